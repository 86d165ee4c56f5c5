"""PlanSplitPlacement: plan a strategy that may split ops, realise the splits, annotate."""

from __future__ import annotations

import re
from collections import Counter

import tvm

from tvm_chiplet.passes.analysis.extract_op_graph import extract_op_graph
from tvm_chiplet.passes.analysis.op_graph import OpGraph
from tvm_chiplet.passes.annotate_placement import AnnotatePlacement
from tvm_chiplet.passes.distribute_tensors import DistributedSplit, distribute_and_reduce
from tvm_chiplet.passes.planners import Planner, PlanningProblem, get_planner
from tvm_chiplet.passes.planners.base import WorkloadSimulator
from tvm_chiplet.passes.planners.placement import Placement
from tvm_chiplet.passes.reduce_graph import ReduceGraph
from tvm_chiplet.passes.split_operators import find_anchors
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


def split_problem(mod: tvm.IRModule, reduced: tvm.IRModule, system: ChipletSystem,
                  simulator: WorkloadSimulator | None = None) -> tuple[PlanningProblem, list[int]]:
    """The planning problem of ``reduced`` with the split dimensions of ``mod``'s anchors.

    When the anchors of ``mod`` do not match the fused ops (a module given after legalization)
    the problem has no split dimensions, and splitting strategies say so. ``simulator`` judges
    the planner's candidates (see :class:`PlanningProblem`).
    """
    graph = extract_op_graph(reduced, system.device_dtype)
    anchors = find_anchors(mod)
    op_ids = anchor_op_ids(graph)
    if len(op_ids) != len(anchors):
        # Not the high-level module (e.g. already legalized): nothing can be split.
        return PlanningProblem(graph, system, Topology(system), simulator=simulator), op_ids
    split_dims = {op_id: dict(a.dims) for op_id, a in zip(op_ids, anchors, strict=True) if a.dims}
    return PlanningProblem(graph, system, Topology(system), split_dims, simulator), op_ids


def realise_splits(mod: tvm.IRModule, anchors: list[int], placement: Placement,
                   target: str | tvm.target.Target = "llvm") -> tuple[tvm.IRModule, Placement]:
    """Apply ``placement``'s splits to the high-level ``mod`` with their parts kept distributed
    (:func:`~.distribute_tensors.distribute_and_reduce`): the reduced module and the placement
    of its ops. ``anchors`` lists the planned graph's conv2d / matmul ops (:func:`split_problem`);
    ops that run whole keep their planned clusters."""
    index = {op_id: i for i, op_id in enumerate(anchors)}
    splits = [DistributedSplit(index[s.op_id], s.dim, s.clusters) for s in placement.splits]
    home = Counter(placement.op_cluster).most_common(1)[0][0] if placement.op_cluster else 0
    reduced, op_cluster = distribute_and_reduce(mod, splits, placement.op_cluster, home, target)
    stages = sorted(set(op_cluster))
    return reduced, Placement(
        strategy=placement.strategy,
        op_cluster=tuple(op_cluster),
        op_stage=tuple(stages.index(c) for c in op_cluster),
        stage_clusters=tuple(stages),
        objective_cycles=placement.objective_cycles,
        notes={**placement.notes, "splits": len(placement.splits)},
        dram_policy=placement.dram_policy,
        dram_shares=placement.dram_shares,
        replicas=placement.replicas,
        sram_loans=placement.sram_loans,
    )


@tvm.transform.module_pass(opt_level=0, name="PlanSplitPlacement")
class PlanSplitPlacement:
    """Plan with a strategy that may split ops, realise its splits, annotate the placement.

    For the ``tensor-parallel`` and ``layer-sequential`` strategies (and any planner returning a
    :class:`Placement` with ``splits``). Takes the high-level module (before ReduceGraph) and
    returns the reduced, annotated module, ready for PartitionByCluster:

    1. ReduceGraph, then the op graph with every conv2d / matmul's split dimensions;
    2. the planner decides (op, dimension, clusters) splits on that graph;
    3. :func:`realise_splits`: DistributeTensors rewrites the high-level module with the split
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
        reduced = ReduceGraph(self.target)(mod)
        problem, anchors = split_problem(mod, reduced, self.system, self.simulator)
        placement = self.planner.plan(problem)
        if not placement.splits:
            return AnnotatePlacement(placement)(reduced)
        split, final = realise_splits(mod, anchors, placement, self.target)
        return AnnotatePlacement(final)(split)
