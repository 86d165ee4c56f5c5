"""Pipeline planner: contiguous stages over clusters in snake order, optimal bottleneck by DP."""

from __future__ import annotations

import itertools

import numpy as np

from tvm_chiplet.passes.planners.base import PlanningProblem
from tvm_chiplet.passes.planners.placement import Placement, PlanningError


def min_bottleneck_partition(
    stage_costs: np.ndarray,
    boundary_costs: np.ndarray,
    max_stages: int | None = None,
    streamed_costs: np.ndarray | None = None,
    weight_bytes: np.ndarray | None = None,
    capacity: np.ndarray | None = None,
) -> tuple[float, list[int]]:
    """Split ops ``0..n-1`` into contiguous stages minimising the most expensive stage.

    Stage ``k`` runs on the ``k``-th resource; its cost is the sum of its ops' costs on that
    resource plus ``boundary_costs[k, i]``, the cost of receiving the values that cross the cut
    before op ``i`` (zero for the first stage). Exact dynamic program, ``O(K n^2)`` arithmetic in
    ``O(K n)`` numpy steps.

    Parameters
    ----------
    stage_costs : ndarray, shape (n, K)
        ``stage_costs[i, k]``: cost of op ``i`` on resource ``k``.
    boundary_costs : ndarray, shape (K, n + 1)
        Receive cost of stage ``k`` when it starts at op ``i`` (row 0 is ignored: the first
        stage receives only model inputs).
    max_stages : int, optional
        Use at most this many of the ``K`` resources (default all).
    streamed_costs, weight_bytes, capacity : ndarray, optional
        Memory-aware costs: a stage whose ops' ``weight_bytes`` (shape ``(n,)``) exceed the
        resource's ``capacity[k]`` pays ``streamed_costs`` (shape ``(n, K)``, weights streamed
        from DRAM) instead of ``stage_costs``.

    Returns
    -------
    (bottleneck, starts)
        The optimal bottleneck and the first op of each stage (``starts[0] == 0``). Ties go to
        fewer stages, then to earlier cuts.
    """
    n, num_resources = stage_costs.shape
    if n == 0:
        return 0.0, [0]
    k_max = min(num_resources, n, max_stages or num_resources)
    def prefix_sums(costs: np.ndarray) -> np.ndarray:
        return np.vstack([np.zeros(num_resources), np.cumsum(costs, axis=0)])

    prefix = prefix_sums(stage_costs)
    memory_aware = streamed_costs is not None
    if memory_aware:
        streamed = prefix_sums(streamed_costs)
        weights = np.concatenate([[0.0], np.cumsum(weight_bytes)])

    def stage_cost(k: int, starts: np.ndarray, j: int) -> np.ndarray:
        cost = prefix[j, k] - prefix[starts, k]
        if memory_aware:
            spills = weights[j] - weights[starts] > capacity[k]
            cost = np.where(spills, streamed[j, k] - streamed[starts, k], cost)
        return cost + boundary_costs[k, starts] if k > 0 else cost

    inf = np.inf
    # best[k][j]: optimal bottleneck of ops 0..j-1 in exactly k+1 stages;
    # arg[k][j]: first op of stage k in that optimum.
    best = np.full((k_max, n + 1), inf)
    arg = np.zeros((k_max, n + 1), dtype=np.int64)
    best[0, 1:] = [stage_cost(0, np.array([0]), j)[0] for j in range(1, n + 1)]
    for k in range(1, k_max):
        for j in range(k + 1, n + 1):
            starts = np.arange(k, j)
            stage = stage_cost(k, starts, j)
            candidates = np.maximum(best[k - 1, starts], stage)
            pick = int(np.argmin(candidates))
            best[k, j], arg[k, j] = candidates[pick], starts[pick]
    stages = int(np.argmin(best[:, n]))
    bottleneck = float(best[stages, n])
    cuts, j = [], n
    for k in range(stages, 0, -1):
        j = int(arg[k, j])
        cuts.append(j)
    return bottleneck, [0, *cuts[::-1]]


class PipelinePlanner:
    """Contiguous pipeline stages over clusters taken in the topology's snake order.

    The ops of the reduced ``main`` keep their order; each stage is a run of consecutive ops on
    one cluster, and consecutive stages sit on neighbouring clusters so stage-to-stage traffic
    crosses few hops. The split minimises the bottleneck stage (compute cycles plus the cycles to
    receive the values crossing its input cut), which maximises steady-state throughput. A stage
    whose weights do not fit its cluster's SRAM is costed with weights streamed from DRAM, as
    the simulator will run it.

    Parameters
    ----------
    max_stages : int, optional
        Use at most this many clusters (default: every cluster of the system).
    """

    name = "pipeline"

    def __init__(self, max_stages: int | None = None) -> None:
        if max_stages is not None and max_stages < 1:
            raise PlanningError(f"max_stages must be >= 1, got {max_stages}")
        self.max_stages = max_stages

    def plan(self, problem: PlanningProblem) -> Placement:
        order = list(problem.topology.cluster_order())
        graph = problem.graph
        n = len(graph.ops)
        stage_costs = problem.op_cycles[:, order]
        streamed_costs = problem.op_cycles_streamed[:, order]
        weights = np.array([op.weight_bytes for op in graph.ops], dtype=np.float64)
        capacity = np.array([problem.system.clusters[c].sram_bytes for c in order], dtype=float)
        cut = graph.cut_bytes()
        boundary = np.zeros((len(order), n + 1))
        for k in range(1, len(order)):
            boundary[k] = [
                problem.transfer_cycles(nbytes, order[k - 1], order[k]) for nbytes in cut
            ]
        bottleneck, starts = min_bottleneck_partition(
            stage_costs, boundary, self.max_stages, streamed_costs, weights, capacity
        )
        bounds = [*starts, n]
        op_stage = [0] * n
        for stage, (lo, hi) in enumerate(itertools.pairwise(bounds)):
            op_stage[lo:hi] = [stage] * (hi - lo)
        stage_clusters = tuple(order[: len(starts)])
        return Placement(
            strategy=self.name,
            op_cluster=tuple(stage_clusters[s] for s in op_stage),
            op_stage=tuple(op_stage),
            stage_clusters=stage_clusters,
            objective_cycles=bottleneck,
        )
