"""PlanSplitPlacement: plan a strategy that may split ops, realise the splits, annotate."""

from __future__ import annotations

import dataclasses
import math
import re
import threading
import time
from collections import Counter
from collections.abc import Sequence

import tvm

from tvm_chiplet.passes.analysis.extract_op_graph import (
    extract_op_graph,
    has_static_shape,
    tensor_bytes,
)
from tvm_chiplet.passes.analysis.op_graph import OpGraph
from tvm_chiplet.passes.annotate_placement import AnnotatePlacement
from tvm_chiplet.passes.distribute_tensors import (
    DistributedSplit,
    distribute_and_reduce,
    planned_clusters,
    prepare_for_splits,
)
from tvm_chiplet.passes.flatten_matmul_rows import FlattenMatmulRows
from tvm_chiplet.passes.forked import Forked, spare_cores
from tvm_chiplet.passes.planners import Planner, PlanningProblem, get_planner
from tvm_chiplet.passes.planners.base import WorkloadSimulator, planning_progress, report
from tvm_chiplet.passes.planners.evaluate import realisation_key, simulate_placement
from tvm_chiplet.passes.planners.layouts import check_groups
from tvm_chiplet.passes.planners.placement import Placement, PlanningError
from tvm_chiplet.passes.reduce_graph import ReduceGraph
from tvm_chiplet.passes.split_operators import anchor_bindings, find_anchors
from tvm_chiplet.targets.collector import collection_paused
from tvm_chiplet.targets.system import ChipletSystem
from tvm_chiplet.targets.topology import Topology

_ANCHOR_NAME = re.compile(r"(conv2d|conv3d|matmul)\d*")


def anchor_op_ids(graph: OpGraph) -> list[int]:
    """Ops of a reduced graph that contain a conv2d or matmul, in order.

    FuseOps names a fused PrimFunc after the ops it fuses (``fused_conv2d_add_relu``) and never
    fuses two such ops into one, so these ops are the high-level anchors in the same order.
    """
    return [
        op.op_id for op in graph.ops
        if op.is_compute and any(_ANCHOR_NAME.fullmatch(part) for part in op.name.split("_"))
    ]


def anchor_ops_by_data_flow(mod: tvm.IRModule, num_ops: int,
                            target: str | tvm.target.Target = "llvm") -> list[int]:
    """The op of ``ReduceGraph(mod)`` (``num_ops`` ops) holding each conv2d / matmul of the
    prepared ``mod``, matched by data flow (:func:`~.distribute_tensors.planned_clusters`), for
    when fused op names do not tell (e.g. a ``conv2d_transpose`` op, whose name holds
    ``conv2d``). Empty unless every anchor is found in an op of its own."""
    op_of = planned_clusters(mod, list(range(num_ops)), target)
    found = [op_of.get(binding.var) for binding, _ in anchor_bindings(mod)]
    if None in found or len(set(found)) != len(found):
        return []
    return found


def split_problem(mod: tvm.IRModule, reduced: tvm.IRModule, system: ChipletSystem,
                  simulator: WorkloadSimulator | None = None,
                  target: str | tvm.target.Target = "llvm") -> tuple[PlanningProblem, list[int]]:
    """The planning problem of ``reduced`` with the split dimensions of ``mod``'s anchors.

    When the anchors of ``mod`` do not match the fused ops (a module given after legalization)
    the problem has no split dimensions, and splitting strategies say so. ``simulator`` judges
    the planner's candidates (see :class:`PlanningProblem`); placements that split ops are
    judged on the module they realise (a :class:`SplitRealiser` of ``mod``, as
    ``problem.realise``).
    """
    graph = extract_op_graph(reduced, system.device_dtype)
    # Anchors are numbered as DistributeTensors numbers them: after constant folding, which
    # removes the conv2d / matmul ops of weights only (e.g. the gates of an imported LSTM), as
    # ReduceGraph does.
    mod = prepare_for_splits(mod)
    anchors = find_anchors(mod)
    op_ids = anchor_op_ids(graph)
    if anchors and len(op_ids) != len(anchors):
        op_ids = anchor_ops_by_data_flow(mod, len(graph.ops), target)
    if len(op_ids) != len(anchors):
        # Not the high-level module (e.g. already legalized): nothing can be split.
        return PlanningProblem(graph, system, Topology(system), simulator=simulator), op_ids
    split_dims = {op_id: dict(a.dims) for op_id, a in zip(op_ids, anchors, strict=True) if a.dims}
    follow_ops = {op_id: math.prod(a.output_shape[:-2]) for op_id, a in zip(op_ids, anchors,
                                                                           strict=True)
                  if a.activations}
    halos = {op_id: a.halo for op_id, a in zip(op_ids, anchors, strict=True) if a.halo[0]}
    data_bytes = {op_id: tensor_bytes(data.ty, "anchor data", system.device_dtype)
                  for op_id, (binding, _) in zip(op_ids, anchor_bindings(mod), strict=True)
                  if has_static_shape((data := binding.value.args[0]).ty)}
    topology = Topology(system)
    realiser = SplitRealiser(mod, op_ids, system.device_dtype, target, topology,
                             system.partial_sum_bytes)
    return PlanningProblem(graph, system, topology, split_dims, simulator,
                           realiser, follow_ops, halos, data_bytes), op_ids


