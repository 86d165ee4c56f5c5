"""AssignPlacement: plan the reduced module with a strategy and annotate the plan on the IR."""

from __future__ import annotations

import tvm

from tvm_chiplet.passes.analysis.op_graph import extract_op_graph
from tvm_chiplet.passes.annotate_placement import AnnotatePlacement
from tvm_chiplet.passes.planners import Planner, PlanningProblem, get_planner
from tvm_chiplet.targets.system import ChipletSystem
from tvm_chiplet.targets.topology import Topology


@tvm.transform.module_pass(opt_level=0, name="AssignPlacement")
class AssignPlacement:
    """Run a placement strategy on the op graph of ``main`` and write its decision on the IR.

    Analysis (:func:`extract_op_graph`), then planning (a :class:`Planner`, which sees no IR),
    then :class:`AnnotatePlacement` applies the result. Use it after :class:`ReduceGraph`.

    Parameters
    ----------
    system : ChipletSystem
        The hardware to place on.
    strategy : str or Planner, default "pipeline"
        A registered strategy name or a planner object with ``plan(problem) -> Placement``.
    """

    def __init__(self, system: ChipletSystem, strategy: str | Planner = "pipeline") -> None:
        self.system = system
        self.planner = get_planner(strategy) if isinstance(strategy, str) else strategy
        if not callable(getattr(self.planner, "plan", None)):
            raise TypeError(f"strategy must be a name or a planner with .plan(), got {strategy!r}")

    def transform_module(self, mod: tvm.IRModule, ctx: tvm.transform.PassContext) -> tvm.IRModule:
        problem = PlanningProblem(extract_op_graph(mod), self.system, Topology(self.system))
        placement = self.planner.plan(problem)
        return AnnotatePlacement(placement)(mod)
