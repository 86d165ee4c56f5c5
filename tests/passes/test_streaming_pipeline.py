"""The pipeline planner when weights overflow SRAM: streaming DP, regions, orders, DRAM LP."""

import dataclasses
import itertools

import numpy as np
import pytest

from tests.passes.test_ilp_planner import make_graph
from tests.passes.test_pipeline_planner import contiguous_partitions
from tvm_chiplet.passes.planners import pipeline_planner
from tvm_chiplet.passes.planners.base import PlanningProblem
from tvm_chiplet.passes.planners.dram import balance_dram
from tvm_chiplet.passes.planners.evaluate import simulate_placement
from tvm_chiplet.passes.planners.partition import min_streaming_partition
from tvm_chiplet.passes.planners.pipeline_planner import (
    ORDERED_COMBOS,
    STREAMING_VARIANTS,
    PipelinePlanner,
    candidate_orders,
    stream_rates,
)
from tvm_chiplet.passes.planners.placement import OpSplit, Placement, PlanningError
from tvm_chiplet.runtime.device import simulate_workload
from tvm_chiplet.targets.system_generators import mesh_system
from tvm_chiplet.targets.topology import Topology
from tvm_chiplet.targets.workload import PLANNED_HEADROOM


def brute_force(costs, weights, capacity, rate, dram, batches):
    n, k = costs.shape
    best = np.inf
    for bounds in contiguous_partitions(n, k):
        times, streamed = [], 0.0
        for s, (lo, hi) in enumerate(itertools.pairwise(bounds)):
            w = weights[lo:hi].sum()
            stream = w - (1 - PLANNED_HEADROOM) * capacity[s] if w > capacity[s] else 0.0
            times.append(max(costs[lo:hi, s].sum(), stream / rate[s]))
            streamed += stream
        best = min(best, sum(times) + (batches - 1) * max(max(times), streamed / dram))
    return best


@pytest.mark.parametrize("seed", range(12))
def test_streaming_dp_is_close_to_brute_force_on_one_wide_stages(seed):
    rng = np.random.default_rng(seed)
    n, k = int(rng.integers(2, 7)), int(rng.integers(1, 4))
    costs = rng.integers(1, 20, size=(n, k)).astype(float)
    weights = rng.integers(0, 10, size=n).astype(float)
    capacity, rate = np.full(k, 8.0), np.full(k, 0.5)
    exact = brute_force(costs, weights, capacity, rate, 2.0, 8)
    found, stages, _ = min_streaming_partition(
        costs, np.zeros((k, n + 1)), weights, capacity, rate, 2.0, batches=8, grid=200)
    assert exact <= found + 1e-9
    assert found <= exact * 1.05  # the grid of targets is the only approximation
    assert stages[0].lo == 0 and stages[-1].hi == n
    assert all(a.hi == b.lo for a, b in itertools.pairwise(stages))


def test_a_wide_region_splits_a_heavy_op_over_its_clusters():
    # One op with 16 units of weights; each resource holds 8 (6 beside the planners'
    # headroom): only a 2-wide region avoids streaming.
    costs = np.array([[10.0, 10.0]])
    one, _, streamed_one = min_streaming_partition(
        costs, np.zeros((2, 2)), np.array([16.0]), np.array([8.0, 8.0]), np.array([1.0, 1.0]),
        1.0, batches=4)
    two, stages, streamed_two = min_streaming_partition(
        costs, np.zeros((2, 2)), np.array([16.0]), np.array([8.0, 8.0]), np.array([1.0, 1.0]),
        1.0, split_max=np.array([4]), max_width=2, batches=4)
    assert streamed_one == 16 - 6.0 and streamed_two == 0.0
    assert [(s.first, s.width) for s in stages] == [(0, 2)]
    assert two == pytest.approx(4 * 5.0) and two < one


def overflowing_problem():
    graph = make_graph(
        [(4e6, 4000, 1_000_000), (8e6, 3000, 3_000_000), (6e6, 3000, 3_000_000),
         (2e6, 1000, 2_000_000)],
        [(0, 1), (1, 2), (2, 3)],
    )
    system = mesh_system(2, 2, bandwidth=32.0, sram_bytes=1_000_000, dram_bandwidth=16.0,
                         dram_at=((0, 0), (1, 1)))
    split_dims = {op: {"out_channels": 64} for op in range(4)}
    return PlanningProblem(graph, system, Topology(system), split_dims, simulator=simulate_workload)


def test_planner_keeps_the_candidate_the_simulator_finds_fastest():
    problem = overflowing_problem()
    placement = PipelinePlanner(batches=8).plan(problem)
    simulated = simulate_placement(problem, placement, 8).total_cycles
    baseline = simulate_placement(
        problem, PipelinePlanner(batches=8, search=False).plan(problem), 8).total_cycles
    assert placement.notes["candidates"] > 1
    assert simulated == pytest.approx(placement.notes["simulated_cycles"])
    assert simulated <= baseline
    assert PipelinePlanner(batches=8).plan(problem) == placement  # deterministic


