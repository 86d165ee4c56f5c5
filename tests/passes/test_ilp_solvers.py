"""The MILP solver backends (ilp_solvers): a looser gap for long solves."""

import random

import pulp
import pytest

from tvm_chiplet.passes.planners.ilp_solvers import (
    WITHIN_LATE_GAP,
    LateGap,
    make_solver,
)
from tvm_chiplet.passes.planners.placement import PlanningError


def cover(items: int = 60, seed: int = 3) -> pulp.LpProblem:
    """The cheapest items that weigh at least half of all: a knapsack that HiGHS branches on."""
    rng = random.Random(seed)
    weights = [rng.randint(1000, 5000) for _ in range(items)]
    costs = [w + rng.randint(-300, 300) for w in weights]
    lp = pulp.LpProblem("cover", pulp.LpMinimize)
    take = [pulp.LpVariable(f"take_{i}", cat="Binary") for i in range(items)]
    lp += pulp.lpSum(c * x for c, x in zip(costs, take, strict=True))
    lp += pulp.lpSum(w * x for w, x in zip(weights, take, strict=True)) >= sum(weights) // 2 + 7
    return lp


def test_a_solve_past_its_late_gaps_time_stops_within_that_gap():
    proven = make_solver("highs", 60.0, False, False, 0.0).solve(lp := cover())
    assert proven.status == "Optimal"
    assert proven.bound == pytest.approx(proven.objective, rel=1e-9)
    late = make_solver("highs", 60.0, False, False, 0.0, LateGap(after=0.0, gap=0.05))
    found = late.solve(lp := cover())
    assert found.status == WITHIN_LATE_GAP
    assert found.has_solution(lp)
    assert found.objective == pytest.approx(pulp.value(lp.objective))
    assert found.bound <= proven.objective <= found.objective
    assert found.objective - found.bound <= 0.05 * found.objective
    # Before the late gap's time, the solve proves its optimum.
    patient = make_solver("highs", 60.0, False, False, 0.0, LateGap(after=600.0, gap=0.05))
    assert patient.solve(cover()).objective == pytest.approx(proven.objective)


@pytest.mark.parametrize(("after", "gap", "message"), [
    (-1.0, 0.01, "a late gap's seconds must be a number >= 0, got -1.0"),
    (float("inf"), 0.01, "a late gap's seconds must be a number >= 0, got inf"),
    (5.0, 1.5, "mip_gap must be a relative gap in \\[0, 1\\), got 1.5"),
])
def test_a_late_gap_out_of_range_is_refused(after, gap, message):
    with pytest.raises(PlanningError, match=message):
        LateGap(after, gap)
