"""Degradation under faults: throughput on random fault sets, fault-aware against fault-oblivious.

Usage: ``python -m tvm_chiplet.tools.bench.faults [--models resnet50 bert] [--presets
simba-6x6 mesh-4x4] [--chiplets 1 2 4] [--links 2 4 8] [--sets 20] [--max-minutes M]
[--plan-times] [--batches 64] [--quick] [--out DIR]``

For each model and preset (device dtype: the preset's), the reduced op graph is planned once on
the healthy system (strategy ``pipeline``, copies included). Then, set after set (seed ``s`` of
every case before seed ``s + 1``, so that a run stopped by ``--max-minutes`` or Ctrl-C covers
every case evenly; the tables are rewritten after every fault set), for every fault case (``k``
dead chiplets, or ``k`` dead die-to-die links) on the faulty system
(:func:`~tvm_chiplet.targets.faults.random_faults`, never disconnecting):

- ``fault-aware``: :class:`~tvm_chiplet.passes.planners.fault_aware.FaultAwarePlanner` on the
  surviving system (it also tries the plain pipeline on the topology-aware order and keeps the
  faster); its planning time is recorded;
- ``pipeline``: :class:`PipelinePlanner` on the surviving system, planned after the fault-aware
  planner on the same problem (it reuses that planner's DP runs and simulations, so it costs
  little and its time is not recorded);
- ``fault-oblivious``: the healthy plan run on the faulty system, each dead cluster's work moved
  to its nearest surviving cluster (fewest hops on the healthy routes, then id); balanced DRAM
  shares become ``nearest`` and SRAM loans are dropped (their ids are the healthy system's).

Each is simulated (``flow``) with ``--batches`` pipelined inputs. Reported: throughput relative
to the healthy system against the fraction of compute (MACs) that survives, fault-aware against
fault-oblivious, and whether any route of any simulated workload crosses a dead part
(``routes_ok``: every link, cluster and DRAM controller used exists in the faulty system and is
no healthy part named dead). ``--plan-times`` first measures fault-aware planning on faulty 6x6
systems against healthy planning side by side. Op splits (regions) are not planned here (no
split dimensions): placements keep whole ops. Writes ``faults.csv`` and ``faults.md``.
"""

from __future__ import annotations

import argparse
import csv
import dataclasses
import math
import os
import statistics
import sys
import time
from dataclasses import dataclass

from tvm_chiplet.passes import ReduceGraph
from tvm_chiplet.passes.analysis.extract_op_graph import extract_op_graph
from tvm_chiplet.passes.analysis.op_graph import OpGraph
from tvm_chiplet.passes.planners import FaultAwarePlanner, PipelinePlanner, PlanningProblem
from tvm_chiplet.passes.planners.evaluate import graph_items, placement_workload
from tvm_chiplet.passes.planners.placement import Placement
from tvm_chiplet.runtime.device import simulate_workload
from tvm_chiplet.targets.faults import dead_parts, random_faults, with_faults
from tvm_chiplet.targets.system import ChipletSystem
from tvm_chiplet.targets.system_toml import load_system
from tvm_chiplet.targets.topology import Topology
from tvm_chiplet.targets.workload import WorkItem, build_workload
from tvm_chiplet.tools import models
from tvm_chiplet.tools.bench.tables import markdown_table, write_csv
from tvm_chiplet.tools.frontends import load_model

MODELS = {"resnet50": {}, "bert": {}}
QUICK = {"resnet50": {"image": 64}, "bert": {"layers": 2, "seq": 32}}
PRESETS = ["simba-6x6", "mesh-4x4"]


def _simulate(problem: PlanningProblem, workload, batches: int, placement: Placement):
    tasks, messages, _, fetches = workload
    return simulate_workload(tasks, messages, problem.system, batches, "flow", fetches=fetches,
                             copies=placement.copies, microbatch=placement.microbatch)


