"""Dependency modules (analysis) and the modular planner built on them."""

import itertools

import networkx as nx
import numpy as np
import pytest

from tvm_chiplet.passes import ReduceGraph
from tvm_chiplet.passes.analysis.dependency_modules import (
    Complexity,
    Module,
    compute_dependencies,
    dependency_modules,
    depth_cut_bytes,
    op_depth,
    resource_bounds,
    serial_groups,
)
from tvm_chiplet.passes.analysis.extract_op_graph import extract_op_graph
from tvm_chiplet.passes.analysis.op_graph import OpGraph, OpNode
from tvm_chiplet.passes.planners.base import PlanningProblem
from tvm_chiplet.passes.planners.modular import ModularPlanner, _BatchTimeEstimator, _Search
from tvm_chiplet.passes.planners.placement import PlanningError
from tvm_chiplet.runtime.device import simulate_workload
from tvm_chiplet.targets.system_generators import mesh_system
from tvm_chiplet.targets.system_toml import load_system
from tvm_chiplet.targets.topology import Topology
from tvm_chiplet.tools import models
from tvm_chiplet.tools.frontends import load_model

MB = 2**20


def make_graph(ops, edges, kinds=None):
    """``ops``: (flops, output_bytes, weight_bytes) per op; ``edges``: (u, v) pairs."""
    kinds = kinds or {}
    nodes = [
        OpNode(i, f"op{i}", kinds.get(i, "call_tir"), float(f), 64, out, w)
        for i, (f, out, w) in enumerate(ops)
    ]
    graph = nx.DiGraph()
    graph.add_nodes_from(range(len(ops)))
    for u, v in edges:
        graph.add_edge(u, v, nbytes=ops[u][1])
    return OpGraph(nodes, graph, output_ops=[len(ops) - 1])


def make_problem(graph, rows=1, cols=3, **system):
    mesh = mesh_system(rows, cols, **system)
    return PlanningProblem(graph, mesh, Topology(mesh), simulator=simulate_workload)


DIAMOND = make_graph([(1e6, 1000, 0)] * 4, [(0, 1), (0, 2), (1, 3), (2, 3)])
CHAIN = make_graph([(1e6, 1000, 0)] * 4, [(0, 1), (1, 2), (2, 3)])
# Two independent chains of three heavy ops: 0-1-2 and 3-4-5.
BRANCHES = make_graph([(4e8, 4000, 0)] * 6, [(0, 1), (1, 2), (3, 4), (4, 5)])


# ---------------------------------------------------------------------- analysis
def test_depth_of_a_diamond():
    assert op_depth(DIAMOND) == [0, 1, 1, 2]


def test_plumbing_ops_sit_at_their_producers_level():
    # 0 -> tuple 1 -> get_item 2 -> 3: plumbing adds no depth.
    graph = make_graph([(1e6, 100, 0), (0, 100, 0), (0, 100, 0), (1e6, 100, 0)],
                       [(0, 1), (1, 2), (2, 3)], kinds={1: "tuple", 2: "get_item"})
    assert op_depth(graph) == [0, 0, 0, 1]
    assert compute_dependencies(graph) == [(0, 3, 100)]


def test_serial_groups_fuse_a_chain():
    assert serial_groups(CHAIN) == [[0, 1, 2, 3]]


def test_serial_groups_stop_at_forks_and_joins():
    assert serial_groups(DIAMOND) == [[0], [1], [2], [3]]


def test_plumbing_joins_its_producers_serial_group():
    graph = make_graph([(1e6, 100, 0), (0, 100, 0), (1e6, 100, 0)], [(0, 1), (1, 2)],
                       kinds={1: "get_item"})
    assert serial_groups(graph) == [[0, 1, 2]]


def test_depth_cut_bytes_count_every_consumer():
    # Before level 1: 0 -> 1 and 0 -> 2; before level 2: 1 -> 3 and 2 -> 3.
    assert depth_cut_bytes(DIAMOND) == [0, 2000, 2000, 0]


@pytest.mark.parametrize("target", [1, 2, 3, 8])
def test_modules_partition_every_op_exactly_once(target):
    graph = make_graph([(1e6 * (i + 1), 1000 * (i % 3 + 1), 500 * i) for i in range(9)],
                       [(i, i + 1) for i in range(8)] + [(0, 4), (2, 7)])
    modules = dependency_modules(graph, target)
    ops = [op for m in modules for op in m.ops]
    assert sorted(ops) == list(range(9))
    assert [m.index for m in modules] == list(range(len(modules)))
    for m in modules:
        assert sorted(op for g in m.parallel_groups for op in g) == list(m.ops)
    ranges = [m.depth_range for m in modules]
    assert ranges[0][0] == 0 and all(
        a[1] + 1 == b[0] for a, b in itertools.pairwise(ranges)
    )


