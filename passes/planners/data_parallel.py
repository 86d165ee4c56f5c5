"""Planner ``data-parallel``: each replica made by ReplicateDataParallel on its own cluster."""

from __future__ import annotations

from tvm_chiplet.passes.planners.base import PlanningProblem
from tvm_chiplet.passes.planners.placement import Placement, PlanningError


def replica_seeds(problem: PlanningProblem) -> list[list[int]]:
    """Per split model input, the ``get_item`` ops that start each replica, in replica order.

    ReplicateDataParallel splits every input with one ``split`` op whose tuple items feed the
    replicas; after ReduceGraph they are a ``call_tir`` reading a model input and its items.
    """
    graph = problem.graph
    input_readers = {op for uses in graph.input_uses for op in uses}
    seeds: dict[int, list[int]] = {}
    for op in graph.ops:
        if op.kind != "get_item":
            continue
        preds = list(graph.graph.predecessors(op.op_id))
        if len(preds) == 1 and preds[0] in input_readers and graph.ops[preds[0]].is_compute:
            seeds.setdefault(preds[0], []).append(op.op_id)
    return [seeds[split] for split in sorted(seeds)]


class DataParallelPlanner:
    """Put replica ``r`` of a data-parallel module on the ``r``-th cluster in snake order.

    The module must have been rebuilt by :class:`ReplicateDataParallel` (``build(...,
    strategy="data-parallel")`` does it): every input split along the batch, the graph replicated
    per slice, the results concatenated. An op belongs to replica ``r`` when it depends on
    replica ``r``'s slices only; the splits and the final concatenation (which read from every
    replica) run on replica 0's cluster, so their traffic is the scatter and the gather.
    """

    name = "data-parallel"

    def plan(self, problem: PlanningProblem) -> Placement:
        per_input = replica_seeds(problem)
        if not per_input:
            raise PlanningError(
                "data-parallel needs a module rebuilt by ReplicateDataParallel (inputs split "
                "along the batch); build(..., strategy='data-parallel') runs it"
            )
        replicas = len(per_input[0])
        if any(len(seeds) != replicas for seeds in per_input) or replicas < 2:
            raise PlanningError(
                f"inputs are split into {[len(s) for s in per_input]} parts; data-parallel needs "
                "the same number (>= 2) for every input"
            )
        order = list(problem.topology.cluster_order())
        clusters = [order[r % len(order)] for r in range(replicas)]
        graph = problem.graph
        labels: list[set[int]] = [set() for _ in graph.ops]
        for seeds in per_input:
            for replica, op_id in enumerate(seeds):
                labels[op_id].add(replica)
        for op in graph.ops:
            for pred in graph.graph.predecessors(op.op_id):
                labels[op.op_id] |= labels[pred]
        op_replica = [next(iter(lab)) if len(lab) == 1 else 0 for lab in labels]
        op_cluster = tuple(clusters[r] for r in op_replica)
        return Placement(
            strategy=self.name,
            op_cluster=op_cluster,
            op_stage=tuple(op_replica),
            stage_clusters=tuple(clusters),
            objective_cycles=max(
                sum(problem.op_cycles[i, c] for i, c in enumerate(op_cluster) if c == cluster)
                for cluster in clusters
            ),
            notes={"replicas": replicas},
        )