def oblivious_items(healthy: ChipletSystem, faulty: ChipletSystem, items: list[WorkItem]
                    ) -> list[WorkItem]:
    """``items`` (on ``healthy`` cluster ids) moved onto ``faulty``: a surviving cluster keeps
    its work (found by name), a dead one's goes to its nearest survivor on the healthy routes."""
    alive = {c.name: c.id for c in faulty.clusters}
    topology = healthy.topology
    survivors = [c.id for c in healthy.clusters if c.name in alive]

    def moved(cluster: int) -> int:
        name = healthy.clusters[cluster].name
        if name in alive:
            return alive[name]
        nearest = min(survivors, key=lambda c: (topology.hops(cluster, c), c))
        return alive[healthy.clusters[nearest].name]

    return [dataclasses.replace(i, cluster=moved(i.cluster)) for i in items]


def routes_ok(healthy: ChipletSystem, faulty: ChipletSystem, workload) -> bool:
    """Whether no task, message route or fetch of ``workload`` (on ``faulty``) touches a part of
    ``healthy`` that the faults killed."""
    dead_clusters, dead_links = dead_parts(healthy, faulty)
    dead_names = {healthy.clusters[c].name for c in dead_clusters}
    dead_ends = {(healthy.clusters[healthy.links[i].src].name,
                  healthy.clusters[healthy.links[i].dst].name) for i in dead_links}
    tasks, messages, _, fetches = workload
    names = [c.name for c in faulty.clusters]
    if any(names[t["cluster"]] in dead_names for t in tasks):
        return False
    for route in [m["route"] for m in messages] + [f["route"] for f in fetches]:
        for link in route:
            if not 0 <= link < len(faulty.links):
                return False
            ends = (names[faulty.links[link].src], names[faulty.links[link].dst])
            if ends in dead_ends or dead_names & set(ends):
                return False
    return all(f.get("dram") is None or f["dram"] < len(faulty.drams) for f in fetches)


def bench_case(graph, healthy: ChipletSystem, healthy_plan, healthy_rate: float, kind: str,
               count: int, seed: int, batches: int) -> dict:
    """One fault set: plan fault-aware (timed, on a problem of its own), pipeline (on the same
    problem afterwards: it reuses the fault-aware planner's runs and simulations, so its time
    is not measured) and oblivious, simulate each."""
    faults = random_faults(healthy, seed=seed, **{kind: count})
    faulty, notes = with_faults(healthy, faults)
    problem = PlanningProblem(graph, faulty, Topology(faulty), simulator=simulate_workload)
    row = {"kind": kind, "count": count, "seed": seed,
           "surviving_compute": faulty.peak_macs_per_cycle / healthy.peak_macs_per_cycle,
           "drams_lost": len(notes)}
    ok = True
    for name, planner in (("fault_aware", FaultAwarePlanner(batches=batches)),
                          ("pipeline", PipelinePlanner(batches=batches))):
        started = time.perf_counter()
        placement = planner.plan(problem)
        if name == "fault_aware":
            row["fault_aware_plan_s"] = time.perf_counter() - started
        workload = placement_workload(problem, placement)
        ok &= routes_ok(healthy, faulty, workload)
        sim = _simulate(problem, workload, batches, placement)
        row[f"{name}_retained"] = sim.throughput_per_cycle / healthy_rate
    items = oblivious_items(healthy, faulty,
                            graph_items(graph, healthy_plan, healthy.partial_sum_scale))
    policy = "nearest" if healthy_plan.dram_policy == "balanced" else healthy_plan.dram_policy
    workload = build_workload(items, faulty, problem.topology, policy,
                              microbatch=healthy_plan.microbatch)
    ok &= routes_ok(healthy, faulty, workload)
    sim = _simulate(problem, workload, batches, healthy_plan)
    row["oblivious_retained"] = sim.throughput_per_cycle / healthy_rate
    row["retained_vs_compute"] = row["fault_aware_retained"] / row["surviving_compute"]
    row["aware_vs_oblivious"] = row["fault_aware_retained"] / row["oblivious_retained"]
    row["routes_ok"] = ok
    return row


@dataclass
class Case:
    """One model on one healthy system, planned once (pipeline): what every fault set of the
    case is compared with."""

    model: str
    preset: str
    graph: OpGraph
    healthy: ChipletSystem
    plan: Placement
    rate: float
    plan_s: float


