"""PlanPlacement: plan the reduced module with a strategy, then annotate the plan on the IR."""

from __future__ import annotations

import tvm

from tvm_chiplet.passes.analysis.extract_op_graph import extract_op_graph
from tvm_chiplet.passes.annotate_placement import AnnotatePlacement
from tvm_chiplet.passes.planners import Planner, PlanningProblem, get_planner
from tvm_chiplet.passes.planners.base import WorkloadSimulator
from tvm_chiplet.targets.system import ChipletSystem
from tvm_chiplet.targets.topology import Topology


@tvm.transform.module_pass(opt_level=0, name="PlanPlacement")
class PlanPlacement:
    """Run a placement strategy on the op graph of ``main`` and write its decision on the IR.

    Analysis (:func:`extract_op_graph`), then planning (a :class:`Planner`, which sees no IR),
    then :class:`AnnotatePlacement` applies the result. Use it after :class:`ReduceGraph`.

    Parameters
    ----------
    system : ChipletSystem
        The hardware to place on.
    strategy : str or Planner, default "pipeline"
        A registered strategy name or a planner object with ``plan(problem) -> Placement``.
    simulator : callable, optional
        The device simulator that judges candidates
        (:func:`tvm_chiplet.runtime.device.simulate_workload`); strategies that compare
        candidates (``pipeline``, ``modular``, ``ilp``, ``auto``) need it.
    """

    def __init__(self, system: ChipletSystem, strategy: str | Planner = "pipeline",
                 simulator: WorkloadSimulator | None = None) -> None:
        self.system = system
        self.simulator = simulator
        self.planner = get_planner(strategy) if isinstance(strategy, str) else strategy
        if not callable(getattr(self.planner, "plan", None)):
            raise TypeError(f"strategy must be a name or a planner with .plan(), got {strategy!r}")

    def transform_module(self, mod: tvm.IRModule, ctx: tvm.transform.PassContext) -> tvm.IRModule:
        graph = extract_op_graph(mod, self.system.device_dtype)
        problem = PlanningProblem(graph, self.system, Topology(self.system),
                                  simulator=self.simulator)
        placement = self.planner.plan(problem)
        placement.check_fits(len(graph.ops), self.system.num_clusters, self.system.name)
        return AnnotatePlacement(placement)(mod)