def test_max_modules_merges_modules():
    graph = make_graph([(1e6, 1000, 0)] * 8, [(i, i + 1) for i in range(7)])
    assert len(dependency_modules(graph, 8)) > 2
    assert len(dependency_modules(graph, 8, max_modules=2)) == 2


def test_two_independent_branches_are_two_parallel_groups():
    (module,) = dependency_modules(BRANCHES, 1)
    assert module.parallel_groups == ((0, 1, 2), (3, 4, 5))
    assert module.complexity == Complexity(parallel_groups=2, max_width=2)


def test_diamond_is_one_group_of_width_two():
    (module,) = dependency_modules(DIAMOND, 1)
    assert module.complexity == Complexity(parallel_groups=1, max_width=2)


def module(index, flops, weight_bytes=0, compute_ops=4, width=1):
    ops = tuple(range(index * compute_ops, (index + 1) * compute_ops))
    return Module(index, ops, (index, index), flops, weight_bytes, (ops,),
                  Complexity(1, width), compute_ops)


def test_resource_bounds_follow_the_cost_share_and_are_at_least_one():
    assert resource_bounds([module(0, 1e6), module(1, 3e6)], 4) == [1, 3]
    assert resource_bounds([module(i, 1e6) for i in range(4)], 2) == [1, 1, 1, 1]


def test_resource_bounds_weigh_weights_that_overflow_one_cluster():
    light, heavy = module(0, 1e6, weight_bytes=0), module(1, 1e6, weight_bytes=8 * MB)
    assert resource_bounds([light, heavy], 4) == [2, 2]
    assert resource_bounds([light, heavy], 4, sram_bytes=2 * MB) == [1, 3]


def test_resource_bounds_never_exceed_a_modules_ops():
    assert resource_bounds([module(0, 1e6, compute_ops=2), module(1, 1e6)], 16) == [2, 4]


def test_bad_module_targets_are_refused():
    with pytest.raises(ValueError, match="target_modules must be >= 1"):
        dependency_modules(CHAIN, 0)
    with pytest.raises(ValueError, match="num_clusters must be >= 1"):
        resource_bounds(dependency_modules(CHAIN), 0)


# ---------------------------------------------------------------------- planner
def branch_clusters(placement, branch):
    return {placement.op_cluster[op] for op in branch}


def test_independent_heavy_branches_go_to_different_clusters():
    placement = ModularPlanner().plan(make_problem(BRANCHES, cols=2))
    assert branch_clusters(placement, [0, 1, 2]).isdisjoint(branch_clusters(placement, [3, 4, 5]))


def test_chain_overflowing_one_clusters_sram_is_spread():
    graph = make_graph([(1e6, 1000, 1 * MB)] * 6, [(i, i + 1) for i in range(5)])
    problem = make_problem(graph, cols=4, sram_bytes=2 * MB)
    placement = ModularPlanner().plan(problem)
    assert len(set(placement.op_cluster)) >= 3


def test_congestion_term_moves_traffic_off_a_shared_link():
    # Two producer -> consumer pairs with heavy traffic on a 1x4 line. Starting with both
    # flows over the middle link (0 -> 2 and 1 -> 3), the search separates them.
    # Each op takes ~3000 cycles and a flow 2048 per link: sharing a link (4096) or a cluster
    # (6000) both cost more than keeping the flows apart.
    graph = make_graph([(6.1e6, 64 * 2**10, 0)] * 4, [(0, 2), (1, 3)])
    problem = make_problem(graph, cols=4)
    estimator = _BatchTimeEstimator(problem, 64, "interleave")
    shared = np.array([0, 1, 2, 3])
    assert estimator.score(shared).bottleneck[0] == "link"
    # Same hops and latency, opposite directions: only the congestion term tells them apart.
    apart = estimator.score(np.array([0, 3, 2, 1]))
    assert apart.makespan == estimator.score(shared).makespan
    assert apart.objective < estimator.score(shared).objective
    search = _Search(problem, estimator, np.zeros(4, dtype=np.int64), op_depth(graph), seed=0)
    trajectory, _ = search.run(shared, iterations=200, deadline=float("inf"))
    assign, score, _ = trajectory[-1]
    per_flow = 64 * 2**10 / 32.0
    assert score.link_load.max() <= per_flow + 1e-6 < estimator.score(shared).link_load.max()
    assert len(set(assign.tolist())) == 4  # still one op per cluster


def test_round_trips_are_refused_by_the_objective():
    problem = make_problem(CHAIN, cols=2)
    estimator = _BatchTimeEstimator(problem, 64, "interleave")
    assert estimator.score(np.array([0, 1, 0, 0])).objective == float("inf")
    assert np.isfinite(estimator.score(np.array([0, 0, 1, 1])).objective)