def test_candidate_orders_put_fast_streaming_clusters_last():
    problem = overflowing_problem()
    rate = stream_rates(problem, "nearest")
    orders = candidate_orders(problem, rate)
    assert orders[0] == problem.topology.cluster_order()
    assert all(sorted(order) == [0, 1, 2, 3] for order in orders)
    hosts = {d.node for d in problem.system.drams}
    assert set(orders[-1][-2:]) == hosts  # controllers' own clusters stream fastest


def test_dram_lp_balances_controllers():
    problem = overflowing_problem()
    # Everything on cluster 0, which hosts controller 0: the LP moves half the bytes to 1.
    placement = Placement("manual", (0, 0, 0, 0), (0, 0, 0, 0), (0,), dram_policy="nearest")
    balanced = balance_dram(problem, placement)
    shares = {d: f for c, d, f in balanced.dram_shares if c == 0}
    assert balanced.dram_policy == "balanced"
    assert sum(shares.values()) == pytest.approx(1.0)
    assert 0.2 < shares[1] < 0.8
    assert (simulate_placement(problem, balanced, 4).total_cycles
            < simulate_placement(problem, placement, 4).total_cycles)


def test_without_a_working_lp_solver_the_placement_keeps_its_policy(monkeypatch):
    import pulp

    def crash(self, *args, **kwargs):
        raise pulp.PulpSolverError("cbc missing")

    monkeypatch.setattr(pulp.LpProblem, "solve", crash)
    placement = Placement("manual", (0, 0, 0, 0), (0, 0, 0, 0), (0,), dram_policy="nearest")
    assert balance_dram(overflowing_problem(), placement) == placement


def test_dram_lp_with_lending_holds_streamed_weights_in_spare_sram():
    problem = overflowing_problem()
    # Clusters 0..2 stream; cluster 3 runs nothing and has 1 MB of SRAM free.
    placement = Placement("manual", (0, 1, 2, 2), (0, 1, 2, 2), (0, 1, 2))
    plain, lent = balance_dram(problem, placement), balance_dram(problem, placement, lend=True)
    assert plain.sram_loans == ()
    assert {lender for _, lender, _ in lent.sram_loans} == {3}
    assert sum(n for _, _, n in lent.sram_loans) <= problem.system.clusters[3].sram_bytes
    assert lent.notes["sram_lent_bytes"] == sum(n for _, _, n in lent.sram_loans)
    assert lent.notes["dram_busiest_cycles"] < plain.notes["dram_busiest_cycles"]
    with_loans, without = (simulate_placement(problem, p, 8) for p in (lent, plain))
    assert with_loans.dram_bytes.sum() < without.dram_bytes.sum()
    assert with_loans.total_cycles < without.total_cycles


def test_lending_is_not_offered_to_copies():
    problem = overflowing_problem()
    placement = Placement("manual", (0, 0, 0, 0), (0, 0, 0, 0), (0,),
                          replicas=(((0, 1),),))
    assert balance_dram(problem, placement, lend=True).sram_loans == ()


def test_streaming_dp_counts_free_sram_against_dram_traffic_when_lending():
    # Op 0 leaves 6 of its resource's 8 units free; op 1 streams 16 - 6 = 10 units per batch
    # (the planners keep a quarter of its resource free), 4 when the 6 units hold some.
    costs, weights = np.array([[1.0, 1.0], [1.0, 1.0]]), np.array([2.0, 16.0])
    args = (costs, np.zeros((2, 3)), weights, np.array([8.0, 8.0]), np.array([100.0, 100.0]),
            1.0)
    alone, stages, streamed = min_streaming_partition(*args, batches=4)
    lent, stages_lent, streamed_lent = min_streaming_partition(*args, batches=4, lend=True)
    assert [(s.lo, s.hi) for s in stages] == [(s.lo, s.hi) for s in stages_lent] == [(0, 1),
                                                                                      (1, 2)]
    assert (streamed, streamed_lent) == (10.0, 4.0)
    assert lent == pytest.approx(alone - 3 * 6.0)


def test_placement_with_loans_round_trips_and_copies_must_map_the_lenders():
    placement = Placement("pipeline", (0, 1), (0, 1), (0, 1), sram_loans=((1, 2, 4096),))
    assert Placement.from_dict(placement.to_dict()) == placement
    assert placement.clusters_used() == [0, 1, 2]
    copied = Placement("pipeline", (0,), (0,), (0,), replicas=(((0, 2), (1, 3)),),
                       sram_loans=((0, 1, 8),))
    assert copied.copies == 2
    with pytest.raises(PlanningError, match="replica 1 must map each used cluster"):
        Placement("pipeline", (0,), (0,), (0,), replicas=(((0, 2),),), sram_loans=((0, 1, 8),))


