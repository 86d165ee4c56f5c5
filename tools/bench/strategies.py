"""Benchmark every placement strategy on standard models and presets, judged by the simulator.

Usage: ``python -m tvm_chiplet.tools.bench.strategies [--models ...] [--presets ...]
[--strategies ...] [--batches 64] [--network flow] [--device-dtypes int8 fp32] [--quick]
[--out DIR]``

For each model (a name of tools/models.py, or an ONNX file: e.g. those
``python -m tvm_chiplet.tools.bench.heldout_models`` writes), preset and device precision: every
strategy plans the reduced
op graph; its placement is simulated at batch 1 (latency, energy) and with ``--batches``
pipelined inputs (throughput) with the shared cost model; both are compared with the physical
lower bound. A placement that splits ops is first realised (DistributeTensors, ReduceGraph) and the
realised module's ops are simulated, exactly as the compiled artifact would be. Writes
``strategies.csv`` and ``strategies.md``. Ctrl-C stops after writing the rows done so far.
"""

from __future__ import annotations

import argparse
import itertools
import os
import sys
import time

import onnx
import tvm

from tvm_chiplet.build import compare_to_bound
from tvm_chiplet.passes import ReduceGraph, ReplicateDataParallel
from tvm_chiplet.passes.analysis.extract_op_graph import extract_op_graph
from tvm_chiplet.passes.pipeline import prepare_splits
from tvm_chiplet.passes.plan_split_placement import plan_splits, split_problem
from tvm_chiplet.passes.planners import (
    PLANNERS,
    AutoPlanner,
    DataParallelPlanner,
    IlpPlanner,
    LayerSequentialPlanner,
    ModularPlanner,
    PipelinePlanner,
    Planner,
    PlanningError,
    PlanningProblem,
    TensorParallelPlanner,
    get_planner,
)
from tvm_chiplet.passes.planners.evaluate import simulate_placement
from tvm_chiplet.runtime.device import simulate_workload
from tvm_chiplet.targets.system_toml import load_system
from tvm_chiplet.targets.topology import Topology
from tvm_chiplet.tools import models
from tvm_chiplet.tools.bench.tables import markdown_table, write_csv
from tvm_chiplet.tools.frontends import load_model

MODELS = ["resnet50", "mobilenet-v2", "bert", "gpt2"]
PRESETS = ["cluster-4", "mesh-4x4", "simba-6x6"]
QUICK = {
    "resnet50": {"image": 64},
    "mobilenet-v2": {"image": 64},
    "bert": {"layers": 2, "seq": 32},
    "gpt2": {"layers": 2, "seq": 32},
}


def make_planners(names: list[str], batches: int, ilp_time_limit: float,
                  max_parts: int | None = None) -> dict[str, Planner]:
    """The planners to compare; the ILP gets the given time limit, tensor-parallel
    ``max_parts`` (its default when None).
    ``tensor-parallel@N`` is tensor-parallel planned for ``N`` inputs (it may then copy a plan
    on tiles of the grid); plain ``tensor-parallel`` plans for one input. ``auto`` chooses
    among pipeline, tensor-parallel (for one input) and modular; ``auto-default`` is ``auto`` as
    ``tvmc compile --strategy auto`` plans (every registered strategy, ``batches`` inputs)."""
    planners: dict[str, Planner] = {}
    for name in names:
        base, _, inputs = name.partition("@")
        if base == TensorParallelPlanner.name:
            planners[name] = TensorParallelPlanner(max_parts=max_parts,
                                                   batches=int(inputs) if inputs else 1)
        elif name == "ilp":
            planners[name] = IlpPlanner(time_limit=ilp_time_limit)
        elif name == "auto-default":
            planners[name] = AutoPlanner(batches=batches)
        elif name == "auto":
            planners[name] = AutoPlanner(
                [PipelinePlanner(batches=batches), TensorParallelPlanner(),
                 ModularPlanner(batches=batches)], batches=batches,
            )
        elif name in ("pipeline", "modular"):
            planners[name] = get_planner(name, batches=batches)
        else:
            planners[name] = get_planner(name)
    return planners


