"""The driver: run the chiplet pipeline, compile once with tvm.compile, describe the plan.

The one place that joins the rooms: frontends load the model, the passes plan and partition it
(judged by the runtime's device simulator, which this module hands them), ``tvm.compile``
builds it, and the plan is described for the artifact and estimated against the lower bound.
"""

from __future__ import annotations

import concurrent.futures
import copy
import dataclasses
import json
import os
import time
from collections.abc import Callable, Sequence

import numpy as np
import onnx
import tvm

from tvm_chiplet.passes.analysis.extract_op_graph import extract_op_graph
from tvm_chiplet.passes.analysis.lower_bound import lower_bound
from tvm_chiplet.passes.analysis.op_graph import OpGraph
from tvm_chiplet.passes.analysis.segments import SegmentSchedule, read_segments
from tvm_chiplet.passes.attrs import ATTR_PLACEMENT
from tvm_chiplet.passes.pipeline import get_pipeline, prepare_splits
from tvm_chiplet.passes.planners import (
    PLANNERS,
    AutoPlanner,
    IlpPlanner,
    Planner,
    TensorParallelPlanner,
    planner_for_inputs,
    plans_for_inputs,
)
from tvm_chiplet.passes.planners.base import planning_progress
from tvm_chiplet.passes.reduce_graph import ReduceGraph
from tvm_chiplet.runtime.artifact import ChipletModule
from tvm_chiplet.runtime.device import DeviceSimResult, simulate_plan, simulate_workload
from tvm_chiplet.targets.cost_estimate import plan_cost
from tvm_chiplet.targets.faults import add_random_faults, fault_table, with_faults
from tvm_chiplet.targets.routing import RoutingTables, routing_tables
from tvm_chiplet.targets.system import ChipletSystem
from tvm_chiplet.targets.target import ChipletTarget, ChipletTargetError, parse_target
from tvm_chiplet.targets.topology import Topology
from tvm_chiplet.targets.workload import (
    WorkItem,
    build_workload,
    pool_groups,
    replicate_items,
    replicate_loans,
)
from tvm_chiplet.tools.frontends import input_specs, load_model


def describe_plan(schedule: SegmentSchedule, system: ChipletSystem, strategy: str,
                  dram_policy: str = "interleave", dram_shares=(), replicas=(),
                  sram_loans=(), weight_pool: bool = False, microbatch: int = 1) -> dict:
    """The artifact's ``plan.json``: segments, transfers with bytes and routes, modeled tasks.

    Task cycles come from the shared cost model; a cluster whose weights exceed its SRAM streams
    them from DRAM. Messages are the op-level dependencies between tasks, with their routes.
    With ``replicas`` (cluster maps of :attr:`Placement.replicas`), ``tasks`` holds every copy
    of the work of one input (``"copy"``: 0 for the segments' own tasks), ``copies`` says how
    many, and the simulator runs input ``b`` on copy ``b mod copies``. ``sram_loans``
    (:attr:`Placement.sram_loans`) turn part of the DRAM fetches into fetches from lending
    clusters; with ``weight_pool`` (:attr:`Placement.weight_pool`) the copies fetch the stripes
    of one shared set of weights from each other. With ``microbatch``
    (:attr:`Placement.microbatch`) every task runs that many inputs per weight fetch: ``tasks``
    and ``messages`` are those of a whole microbatch, ``microbatch`` says how many inputs.
    """
    topology = Topology(system)
    items = [
        WorkItem(t.name, t.cluster, t.flops, t.bytes_moved, t.weight_bytes,
                 [(p, b) for p, b in t.deps], t.output_bytes, t.weight_key)
        for t in schedule.tasks
    ]
    copies = [dict(mapping) for mapping in replicas]
    items = replicate_items(items, copies)
    pool = pool_groups(sorted({t.cluster for t in schedule.tasks}), copies) if weight_pool else ()
    work, messages, resident, fetches = build_workload(
        items, system, topology, dram_policy, dram_shares, replicate_loans(sram_loans, copies),
        pool, microbatch)
    per_copy = len(schedule.tasks)
    tasks = [
        {**schedule.tasks[index % per_copy].to_dict(), "name": item.name,
         "cluster": item.cluster, "deps": [list(dep) for dep in item.deps],
         "copy": index // per_copy, "cycles": w["cycles"],
         "mac_pj": w["mac_pj"], "sram_pj": w["sram_pj"]}
        for index, (item, w) in enumerate(zip(items, work, strict=True))
    ]
    transfers = []
    for segment in schedule.segments:
        for slot, src in enumerate(segment.inputs):
            if src[0] != "segment":
                continue
            producer = schedule.segments[src[1]]
            if producer.cluster == segment.cluster:
                continue
            transfers.append(
                {
                    "src_segment": producer.index,
                    "dst_segment": segment.index,
                    "input": slot,
                    "src_cluster": producer.cluster,
                    "dst_cluster": segment.cluster,
                    "bytes": producer.output_bytes[src[2]],
                    "route": topology.route(producer.cluster, segment.cluster),
                }
            )
    return {
        "strategy": strategy,
        **schedule.to_dict(),
        "tasks": tasks,
        "messages": messages,
        "transfers": transfers,
        "weights_resident": resident,
        "dram_fetches": fetches,
        "dram_policy": dram_policy,
        "sram_loans": [list(loan) for loan in sram_loans],
        "weight_pool": bool(pool),
        "copies": 1 + len(replicas),
        "microbatch": microbatch,
        "clusters_used": sorted({s.cluster for s in schedule.segments}
                                | {c for mapping in replicas for _, c in mapping}
                                | {lender for _, lender, _ in sram_loans}),
    }


