"""Fit the ``flow`` network model to the ``flit`` model: a bandwidth efficiency per link kind.

The flow model shares each link max-min fairly at its rated bandwidth; the flit model's routers,
with finite buffers, allocators and packet overheads, lose more when links are contended. A
:class:`~tvm_chiplet.targets.system.FlowCalibration` scales the bandwidth flow gives each kind of
link (``noc``, ``nop``) and the DRAM controllers (``dram``). :func:`fit_flow_calibration` runs
each workload once on the flit model and searches the efficiencies that bring flow's total
cycles closest to flit's (the largest relative difference over the workloads), one kind at a
time (golden-section search in ``[MIN_EFFICIENCY, 1]``, a few sweeps). The result is stored with
the system (the ``[calibration]`` section of its TOML, :func:`calibration_toml`), and the flow
model then runs with it wherever it judges a plan.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Sequence

from tvm_chiplet.runtime.device import simulate_plan
from tvm_chiplet.targets.system import CALIBRATED_KINDS, ChipletSystem, FlowCalibration

MIN_EFFICIENCY = 0.25
_SWEEPS = 3
_GOLDEN_STEPS = 14
_GOLDEN = (math.sqrt(5.0) - 1.0) / 2.0


@dataclasses.dataclass(frozen=True)
class Workload:
    """A compiled plan (``plan.json``: tasks, messages, fetches, copies) run for ``batches``."""

    label: str
    plan: dict
    batches: int = 8


def fit_flow_calibration(
    system: ChipletSystem, workloads: Sequence[Workload],
    progress: Callable[[str], None] | None = None,
) -> tuple[FlowCalibration, list[dict]]:
    """The efficiencies that bring flow closest to flit on ``workloads``, and a row per workload.

    Each row has ``label``, ``flit``, ``flow`` (uncalibrated) and ``calibrated`` total cycles.
    Only the kinds that carry traffic in some workload are fitted; the others stay at 1.
    """
    if not workloads:
        raise ValueError("fit_flow_calibration needs at least one workload to fit on")
    base = dataclasses.replace(system, calibration=None)
    fingerprint = base.network_fingerprint()

    def report(line: str) -> None:
        if progress:
            progress(line)

    flit, used = [], set()
    for workload in workloads:
        sim = simulate_plan(workload.plan, base, workload.batches, "flit")
        flit.append(float(sim.total_cycles))
        used |= {link.kind for link in base.links if sim.link_bytes[link.id] > 0}
        if any(sim.dram_bytes > 0):
            used.add("dram")
        report(f"flit {workload.label}: {flit[-1]:.0f} cycles")
    kinds = [kind for kind in CALIBRATED_KINDS if kind in used]

    def calibrated(efficiency: dict[str, float]) -> ChipletSystem:
        table = tuple((kind, efficiency[kind]) for kind in kinds)
        return dataclasses.replace(base, calibration=FlowCalibration(table, 0.0, "", fingerprint))

    def flows(efficiency: dict[str, float]) -> list[float]:
        system_ = calibrated(efficiency)
        return [float(simulate_plan(w.plan, system_, w.batches, "flow").total_cycles)
                for w in workloads]

    def error(efficiency: dict[str, float]) -> float:
        return max(abs(f / t - 1.0) for f, t in zip(flows(efficiency), flit, strict=True))

    efficiency = dict.fromkeys(kinds, 1.0)
    for _ in range(_SWEEPS):
        for kind in kinds:
            efficiency[kind] = _golden_min(
                lambda eta, kind=kind: error({**efficiency, kind: eta}), MIN_EFFICIENCY, 1.0)
        report("fitted " + ", ".join(f"{k} x{v:.3f}" for k, v in efficiency.items()))
    uncalibrated = flows(dict.fromkeys(kinds, 1.0))
    fitted = flows(efficiency)
    rows = [{"label": w.label, "flit": t, "flow": u, "calibrated": c}
            for w, t, u, c in zip(workloads, flit, uncalibrated, fitted, strict=True)]
    worst = max(abs(c / t - 1.0) for t, c in zip(flit, fitted, strict=True))
    label = ", ".join(w.label for w in workloads)
    return FlowCalibration(tuple(efficiency.items()), worst, label, fingerprint), rows


def _golden_min(function: Callable[[float], float], low: float, high: float) -> float:
    """The argument in ``[low, high]`` where ``function`` is least (unimodal assumed); ties and
    plateaus keep the higher bandwidth, so an unused kind stays at 1."""
    a, b = low, high
    c, d = b - _GOLDEN * (b - a), a + _GOLDEN * (b - a)
    fc, fd = function(c), function(d)
    for _ in range(_GOLDEN_STEPS):
        if fc < fd:
            b, d, fd = d, c, fc
            c = b - _GOLDEN * (b - a)
            fc = function(c)
        else:
            a, c, fc = c, d, fd
            d = a + _GOLDEN * (b - a)
            fd = function(d)
    best = (a + b) / 2.0
    return 1.0 if function(1.0) <= function(best) else round(best, 4)


def calibration_toml(calibration: FlowCalibration) -> str:
    """The ``[calibration]`` section of a system TOML file that stores ``calibration``."""
    rates = ", ".join(f"{kind} = {eta:g}" for kind, eta in calibration.efficiency)
    return "\n".join([
        "[calibration]",
        f"flow_efficiency = {{{rates}}}",
        f"flit_error = {calibration.flit_error:.4f}",
        f'workload = "{calibration.workload}"',
        f'fingerprint = "{calibration.fingerprint}"',
        "",
    ])
