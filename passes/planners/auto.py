"""Strategy ``auto``: run candidate planners, simulate each, keep the best."""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Sequence

from tvm_chiplet.passes.planners.base import Planner, PlanningProblem, report
from tvm_chiplet.passes.planners.evaluate import simulate_placement
from tvm_chiplet.passes.planners.microbatch import fastest_microbatch
from tvm_chiplet.passes.planners.placement import Placement, PlanningError

OBJECTIVES = ("time", "throughput", "latency", "energy", "edp")

PRUNE_FACTOR = 2.0
"""A candidate that splits ops is realised and simulated as built unless its estimate before
realisation is already this many times worse than the best candidate's simulated objective
(one its planner realised already, ``notes["simulated_as_built"]``, is simulated as built)."""


ESTIMATE_CUTOFF = 3.0
"""A planner that estimates its own plans before realising them (one with a ``cutoff``:
tensor-parallel) skips the realisation when its best estimate is this many times the best
candidate's simulated cycles so far. Its estimates ran 1.06x to 1.46x the cycles simulated
as built on BERT-base mesh-4x4 (1 and 64 inputs) and ResNet-50 mesh-4x4 and simba-6x6 (64
inputs); such planners run after the others, so that the cutoff is the tightest."""


class AutoPlanner:
    """Try several strategies and keep the one the simulator judges best.

    Each candidate's placement is simulated with the shared cost model (``batches`` pipelined
    inputs, ``network`` model), as built: op splits realised when the problem can realise
    them. The objective is the time of those inputs, pipeline fill included (``"time"``, what
    the benchmark's ratio to the bound measures), the steady-state throughput
    (``"throughput"``, which ignores the fill), batch-1 latency (``"latency"``), the energy per
    inference (``"energy"``) or the energy-delay product (``"edp"``: energy per
    inference times the time of the inputs; the simulated result's ``energy``).
    Candidates that cannot apply (they raise :class:`PlanningError`) are skipped and listed;
    a candidate that splits ops is pruned, and listed, when its estimate before realisation is
    :data:`PRUNE_FACTOR` times worse than the best so far (that estimate is optimistic), or
    when its own planner's estimate is :data:`ESTIMATE_CUTOFF` times worse (objectives in
    cycles only).
    With more than one input, each candidate that streams weights also runs with the
    microbatch that simulates best (:func:`~.microbatch.fastest_microbatch`: several inputs
    per weight fetch). The comparison is kept in ``placement.notes["auto"]``.

    Parameters
    ----------
    candidates : sequence of str or Planner, optional
        Default: every registered strategy except ``auto`` itself.
    objective : {"time", "throughput", "latency", "energy", "edp"}
    batches : int, default 64
        Pipelined inputs simulated for the time and throughput objectives.
    network : str, default "flow"
    progress : callable, optional
        Called with one line of text per candidate; default: the planning progress of the
        driver (:func:`~.base.planning_progress`, which the CLI prints).
    """

    name = "auto"

    def __init__(
        self,
        candidates: Sequence[str | Planner] | None = None,
        objective: str = "time",
        batches: int = 64,
        network: str = "flow",
        progress: Callable[[str], None] | None = None,
    ) -> None:
        if objective not in OBJECTIVES:
            raise PlanningError(f"unknown objective {objective!r}; valid: {', '.join(OBJECTIVES)}")
        if batches < 1:
            raise PlanningError(f"batches must be >= 1, got {batches}")
        self.candidates = candidates
        self.objective = objective
        self.batches = 1 if objective == "latency" else batches
        self.network = network
        self.progress = progress

    def _planners(self) -> list[Planner]:
        from tvm_chiplet.passes.planners import BASELINES, PLANNERS, planner_for_inputs

        names = self.candidates or [
            n for n in PLANNERS if n != self.name and n not in BASELINES
        ]
        # Planned for the inputs the candidates are judged on.
        planners = [planner_for_inputs(c, self.batches) if isinstance(c, str) else c
                    for c in names]
        # Planners that take a cutoff run last, under the tightest one (a stable sort).
        return sorted(planners, key=lambda planner: hasattr(planner, "cutoff"))

    def cost(self, sim) -> float:
        """The objective of a simulated run as a positive cost: lower is better."""
        if self.objective == "throughput":
            return 1.0 / max(sim.throughput_per_cycle, 1e-30)
        cycles = max(sim.total_cycles, 1e-9)  # time of the inputs, or latency
        if self.objective == "energy":
            return sim.energy.total_pj
        if self.objective == "edp":
            return sim.energy.total_pj * cycles
        return cycles

    def plan(self, problem: PlanningProblem) -> Placement:
        if self.objective in ("energy", "edp") and not problem.system.has_energy:
            raise PlanningError(
                f"objective {self.objective!r} needs energy coefficients, but system "
                f"{problem.system.name!r} ({problem.system.source}) declares none; add them "
                "(energy_pj_per_mac, energy_pj_per_sram_byte, [noc] / [nop] / [[dram]] "
                "energy_pj_per_bit, static_power_w) or choose objective 'time'"
            )
        rows, best = [], None
        for planner in self._planners():
            started = time.perf_counter()
            if hasattr(planner, "cutoff") and best is not None and self.objective in (
                    "time", "latency"):
                planner.cutoff = ESTIMATE_CUTOFF * best[0]
            try:
                placement = planner.plan(problem)
            except PlanningError as err:
                rows.append({"strategy": planner.name, "skipped": str(err)})
                continue
            if "above_cutoff" in placement.notes:
                estimate = min(placement.notes["estimated_cycles"].values())
                rows.append({"strategy": planner.name, "pruned": (
                    f"its planner estimates {estimate / best[0]:.1f}x the best candidate's "
                    f"{self.objective} before realising its op splits")})
                continue
            realised = placement.notes.get("simulated_as_built", False)
            if (best is not None and placement.splits and problem.realise is not None
                    and not realised):
                # Realising splits costs seconds to minutes; the estimate before realisation
                # is optimistic, so a candidate it puts far behind the best cannot win.
                estimate = self.cost(simulate_placement(problem, placement, self.batches,
                                                        self.network))
                if estimate > PRUNE_FACTOR * best[0]:
                    rows.append({"strategy": planner.name, "pruned": (
                        f"estimated at {estimate / best[0]:.1f}x the best candidate's "
                        f"{self.objective} before realising its op splits")})
                    continue
            if self.batches > 1:
                placement, sim = fastest_microbatch(problem, placement, self.batches,
                                                    self.cost, self.network)
            else:
                sim = simulate_placement(problem, placement, self.batches, self.network,
                                         as_built=True)
            cost = self.cost(sim)
            row = {
                "strategy": planner.name,
                "cycles": float(sim.total_cycles),
                "throughput_per_cycle": float(sim.throughput_per_cycle),
                "energy_pj": sim.energy.total_pj,
                "microbatch": placement.microbatch,
                "plan_seconds": time.perf_counter() - started,
            }
            rows.append(row)
            (self.progress or report)(
                f"auto: {planner.name:<16} {row['cycles']:14.0f} cycles for {self.batches} "
                f"batch(es), {row['throughput_per_cycle'] * problem.system.frequency_hz:10.1f} "
                "inf/s"
            )
            if best is None or cost < best[0]:
                best = (cost, placement)
        if best is None:
            raise PlanningError(
                "no candidate strategy applies: "
                + "; ".join(f"{r['strategy']}: {r['skipped']}" for r in rows)
            )
        chosen = best[1]
        notes = {**chosen.notes, "auto": {"objective": self.objective, "batches": self.batches,
                                          "chosen": chosen.strategy, "candidates": rows}}
        return dataclasses.replace(chosen, strategy=f"auto:{chosen.strategy}", notes=notes)
