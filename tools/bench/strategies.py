"""Benchmark every placement strategy on standard models and presets, judged by the simulator.

Usage: ``python -m tvm_chiplet.tools.bench.strategies [--models ...] [--presets ...]
[--strategies ...] [--batches 64] [--network flow] [--quick] [--out DIR]``

For each model (tools/models.py) and preset: every strategy plans the reduced op graph; its
placement is simulated at batch 1 (latency) and with ``--batches`` pipelined inputs (throughput)
with the shared cost model; both are compared with the physical lower bound. A placement that
splits ops is first realised (SplitOperators, ReduceGraph) and the realised module's ops are
simulated, exactly as the compiled artifact would be. Writes ``strategies.csv`` and
``strategies.md``. Ctrl-C stops after writing the rows done so far.
"""

from __future__ import annotations

import argparse
import csv
import os
import sys
import time

from tvm_chiplet.passes import ReduceGraph, ReplicateDataParallel
from tvm_chiplet.passes.analysis.lower_bound import lower_bound
from tvm_chiplet.passes.analysis.op_graph import extract_op_graph
from tvm_chiplet.passes.assign_split_placement import (
    realise_placement,
    split_module,
    split_problem,
)
from tvm_chiplet.passes.planners import (
    PLANNERS,
    AutoPlanner,
    DataParallelPlanner,
    IlpPlanner,
    LayerSequentialPlanner,
    ModularPlanner,
    PipelinePlanner,
    Planner,
    PlanningError,
    PlanningProblem,
    TensorParallelPlanner,
    get_planner,
)
from tvm_chiplet.passes.planners.evaluate import simulate_placement
from tvm_chiplet.targets.system import load_system
from tvm_chiplet.targets.topology import Topology
from tvm_chiplet.tools import models
from tvm_chiplet.tools.frontends import load_model

MODELS = ["resnet50", "mobilenet-v2", "bert", "gpt2"]
PRESETS = ["cluster-4", "mesh-4x4", "simba-6x6"]
QUICK = {
    "resnet50": {"image": 64},
    "mobilenet-v2": {"image": 64},
    "bert": {"layers": 2, "seq": 32},
    "gpt2": {"layers": 2, "seq": 32},
}


def make_planners(names: list[str], batches: int, ilp_time_limit: float) -> dict[str, Planner]:
    """The planners to compare; the ILP (also inside ``auto``) gets the given time limit."""
    planners: dict[str, Planner] = {}
    for name in names:
        if name == "ilp":
            planners[name] = IlpPlanner(time_limit=ilp_time_limit)
        elif name == "auto":
            planners[name] = AutoPlanner(
                [PipelinePlanner(batches=batches), TensorParallelPlanner(),
                 ModularPlanner(batches=batches)], batches=batches,
            )
        elif name in ("pipeline", "modular"):
            planners[name] = get_planner(name, batches=batches)
        else:
            planners[name] = get_planner(name)
    return planners


class Realiser:
    """Realises placements that split ops on one model, caching the split modules' op graphs."""

    def __init__(self, mod, anchors: list[int]) -> None:
        self.mod, self.anchors, self.cache = mod, anchors, {}

    def __call__(self, problem: PlanningProblem, placement):
        if not placement.splits:
            return problem, placement
        key = tuple((s.op_id, s.dim, s.parts) for s in placement.splits)
        if key not in self.cache:
            split = split_module(self.mod, self.anchors, placement.splits)
            self.cache[key] = extract_op_graph(split)
        graph = self.cache[key]
        realised = realise_placement(placement, self.anchors, graph, problem.graph)
        return PlanningProblem(graph, problem.system, problem.topology), realised


def bench_strategy(
    planner: Planner, problem: PlanningProblem, batches: int, network: str,
    samples_per_input: int = 1, realise=None,
) -> dict:
    """Plan, then simulate one input (latency) and ``batches`` pipelined inputs (throughput).

    ``samples_per_input`` > 1 is for data-parallel graphs, whose one input carries that many
    samples: throughput is then counted in samples per second. ``realise(problem, placement)``
    turns a placement that splits ops into the realised module's problem and placement.
    """
    started = time.perf_counter()
    placement = planner.plan(problem)
    plan_s = time.perf_counter() - started
    splits = len(placement.splits)
    problem, placement = realise(problem, placement) if realise else (problem, placement)
    single = simulate_placement(problem, placement, 1, network)
    streamed = simulate_placement(problem, placement, batches, network)
    freq = problem.system.frequency_hz
    # The simulator starts with resident weights loaded and models no host I/O: so does the bound.
    bound_1 = lower_bound(problem.graph, problem.system, 1, weights_preloaded=True,
                          io_in_dram=False)
    # Copies of a placement run whole rounds: the bound is for the inputs simulated.
    bound_b = lower_bound(problem.graph, problem.system, streamed.inputs,
                          weights_preloaded=True, io_in_dram=False)
    notes = placement.notes
    return {
        "strategy": placement.strategy,
        "clusters": len(placement.clusters_used()) * placement.copies,
        "copies": placement.copies,
        "split_ops": splits,
        "dram_policy": placement.dram_policy,
        "latency_ms": 1e3 * single.total_cycles / freq,
        "latency_vs_bound": bound_1.ratio(single.total_cycles),
        "throughput_per_s": streamed.throughput_per_cycle * freq * samples_per_input,
        "inputs": streamed.inputs,
        "cycles_streamed": streamed.total_cycles,
        "time_vs_bound": bound_b.ratio(streamed.total_cycles),
        "bound_binding": bound_b.binding,
        "plan_s": plan_s,
        "ilp_gap": notes.get("gap", ""),
    }


