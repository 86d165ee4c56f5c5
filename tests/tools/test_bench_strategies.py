"""The strategies benchmark's planner set."""

from tvm_chiplet.passes.planners import AutoPlanner
from tvm_chiplet.tools.bench.strategies import make_planners


def test_auto_default_is_auto_as_tvmc_compile_plans_it():
    planners = make_planners(["auto", "auto-default"], batches=8, ilp_time_limit=5.0)
    default = planners["auto-default"]
    assert isinstance(default, AutoPlanner) and default.batches == 8
    every = [p.name for p in default._planners()]
    assert every == [p.name for p in AutoPlanner(batches=8)._planners()]
    # The benchmark's own auto is a smaller set.
    assert set(every) > {p.name for p in planners["auto"]._planners()}
