import itertools

import numpy as np
import pytest

from tvm_chiplet.passes.planners import PipelinePlanner, PlanningError, min_bottleneck_partition


def contiguous_partitions(n, max_stages):
    """Every split of ops 0..n-1 into 1..max_stages contiguous stages, as stage bounds."""
    for stages in range(1, min(n, max_stages) + 1):
        for cuts in itertools.combinations(range(1, n), stages - 1):
            yield [0, *cuts, n]


def brute_force(costs, boundary, max_stages):
    n, k = costs.shape
    best = (np.inf, None)
    for bounds in contiguous_partitions(n, min(k, max_stages)):
        worst = max(
            costs[lo:hi, s].sum() + boundary[s, lo]
            for s, (lo, hi) in enumerate(itertools.pairwise(bounds))
        )
        if worst < best[0] - 1e-9:
            best = (worst, bounds[:-1])
    return best


@pytest.mark.parametrize("seed", range(40))
def test_dp_bottleneck_equals_brute_force(seed):
    rng = np.random.default_rng(seed)
    n, k = int(rng.integers(1, 9)), int(rng.integers(1, 5))
    costs = rng.integers(1, 20, size=(n, k)).astype(float)
    boundary = rng.integers(0, 10, size=(k, n + 1)).astype(float)
    boundary[0] = 0
    max_stages = int(rng.integers(1, k + 1))
    value, starts = min_bottleneck_partition(costs, boundary, max_stages)
    expected, _ = brute_force(costs, boundary, max_stages)
    assert value == pytest.approx(expected)
    bounds = [*starts, n]
    recomputed = max(
        costs[lo:hi, s].sum() + boundary[s, lo]
        for s, (lo, hi) in enumerate(itertools.pairwise(bounds))
    )
    assert recomputed == pytest.approx(value)


def test_equal_ops_split_evenly_over_enough_stages():
    costs = np.ones((8, 4))
    value, starts = min_bottleneck_partition(costs, np.zeros((4, 9)))
    assert value == 2 and starts == [0, 2, 4, 6]


def test_expensive_boundary_keeps_everything_in_one_stage():
    costs = np.ones((4, 2))
    boundary = np.full((2, 5), 100.0)
    value, starts = min_bottleneck_partition(costs, boundary)
    assert value == 4 and starts == [0]


def test_empty_graph_has_zero_bottleneck():
    assert min_bottleneck_partition(np.zeros((0, 3)), np.zeros((3, 1))) == (0.0, [0])


def test_invalid_stage_limit_is_refused():
    with pytest.raises(PlanningError, match="max_stages must be >= 1"):
        PipelinePlanner(max_stages=0)


def test_stage_whose_weights_overflow_sram_pays_streaming():
    costs = np.ones((4, 2))
    streamed = np.full((4, 2), 10.0)
    weights = np.array([3.0, 3.0, 3.0, 3.0])
    capacity = np.array([6.0, 6.0])
    value, starts = min_bottleneck_partition(
        costs, np.zeros((2, 5)), None, streamed, weights, capacity
    )
    assert (value, starts) == (2.0, [0, 2])
    value, _ = min_bottleneck_partition(costs, np.zeros((2, 5)), 1, streamed, weights, capacity)
    assert value == 40.0


def test_consecutive_stages_are_neighbours_on_a_faulty_grid():
    import networkx as nx

    from tvm_chiplet.passes.analysis.op_graph import OpGraph, OpNode
    from tvm_chiplet.passes.planners.base import PlanningProblem
    from tvm_chiplet.runtime.device import simulate_workload
    from tvm_chiplet.targets.system_generators import mesh_system
    from tvm_chiplet.targets.topology import Topology

    system = mesh_system(3, 3, faults={"chiplets": ["x1y1"], "links": [["x0y0", "x1y0"]]})
    nodes = [OpNode(i, f"op{i}", "call_tir", 4e7, 64, 4096, 0) for i in range(16)]
    graph = nx.DiGraph()
    graph.add_nodes_from(range(16))
    graph.add_edges_from(((i, i + 1) for i in range(15)), nbytes=4096)
    problem = PlanningProblem(OpGraph(nodes, graph, output_ops=[15]), system, Topology(system),
                              simulator=simulate_workload)
    placement = PipelinePlanner(replicate=False).plan(problem)
    stages = placement.stage_clusters
    assert len(stages) == system.num_clusters
    assert max(problem.topology.hops(a, b) for a, b in itertools.pairwise(stages)) <= 1


def test_receive_costs_are_the_transfers_between_consecutive_clusters():
    import networkx as nx

    from tvm_chiplet.passes.analysis.op_graph import OpGraph, OpNode
    from tvm_chiplet.passes.planners.base import PlanningProblem
    from tvm_chiplet.targets.system_generators import mesh_system
    from tvm_chiplet.targets.topology import Topology

    system = mesh_system(2, 3, faults={"links": [["x0y0", "x1y0"]]})
    graph = nx.DiGraph()
    graph.add_node(0)
    problem = PlanningProblem(OpGraph([OpNode(0, "op0", "call_tir", 1e6, 64, 64, 0)], graph,
                                      output_ops=[0]), system, Topology(system))
    order, cut = [0, 1, 1, 5, 3], [0, 5, 1000, 0, 7, 123456]
    table = problem.receive_cycles(order, cut)
    assert table.shape == (5, 6) and not table[0].any() and not table[2].any()
    for k in range(1, len(order)):
        assert list(table[k]) == [problem.transfer_cycles(b, order[k - 1], order[k]) for b in cut]
    assert table[1, 5] > table[1, 4] > 0  # more bytes, longer
    with pytest.raises(ValueError, match="cut bytes must be >= 0"):
        problem.receive_cycles(order, [0, -1])