def test_planner_is_deterministic():
    problem = make_problem(BRANCHES, rows=2, cols=2)
    first = ModularPlanner(seed=3).plan(problem).to_dict()
    assert ModularPlanner(seed=3).plan(problem).to_dict() == first


def test_result_is_never_slower_than_the_initial_placement():
    graph = make_graph([(1e6 * (1 + i % 3), 8000, 300_000 * (i % 2)) for i in range(10)],
                       [(i, i + 1) for i in range(9)] + [(1, 4), (5, 8)])
    placement = ModularPlanner(batches=16).plan(make_problem(graph, rows=2, cols=2,
                                                             sram_bytes=MB))
    rows = placement.notes["candidates"]
    chosen = rows[placement.notes["chosen"]]["simulated_cycles"]
    initial = [r["simulated_cycles"] for r in rows if r["candidate"].startswith("initial")]
    assert chosen == min(r["simulated_cycles"] for r in rows) <= min(initial)
    assert placement.notes["modules"] >= 1


def test_every_op_gets_a_valid_cluster_and_plumbing_follows_its_producer():
    graph = make_graph([(1e6, 100, 0), (0, 100, 0), (4e8, 100, 0), (4e8, 100, 0)],
                       [(0, 1), (1, 2), (1, 3)], kinds={1: "tuple"})
    problem = make_problem(graph, cols=3)
    placement = ModularPlanner().plan(problem)
    assert len(placement.op_cluster) == len(placement.op_stage) == 4
    assert all(0 <= c < problem.system.num_clusters for c in placement.op_cluster)
    assert placement.op_cluster[1] == placement.op_cluster[0]
    assert all(0 <= s < len(placement.stage_clusters) for s in placement.op_stage)
    assert placement.strategy == "modular"


def test_graph_without_compute_ops_goes_to_the_first_cluster():
    graph = make_graph([(0, 100, 0), (0, 100, 0)], [(0, 1)], kinds={0: "tuple", 1: "get_item"})
    problem = make_problem(graph, cols=3)
    placement = ModularPlanner().plan(problem)
    first = problem.topology.cluster_order()[0]
    assert placement.op_cluster == (first, first)


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"iterations": -1}, "iterations must be an integer >= 0"),
        ({"batches": 0}, "batches must be an integer >= 1"),
        ({"seed": 1.5}, "seed must be an integer >= 0"),
        ({"time_limit": 0}, "time_limit must be > 0"),
        ({"target_modules": 0}, "target_modules must be an integer >= 1"),
        ({"checkpoints": 1}, "checkpoints must be an integer >= 2"),
    ],
)
def test_bad_options_are_refused(options, message):
    with pytest.raises(PlanningError, match=message):
        ModularPlanner(**options)


def test_small_cnn_on_mesh():
    graph = extract_op_graph(ReduceGraph()(load_model(models.get_model("small-cnn"))))
    system = load_system("mesh-4x4")
    problem = PlanningProblem(graph, system, Topology(system), simulator=simulate_workload)
    modules = dependency_modules(graph, 4)
    assert sorted(op for m in modules for op in m.ops) == list(range(len(graph.ops)))
    placement = ModularPlanner(batches=8).plan(problem)
    assert all(0 <= c < system.num_clusters for c in placement.op_cluster)
    rows = placement.notes["candidates"]
    assert rows[placement.notes["chosen"]]["simulated_cycles"] == min(
        r["simulated_cycles"] for r in rows
    )


def test_weights_streaming_from_a_slow_dram_borrow_other_clusters_sram():
    # 1.5 MB of weights on 1 MB clusters, a 4 B/cycle controller: the weights fit in the SRAM
    # of the grid, and the loans of the idle clusters take DRAM out of the steady state.
    graph = make_graph([(1e6, 8000, 0), (1e6, 8000, 3 * MB // 2)], [(0, 1)])
    problem = make_problem(graph, rows=2, cols=2, sram_bytes=MB, dram_at=((0, 0),),
                           dram_bandwidth=4.0)
    placement = ModularPlanner(batches=8).plan(problem)
    rows = placement.notes["candidates"]
    chosen = rows[placement.notes["chosen"]]
    unlent = min(r["simulated_cycles"] for r in rows if not r["candidate"].startswith("lent/"))
    assert chosen["candidate"].startswith("lent/")
    assert chosen["simulated_cycles"] < unlent / 5
    borrower = placement.op_cluster[1]
    assert placement.sram_loans
    assert all(b == borrower != k for b, k, _ in placement.sram_loans)