class SplitRealiser:
    """Realises placements that split ops of one high-level module, each distinct one once.

    ``realiser(placement)`` gives the op graph of the realised module (at ``device_dtype``,
    its partial sums at ``partial_width``: :func:`~.analysis.extract_op_graph.value_bytes`) and
    the placement of its ops, which is what the compiled artifact runs: planners' candidates
    are judged on it (:func:`~.planners.evaluate.simulate_placement`).
    :meth:`module` gives the realised module itself. ``anchors`` lists the planned graph's
    conv2d / matmul ops (:func:`split_problem`); its reduce-scatters go around rings of
    ``topology`` where that is cheaper.

    :meth:`prefetch` starts realising a placement in a forked copy of this process (where
    there is a core to spare), while this one realises another: the op graph comes back, the
    module is realised here if it is asked for.
    """

    def __init__(self, mod: tvm.IRModule, anchors: list[int], device_dtype: str | None = None,
                 target: str | tvm.target.Target = "llvm", topology: Topology | None = None,
                 partial_width: int | None = None) -> None:
        self.mod, self.anchors, self.device_dtype, self.target = mod, anchors, device_dtype, target
        self.topology, self.partial_width = topology, partial_width
        # the realised module (None: realised in a forked child, which sent its graph back),
        # its op graph and the cluster of each of its ops
        self._cache: dict[tuple, tuple[tvm.IRModule | None, OpGraph, tuple[int, ...]]] = {}
        self._lock = threading.Lock()
        self._forked = Forked()

    def known(self, placement: Placement) -> bool:
        """Whether ``placement`` needs no realisation here: it splits no op, or it is realised
        or being realised (:meth:`prefetch`)."""
        key = realisation_key(placement)
        return not placement.splits or key in self._cache or key in self._forked

    def prefetch(self, placement: Placement) -> None:
        """Start realising ``placement`` in a forked copy of this process, if a core is spare
        and it is not :meth:`known`: its op graph is read back when it is asked for."""
        if self.known(placement) or len(self._forked) >= spare_cores():
            return
        started = time.perf_counter()

        def realise_graph() -> tuple[OpGraph, tuple[int, ...], float]:
            with planning_progress(None):  # reported when it is read back
                _, graph, op_cluster = self._realise(placement)
            return graph, op_cluster, time.perf_counter() - started

        self._forked.start(realisation_key(placement), realise_graph)

    def cancel(self) -> None:
        """Stop the realisations :meth:`prefetch` started that were not asked for."""
        self._forked.cancel()

    def _realised(self, placement: Placement, module: bool = False
                  ) -> tuple[tvm.IRModule | None, OpGraph, tuple[int, ...]]:
        key = realisation_key(placement)
        with self._lock:  # TE legalization keeps global state: one realisation at a time
            if key not in self._cache and key in self._forked:
                found = self._forked.take(key)
                if found is not None:
                    graph, op_cluster, seconds = found
                    _report_realisation(placement, graph, op_cluster, seconds,
                                        " (in a second process)")
                    self._cache[key] = (None, graph, op_cluster)
            if key not in self._cache or (module and self._cache[key][0] is None):
                self._cache[key] = self._realise(placement)
        return self._cache[key]

    def _realise(self, placement: Placement) -> tuple[tvm.IRModule, OpGraph, tuple[int, ...]]:
        index = {op_id: i for i, op_id in enumerate(self.anchors)}
        splits = [DistributedSplit(index[s.op_id], s.dim, s.clusters) for s in placement.splits]
        home = Counter(placement.op_cluster).most_common(1)[0][0] if placement.op_cluster else 0
        started = time.perf_counter()
        with collection_paused():
            reduced, op_cluster = distribute_and_reduce(
                self.mod, splits, placement.op_cluster, home, self.target, self.topology,
                centred_rows=not placement.even_rows)
            graph = extract_op_graph(reduced, self.device_dtype, self.partial_width)
        _report_realisation(placement, graph, op_cluster, time.perf_counter() - started)
        return reduced, graph, tuple(op_cluster)

    def __call__(self, placement: Placement) -> tuple[OpGraph, Placement]:
        _, graph, op_cluster = self._realised(placement)
        return graph, _realised_placement(placement, op_cluster)

    def module(self, placement: Placement) -> tuple[tvm.IRModule, Placement]:
        """The reduced module with ``placement``'s splits kept distributed
        (:func:`~.distribute_tensors.distribute_and_reduce`) and the placement of its ops; ops
        that run whole keep their planned clusters."""
        reduced, _, op_cluster = self._realised(placement, module=True)
        return reduced, _realised_placement(placement, op_cluster)