def bench_strategy(
    planner: Planner, problem: PlanningProblem, batches: int, network: str,
    samples_per_input: int = 1, prepared: tuple[tvm.IRModule, tvm.IRModule] | None = None,
) -> dict:
    """Plan, then simulate one input (latency) and ``batches`` pipelined inputs (throughput).

    ``samples_per_input`` > 1 is for data-parallel graphs, whose one input carries that many
    samples: throughput is then counted in samples per second. ``prepared``: the prepared
    module ``problem`` was made of and its reduction, planned as ``tvmc compile`` plans them
    (:func:`~tvm_chiplet.passes.plan_split_placement.plan_splits`, which may plan another
    form of it). A placement that splits ops is simulated as realised (``problem.realise``).
    Every strategy is compared with the bound of the prepared module's op graph (a realised
    graph's parts are smaller ops, whose critical path is no bound for the model).
    """
    graph = problem.graph  # the prepared module's, as tvmc's summary takes it
    started = time.perf_counter()
    if prepared is None:
        placement = planner.plan(problem)
    else:
        planned = plan_splits(*prepared, problem.system, planner, problem.simulator,
                              problem=problem)
        problem, placement = planned.problem, planned.placement
    plan_s = time.perf_counter() - started
    splits = len(placement.splits)
    notes = placement.notes
    # Latency: one round (one input per copy, or a microbatch) against the bound of one input.
    single = compare_to_bound(simulate_placement(problem, placement, 1, network, as_built=True),
                              graph, problem.system, inputs=1)
    streamed = compare_to_bound(simulate_placement(problem, placement, batches, network,
                                                   as_built=True),
                                graph, problem.system)
    freq = problem.system.frequency_hz
    return {
        "strategy": placement.strategy + (f" x{placement.copies}" if placement.copies > 1
                                          else ""),
        "max_parts": getattr(planner, "max_parts", ""),
        "clusters": len(placement.clusters_used()) * placement.copies,
        "copies": placement.copies,
        "microbatch": placement.microbatch,
        "stages": len(placement.stage_clusters),
        "split_ops": splits,
        "dram_policy": placement.dram_policy,
        "latency_ms": 1e3 * single["simulated_cycles"] / freq,
        "latency_vs_bound": single["ratio_to_bound"],
        "throughput_per_s": streamed["throughput_per_s"] * samples_per_input,
        "inputs": streamed["inputs_simulated"],
        "cycles_streamed": streamed["simulated_cycles"],
        "time_vs_bound": streamed["ratio_to_bound"],
        "bound_binding": streamed["bound_binding"],
        "energy_uJ": single["energy_per_inference_pj"] / 1e6,
        **{f"energy_{term}_uJ": value / 1e6
           for term, value in single["energy_breakdown_pj"].items()},
        "energy_vs_bound": single["energy_per_inference_pj"] / single["energy_bound_pj"]
        if single["energy_bound_pj"] else "",
        "plan_s": plan_s,
        "ilp_gap": notes.get("gap", ""),
    }


MAX_REPLICAS = 4  # replicas copy the weights: bounded to keep the benchmark in minutes


def get_model(name: str, **options):
    """A bundled model by name, or an ONNX file (a path ending in ``.onnx``)."""
    if name.endswith(".onnx"):
        if not os.path.isfile(name):
            raise SystemExit(f"--models: no ONNX file {name!r}")
        return onnx.load(name)
    return models.get_model(name, **options)


def model_label(name: str) -> str:
    """How a model is named in the tables: an ONNX file by its stem."""
    return os.path.splitext(os.path.basename(name))[0] if name.endswith(".onnx") else name