def test_loans_leave_room_for_split_parts_rounded_up_to_whole_slices():
    # Op 0 (0.6 MB of weights, 3 output channels) is split over clusters 1 and 2: the planner
    # counts 0.3 MB each, the compiled parts hold 2 and 1 channels (0.4 MB and 0.2 MB).
    graph = make_graph([(4e6, 4000, 600_000), (8e6, 3000, 3_000_000)], [(0, 1)])
    system = mesh_system(1, 3, bandwidth=32.0, sram_bytes=1_000_000, dram_bandwidth=16.0,
                         dram_at=((0, 0),))
    problem = PlanningProblem(graph, system, Topology(system), {0: {"out_channels": 3}},
                              simulator=simulate_workload)
    placement = Placement("manual", (1, 0), (0, 1), (1, 0),
                          splits=(OpSplit(0, "out_channels", (1, 2)),))
    lent = balance_dram(problem, placement, lend=True)
    by_lender = {k: sum(n for _, lender, n in lent.sram_loans if lender == k) for k in (1, 2)}
    assert by_lender[1] and by_lender[2]
    assert all(by_lender[k] + 400_000 <= 1_000_000 for k in (1, 2))


def test_loans_as_built_go_to_the_clusters_that_stream_in_the_realised_module():
    # The planner's items stream op 1 on cluster 0; its realised module (a stand-in for
    # problem.realise) runs op 1 on cluster 2, so cluster 2 streams and cluster 0 has room.
    graph = make_graph([(4e6, 4000, 600_000), (8e6, 3000, 3_000_000)], [(0, 1)])
    system = mesh_system(1, 3, bandwidth=32.0, sram_bytes=1_000_000, dram_bandwidth=16.0,
                         dram_at=((0, 0),))
    placement = Placement("manual", (1, 0), (0, 1), (1, 0),
                          splits=(OpSplit(0, "out_channels", (1, 2)),))
    problem = PlanningProblem(graph, system, Topology(system), {0: {"out_channels": 3}},
                              simulator=simulate_workload,
                              realise=lambda placement: (graph, dataclasses.replace(
                                  placement, op_cluster=(1, 2), stage_clusters=(1, 2),
                                  splits=())))
    lent = balance_dram(problem, placement, lend=True, as_built=True)
    assert lent.sram_loans and {borrower for borrower, _, _ in lent.sram_loans} == {2}
    simulate_placement(problem, lent, 4, as_built=True)  # loans valid as built
    estimated = balance_dram(problem, placement, lend=True)
    assert {borrower for borrower, _, _ in estimated.sram_loans} == {0}
    with pytest.raises(ValueError, match=r"borrows .* but streams only 0 B"):
        simulate_placement(problem, estimated, 4, as_built=True)


def test_streaming_runs_whose_inputs_are_equal_are_solved_once_and_placed_on_each_order(
        monkeypatch):
    # A line of 4 with a controller at each end: the order and its mirror image see the same
    # costs, capacities and stream rates.
    system = mesh_system(1, 4, bandwidth=32.0, sram_bytes=1_000_000, dram_bandwidth=16.0,
                         dram_at=((0, 0), (3, 0)))
    problem = PlanningProblem(overflowing_problem().graph, system, Topology(system),
                              {op: {"out_channels": 64} for op in range(4)},
                              simulator=simulate_workload)
    solved = []
    real = pipeline_planner.min_streaming_partition
    monkeypatch.setattr(pipeline_planner, "min_streaming_partition",
                        lambda *args, **kwargs: solved.append(1) or real(*args, **kwargs))
    planner = PipelinePlanner(batches=8)
    variant = STREAMING_VARIANTS[1]
    runs = [(variant, 2, [0, 1, 2, 3]), (variant, 2, [3, 2, 1, 0])]
    found = planner._streaming_runs(problem, runs, lambda order: planner._boundary(problem, order))
    assert len(solved) == 1
    there, _, back, _ = found[variant, 2]
    assert back.op_cluster == tuple(3 - c for c in there.op_cluster)
    assert back.op_stage == there.op_stage


def test_other_cluster_orders_are_tried_for_the_fastest_variants_and_for_lending(monkeypatch):
    problem = overflowing_problem()
    runs = []
    real = PipelinePlanner._streaming_runs

    def recording(self, problem, todo, boundary):
        runs.append(todo)
        return real(self, problem, todo, boundary)

    monkeypatch.setattr(PipelinePlanner, "_streaming_runs", recording)
    PipelinePlanner(batches=8, replicate=False).plan(problem)
    first, others = runs
    base = problem.topology.cluster_order()
    assert {tuple(order) for _, _, order in first} == {tuple(base)}
    assert len({(variant, width) for variant, width, _ in first}) == len(first) > ORDERED_COMBOS
    tried = {(variant, width) for variant, width, _ in others}
    lending = {(variant, width) for variant, width, _ in first if variant.lend}
    assert lending and lending <= tried  # loans depend on the order: always tried on all
    assert len(tried - lending) <= ORDERED_COMBOS
    assert all(list(order) != list(base) for _, _, order in others)