MAX_REPLICAS = 4  # replicas copy the weights: bounded to keep the benchmark in minutes


def bench_data_parallel(model_name: str, options: dict, system, args) -> dict:
    """Data-parallel needs batch > 1: one input of ``k`` samples, k = clusters (at most 4),
    ``ceil(batches / k)`` such inputs streamed, throughput in samples per second."""
    replicas = min(system.num_clusters, MAX_REPLICAS)
    model = models.get_model(model_name, batch=replicas, **options)
    graph = extract_op_graph(
        ReduceGraph()(ReplicateDataParallel(replicas=replicas)(load_model(model)))
    )
    problem = PlanningProblem(graph, system, Topology(system))
    inputs = -(-args.batches // replicas)
    row = bench_strategy(DataParallelPlanner(), problem, inputs, args.network, replicas)
    row["strategy"] = f"data-parallel (batch {replicas} x {inputs})"
    return row


def mark_layer_sequential(rows: list[dict], model: str, preset: str) -> None:
    """Give every row of ``model`` on ``preset`` its throughput over layer-sequential's."""
    same = [r for r in rows if r["model"] == model and r["system"] == preset]
    base = next(r for r in same if r["strategy"] == LayerSequentialPlanner.name)
    for row in same:
        row["vs_layer_sequential"] = row["throughput_per_s"] / base["throughput_per_s"]


def write_results(rows: list[dict], out: str, batches: int, network: str) -> None:
    if not rows:
        return
    os.makedirs(out, exist_ok=True)
    fields = list(dict.fromkeys(key for row in rows for key in row))
    with open(os.path.join(out, "strategies.csv"), "w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=fields, restval="")
        writer.writeheader()
        writer.writerows(rows)

    def cell(value) -> str:
        return f"{value:.4g}" if isinstance(value, float) else str(value)

    lines = [
        "# Strategies benchmark", "",
        f"Simulated with the `{network}` network model; throughput with {batches} pipelined "
        "inputs (data-parallel: inputs of k samples, throughput in samples/s). "
        "`latency_vs_bound`, `time_vs_bound` = simulated time of 1 input, of all the pipelined "
        "inputs (pipeline fill included) / physical lower bound of the same work (1.0 is the "
        "bound). `throughput_per_s` is the steady-state rate, which can beat the bound's "
        "inputs / bound time when the pipeline fill prefetches later inputs' weights: the "
        "ratios compare times only.", "",
        "| " + " | ".join(fields) + " |", "|" + "---|" * len(fields),
    ]
    lines += ["| " + " | ".join(cell(row.get(f, "")) for f in fields) + " |" for row in rows]
    with open(os.path.join(out, "strategies.md"), "w") as handle:
        handle.write("\n".join(lines) + "\n")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", nargs="+", default=MODELS)
    parser.add_argument("--presets", nargs="+", default=PRESETS)
    parser.add_argument("--strategies", nargs="+", default=list(PLANNERS))
    parser.add_argument("--batches", type=int, default=64)
    parser.add_argument("--network", default="flow")
    parser.add_argument("--quick", action="store_true", help="small model configurations")
    parser.add_argument("--ilp-time-limit", type=float, default=60.0)
    parser.add_argument("--out", default="tools/bench/results")
    args = parser.parse_args(argv)
    rows: list[dict] = []
    planners = make_planners(args.strategies, args.batches, args.ilp_time_limit)
    try:
        for model_name in args.models:
            options = QUICK.get(model_name, {}) if args.quick else {}
            started = time.perf_counter()
            mod = load_model(models.get_model(model_name, **options))
            reduced = ReduceGraph()(mod)
            print(f"[strategies] {model_name}: reduced in "
                  f"{time.perf_counter() - started:.1f} s", flush=True)
            realiser = None
            for preset in args.presets:
                system = load_system(preset)
                problem, anchors = split_problem(mod, reduced, system)
                realiser = realiser or Realiser(mod, anchors)
                for strategy, planner in planners.items():
                    try:
                        if strategy == DataParallelPlanner.name:
                            row = bench_data_parallel(model_name, options, system, args)
                        else:
                            row = bench_strategy(planner, problem, args.batches, args.network,
                                                 realise=realiser)
                    except PlanningError as err:
                        print(f"[strategies] {model_name} {preset} {strategy}: skipped ({err})")
                        continue
                    rows.append({"model": model_name, "system": preset, **row})
                    if strategy == LayerSequentialPlanner.name:
                        mark_layer_sequential(rows, model_name, preset)
                    print(f"[strategies] {model_name} {preset} {row['strategy']}: "
                          f"{row['throughput_per_s']:.1f} inf/s "
                          f"({row['time_vs_bound']:.2f}x bound time), "
                          f"latency {row['latency_ms']:.3f} ms, plan {row['plan_s']:.2f} s",
                          flush=True)
    except KeyboardInterrupt:
        write_results(rows, args.out, args.batches, args.network)
        print(f"[strategies] interrupted; {len(rows)} rows written to {args.out}",
              file=sys.stderr)
        return 130
    write_results(rows, args.out, args.batches, args.network)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
