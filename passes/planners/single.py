"""Baseline ``single``: every op on one cluster (for comparison only)."""

from __future__ import annotations

import numpy as np

from tvm_chiplet.passes.planners.base import PlanningProblem
from tvm_chiplet.passes.planners.placement import Placement


class SinglePlanner:
    """Put the whole model on the single cluster where it runs fastest (ties: snake order).

    A baseline: what one cluster of the system achieves alone.
    """

    name = "single"

    def plan(self, problem: PlanningProblem) -> Placement:
        order = list(problem.topology.cluster_order())
        weights = sum(op.weight_bytes for op in problem.graph.ops)
        totals = [
            float(np.sum(
                problem.op_cycles[:, c]
                if weights <= problem.system.clusters[c].sram_bytes
                else problem.op_cycles_streamed[:, c]
            ))
            for c in order
        ]
        best = order[int(np.argmin(totals))]
        n = len(problem.graph.ops)
        return Placement(self.name, (best,) * n, (0,) * n, (best,), min(totals, default=0.0))