REPORTED_REALISATION = 1.0
"""Seconds from which a realisation is reported to the planning progress
(:func:`~.planners.base.planning_progress`): the realisations of small plans, many per plan and
each over in a moment, are not."""


def _report_realisation(placement: Placement, graph: OpGraph, op_cluster: Sequence[int],
                        seconds: float, where: str = "") -> None:
    """Report a realisation of :data:`REPORTED_REALISATION` seconds or more."""
    if seconds >= REPORTED_REALISATION:
        report(f"realised {len(placement.splits)} split ops over {len(set(op_cluster))} "
               f"clusters: {len(graph.ops):,} ops in {seconds:.1f} s{where}")


def _realised_placement(placement: Placement, op_cluster: tuple[int, ...]) -> Placement:
    """``placement`` for its realised module: ``op_cluster`` places every op (the parts
    included), one stage per cluster used, no splits left; every other field kept."""
    stages = sorted(set(op_cluster))
    return dataclasses.replace(
        placement, op_cluster=op_cluster, op_stage=tuple(stages.index(c) for c in op_cluster),
        stage_clusters=tuple(stages), splits=(),
        notes={**placement.notes, "splits": len(placement.splits)})


@dataclasses.dataclass(frozen=True)
class SplitPlan:
    """A plan of one form of a prepared module: that form, its reduction, its planning problem
    and the placement planned on it (:func:`plan_splits`)."""

    module: tvm.IRModule
    reduced: tvm.IRModule
    problem: PlanningProblem
    placement: Placement


