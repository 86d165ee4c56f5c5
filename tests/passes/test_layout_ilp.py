"""The integer program over each op's partition strategy and parallel group (layout_ilp)."""

import dataclasses
import itertools

import pytest

from tests.passes.test_ilp_planner import make_graph
from tests.passes.test_tensor_parallel_planner import problem as chain_problem
from tvm_chiplet.passes.planners import (
    PlanningError,
    PlanningProblem,
    TensorParallelPlanner,
    layout_ilp,
    tensor_parallel,
)
from tvm_chiplet.passes.planners.ilp_solvers import LateGap
from tvm_chiplet.passes.planners.layout_ilp import LayoutIlpResult, solve_layouts
from tvm_chiplet.targets.system_generators import mesh_system
from tvm_chiplet.targets.topology import Topology

# A chain of three heavy ops and a light one, whose weights fit any cluster: the program's cost
# is then the walk's (one input per op, nothing streamed).
CHAIN = make_graph(
    [(4e9, 40_000, 40_000), (8e9, 40_000, 80_000), (4e9, 40_000, 40_000), (1e5, 4000, 0)],
    [(0, 1), (1, 2), (2, 3)],
)
DIMS = {0: {"out_channels": 64, "rows": 56}, 1: {"out_channels": 128, "in_channels": 64},
        2: {"cols": 3, "reduction": 512}}


@pytest.mark.parametrize("inputs", [1, 16])
def test_the_program_finds_the_cheapest_choice_of_every_op(inputs):
    system = mesh_system(2, 4, bandwidth=32.0)
    p = PlanningProblem(CHAIN, system, Topology(system), DIMS)
    planner = TensorParallelPlanner(batches=inputs)
    space = planner._space(p, "1", [None], None)
    found = solve_layouts(space.walk, space.options, space.inputs)
    assert found.status == "Optimal"
    # Every choice of the three ops, walked: none is cheaper than the program's.
    ops = list(space.options)
    every = [dict(zip(ops, combo, strict=True))
             for combo in itertools.product(*(space.options[op] for op in ops))]
    cheapest = min(space.estimate(choice) for choice in every)
    assert found.objective == pytest.approx(cheapest, rel=1e-6)
    assert space.estimate(found.choice) == pytest.approx(cheapest, rel=1e-6)
    assert found.bound == pytest.approx(found.objective, rel=1e-6)


def test_the_program_costs_a_row_splits_halo_as_the_walk_does():
    # Two convs that may both split into row bands, each reading a halo of 6 rows: the first's
    # from the model input (free), the second's with its bands wherever the first's output
    # lies in another layout, a move between two ops' choices.
    system = mesh_system(2, 4, bandwidth=32.0)
    dims = {0: {"out_channels": 64, "rows": 56},
            1: {"out_channels": 128, "in_channels": 64, "rows": 56}, 2: DIMS[2]}
    p = PlanningProblem(CHAIN, system, Topology(system), dims, halos={0: (6, 56), 1: (6, 56)})
    space = TensorParallelPlanner()._space(p, "1", [None], None)
    found = solve_layouts(space.walk, space.options, space.inputs)
    ops = list(space.options)
    every = [dict(zip(ops, combo, strict=True))
             for combo in itertools.product(*(space.options[op] for op in ops))]
    assert found.objective == pytest.approx(min(map(space.estimate, every)), rel=1e-6)
    assert space.estimate(found.choice) == pytest.approx(found.objective, rel=1e-6)
    # The halo is paid: the second op's bands over the grid, cut from the first's output
    # whole, cost more with it than without.
    rows = next(c for c in every if c[0] is None and c[1] == ("rows", max(
        group for dim, group in filter(None, space.options[1]) if dim == "rows")))
    plain = TensorParallelPlanner()._space(
        dataclasses.replace(p, halos={}), "1", [None], None).estimate(rows)
    assert space.estimate(rows) > plain


def test_weights_that_overflow_a_cluster_stream_at_the_dram_rate():
    # Op 1 computes little but holds 8 MB of weights, more than a cluster's 2 MiB: whole, most
    # of them stream every input; the program spreads them over clusters that hold them.
    graph = make_graph([(4e9, 40_000, 40_000), (1e6, 40_000, 8_000_000), (4e9, 40_000, 40_000)],
                       [(0, 1), (1, 2)])
    system = mesh_system(2, 4, bandwidth=32.0, dram_bandwidth=8.0)
    p = PlanningProblem(graph, system, Topology(system),
                        {0: {"out_channels": 64}, 1: {"out_channels": 128}, 2: {"cols": 64}})
    space = TensorParallelPlanner()._space(p, "1", [None], None)
    found = solve_layouts(space.walk, space.options)
    _, group = found.choice[1]
    assert space.walk.costs.groups[group].size == 8  # 1 MB each fits a budget, 2 MB would not
    whole = solve_layouts(space.walk, {**space.options, 1: [None]})
    # Whole on one cluster, its weights less the budget (0.75 of 2 MiB) stream at 8 B/cycle.
    streamed = (8_000_000 - 0.75 * 2 * 2**20) / 8.0
    assert whole.objective > found.objective + 0.9 * streamed