def healthy_case(model: str, preset: str, graph: OpGraph, healthy: ChipletSystem,
                 batches: int) -> Case:
    problem = PlanningProblem(graph, healthy, Topology(healthy), simulator=simulate_workload)
    started = time.perf_counter()
    plan = PipelinePlanner(batches=batches).plan(problem)
    plan_s = time.perf_counter() - started
    rate = _simulate(problem, placement_workload(problem, plan), batches,
                     plan).throughput_per_cycle
    return Case(model, preset, graph, healthy, plan, rate, plan_s)


def run_cases(cases: list[Case], faults: list[tuple[str, int]], sets: int, batches: int,
              done, deadline: float = math.inf) -> int:
    """Every fault case of every case, set after set (seed 0 of everything, then seed 1, ...),
    so that a run stopped early covers every case evenly; ``done(row)`` after each. Stops at
    ``deadline`` (a ``time.monotonic()`` value) before starting a new set. Returns the number
    of sets run."""
    for seed in range(sets):
        if time.monotonic() >= deadline:
            return seed
        for case in cases:
            for kind, count in faults:
                row = bench_case(case.graph, case.healthy, case.plan, case.rate, kind, count,
                                 seed, batches)
                done({"model": case.model, "preset": case.preset, **row,
                      "healthy_plan_s": case.plan_s,
                      "healthy_per_s": case.rate * case.healthy.frequency_hz})
    return sets


def model_graph(name: str, options: dict, dtype: str) -> OpGraph:
    return extract_op_graph(ReduceGraph()(load_model(models.get_model(name, **options))), dtype)


def plan_time_ratios(case: Case, faults: list[tuple[str, int]], batches: int) -> list[dict]:
    """Planning time on a faulty system (fault-aware) against the healthy system (pipeline),
    measured side by side: the healthy plan right before and right after each faulty one (on
    fresh problems, nothing reused), the ratio taken to their mean."""
    def seconds(system: ChipletSystem, planner) -> float:
        problem = PlanningProblem(case.graph, system, Topology(system),
                                  simulator=simulate_workload)
        started = time.perf_counter()
        planner.plan(problem)
        return time.perf_counter() - started

    rows = []
    for kind, count in faults:
        faulty, _ = with_faults(case.healthy, random_faults(case.healthy, **{kind: count}))
        before = seconds(case.healthy, PipelinePlanner(batches=batches))
        aware = seconds(faulty, FaultAwarePlanner(batches=batches))
        after = seconds(case.healthy, PipelinePlanner(batches=batches))
        rows.append({"model": case.model, "preset": case.preset, "faults": f"{count} {kind}",
                     "healthy_s_before": before, "fault_aware_s": aware,
                     "healthy_s_after": after, "ratio": 2 * aware / (before + after)})
        print(f"[faults] plan time {case.model} {case.preset} {count} {kind}: healthy "
              f"{before:.1f} / {after:.1f} s, fault-aware {aware:.1f} s, ratio "
              f"{rows[-1]['ratio']:.2f}", flush=True)
    return rows


def summarise(rows: list[dict]) -> list[dict]:
    """Medians per model, preset and fault case."""
    groups: dict[tuple, list[dict]] = {}
    for row in rows:
        groups.setdefault((row["model"], row["preset"], row["kind"], row["count"]), []).append(row)
    summary = []
    for (model, preset, kind, count), group in groups.items():
        def median(key: str, group=group) -> float:
            return statistics.median(r[key] for r in group)

        summary.append({
            "model": model, "preset": preset, "faults": f"{count} {kind}", "sets": len(group),
            "surviving_compute": median("surviving_compute"),
            "aware_retained": median("fault_aware_retained"),
            "retained_vs_compute": median("retained_vs_compute"),
            "pipeline_retained": median("pipeline_retained"),
            "oblivious_retained": median("oblivious_retained"),
            "aware_vs_oblivious": median("aware_vs_oblivious"),
            "aware_plan_vs_healthy": median("fault_aware_plan_s") / group[0]["healthy_plan_s"],
            "routes_ok": all(r["routes_ok"] for r in group),
        })
    return summary