def plan_splits(mod: tvm.IRModule, reduced: tvm.IRModule, system: ChipletSystem,
                planner: Planner, simulator: WorkloadSimulator | None = None,
                target: str | tvm.target.Target = "llvm",
                problem: PlanningProblem | None = None) -> SplitPlan:
    """Plan ``mod`` (prepared: :func:`~.pipeline.prepare_splits`; ``reduced`` is its
    ReduceGraph, ``problem`` its :func:`split_problem` if already made) with ``planner``, and
    the module FlattenMatmulRows makes of it where that differs, and keep the plan that
    simulates better as built.

    FlattenMatmulRows (torch's sequence-first projections as matmuls of many rows) lets the
    planners split a projection's tokens as rows and keep attention on every cluster, which
    the planners' estimates cannot weigh against the traffic it adds: int8 batch-1
    tensor-parallel plans of ``nn.TransformerEncoder`` stacks (throwaway models) simulated at
    30.1 k against 54.8 k cycles flattened and not (width 256, 4 layers, 64 tokens, simba-6x6),
    but 432.2 k against 295.6 k (width 512, 6 layers, 128 tokens, simba-6x6) and 977 against
    486 (width 64, 2 layers, 16 tokens, mesh-4x4). Both plans are simulated as built for the
    planner's inputs (its ``batches``, else one; on its ``network``, else ``flow``) and judged
    by the planner's ``cost`` of a simulated run where it has one (``auto``'s objective), else
    by the time of those inputs; the better is kept, each one's cost in its notes
    (``"flatten_matmul_rows_simulated"``). Without a simulator the flattened form is planned
    alone; a form that cannot be planned leaves the other (if neither can, the error of the
    module as given is raised).
    """
    flat = FlattenMatmulRows()(mod)
    if problem is None and (flat.same_as(mod) or simulator is not None):
        problem = split_problem(mod, reduced, system, simulator, target)[0]
    if flat.same_as(mod):
        return SplitPlan(mod, reduced, problem, planner.plan(problem))
    flat_reduced = ReduceGraph(target)(flat)
    flat_problem, _ = split_problem(flat, flat_reduced, system, simulator, target)
    forms = {"flattened": (flat, flat_reduced, flat_problem)}
    if simulator is not None:  # without one, the as-given form is neither planned nor judged
        forms["as given"] = (mod, reduced, problem)
    plans: dict[str, SplitPlan] = {}
    failed: dict[str, PlanningError] = {}
    for name, (form, form_reduced, form_problem) in forms.items():
        try:
            plans[name] = SplitPlan(form, form_reduced, form_problem,
                                    planner.plan(form_problem))
        except PlanningError as err:
            failed[name] = err
    if not plans:  # the error of the module as given names what the user wrote
        raise failed.get("as given", failed["flattened"])
    if len(plans) == 1:
        return next(iter(plans.values()))
    batches, network = getattr(planner, "batches", 1), getattr(planner, "network", "flow")
    cost = getattr(planner, "cost", lambda sim: sim.total_cycles)
    costs = {name: float(cost(simulate_placement(plan.problem, plan.placement, batches,
                                                 network, as_built=True)))
             for name, plan in plans.items()}
    best = plans[min(costs, key=costs.get)]
    notes = {**best.placement.notes, "flatten_matmul_rows_simulated": costs}
    return dataclasses.replace(best, placement=dataclasses.replace(best.placement, notes=notes))


@tvm.transform.module_pass(opt_level=0, name="PlanSplitPlacement")
class PlanSplitPlacement:
    """Plan with a strategy that may split ops, realise its splits, annotate the placement.

    For the ``tensor-parallel`` and ``layer-sequential`` strategies (and any planner returning a
    :class:`Placement` with ``splits``). Takes the high-level module (before ReduceGraph) and
    returns the reduced, annotated module, ready for PartitionByCluster:

    1. ReduceGraph, then the op graph with every conv2d / matmul's split dimensions;
    2. the planner decides (op, dimension, clusters) splits on that graph, and on the graph of
       the module FlattenMatmulRows makes of it where that differs, the plan simulated faster
       kept (:func:`plan_splits`);
    3. :class:`SplitRealiser`: DistributeTensors rewrites the high-level module with the split
       ops' parts kept distributed (ops that run whole on their planned clusters), ReduceGraph
       reduces it again; AnnotatePlacement writes the clusters of its ops.

    A plan without splits is annotated on the first reduction directly.

    Parameters
    ----------
    system : ChipletSystem
        The hardware.
    strategy : str or Planner
        A registered strategy name or a planner object.
    target : str or Target
        Target for ReduceGraph (legalization and fusion).
    simulator : callable, optional
        The device simulator that judges candidates, as for :class:`PlanPlacement`.
    """

    def __init__(self, system: ChipletSystem, strategy: str | Planner = "tensor-parallel",
                 target: str | tvm.target.Target = "llvm",
                 simulator: WorkloadSimulator | None = None) -> None:
        self.system = system
        self.planner = get_planner(strategy) if isinstance(strategy, str) else strategy
        self.target = target
        self.simulator = simulator

    def transform_module(self, mod: tvm.IRModule, _ctx: tvm.transform.PassContext) -> tvm.IRModule:
        plan = plan_splits(mod, ReduceGraph(self.target)(mod), self.system, self.planner,
                           self.simulator, self.target)
        reduced, problem, placement = plan.reduced, plan.problem, plan.placement
        placement.check_fits(len(problem.graph.ops), self.system.num_clusters, self.system.name)
        check_groups(problem.topology, placement.splits)
        if not placement.splits:
            return AnnotatePlacement(placement)(reduced)
        if problem.realise is None:
            raise PlanningError(
                f"strategy {placement.strategy!r} splits ops, but the module's conv2d / matmul "
                "ops do not match its fused ops (was it legalized already?); pass the "
                "high-level module, as imported, or choose the pipeline strategy"
            )
        split, final = problem.realise.module(placement)
        return AnnotatePlacement(final)(split)