def _apply_faults(target: ChipletTarget, faults: dict | str | None,
                  random_faults: dict | str | None, seed: int) -> tuple[ChipletTarget, dict]:
    """The target on its system with ``faults`` and ``random_faults`` dead, and the record of
    them for ``plan.json``: the healthy system, the dead parts, notes (DRAM controllers lost),
    the surviving share of compute."""
    healthy = target.system
    table = fault_table(faults) if faults else {}
    random_record = None
    if random_faults:
        table, random_record = add_random_faults(healthy, table, random_faults, seed)
    faulty, notes = with_faults(healthy, table)
    record = {
        "healthy_system": healthy.name,
        "dead": table,
        "random": random_record,
        "notes": notes,
        "surviving_compute": faulty.peak_macs_per_cycle / healthy.peak_macs_per_cycle,
        "surviving_clusters": faulty.num_clusters,
        "healthy_clusters": healthy.num_clusters,
    }
    return dataclasses.replace(target, system=faulty), record


ESTIMATE_BATCHES = (1, 64)

REPORTED_PASSES = ("ReplicateDataParallel", "ReduceGraph", "PlanPlacement",
                   "PlanSplitPlacement", "AnnotatePlacement",
                   "PartitionByCluster")
"""The passes whose start and end :func:`build` reports to its ``progress`` callback."""


@tvm.ir.instrument.pass_instrument
class _PassProgress:
    """Reports each of :data:`REPORTED_PASSES` as it starts and ends, indented by nesting."""

    def __init__(self, progress: Callable[[str], None]) -> None:
        self.progress = progress
        self.started: list[float] = []

    def run_before_pass(self, _mod, info) -> None:
        if info.name in REPORTED_PASSES:
            self.progress(f"{'  ' * len(self.started)}{info.name} ...")
            self.started.append(time.perf_counter())

    def run_after_pass(self, _mod, info) -> None:
        if info.name in REPORTED_PASSES:
            seconds = time.perf_counter() - self.started.pop()
            self.progress(f"{'  ' * len(self.started)}{info.name} done in {seconds:.1f} s")


_DTYPE_NAMES = {"float32": "fp32", "float16": "fp16", "bfloat16": "bf16", "float64": "fp64"}


def host_dtypes(mod: tvm.IRModule) -> list[str]:
    """The dtypes the host computes the model's inputs and outputs in (``"fp32"`` for a model
    imported from an fp32 or a QDQ ONNX file, which TVM dequantizes)."""
    types = [param.ty for param in mod["main"].params]
    ret = mod["main"].ret_ty
    types += list(ret.fields) if isinstance(ret, tvm.ir.TupleType) else [ret]
    names = {str(ty.dtype) for ty in types if isinstance(ty, tvm.relax.TensorType)}
    return sorted(_DTYPE_NAMES.get(name, name) for name in names)