def targets(rows: list[dict]) -> list[str]:
    """The issue's targets, each with the measured median and whether it is met."""
    retained = statistics.median(r["retained_vs_compute"] for r in rows)
    four = [r["aware_vs_oblivious"] for r in rows if r["kind"] == "chiplets" and r["count"] == 4]
    lines = [f"- median retained throughput / surviving compute over all {len(rows)} fault sets: "
             f"{retained:.3f} (target >= 0.9: {'met' if retained >= 0.9 else 'NOT met'})"]
    if four:
        median_four = statistics.median(four)
        lines.append(f"- median fault-aware / fault-oblivious throughput over the {len(four)} "
                     f"4-dead-chiplet sets: {median_four:.2f}x (target >= 1.3x: "
                     f"{'met' if median_four >= 1.3 else 'NOT met'})")
    else:
        lines.append("- fault-aware / fault-oblivious with 4 dead chiplets: not run")
    dead_chiplets = [r["retained_vs_compute"] for r in rows if r["kind"] == "chiplets"]
    if dead_chiplets:
        lines.append(f"- median retained throughput / surviving compute over the "
                     f"{len(dead_chiplets)} dead-chiplet sets alone (dead links leave all the "
                     f"compute): {statistics.median(dead_chiplets):.3f}")
    low = [f"{s['model']} {s['preset']} {s['faults']} ({s['retained_vs_compute']:.2f})"
           for s in summarise(rows) if s["retained_vs_compute"] < 0.9]
    lines.append("- cases whose median is below 0.9: " + (", ".join(low) if low else "none"))
    lines.append(f"- every route of every plan avoids the dead parts: "
                 f"{all(r['routes_ok'] for r in rows)}")
    return lines


def read_rows(path: str) -> list[dict]:
    """Rows of a CSV this bench wrote, numbers and booleans as such."""
    def value(text: str):
        if text in ("True", "False"):
            return text == "True"
        try:
            return int(text)
        except ValueError:
            try:
                return float(text)
            except ValueError:
                return text

    with open(path, newline="") as handle:
        return [{key: value(text) for key, text in row.items()}
                for row in csv.DictReader(handle)]


def write(out: str, rows: list[dict], args, plan_times: list[dict], status: str) -> None:
    os.makedirs(out, exist_ok=True)
    write_csv(os.path.join(out, "faults.csv"), rows)
    if plan_times:
        write_csv(os.path.join(out, "plan_times.csv"), plan_times)
    run = f"`python -m tvm_chiplet.tools.bench.faults {' '.join(args.argv)}`: {status}"
    with open(os.path.join(out, "run.txt"), "w") as handle:
        handle.write(run + "\n")
    write_report(out, rows, plan_times, run, args.batches)


