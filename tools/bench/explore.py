"""Benchmark ``tvmc explore``: study wall time with 1 and 2 workers, the engine's per-trial
overhead against a direct call, and a cached-plan trial against a full one.

Usage: ``python -m tvm_chiplet.tools.bench.explore [--workers 2 1] [--points 100] [--out DIR]``

Two studies on ``mesh-4x4`` over ResNet-18 and BERT-tiny (BERT with 2 layers, hidden 128,
2 heads, FFN 512, sequence 128): a grid (grid size, SRAM, NoP bandwidth, two network models,
so half its points reuse a plan) and a random search of ``--points`` points (grid size, MACs,
SRAM, NoP latency, device dtype). Each runs once per worker count on a fresh results directory
(no cached plans from an earlier run). The overhead: 12 points run with :func:`run_trial`
directly in this process, then the same points through the engine with 1 worker (Ray started
beforehand, a worker's first import of TVM included). Writes
``explore.csv`` and ``explore.md``.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

from tvm_chiplet.tools.bench.tables import markdown_table, write_csv
from tvm_chiplet.tools.explore import load_study, run_study, run_trial
from tvm_chiplet.tools.explore.engine import connect
from tvm_chiplet.tools.explore.study import grid_points

BERT_TINY = "{layers = 2, hidden = 128, heads = 2, ffn = 512, seq = 128}"
MODELS = f"""models = ["resnet18",
          {{name = "bert", label = "bert-tiny", options = {BERT_TINY}}}]"""
OBJECTIVES = """[objectives]
area = {per_mac = 2.0e-4, per_sram_mib = 0.6, per_phy = 0.5, per_dram_channel = 1.0}
"""
GRID = f"""[study]
name = "bench-grid"
base = "mesh-4x4"
{MODELS}

[parameters]
rows = [2, 4]
cols = [2, 4]
sram_bytes = [524288, 1048576, 2097152]
nop_bandwidth = [16.0, 64.0]
network = ["analytical", "flow"]

{OBJECTIVES}"""
RANDOM = f"""[study]
name = "bench-random"
base = "mesh-4x4"
seed = 1
{MODELS}

[parameters]
rows = [1, 2, 3, 4]
cols = [2, 3, 4]
macs_per_cycle = [512, 1024, 2048]
sram_bytes = {{low = 262144, high = 4194304, log = true}}
nop_latency = {{low = 5.0, high = 40.0}}
device_dtype = ["int8", "fp16"]

{OBJECTIVES}
[search]
method = "random"
budget = {{points}}
"""


def _study(root: Path, name: str, text: str):
    path = root / f"{name}.toml"
    path.write_text(text)
    return load_study(path)


def run_studies(root: Path, workers: list[int], points: int, log) -> list[dict]:
    rows = []
    for count in workers:
        for name, text in (("grid", GRID), ("random", RANDOM.replace("{points}", str(points)))):
            study = _study(root, name, text)
            out = root / f"{name}-w{count}"
            started = time.perf_counter()
            connect(workers=count)
            ray_init = time.perf_counter() - started
            run = run_study(study, out, workers=count)
            wall = time.perf_counter() - started
            import ray

            ray.shutdown()
            ok = [r for r in run.rows if r["status"] == "ok"]
            full = [r["trial_s"] for r in ok if not r["cached"]]
            cached = [r["trial_s"] for r in ok if r["cached"]]
            row = {
                "study": name, "workers": count, "points": len(run.rows), "ok": len(ok),
                "plans_compiled": len(full), "wall_s": wall, "ray_init_s": ray_init,
                "points_per_min": 60 * len(run.rows) / wall,
                "median_full_trial_s": statistics.median(full) if full else "",
                "median_cached_trial_s": statistics.median(cached) if cached else "",
                "cached_speedup": (statistics.median(full) / statistics.median(cached)
                                   if full and cached else ""),
            }
            log(row)
            rows.append(row)
    return rows


def overhead(root: Path) -> dict:
    """Direct :func:`run_trial` calls against the engine on the same 12 points (1 worker)."""
    study = _study(root, "overhead", GRID.replace("rows = [2, 4]", "rows = [2]")
                   .replace("cols = [2, 4]", "cols = [2]")
                   .replace('network = ["analytical", "flow"]', 'network = ["flow"]'))
    points = grid_points(study)
    run_trial(study, points[0], tempfile.mkdtemp(dir=root))  # imports and first-call costs
    cache = tempfile.mkdtemp(dir=root)
    started = time.perf_counter()
    for point in points:
        run_trial(study, point, cache)
    direct = time.perf_counter() - started
    connect(workers=1)
    started = time.perf_counter()
    run = run_study(study, root / "overhead-engine", workers=1)
    engine = time.perf_counter() - started
    import ray

    ray.shutdown()
    in_trial = sum(r["trial_s"] for r in run.rows)
    return {"points": len(points), "direct_s": direct, "engine_s": engine,
            "engine_trial_time_s": in_trial,
            "overhead_pct": 100 * (engine - direct) / direct,
            "engine_vs_in_trial_pct": 100 * (engine - in_trial) / in_trial}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workers", type=int, nargs="+", default=[2, 1])
    parser.add_argument("--points", type=int, default=100, help="random search budget")
    parser.add_argument("--out", default=str(Path(__file__).parent / "results"))
    args = parser.parse_args()
    out = Path(args.out)
    root = Path(tempfile.mkdtemp(prefix="bench-explore-"))
    rows: list[dict] = []

    def log(row: dict) -> None:
        print(row, flush=True)

    over = overhead(root)
    log(over)
    for count in args.workers:
        rows += run_studies(root, [count], args.points, log)
        write(out, rows, over)
    write(out, rows, over)


def write(out: Path, rows: list[dict], over: dict) -> None:
    write_csv(str(out / "explore.csv"), rows)
    lines = [
        "# tvmc explore: studies on Ray", "",
        "ResNet-18 and BERT-tiny on `mesh-4x4` variants, `python -m "
        "tvm_chiplet.tools.bench.explore`: a grid study (half its points differ from another "
        "only in the network model and reuse its plan) and a random search, each on a fresh "
        "results directory, with 1 and 2 workers of a local Ray on this 2-core machine (shared "
        "with other jobs while it ran).", "",
        *markdown_table(rows), "",
        "Engine overhead: the same 12 points (both models, full compiles) run by `run_trial` "
        "directly in one process, then through `run_study` with 1 worker, Ray already started. "
        "`overhead_pct`: the engine's wall time against the direct calls' wall time. "
        "`engine_vs_in_trial_pct`: the engine's wall time against the sum of the trials' own "
        "times as the worker measured them (scheduling, the worker's start with its TVM "
        "import, and rewriting the results table after every trial).", "",
        *markdown_table([over]), "",
    ]
    (out / "explore.md").write_text("\n".join(lines))


if __name__ == "__main__":
    main()
