"""AssignSplitPlacement: plan a strategy that may split ops, realise the splits, annotate."""

from __future__ import annotations

import re
from collections.abc import Sequence

import tvm

from tvm_chiplet.passes.analysis.graph import OpGraph
from tvm_chiplet.passes.analysis.op_graph import extract_op_graph
from tvm_chiplet.passes.annotate_placement import AnnotatePlacement
from tvm_chiplet.passes.planners import Planner, PlanningProblem, get_planner
from tvm_chiplet.passes.planners.placement import OpSplit, Placement, PlanningError
from tvm_chiplet.passes.reduce_graph import ReduceGraph
from tvm_chiplet.passes.split_operators import AnchorSplit, SplitOperators, find_anchors
from tvm_chiplet.targets.system import ChipletSystem
from tvm_chiplet.targets.topology import Topology

_ANCHOR_NAME = re.compile(r"(conv2d|matmul)\d*")


def anchor_op_ids(graph: OpGraph) -> list[int]:
    """Ops of a reduced graph that contain a conv2d or matmul, in order.

    FuseOps names a fused PrimFunc after the ops it fuses (``fused_conv2d_add_relu``) and never
    fuses two such ops into one, so these ops are the high-level anchors in the same order.
    """
    return [
        op.op_id for op in graph.ops
        if op.is_compute and any(_ANCHOR_NAME.fullmatch(part) for part in op.name.split("_"))
    ]


def split_problem(mod: tvm.IRModule, reduced: tvm.IRModule, system: ChipletSystem) -> tuple[
        PlanningProblem, list[int]]:
    """The planning problem of ``reduced`` with the split dimensions of ``mod``'s anchors.

    When the anchors of ``mod`` do not match the fused ops (a module given after legalization)
    the problem has no split dimensions, and splitting strategies say so.
    """
    graph = extract_op_graph(reduced)
    anchors = find_anchors(mod)
    op_ids = anchor_op_ids(graph)
    if len(op_ids) != len(anchors):
        # Not the high-level module (e.g. already legalized): nothing can be split.
        return PlanningProblem(graph, system, Topology(system)), op_ids
    split_dims = {op_id: dict(a.dims) for op_id, a in zip(op_ids, anchors, strict=True) if a.dims}
    return PlanningProblem(graph, system, Topology(system), split_dims), op_ids


def realise_placement(placement: Placement, anchors: list[int], split_graph: OpGraph,
                      graph: OpGraph | None = None) -> Placement:
    """The placement of the split module's ops that realises ``placement``.

    The split module's anchor ops are, in order, the parts of each split anchor (on the split's
    clusters) or the unsplit anchor (on its planned cluster). An op reading several parts of one
    split is its combine and runs on the split op's planned cluster. The other ops are the
    planned ``graph``'s other ops in the same order and keep their planned clusters; without
    ``graph`` (or if the counts differ) each runs where the producer it reads the most bytes
    from runs, else where the first op was planned.
    """
    by_op = {s.op_id: s for s in placement.splits}
    expected = []  # (planned op, cluster) per anchor op of the split module
    for op_id in anchors:
        split = by_op.get(op_id)
        parts = split.clusters if split else (placement.op_cluster[op_id],)
        expected += [(op_id, c) for c in parts]
    new_anchors = anchor_op_ids(split_graph)
    if len(new_anchors) != len(expected):
        raise PlanningError(
            f"the split module has {len(new_anchors)} conv2d/matmul ops, the plan expects "
            f"{len(expected)}; FuseOps grouped the parts unexpectedly"
        )
    origin = {op: planned for op, (planned, _) in zip(new_anchors, expected, strict=True)}
    cluster = {op: c for op, (_, c) in zip(new_anchors, expected, strict=True)}
    edges = split_graph.graph
    combines, others = {}, []
    for op in split_graph.ops:
        if op.op_id in cluster:
            continue
        split_preds = [origin[p] for p in edges.predecessors(op.op_id)
                       if p in origin and origin[p] in by_op]
        repeated = [o for o in set(split_preds) if split_preds.count(o) > 1]
        if repeated:
            combines[op.op_id] = placement.op_cluster[min(repeated)]
        else:
            others.append(op.op_id)
    cluster.update(combines)
    planned = [op.op_id for op in graph.ops if op.op_id not in set(anchors)] if graph else None
    if planned is not None and len(planned) == len(others):
        cluster.update({new: placement.op_cluster[old]
                        for new, old in zip(others, planned, strict=True)})
    else:
        for op_id in others:  # in order: producers are placed first
            preds = sorted(edges.predecessors(op_id))
            if preds:
                top = max(preds, key=lambda p: (edges.edges[p, op_id]["nbytes"], -p))
                cluster[op_id] = cluster[top]
            else:
                cluster[op_id] = placement.op_cluster[0] if placement.op_cluster else 0
    op_cluster = tuple(cluster[op.op_id] for op in split_graph.ops)
    stages = sorted(set(op_cluster))
    return Placement(
        strategy=placement.strategy,
        op_cluster=op_cluster,
        op_stage=tuple(stages.index(c) for c in op_cluster),
        stage_clusters=tuple(stages),
        objective_cycles=placement.objective_cycles,
        notes={**placement.notes, "splits": len(placement.splits)},
        dram_policy=placement.dram_policy,
        dram_shares=placement.dram_shares,
        replicas=placement.replicas,
        sram_loans=placement.sram_loans,
    )