def bench_data_parallel(model_name: str, options: dict, system, args) -> dict:
    """Data-parallel needs batch > 1: one input of ``k`` samples, k = clusters (at most 4),
    ``ceil(batches / k)`` such inputs streamed, throughput in samples per second."""
    if model_name.endswith(".onnx"):
        raise PlanningError("data-parallel rebuilds a bundled model with a batch of several "
                            "samples; an ONNX file has its own batch")
    replicas = min(system.num_clusters, MAX_REPLICAS)
    model = models.get_model(model_name, batch=replicas, **options)
    graph = extract_op_graph(
        ReduceGraph()(ReplicateDataParallel(replicas=replicas)(load_model(model))),
        system.device_dtype,
    )
    problem = PlanningProblem(graph, system, Topology(system), simulator=simulate_workload)
    inputs = -(-args.batches // replicas)
    row = bench_strategy(DataParallelPlanner(), problem, inputs, args.network, replicas)
    row["strategy"] = f"data-parallel (batch {replicas} x {inputs})"
    return row


def mark_layer_sequential(rows: list[dict], model: str, preset: str, dtype: str) -> None:
    """Give every row of ``model`` on ``preset`` at ``dtype`` its throughput over
    layer-sequential's."""
    same = [r for r in rows if r["model"] == model and r["system"] == preset
            and r["device_dtype"] == dtype]
    base = next(r for r in same if r["strategy"] == LayerSequentialPlanner.name)
    for row in same:
        row["vs_layer_sequential"] = row["throughput_per_s"] / base["throughput_per_s"]


def write_results(rows: list[dict], out: str, batches: int, network: str) -> None:
    if not rows:
        return
    os.makedirs(out, exist_ok=True)
    write_csv(os.path.join(out, "strategies.csv"), rows)
    lines = [
        "# Strategies benchmark", "",
        f"Simulated with the `{network}` network model; throughput with {batches} pipelined "
        "inputs (data-parallel: inputs of k samples, throughput in samples/s). "
        "`latency_vs_bound`, `time_vs_bound` = simulated time of 1 input, of all the pipelined "
        "inputs (pipeline fill included) / physical lower bound of the same work (1.0 is the "
        "bound). `throughput_per_s` is the steady-state rate, which can beat the bound's "
        "inputs / bound time when the pipeline fill prefetches later inputs' weights: the "
        "ratios compare times only. `microbatch`: inputs each op runs per fetch of its "
        "streamed weights (one round of a microbatched plan serves them all, so its latency is "
        "the round's). `device_dtype`: the precision of the device model (bytes, "
        "SRAM, MAC rates, energy); `energy_uJ`: simulated energy of one input (batch 1), "
        "`energy_vs_bound` over the energy lower bound (MACs + forced DRAM traffic).", "",
        *markdown_table(rows),
    ]
    with open(os.path.join(out, "strategies.md"), "w") as handle:
        handle.write("\n".join(lines) + "\n")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", nargs="+", default=MODELS,
                        help="bundled model names or ONNX files")
    parser.add_argument("--presets", nargs="+", default=PRESETS,
                        help="presets or system TOML files (tools/bench/systems/ has 8x8 and "
                        "16x16 meshes of the mesh-4x4 kind)")
    parser.add_argument("--strategies", nargs="+", default=list(PLANNERS),
                        help="strategies; tensor-parallel@N plans tensor-parallel for N inputs, "
                        "auto-default is auto as tvmc compile plans it")
    parser.add_argument("--batches", type=int, default=64)
    parser.add_argument("--network", default="flow")
    parser.add_argument("--device-dtypes", nargs="+", default=["int8", "fp32"],
                        help="precisions of the device model to run every case at")
    parser.add_argument("--quick", action="store_true", help="small model configurations")
    parser.add_argument("--ilp-time-limit", type=float, default=60.0)
    parser.add_argument("--max-parts", type=int,
                        help="most clusters tensor-parallel splits one op over (its default "
                        "when not given)")
    parser.add_argument("--out", default="tools/bench/results")
    args = parser.parse_args(argv)
    rows: list[dict] = []
    planners = make_planners(args.strategies, args.batches, args.ilp_time_limit,
                             args.max_parts)
    try:
        for model_name in args.models:
            options = QUICK.get(model_name, {}) if args.quick else {}
            started = time.perf_counter()
            mod = prepare_splits()(load_model(get_model(model_name, **options)))
            reduced = ReduceGraph()(mod)
            label = model_label(model_name)
            print(f"[strategies] {label}: reduced in "
                  f"{time.perf_counter() - started:.1f} s", flush=True)
            for preset, dtype in itertools.product(args.presets, args.device_dtypes):
                system = load_system(preset).with_device_dtype(dtype)
                problem, _ = split_problem(mod, reduced, system, simulate_workload)
                for strategy, planner in planners.items():
                    try:
                        if strategy == DataParallelPlanner.name:
                            row = bench_data_parallel(model_name, options, system, args)
                        else:
                            row = bench_strategy(planner, problem, args.batches, args.network,
                                                 prepared=(mod, reduced))
                    except PlanningError as err:
                        print(f"[strategies] {label} {preset} {dtype} {strategy}: skipped "
                              f"({err})")
                        continue
                    rows.append({"model": label, "system": system.name,
                                 "device_dtype": dtype, **row})
                    if strategy == LayerSequentialPlanner.name:
                        mark_layer_sequential(rows, label, system.name, dtype)
                    print(f"[strategies] {label} {preset} {dtype} {row['strategy']}: "
                          f"{row['throughput_per_s']:.1f} inf/s "
                          f"({row['time_vs_bound']:.2f}x bound time), "
                          f"latency {row['latency_ms']:.3f} ms, plan {row['plan_s']:.2f} s",
                          flush=True)
    except KeyboardInterrupt:
        write_results(rows, args.out, args.batches, args.network)
        print(f"[strategies] interrupted; {len(rows)} rows written to {args.out}",
              file=sys.stderr)
        return 130
    write_results(rows, args.out, args.batches, args.network)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