def planned_graph(mod: tvm.IRModule, chiplet_target: ChipletTarget) -> OpGraph:
    """The op graph of ``mod`` as the split planners see it (:func:`~tvm_chiplet.passes.
    pipeline.prepare_splits`' rewrites, which keep its results, then ReduceGraph), whose lower
    bound a split plan is compared with. The rewrites change the bound: a packed Q/K/V
    projection is one op on the critical path, its three parts are not (the held-out ViT on
    simba-6x6: 34 845 cycles imported, 34 405 as planned). The plan runs the rewritten
    module, so its graph gives the bound of what runs, as the benchmarks compute it. A plan
    of FlattenMatmulRows' form of it (:func:`~tvm_chiplet.passes.plan_split_placement.
    plan_splits`) is compared with this bound too: it does the same compute, and its
    critical path was no shorter where measured (the held-out ViT on simba-6x6 equal, a
    throwaway encoder of 6 layers 57 724 cycles as prepared and 57 969 flattened)."""
    prepared = prepare_splits()(mod)
    return extract_op_graph(ReduceGraph(chiplet_target.tvm_target)(prepared),
                            chiplet_target.system.device_dtype)


def compare_to_bound(sim: DeviceSimResult, graph: OpGraph, system: ChipletSystem,
                     inputs: int | None = None) -> dict:
    """A simulated run next to the physical lower bound of ``inputs`` inputs' work.

    The simulator starts with resident weights loaded and models no host I/O, so the bound does
    too. By default the bound is for the inputs simulated (copies of a placement run whole
    rounds); ``inputs=1`` compares a one-round run with one input's bound, as a latency.
    What kept the run from the bound shows in how busy its parts were, each a share of the
    run: ``clusters_busy`` on average over the system's clusters (computing), ``links_busy``
    on average over its links and ``busiest_link`` (carrying data; both None without links).
    """
    bound = lower_bound(graph, system, inputs or sim.inputs, weights_preloaded=True,
                        io_in_dram=False)
    links = sim.link_utilisation
    return {
        "inputs_simulated": sim.inputs,
        "network": sim.network,
        "network_calibration": system.calibration.summary() if sim.calibrated else None,
        "simulated_cycles": float(sim.total_cycles),
        "throughput_per_s": sim.per_second(system.frequency_hz),
        "bound_cycles": bound.bound_cycles,
        "bound_binding": bound.binding,
        "ratio_to_bound": bound.ratio(sim.total_cycles),
        "clusters_busy": float(np.mean(sim.cluster_utilisation)),
        "links_busy": float(np.mean(links)) if len(links) else None,
        "busiest_link": float(np.max(links)) if len(links) else None,
        "energy_per_inference_pj": sim.energy.total_pj,
        "energy_breakdown_pj": dict(sim.energy.per_inference_pj),
        "energy_bound_pj": bound.energy_per_inference_pj,
    }


def estimate_plan(plan: dict, system: ChipletSystem, network: str = "flow",
                  graph: OpGraph | None = None, routing: RoutingTables | None = None
                  ) -> list[dict]:
    """Simulated cycles of a plan at batch 1 and 64 against the physical lower bound of
    ``graph``, the model's op graph (default: the plan's own tasks, which are the model's ops
    unless the plan splits them); messages routed by walking ``routing`` when given."""
    if graph is None:
        graph = OpGraph.from_tasks([t for t in plan["tasks"] if t.get("copy", 0) == 0])
    return [
        {"batches": batches,
         **compare_to_bound(simulate_plan(plan, system, batches, network, routing=routing),
                            graph, system)}
        for batches in ESTIMATE_BATCHES
    ]


INPUT_OBJECTIVES = ("time", "throughput", "latency")
"""Objectives a strategy that plans for a number of inputs can take without ``auto``."""


def _with_max_parts(strategy: str | Planner, value: str) -> Planner:
    """``strategy`` (tensor-parallel) splitting each op over at most ``value`` clusters (target
    option ``max-parts``)."""
    parts = int(value) if str(value).isdigit() else 0
    if parts < 1:
        raise ChipletTargetError(
            f"target option max-parts must be a positive integer (clusters per split op), "
            f"found {value!r}"
        )
    if strategy == TensorParallelPlanner.name:
        return TensorParallelPlanner(max_parts=parts)
    if isinstance(strategy, TensorParallelPlanner):
        planner = copy.copy(strategy)
        planner.max_parts = parts
        return planner
    name = getattr(strategy, "name", strategy)
    raise ChipletTargetError(
        f"target option max-parts applies to strategy 'tensor-parallel'; the strategy is "
        f"{name!r}: add -strategy=tensor-parallel (--target-chiplet-strategy tensor-parallel) "
        "or drop max-parts"
    )


