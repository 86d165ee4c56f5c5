"""Strategy ``auto``: run candidate planners, simulate each, keep the best."""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Sequence

from tvm_chiplet.passes.planners.base import Planner, PlanningProblem
from tvm_chiplet.passes.planners.evaluate import simulate_placement
from tvm_chiplet.passes.planners.placement import Placement, PlanningError

OBJECTIVES = ("time", "throughput", "latency", "energy", "edp")


class AutoPlanner:
    """Try several strategies and keep the one the simulator judges best.

    Each candidate's placement is simulated with the shared cost model (``batches`` pipelined
    inputs, ``network`` model), as built: op splits realised when the problem can realise
    them. The objective is the time of those inputs, pipeline fill included (``"time"``, what
    the benchmark's ratio to the bound measures), the steady-state throughput
    (``"throughput"``, which ignores the fill), batch-1 latency (``"latency"``), the energy per
    inference (``"energy"``) or the energy-delay product (``"edp"``: energy per
    inference times the time of the inputs; the simulated result's ``energy``).
    Candidates that cannot apply (they raise :class:`PlanningError`) are skipped and listed.
    The comparison is kept in ``placement.notes["auto"]``.

    Parameters
    ----------
    candidates : sequence of str or Planner, optional
        Default: every registered strategy except ``auto`` itself.
    objective : {"time", "throughput", "latency", "energy", "edp"}
    batches : int, default 64
        Pipelined inputs simulated for the time and throughput objectives.
    network : str, default "flow"
    progress : callable, optional
        Called with one line of text per candidate (the CLI prints it).
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
        from tvm_chiplet.passes.planners import BASELINES, PLANNERS, get_planner

        names = self.candidates or [
            n for n in PLANNERS if n != self.name and n not in BASELINES
        ]
        return [get_planner(c) if isinstance(c, str) else c for c in names]

    def _score(self, sim) -> float:
        """Higher is better."""
        if self.objective == "throughput":
            return sim.throughput_per_cycle
        cycles = max(sim.total_cycles, 1e-9)  # time of the inputs, or latency
        if self.objective == "energy":
            return -sim.energy.total_pj
        if self.objective == "edp":
            return -sim.energy.total_pj * cycles
        return 1.0 / cycles

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
            try:
                placement = planner.plan(problem)
            except PlanningError as err:
                rows.append({"strategy": planner.name, "skipped": str(err)})
                continue
            sim = simulate_placement(problem, placement, self.batches, self.network,
                                     as_built=True)
            score = self._score(sim)
            row = {
                "strategy": planner.name,
                "cycles": float(sim.total_cycles),
                "throughput_per_cycle": float(sim.throughput_per_cycle),
                "energy_pj": sim.energy.total_pj,
                "plan_seconds": time.perf_counter() - started,
            }
            rows.append(row)
            if self.progress:
                self.progress(
                    f"auto: {planner.name:<16} {row['cycles']:14.0f} cycles for {self.batches} "
                    f"batch(es), {row['throughput_per_cycle'] * problem.system.frequency_hz:10.1f} "
                    "inf/s"
                )
            if best is None or score > best[0]:
                best = (score, placement)
        if best is None:
            raise PlanningError(
                "no candidate strategy applies: "
                + "; ".join(f"{r['strategy']}: {r['skipped']}" for r in rows)
            )
        chosen = best[1]
        notes = {**chosen.notes, "auto": {"objective": self.objective, "batches": self.batches,
                                          "chosen": chosen.strategy, "candidates": rows}}
        return dataclasses.replace(chosen, strategy=f"auto:{chosen.strategy}", notes=notes)
