"""Simulator fidelity: the ``flow`` network model against the cycle-level ``flit`` model.

Usage: ``python -m tvm_chiplet.tools.bench.fidelity [--models ...] [--presets ...]
[--inputs 8] [--calibrate] [--skip-synthetic] [--quick] [--out DIR]``

1. Whole models: each bundled model (ResNet-50, BERT-base, GPT-2) is planned with the default
   strategy on each preset (device model at the preset's dtype), and its workload of ``--inputs``
   pipelined inputs is simulated with ``flow`` (as the preset stores it: calibrated when it has a
   ``[calibration]``), uncalibrated ``flow`` and ``flit``; the table gives each ratio to flit.
   ``--calibrate`` fits a calibration per preset on its models
   (:func:`~tvm_chiplet.runtime.calibration.fit_flow_calibration`) and prints the
   ``[calibration]`` section to store in the preset.
2. Synthetic traffic: saturation throughput of uniform, transpose, bitcomp and hotspot traffic
   on 4x4 and 8x8 meshes with 4 and 16 virtual channels, against the closed-form channel-load
   bound of dimension-order routing (tools/bench/noc_bounds.py).

Writes ``fidelity.csv`` and ``fidelity.md``. Ctrl-C stops after writing the rows done so far.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import sys
import time

from tvm_chiplet.passes import ReduceGraph
from tvm_chiplet.passes.plan_split_placement import split_problem
from tvm_chiplet.passes.planners import get_planner
from tvm_chiplet.passes.planners.evaluate import placement_items
from tvm_chiplet.runtime.calibration import Workload, calibration_toml, fit_flow_calibration
from tvm_chiplet.runtime.device import simulate_plan, simulate_workload
from tvm_chiplet.runtime.noc import FlitParams
from tvm_chiplet.targets.system_toml import load_system
from tvm_chiplet.targets.workload import build_workload, replicate_loans
from tvm_chiplet.tools import models
from tvm_chiplet.tools.bench.noc import saturation_rows
from tvm_chiplet.tools.bench.tables import markdown_table, write_csv
from tvm_chiplet.tools.frontends import load_model

MODELS = ("resnet50", "bert", "gpt2")
PRESETS = ("mesh-4x4", "simba-6x6")
QUICK = {"resnet50": {"image": 64}, "bert": {"layers": 2}, "gpt2": {"layers": 2}}
VCS = (4, 16)


def plan_workload(model_name: str, preset: str, options: dict, inputs: int) -> Workload:
    """The default strategy's placement of ``model_name`` on ``preset`` as a plan workload."""
    mod = load_model(models.get_model(model_name, **options))
    system = load_system(preset)
    problem, _ = split_problem(mod, ReduceGraph()(mod), system, simulate_workload)
    placement = get_planner("pipeline").plan(problem)
    tasks, messages, _, fetches = build_workload(
        placement_items(problem, placement), system, problem.topology, placement.dram_policy,
        placement.dram_shares, replicate_loans(placement.sram_loans, placement.copy_maps))
    plan = {"tasks": tasks, "messages": messages, "dram_fetches": fetches,
            "copies": placement.copies}
    return Workload(f"{model_name} ({inputs} inputs)", plan, inputs)


def model_rows(args, rows: list[dict]) -> None:
    """Append a row per model and preset to ``rows`` (kept when interrupted)."""
    for preset in args.presets:
        system = load_system(preset)
        plain = dataclasses.replace(system, calibration=None)
        workloads = []
        for name in args.models:
            options = QUICK.get(name, {}) if args.quick else {}
            workload = plan_workload(name, preset, options, args.inputs)
            workloads.append(workload)
            times = {}
            for label, system_, network in (("flow", system, "flow"),
                                            ("flow_uncalibrated", plain, "flow"),
                                            ("flit", plain, "flit")):
                started = time.perf_counter()
                sim = simulate_plan(workload.plan, system_, workload.batches, network)
                times[label] = (float(sim.total_cycles), time.perf_counter() - started)
            flit = times["flit"][0]
            rows.append({
                "model": name, "system": preset, "inputs": args.inputs,
                "calibrated": system.calibration is not None,
                "flow_cycles": times["flow"][0], "flit_cycles": flit,
                "flow_vs_flit": times["flow"][0] / flit,
                "uncalibrated_flow_vs_flit": times["flow_uncalibrated"][0] / flit,
                "flit_s": times["flit"][1], "flow_s": times["flow"][1],
            })
            print(f"[fidelity] {name} {preset}: flow/flit {rows[-1]['flow_vs_flit']:.3f} "
                  f"(uncalibrated {rows[-1]['uncalibrated_flow_vs_flit']:.3f}), flit "
                  f"{times['flit'][1]:.1f} s", flush=True)
        if args.calibrate:
            calibration, _ = fit_flow_calibration(
                plain, workloads,
                progress=lambda line, at=preset: print(f"[fidelity] {at}: {line}", flush=True))
            print(f"[fidelity] {preset}: store in targets/presets/{preset}.toml:\n"
                  + calibration_toml(calibration), flush=True)


def synthetic_rows(args, rows: list[dict]) -> None:
    """Append the saturation rows for each number of VCs to ``rows``."""
    for vcs in VCS:
        found, _ = saturation_rows(None, args.quick, FlitParams(num_vcs=vcs))
        rows += [{"num_vcs": vcs, **row} for row in found]


def write(out: str, models_: list[dict], synthetic: list[dict]) -> None:
    os.makedirs(out, exist_ok=True)
    rows = [{"part": "model", **r} for r in models_] + [{"part": "synthetic", **r}
                                                         for r in synthetic]
    write_csv(os.path.join(out, "fidelity.csv"), rows)

    def table(part: list[dict]) -> list[str]:
        return markdown_table(part) if part else ["(not run)"]

    lines = ["# Simulator fidelity: flow against flit", "",
             "Whole models: total cycles of the default strategy's plan, pipelined inputs; "
             "`flow_vs_flit` with the preset's stored calibration (if any), "
             "`uncalibrated_flow_vs_flit` without.", "", *table(models_), "",
             "Synthetic traffic: saturation throughput (flits/node/cycle) of the flit model "
             "against the channel-load bound of dimension-order routing.", "",
             *table(synthetic)]
    with open(os.path.join(out, "fidelity.md"), "w") as handle:
        handle.write("\n".join(lines) + "\n")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", nargs="+", default=list(MODELS))
    parser.add_argument("--presets", nargs="+", default=list(PRESETS))
    parser.add_argument("--inputs", type=int, default=8)
    parser.add_argument("--calibrate", action="store_true")
    parser.add_argument("--skip-synthetic", action="store_true")
    parser.add_argument("--quick", action="store_true", help="small model configurations")
    parser.add_argument("--out", default="tools/bench/results")
    args = parser.parse_args(argv)
    found: list[dict] = []
    synthetic: list[dict] = []
    try:
        model_rows(args, found)
        if not args.skip_synthetic:
            synthetic_rows(args, synthetic)
    except KeyboardInterrupt:
        write(args.out, found, synthetic)
        print(f"[fidelity] interrupted; rows so far written to {args.out}", file=sys.stderr)
        return 130
    write(args.out, found, synthetic)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