def realise_splits(mod: tvm.IRModule, anchors: list[int], placement: Placement,
                   graph: OpGraph | None = None, target: str | tvm.target.Target = "llvm",
                   ) -> tuple[tvm.IRModule, Placement]:
    """Apply ``placement``'s splits to the high-level ``mod``: the reduced split module and the
    placement of its ops (:func:`realise_placement`; ``graph`` is the planned op graph)."""
    split = split_module(mod, anchors, placement.splits, target)
    return split, realise_placement(placement, anchors, extract_op_graph(split), graph)


def split_module(mod: tvm.IRModule, anchors: list[int], splits: Sequence[OpSplit],
                 target: str | tvm.target.Target = "llvm") -> tvm.IRModule:
    """The high-level ``mod`` with ``splits`` (on the ops ``anchors`` lists) applied, reduced."""
    index = {op_id: i for i, op_id in enumerate(anchors)}
    plan = [AnchorSplit(index[s.op_id], s.dim, s.parts) for s in splits]
    return ReduceGraph(target)(SplitOperators(plan)(mod))


@tvm.transform.module_pass(opt_level=0, name="AssignSplitPlacement")
class AssignSplitPlacement:
    """Plan with a strategy that may split ops, realise its splits, annotate the placement.

    For the ``tensor-parallel`` and ``layer-sequential`` strategies (and any planner returning a
    :class:`Placement` with ``splits``). Takes the high-level module (before ReduceGraph) and
    returns the reduced, annotated module, ready for PartitionByCluster:

    1. ReduceGraph, then the op graph with every conv2d / matmul's split dimensions;
    2. the planner decides (op, dimension, clusters) splits on that graph;
    3. SplitOperators rewrites the high-level module, ReduceGraph reduces it again;
    4. :func:`realise_placement` maps the plan onto the new ops; AnnotatePlacement writes it.

    A plan without splits is annotated on the first reduction directly.

    Parameters
    ----------
    system : ChipletSystem
        The hardware.
    strategy : str or Planner
        A registered strategy name or a planner object.
    target : str or Target
        Target for ReduceGraph (legalization and fusion).
    """

    def __init__(self, system: ChipletSystem, strategy: str | Planner = "tensor-parallel",
                 target: str | tvm.target.Target = "llvm") -> None:
        self.system = system
        self.planner = get_planner(strategy) if isinstance(strategy, str) else strategy
        self.target = target

    def transform_module(self, mod: tvm.IRModule, _ctx: tvm.transform.PassContext) -> tvm.IRModule:
        reduced = ReduceGraph(self.target)(mod)
        problem, anchors = split_problem(mod, reduced, self.system)
        placement = self.planner.plan(problem)
        if not placement.splits:
            return AnnotatePlacement(placement)(reduced)
        split, final = realise_splits(mod, anchors, placement, problem.graph, self.target)
        return AnnotatePlacement(final)(split)
