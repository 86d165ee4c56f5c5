"""Benchmark the ILP planner: solve time, proven gap and bounds, and the plan against the DP's.

Usage: ``python -m tvm_chiplet.tools.bench.ilp [--models resnet50 bert]
[--presets mesh-4x4 simba-6x6] [--solvers cbc highs] [--formulations decomposition milp]
[--time-limit 60] [--tag NAME] [--out tools/bench/results/ilp]``

For each model (tools/models.py), preset (at its own device precision), formulation
(:data:`FORMULATIONS`) and solver, the ILP
planner plans the reduced op graph for throughput (one solver thread). A row records: the
solve time; the result (``optimal``: proven within the MIP gap, ``time-limited``, or
``heuristic``: nothing proven, or the simulator preferred the pipeline heuristic); the ILP's
objective (bottleneck stage, cycles per input under the ILP's stage cost) and its proven lower
bound with the gap between them; the physical lower bound of the same quantity (steady-state
cycles per input, :mod:`~tvm_chiplet.passes.analysis.lower_bound`); the DP's split under the
same stage cost (the warm start); and the simulated cycles of 64 pipelined inputs for the ILP's
own plan and for the best heuristic (the pipeline planner with its full search). Writes
``ilp[-TAG].csv`` and ``ilp[-TAG].md``. Ctrl-C stops after writing the rows done so far.
"""

from __future__ import annotations

import argparse
import itertools
import os
import sys
import time

from tvm_chiplet.passes import ReduceGraph
from tvm_chiplet.passes.plan_split_placement import split_problem
from tvm_chiplet.passes.planners import IlpPlanner, PlanningError
from tvm_chiplet.runtime.device import simulate_workload
from tvm_chiplet.targets.system_toml import load_system
from tvm_chiplet.tools import models
from tvm_chiplet.tools.bench.tables import markdown_table, write_csv
from tvm_chiplet.tools.frontends import load_model

MODELS = ["resnet50", "bert"]
PRESETS = ["mesh-4x4", "simba-6x6"]
SOLVERS = ["cbc", "highs"]
FORMULATIONS = {
    "decomposition": {"stages": "contiguous", "decompose": True},
    "milp": {"stages": "contiguous", "decompose": False},
    "forward": {"stages": "forward"},
}
"""``decomposition``: the default (interval decomposition, then the MILP if a gap is left);
``milp``: the compact contiguous MILP alone; ``forward``: the compact non-contiguous MILP,
started from the decomposition's contiguous optimum."""


def bench_case(problem, solver: str, time_limit: float, formulation: str | None = None) -> dict:
    """Plan ``problem`` with the ILP on ``solver``; the row of the table (see the module doc).

    ``formulation``: a key of :data:`FORMULATIONS` (``None``: the planner's defaults, for
    planners that predate them).
    """
    started = time.perf_counter()
    options = FORMULATIONS[formulation] if formulation else {}
    placement = IlpPlanner(solver=solver, time_limit=time_limit, **options).plan(problem)
    notes = placement.notes
    objective = notes.get("ilp_objective", notes["objective"])
    bound = notes.get("lower_bound", notes.get("best_bound"))
    dp = notes["warm_start_objective"]
    ours, theirs = notes["ilp_simulated_cycles"], notes["heuristic_simulated_cycles"]
    return {
        "formulation": formulation or "forward (before)",
        "solver": solver,
        "solve_s": notes["solve_seconds"],
        "plan_s": time.perf_counter() - started,
        "status": notes["status"],
        "result": notes.get("result", ""),
        "ilp_objective": objective,
        "ilp_lower_bound": bound if bound is not None else "",
        "gap": notes.get("ilp_gap", notes["gap"]) if notes["gap"] is not None else "",
        "plan_objective": notes["objective"],
        "plan_gap": notes["gap"] if notes["gap"] is not None else "",
        "physical_bound": notes.get("physical_bound", ""),
        "dp_objective": dp if dp is not None else "",
        "ilp_vs_dp": objective / dp if dp else "",
        "split": "dp" if notes["warm_start_kept"] else "solver",
        "dram_placement": notes.get("dram_placement", ""),
        "ilp_sim_cycles": ours,
        "solver_split_sim_cycles": notes.get("simulated_cycles", {}).get("solver", ""),
        "heuristic_sim_cycles": theirs,
        "ilp_sim_vs_heuristic": ours / theirs,
        "heuristic_kept": notes["heuristic_kept"],
    }