def build(
    model: str | os.PathLike | onnx.ModelProto | tvm.IRModule,
    target: str | tvm.target.Target | ChipletTarget = "chiplet/mesh-4x4",
    strategy: str | Planner | None = None,
    input_shapes: dict[str, list[int]] | None = None,
    pipeline: str = "chiplet-default",
    progress: Callable[[str], None] | None = None,
    device_dtype: str | None = None,
    example_inputs: Sequence | None = None,
    faults: dict | str | None = None,
    random_faults: dict | str | None = None,
    fault_seed: int = 0,
) -> ChipletModule:
    """Compile a model for a chiplet system into one :class:`ChipletModule`.

    Runs the named pass pipeline (ReduceGraph -> PlanPlacement -> PartitionByCluster) under a
    ``PassContext``, with the device simulator (:func:`simulate_workload`) as the planners'
    judge, compiles the partitioned module once with ``tvm.compile`` (``main`` and every
    segment function in one executable) and describes the plan for the runtime and simulator.

    Parameters
    ----------
    model : path, onnx.ModelProto, IRModule, torch.nn.Module or torch ExportedProgram
        The model: ONNX (a file or proto) is imported with TVM's ONNX frontend (shape
        subgraphs folded first); PyTorch (a module, an ExportedProgram or a ``.pt2`` file,
        with ``pip install ".[torch]"``) through ``torch.export`` and
        ``from_exported_program``.
    target : str, Target or ChipletTarget
        ``"chiplet/<preset>"``, ``"chiplet -config=my.toml"`` or a parsed target.
    strategy : str or Planner, optional
        Placement strategy; default the target's ``strategy`` option, else ``"pipeline"``.
    input_shapes : dict, optional
        Static shapes for ONNX inputs, e.g. ``{"x": [1, 3, 224, 224]}``.
    pipeline : str
        Name of the pass pipeline (see ``tvm_chiplet.passes.get_pipeline``).
    progress : callable, optional
        Called with a line of text as each chiplet pass (:data:`REPORTED_PASSES`; planning
        happens inside PlanPlacement / PlanSplitPlacement) and ``tvm.compile`` start and
        end.
    example_inputs : tuple of tensors, optional
        What a ``torch.nn.Module`` is called on to export it (its input shapes and dtypes).
    device_dtype : str, optional
        Precision of the device model (``"int8"``, ``"fp16"``, ``"bf16"``, ``"fp32"``): bytes,
        SRAM use, MAC rates and energy; default the target's ``device-dtype`` option, else the
        system's own. Host numerics stay as compiled (``plan.json`` says both).
    faults : dict or str, optional
        Parts to kill on top of the target's system: a ``[faults]`` table or ``tvmc --faults``
        text (``"x1y1, x0y0.k3, x0y0:x1y0"``; :mod:`tvm_chiplet.targets.faults`). The model is
        planned and routed on what survives; ``plan.json`` ``faults`` records them.
    random_faults : dict or str, optional
        Counts of parts to kill at random, ``{"chiplets": 2, "links": 4}`` or
        ``"chiplets=2,links=4"``, drawn with ``fault_seed`` among what ``faults`` leaves, never
        disconnecting the system.
    """
    chiplet_target = target if isinstance(target, ChipletTarget) else parse_target(target)
    if device_dtype is not None:
        chiplet_target = dataclasses.replace(
            chiplet_target, system=chiplet_target.system.with_device_dtype(device_dtype))
    fault_record = None
    if faults or random_faults:
        chiplet_target, fault_record = _apply_faults(chiplet_target, faults, random_faults,
                                                     fault_seed)
    strategy = strategy or chiplet_target.options.get("strategy", "pipeline")
    if "objective" in chiplet_target.options:
        objective = chiplet_target.options["objective"]
        if strategy == AutoPlanner.name:
            strategy = AutoPlanner(objective=objective)
        elif (isinstance(strategy, str) and plans_for_inputs(strategy)
              and objective in INPUT_OBJECTIVES):
            # The strategy plans for one input (latency) or the inputs auto judges time on.
            inputs = 1 if objective == "latency" else AutoPlanner().batches
            strategy = planner_for_inputs(strategy, inputs)
        elif strategy == IlpPlanner.name and objective in INPUT_OBJECTIVES:
            # The ILP's own objectives: one input (with split plans), or the steady state.
            strategy = IlpPlanner(objective="latency" if objective == "latency"
                                  else "throughput")
        else:
            takes = [name for name in PLANNERS if plans_for_inputs(name)]
            raise ChipletTargetError(
                f"target option objective={objective!r} applies to strategy 'auto' (every "
                f"objective) and, with {', '.join(INPUT_OBJECTIVES)}, to the strategies that "
                f"plan for a number of inputs ({', '.join(takes)}) and to 'ilp'; the strategy is "
                f"{strategy!r}: add -strategy=auto (--target-chiplet-strategy auto) or drop "
                "the objective"
            )
    if "max-parts" in chiplet_target.options:
        strategy = _with_max_parts(strategy, chiplet_target.options["max-parts"])
    started = time.perf_counter()
    import_notes: list[str] = []

    def noted(line: str) -> None:
        import_notes.append(line)
        if progress:
            progress(line)

    mod = load_model(model, input_shapes, report=noted, example_inputs=example_inputs)
    specs = input_specs(mod)
    passes = get_pipeline(
        pipeline,
        system=chiplet_target.system,
        target=chiplet_target.tvm_target,
        strategy=strategy,
        simulator=simulate_workload,
    )
    instruments = [_PassProgress(progress)] if progress else []
    with tvm.transform.PassContext(opt_level=3, instruments=instruments), \
            planning_progress(progress):
        partitioned = passes(mod)
    plan_time = time.perf_counter() - started
    strategy_name = strategy if isinstance(strategy, str) else getattr(strategy, "name", "custom")
    placement = None
    if partitioned.attrs is not None and ATTR_PLACEMENT in partitioned.attrs:
        placement = json.loads(str(partitioned.attrs[ATTR_PLACEMENT]))
    placement = placement or {}
    system = chiplet_target.system
    plan = describe_plan(read_segments(partitioned, system.device_dtype, system.partial_sum_bytes),
                         system, strategy_name,
                         placement.get("dram_policy", "interleave"),
                         [tuple(share) for share in placement.get("dram_shares", [])],
                         placement.get("replicas", []),
                         [tuple(loan) for loan in placement.get("sram_loans", [])],
                         placement.get("weight_pool", False),
                         placement.get("microbatch", 1))
    if placement:
        plan["strategy"] = placement["strategy"]
        plan["placement"] = placement
    plan["device_dtype"] = system.device_dtype
    plan["partial_sum_bytes"] = system.partial_sum_bytes
    plan["host_dtypes"] = host_dtypes(mod)
    plan["import_notes"] = import_notes
    if fault_record:
        plan["faults"] = fault_record
    model_graph = None
    if placement.get("notes", {}).get("splits"):
        # The parts of split ops are no ops of the model: bound the model's own op graph.
        model_graph = planned_graph(mod, chiplet_target)
    routing = routing_tables(chiplet_target.system)
    cost = plan_cost(plan, chiplet_target.system, routing)
    plan["cost_estimate"] = {**cost.to_dict(), "cycles": {
        str(batches): cost.cycles(batches) for batches in ESTIMATE_BATCHES}}
    # The plan's simulation (C++, outside the GIL) runs beside tvm.compile.
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        estimate = pool.submit(estimate_plan, plan, chiplet_target.system, graph=model_graph,
                               routing=routing)
        if progress:
            progress("tvm.compile ...")
        compiling = time.perf_counter()
        executable = tvm.compile(partitioned, target=chiplet_target.tvm_target)
        if progress:
            progress(f"tvm.compile done in {time.perf_counter() - compiling:.1f} s")
        plan["estimate"] = estimate.result()
    plan["compile_seconds"] = {
        "plan": plan_time,
        "total": time.perf_counter() - started,
    }
    return ChipletModule(
        executable=executable,
        plan=plan,
        system=chiplet_target.system,
        input_specs=specs,
        target=str(chiplet_target.tvm_target.tag or chiplet_target.tvm_target),
        routing=routing,
    )
