"""Degradation under faults: throughput on random fault sets, fault-aware against fault-oblivious.

Usage: ``python -m tvm_chiplet.tools.bench.faults [--models resnet50 bert] [--presets
simba-6x6 mesh-4x4] [--chiplets 1 2 4] [--links 2 4 8] [--sets 20] [--batches 64] [--quick]
[--out DIR]``

For each model and preset (device dtype: the preset's), the reduced op graph is planned once on
the healthy system (strategy ``pipeline``, copies included) and, for every fault case (``k``
dead chiplets, or ``k`` dead die-to-die links) and each of ``--sets`` seeds, on the faulty system
(:func:`~tvm_chiplet.targets.faults.random_faults`, never disconnecting):

- ``fault-aware``: :class:`~tvm_chiplet.passes.planners.fault_aware.FaultAwarePlanner` on the
  surviving system (it also tries the plain pipeline on the topology-aware order and keeps the
  faster);
- ``pipeline``: :class:`PipelinePlanner` on the surviving system (its planning time is the
  faulty-vs-healthy comparison);
- ``fault-oblivious``: the healthy plan run on the faulty system, each dead cluster's work moved
  to its nearest surviving cluster (fewest hops on the healthy routes, then id); balanced DRAM
  shares become ``nearest`` and SRAM loans are dropped (their ids are the healthy system's).

Each is simulated (``flow``) with ``--batches`` pipelined inputs. Reported: throughput relative
to the healthy system against the fraction of compute (MACs) that survives, fault-aware against
fault-oblivious, planning times, and whether any route of any simulated workload crosses a dead
part (``routes_ok``: every link, cluster and DRAM controller used exists in the faulty system
and is no healthy part named dead). Op splits (regions) are not planned here (no split
dimensions): placements keep whole ops. Writes ``faults.csv`` and ``faults.md``.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

from tvm_chiplet.passes import ReduceGraph
from tvm_chiplet.passes.analysis.extract_op_graph import extract_op_graph
from tvm_chiplet.passes.planners import FaultAwarePlanner, PipelinePlanner, PlanningProblem
from tvm_chiplet.passes.planners.evaluate import graph_items
from tvm_chiplet.runtime.device import simulate_workload
from tvm_chiplet.targets.faults import dead_parts, random_faults, with_faults
from tvm_chiplet.targets.system import ChipletSystem
from tvm_chiplet.targets.system_toml import load_system
from tvm_chiplet.targets.topology import Topology
from tvm_chiplet.targets.workload import WorkItem, build_workload, replicate_loans
from tvm_chiplet.tools import models
from tvm_chiplet.tools.bench.tables import markdown_table, write_csv
from tvm_chiplet.tools.frontends import load_model

MODELS = {"resnet50": {}, "bert": {}}
QUICK = {"resnet50": {"image": 64}, "bert": {"layers": 2, "seq": 32}}
PRESETS = ["simba-6x6", "mesh-4x4"]


def _workload(problem: PlanningProblem, placement, items=None):
    items = items if items is not None else graph_items(problem.graph, placement)
    return build_workload(items, problem.system, problem.topology, placement.dram_policy,
                          placement.dram_shares,
                          replicate_loans(placement.sram_loans, placement.copy_maps))


def _simulate(problem: PlanningProblem, workload, batches: int, copies: int):
    tasks, messages, _, fetches = workload
    return simulate_workload(tasks, messages, problem.system, batches, "flow", fetches=fetches,
                             copies=copies)


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

    return [WorkItem(i.name, moved(i.cluster), i.flops, i.bytes_moved, i.weight_bytes, i.deps,
                     i.output_bytes) for i in items]


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
    """One fault set: plan fault-aware, pipeline and oblivious, simulate each."""
    faults = random_faults(healthy, seed=seed, **{kind: count})
    faulty, notes = with_faults(healthy, faults)
    problem = PlanningProblem(graph, faulty, Topology(faulty), simulator=simulate_workload)
    row = {"kind": kind, "count": count, "seed": seed,
           "surviving_compute": faulty.peak_macs_per_cycle / healthy.peak_macs_per_cycle,
           "drams_lost": len(notes)}
    ok = True
    for name, planner in (("pipeline", PipelinePlanner(batches=batches)),
                          ("fault_aware", FaultAwarePlanner(batches=batches))):
        started = time.perf_counter()
        placement = planner.plan(problem)
        row[f"{name}_plan_s"] = time.perf_counter() - started
        workload = _workload(problem, placement)
        ok &= routes_ok(healthy, faulty, workload)
        sim = _simulate(problem, workload, batches, placement.copies)
        row[f"{name}_retained"] = sim.throughput_per_cycle / healthy_rate
    items = oblivious_items(healthy, faulty, graph_items(graph, healthy_plan))
    policy = "nearest" if healthy_plan.dram_policy == "balanced" else healthy_plan.dram_policy
    workload = build_workload(items, faulty, problem.topology, policy)
    ok &= routes_ok(healthy, faulty, workload)
    sim = _simulate(problem, workload, batches, healthy_plan.copies)
    row["oblivious_retained"] = sim.throughput_per_cycle / healthy_rate
    row["retained_vs_compute"] = row["fault_aware_retained"] / row["surviving_compute"]
    row["aware_vs_oblivious"] = row["fault_aware_retained"] / row["oblivious_retained"]
    row["routes_ok"] = ok
    return row


def bench_model(name: str, options: dict, preset: str, args, done) -> None:
    """Every fault case of one model on one preset; ``done(row)`` after each (the tables are
    rewritten then, so a stopped run keeps what it measured)."""
    healthy = load_system(preset)
    graph = extract_op_graph(ReduceGraph()(load_model(models.get_model(name, **options))),
                             healthy.device_dtype)
    problem = PlanningProblem(graph, healthy, Topology(healthy), simulator=simulate_workload)
    started = time.perf_counter()
    plan = PipelinePlanner(batches=args.batches).plan(problem)
    healthy_plan_s = time.perf_counter() - started
    healthy_rate = _simulate(problem, _workload(problem, plan), args.batches,
                             plan.copies).throughput_per_cycle
    cases = [("chiplets", k) for k in args.chiplets] + [("links", k) for k in args.links]
    for kind, count in cases:
        for seed in range(args.sets):
            row = bench_case(graph, healthy, plan, healthy_rate, kind, count, seed, args.batches)
            row = {"model": name, "preset": preset, **row, "healthy_plan_s": healthy_plan_s,
                   "healthy_per_s": healthy_rate * healthy.frequency_hz}
            done(row)
            print(f"[faults] {name} {preset} {kind}={count} seed {seed}: retained "
                  f"{row['fault_aware_retained']:.3f} (compute {row['surviving_compute']:.3f}), "
                  f"x{row['aware_vs_oblivious']:.2f} oblivious, plan "
                  f"{row['fault_aware_plan_s']:.1f} s (healthy pipeline {healthy_plan_s:.1f} s), "
                  f"routes ok {row['routes_ok']}", flush=True)


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
            "pipeline_plan_vs_healthy": median("pipeline_plan_s") / group[0]["healthy_plan_s"],
            "routes_ok": all(r["routes_ok"] for r in group),
        })
    return summary


def write(out: str, rows: list[dict], summary: list[dict], args) -> None:
    os.makedirs(out, exist_ok=True)
    write_csv(os.path.join(out, "faults.csv"), rows)
    retained = [r["retained_vs_compute"] for r in rows]
    four = [r["aware_vs_oblivious"] for r in rows if r["kind"] == "chiplets" and r["count"] == 4]
    lines = [
        "# Degradation under faults: fault-aware against fault-oblivious deployment", "",
        f"`python -m tvm_chiplet.tools.bench.faults {' '.join(args.argv)}`. "
        f"{args.sets} random fault set(s) per case (seeds 0..{args.sets - 1}); every plan "
        f"simulated with {args.batches} pipelined inputs on the `flow` network; throughput "
        "relative to the pipeline plan of the healthy system. `aware`: strategy fault-aware; "
        "`pipeline`: the pipeline planner on the surviving system; `oblivious`: the healthy "
        "plan with each dead cluster's work on its nearest survivor. Plan times are relative "
        "to planning the healthy system (pipeline).", "",
        f"- median retained throughput / surviving compute: {statistics.median(retained):.3f} "
        "(target >= 0.9)",
        "- median fault-aware / fault-oblivious, 4 dead chiplets: "
        + (f"{statistics.median(four):.2f}x (target >= 1.3x)" if four else "not run"),
        f"- every route of every plan avoids the dead parts: "
        f"{all(r['routes_ok'] for r in rows)}", "",
        *markdown_table(summary), "",
    ]
    with open(os.path.join(out, "faults.md"), "w") as handle:
        handle.write("\n".join(lines))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", nargs="+", default=list(MODELS))
    parser.add_argument("--presets", nargs="+", default=PRESETS)
    parser.add_argument("--chiplets", nargs="*", type=int, default=[1, 2, 4])
    parser.add_argument("--links", nargs="*", type=int, default=[2, 4, 8])
    parser.add_argument("--sets", type=int, default=20, help="random fault sets per case")
    parser.add_argument("--batches", type=int, default=64)
    parser.add_argument("--quick", action="store_true", help="small model variants")
    parser.add_argument("--out", default="tools/bench/results")
    args = parser.parse_args(argv)
    args.argv = sys.argv[1:] if argv is None else list(argv)
    rows: list[dict] = []

    def done(row: dict) -> None:
        rows.append(row)
        write(args.out, rows, summarise(rows), args)

    for name in args.models:
        options = QUICK.get(name, {}) if args.quick else MODELS.get(name, {})
        for preset in args.presets:
            bench_model(name, options, preset, args, done)
    return 0 if all(r["routes_ok"] for r in rows) else 1


if __name__ == "__main__":
    raise SystemExit(main())