def write_report(out: str, rows: list[dict], plan_times: list[dict], run: str,
                 batches: int) -> None:
    lines = [
        "# Degradation under faults: fault-aware against fault-oblivious deployment", "",
        f"{run}. Random fault sets (seed = set number) per case; every plan simulated with "
        f"{batches} pipelined inputs on the `flow` network; throughput relative to the "
        "pipeline plan of the healthy system. `aware`: strategy fault-aware; `pipeline`: the "
        "pipeline planner on the surviving system; `oblivious`: the healthy plan with each "
        "dead cluster's work on its nearest survivor. `aware_plan_vs_healthy`: fault-aware "
        "planning time over the healthy system's pipeline planning time, measured once at the "
        "start of the run (the load of the machine varies; see the side-by-side table).", "",
        *(targets(rows) if rows else ["- no fault set ran"]), "",
        *(markdown_table(summarise(rows)) if rows else []), "",
    ]
    if plan_times:
        ratios = [r["ratio"] for r in plan_times]
        lines += [
            "## Planning time on a faulty system against the healthy one, side by side", "",
            "Fault-aware planning on the faulty system between two pipeline plannings of the "
            "healthy system, each on a fresh problem (nothing reused across them); ratio = "
            "fault-aware / mean healthy. Median ratio "
            f"{statistics.median(ratios):.2f} (target < 2: "
            f"{'met' if statistics.median(ratios) < 2 else 'NOT met'}), max {max(ratios):.2f}.",
            "", *markdown_table(plan_times), ""]
    with open(os.path.join(out, "faults.md"), "w") as handle:
        handle.write("\n".join(lines))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", nargs="+", default=list(MODELS))
    parser.add_argument("--presets", nargs="+", default=PRESETS)
    parser.add_argument("--chiplets", nargs="*", type=int, default=[1, 2, 4])
    parser.add_argument("--links", nargs="*", type=int, default=[2, 4, 8])
    parser.add_argument("--sets", type=int, default=20, help="random fault sets per case")
    parser.add_argument("--max-minutes", type=float, default=math.inf,
                        help="start no new set after this long (the sets run so far are kept)")
    parser.add_argument("--plan-times", action="store_true",
                        help="first time fault-aware planning against healthy planning side by "
                             "side on the 6x6 presets (1 and 4 dead chiplets, 4 dead links)")
    parser.add_argument("--batches", type=int, default=64)
    parser.add_argument("--quick", action="store_true", help="small model variants")
    parser.add_argument("--out", default="tools/bench/results")
    parser.add_argument("--report", action="store_true",
                        help="only rewrite faults.md in --out from its faults.csv, "
                             "plan_times.csv and run.txt")
    args = parser.parse_args(argv)
    args.argv = sys.argv[1:] if argv is None else list(argv)
    if args.report:
        times = os.path.join(args.out, "plan_times.csv")
        with open(os.path.join(args.out, "run.txt")) as handle:
            run = handle.read().strip()
        write_report(args.out, read_rows(os.path.join(args.out, "faults.csv")),
                     read_rows(times) if os.path.exists(times) else [], run, args.batches)
        return 0
    started = time.monotonic()
    rows: list[dict] = []
    plan_times: list[dict] = []
    faults = [("chiplets", k) for k in args.chiplets] + [("links", k) for k in args.links]
    per_set = len(args.models) * len(args.presets) * len(faults)

    def done(row: dict) -> None:
        rows.append(row)
        sets = len(rows) // per_set
        write(args.out, rows, args, plan_times,
              f"{sets} of {args.sets} sets complete, {len(rows)} of {args.sets * per_set} "
              "fault sets (run in progress or stopped)")
        elapsed = time.monotonic() - started
        print(f"[faults] {len(rows)}/{args.sets * per_set} {elapsed / 60:.1f} min: "
              f"{row['model']} {row['preset']} {row['kind']}={row['count']} seed {row['seed']}: "
              f"retained {row['fault_aware_retained']:.3f} (compute "
              f"{row['surviving_compute']:.3f}), x{row['aware_vs_oblivious']:.2f} oblivious, "
              f"plan {row['fault_aware_plan_s']:.1f} s (healthy {row['healthy_plan_s']:.1f} s), "
              f"routes ok {row['routes_ok']}", flush=True)

    try:
        graphs: dict[tuple[str, str], OpGraph] = {}
        cases = []
        for name in args.models:
            options = QUICK.get(name, {}) if args.quick else MODELS.get(name, {})
            for preset in args.presets:
                healthy = load_system(preset)
                key = (name, healthy.device_dtype)
                if key not in graphs:
                    graphs[key] = model_graph(name, options, healthy.device_dtype)
                cases.append(healthy_case(name, preset, graphs[key], healthy, args.batches))
                print(f"[faults] healthy {name} on {preset}: planned in "
                      f"{cases[-1].plan_s:.1f} s", flush=True)
        if args.plan_times:
            for case in cases:
                if case.healthy.num_clusters == 36:
                    plan_times += plan_time_ratios(case, [("chiplets", 1), ("chiplets", 4),
                                                          ("links", 4)], args.batches)
        deadline = started + 60 * args.max_minutes
        ran = run_cases(cases, faults, args.sets, args.batches, done, deadline)
        status = (f"all {args.sets} sets" if ran == args.sets else
                  f"{ran} of {args.sets} sets (stopped after --max-minutes {args.max_minutes:g})")
    except KeyboardInterrupt:
        status = (f"interrupted after {len(rows) // per_set} complete sets of {args.sets} "
                  f"({len(rows)} fault sets)")
    write(args.out, rows, args, plan_times, f"{status}, in {(time.monotonic() - started) / 60:.0f}"
          " min")
    print(f"[faults] {status} -> {args.out}", flush=True)
    return 0 if all(r["routes_ok"] for r in rows) else 1


if __name__ == "__main__":
    raise SystemExit(main())