def test_tensor_parallel_with_the_program_reports_its_proof_and_simulates():
    p = chain_problem(clusters=4)
    placement = TensorParallelPlanner(search="ilp").plan(p)
    proof = placement.notes["ilp"]
    assert proof["status"] == "Optimal"
    assert proof["bound"] == pytest.approx(proof["objective"], rel=1e-6)
    assert placement.splits
    local = TensorParallelPlanner(search="local").plan(p)
    assert placement.objective_cycles <= local.objective_cycles * (1 + 1e-6)


def test_the_planners_gaps_reach_its_solver(monkeypatch):
    gaps = []
    real = layout_ilp.make_solver

    def solver(name, time_limit, msg, warm_start, mip_gap=1e-4, late_gap=None):
        gaps.append((mip_gap, late_gap))
        return real(name, time_limit, msg, warm_start, mip_gap, late_gap)

    monkeypatch.setattr(layout_ilp, "make_solver", solver)
    p = chain_problem(clusters=4)
    placement = TensorParallelPlanner(layouts=["grid"]).plan(p)
    assert gaps and set(gaps) == {(1e-4, tensor_parallel.LATE_GAP)}
    assert placement.notes["ilp"]["status"] == "Optimal"  # solved before the late gap's time
    gaps.clear()
    late = LateGap(after=2.0, gap=0.05)
    TensorParallelPlanner(layouts=["grid"], mip_gap=0.0, late_gap=late).plan(p)
    assert set(gaps) == {(0.0, late)}
    gaps.clear()
    TensorParallelPlanner(layouts=["grid"], late_gap=None).plan(p)
    assert set(gaps) == {(1e-4, None)}


@pytest.mark.parametrize(("kwargs", "message"), [
    ({"mip_gap": 1.0}, "mip_gap must be a relative gap in \\[0, 1\\), got 1.0"),
    ({"mip_gap": "1%"}, "mip_gap must be a relative gap in \\[0, 1\\), got '1%'"),
    ({"late_gap": 0.01}, "late_gap must be a LateGap\\(after=seconds, gap=fraction\\) or None, "
                         "got 0.01"),
])
def test_gaps_that_are_no_fractions_are_refused(kwargs, message):
    with pytest.raises(PlanningError, match=message):
        TensorParallelPlanner(**kwargs)


def test_an_unknown_search_is_refused():
    with pytest.raises(PlanningError, match="unknown search 'exhaustive'; valid searches: "
                                            "local, ilp"):
        TensorParallelPlanner(search="exhaustive")


def test_one_input_is_planned_by_the_program_and_many_by_the_local_search(monkeypatch):
    assert TensorParallelPlanner().search == "ilp"
    assert TensorParallelPlanner(batches=64).search == "local"
    assert TensorParallelPlanner(batches=64, search="ilp").search == "ilp"
    # A solver that finds nothing in time leaves each layout to the local search.
    p = chain_problem(clusters=4)
    local = TensorParallelPlanner(search="local").plan(p)
    monkeypatch.setattr(tensor_parallel, "solve_layouts", lambda *args: LayoutIlpResult(
        {}, "Time limit", None, None, 30.0, 0))
    placement = TensorParallelPlanner().plan(p)
    assert placement.notes["ilp"] == {"status": "Time limit", "seconds": 30.0}
    assert placement.splits == local.splits


def test_the_programs_time_limit_is_shared_by_the_layouts(monkeypatch):
    solved = []

    def slow(walk, options, inputs, solver, time_limit, mip_gap, late_gap):
        solved.append(time_limit)
        return dataclasses.replace(solve_layouts(walk, options, inputs), seconds=7.0)

    monkeypatch.setattr(tensor_parallel, "solve_layouts", slow)
    monkeypatch.setattr(tensor_parallel, "SEARCH_WITHIN", float("inf"))
    p = chain_problem(clusters=4)  # one stage of 4 clusters, or 2 stages of 2: two layouts
    placement = TensorParallelPlanner(time_limit=10.0).plan(p)
    assert solved == [10.0, 3.0]
    solved.clear()
    TensorParallelPlanner(time_limit=5.0).plan(p)
    assert solved == [5.0]  # nothing left for the second layout: its local search's plan
    assert placement.notes["ilp"]["status"] == "Optimal"


def test_the_whole_grid_is_searched_first_whatever_its_start(monkeypatch):
    # The layouts share the program's seconds: a pipeline whose start looks faster must not
    # leave the whole grid's program (the largest) to be cut off.
    stages = []

    def record(walk, options, inputs, solver, time_limit, mip_gap, late_gap):
        stages.append(len(walk.costs.first) - 1)
        return solve_layouts(walk, options, inputs)

    monkeypatch.setattr(tensor_parallel, "solve_layouts", record)
    monkeypatch.setattr(tensor_parallel, "SEARCH_WITHIN", float("inf"))
    monkeypatch.setattr(tensor_parallel._Space, "estimate",
                        lambda space, choice: 1.0 if space.stage_of is not None else 2.0)
    TensorParallelPlanner().plan(chain_problem(clusters=4))
    # The grid with 2-D splits, without, then the pipeline; last, when the grid's plan takes
    # blocks splits or streams, the grid without them or with replicas pooled.
    assert stages[:3] == [1, 1, 2] and stages[3:] in ([], [1], [1, 1])