def write_results(rows: list[dict], out: str, tag: str, time_limit: float) -> None:
    if not rows:
        return
    os.makedirs(out, exist_ok=True)
    stem = f"ilp-{tag}" if tag else "ilp"
    write_csv(os.path.join(out, f"{stem}.csv"), rows)
    lines = [
        f"# ILP planner benchmark{f' ({tag})' if tag else ''}", "",
        f"Throughput objective, time limit {time_limit:g} s, one solver thread. Cycles are per "
        "input in steady state under the ILP's stage cost (compute at the device dtype, DRAM "
        "streaming of non-resident weights, spills, receiving the input cut): "
        "`ilp_objective` is the bottleneck stage of the best plan the ILP found in its model, "
        "`ilp_lower_bound` what it proved no plan of its model beats, `gap` = (objective - "
        "bound) / objective; `plan_objective`, `plan_gap`: the same for the plan the planner "
        "returns (the simulator may prefer the DP's split, see `split`), "
        "`physical_bound` the steady-state bound no placement at all beats (compute, DRAM), "
        "`dp_objective` the pipeline DP's split under the same cost (the warm start). "
        "`result`: `optimal` (proven within the MIP gap), `time-limited`, or `heuristic` "
        "(nothing proven, or the simulator preferred the pipeline heuristic's plan). "
        "`split`: whose split the ILP planner's plan uses (`solver`: its own, `dp`: the warm "
        "start, when the solver found nothing better in its model or the simulator preferred "
        "the warm start); `dram_placement`: how that plan's streamed weights are placed "
        "(interleaved, balanced, balanced with SRAM loans: the fastest simulated). "
        "`ilp_sim_cycles`, `heuristic_sim_cycles`: simulated cycles of 64 pipelined inputs "
        "(flow network) of the ILP planner's plan and of the pipeline planner's full search; "
        "`solver_split_sim_cycles`: the solver's own split, when it differs from the DP's.", "",
        *markdown_table(rows),
    ]
    with open(os.path.join(out, f"{stem}.md"), "w") as handle:
        handle.write("\n".join(lines) + "\n")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", nargs="+", default=MODELS)
    parser.add_argument("--presets", nargs="+", default=PRESETS)
    parser.add_argument("--solvers", nargs="+", default=SOLVERS)
    parser.add_argument("--formulations", nargs="+", default=["decomposition", "milp"],
                        choices=list(FORMULATIONS))
    parser.add_argument("--time-limit", type=float, default=60.0)
    parser.add_argument("--tag", default="", help="suffix of the output files (e.g. baseline)")
    parser.add_argument("--out", default="tools/bench/results/ilp")
    args = parser.parse_args(argv)
    rows: list[dict] = []
    try:
        for model_name in args.models:
            started = time.perf_counter()
            mod = load_model(models.get_model(model_name))
            reduced = ReduceGraph()(mod)
            print(f"[ilp] {model_name}: reduced in {time.perf_counter() - started:.1f} s",
                  flush=True)
            for preset, formulation, solver in itertools.product(
                    args.presets, args.formulations, args.solvers):
                system = load_system(preset)
                problem, _ = split_problem(mod, reduced, system, simulate_workload)
                try:
                    row = bench_case(problem, solver, args.time_limit, formulation)
                except PlanningError as err:
                    print(f"[ilp] {model_name} {preset} {formulation} {solver}: skipped ({err})",
                          flush=True)
                    continue
                rows.append({"model": model_name, "system": preset,
                             "ops": len(problem.graph.ops), **row})
                print(f"[ilp] {model_name} {preset} {formulation} {solver}: "
                      f"{row['result'] or row['status']} "
                      f"in {row['solve_s']:.1f} s, gap {row['gap']}, objective "
                      f"{row['ilp_objective']:.0f} (bound {row['ilp_lower_bound']}, DP "
                      f"{row['dp_objective']}), simulated {row['ilp_sim_vs_heuristic']:.3f}x "
                      "the heuristic", flush=True)
                write_results(rows, args.out, args.tag, args.time_limit)
    except KeyboardInterrupt:
        write_results(rows, args.out, args.tag, args.time_limit)
        print(f"[ilp] interrupted; {len(rows)} rows written to {args.out}", file=sys.stderr)
        return 130
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
