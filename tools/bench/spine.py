"""Benchmark the spine: compile time and executor overhead against plain TVM, in one run.

Usage: ``python -m tvm_chiplet.tools.bench.spine [--models resnet50 bert] [--compiles 3]
[--out DIR]``

For each model on ``simba-6x6``: wall time of ``tvmc compile`` (import, chiplet pipeline,
``tvm.compile``, export) against plain ``tvm.compile`` with TVM's fused default pipeline
(import and export included for both; the median of ``--compiles`` of each, alternating),
and the executor's wall time per inference against
``vm["main"]`` on the same executable. Writes ``spine.csv`` and ``spine.md``; also the
per-cluster table of ResNet-50 on ``mesh-4x4``.
"""

from __future__ import annotations

import argparse
import csv
import os
import statistics
import tempfile
import time

import tvm
from tvm import relax

from tvm_chiplet.build import build
from tvm_chiplet.runtime.artifact import load_module
from tvm_chiplet.runtime.device import simulate_plan
from tvm_chiplet.runtime.profile import format_table, profile_report
from tvm_chiplet.tools import models
from tvm_chiplet.tools.frontends import load_model


def _median_seconds(fn, repeat: int) -> float:
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def bench_model(name: str, preset: str, work: str, repeat: int, compiles: int = 1) -> dict:
    model = models.get_model(name)
    inputs = models.example_inputs(model)

    def plain() -> None:
        plain_mod = load_model(model)
        with tvm.target.Target("llvm"):
            built = tvm.compile(plain_mod, "llvm", relax_pipeline=relax.get_default_pipeline(
                tvm.target.Target("llvm")))
        built.export_library(os.path.join(work, f"{name}-plain.so"))

    def chiplet():
        lib = build(model, target=f"chiplet/{preset}")
        return lib, lib.export_library(os.path.join(work, f"{name}.tar"))

    # Alternately, so that both sides see the machine alike: the median of each.
    plain_times, chiplet_times = [], []
    for _ in range(compiles):
        start = time.perf_counter()
        plain()
        plain_times.append(time.perf_counter() - start)
        start = time.perf_counter()
        lib, artifact = chiplet()
        chiplet_times.append(time.perf_counter() - start)
    plain_s, chiplet_s = statistics.median(plain_times), statistics.median(chiplet_times)

    module = load_module(artifact)
    vm = module.vm()
    args = [tvm.runtime.tensor(inputs[s.name]) for s in module.input_specs]
    vm["main"](*args)
    module.run(inputs)
    main_s = _median_seconds(lambda: vm["main"](*args), repeat)
    executor_s = _median_seconds(lambda: module.run(inputs), repeat)
    return {
        "model": name,
        "system": preset,
        "ops": len(lib.plan["tasks"]),
        "segments": len(lib.plan["segments"]),
        "clusters": len(lib.plan["clusters_used"]),
        "plain_compile_s": round(plain_s, 2),
        "chiplet_compile_s": round(chiplet_s, 2),
        "compile_ratio": round(chiplet_s / plain_s, 2),
        "vm_main_s": round(main_s, 4),
        "executor_s": round(executor_s, 4),
        "executor_ratio": round(executor_s / main_s, 2),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", nargs="+", default=["resnet50", "bert"])
    parser.add_argument("--preset", default="simba-6x6")
    parser.add_argument("--table-preset", default="mesh-4x4")
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--compiles", type=int, default=3,
                        help="compiles of each side, alternating; their medians are compared")
    parser.add_argument("--out", default="tools/bench/results")
    args = parser.parse_args(argv)
    os.makedirs(args.out, exist_ok=True)
    rows = []
    with tempfile.TemporaryDirectory() as work:
        for name in args.models:
            print(f"[spine] {name} on {args.preset} ...", flush=True)
            rows.append(bench_model(name, args.preset, work, args.repeat, args.compiles))
            print(f"[spine] {rows[-1]}", flush=True)
        model = models.get_model("resnet50")
        lib = build(model, target=f"chiplet/{args.table_preset}")
        module = load_module(lib.export_library(os.path.join(work, "r50.tar")))
        execution = module.run(models.example_inputs(model))
        sim = simulate_plan(module.plan, module.system, batches=1)
        table = format_table(profile_report(module.plan, module.system, sim, execution))
    with open(os.path.join(args.out, "spine.csv"), "w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    lines = ["# Spine benchmark", "", "| " + " | ".join(rows[0]) + " |",
             "|" + "---|" * len(rows[0])]
    lines += ["| " + " | ".join(str(v) for v in row.values()) + " |" for row in rows]
    lines += ["", f"## ResNet-50 on {args.table_preset}, per cluster (batch 1, flow network)",
              "", "```", table, "```", ""]
    with open(os.path.join(args.out, "spine.md"), "w") as handle:
        handle.write("\n".join(lines))
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
