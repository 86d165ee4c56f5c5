"""A study's results: the CSV table, Pareto fronts as PNG plots, and the best point per
objective."""

from __future__ import annotations

import csv
import itertools
import json
import math
from pathlib import Path

from tvm_chiplet.runtime.files import atomic_write
from tvm_chiplet.tools.explore.study import OBJECTIVES, Study

RESULTS = "results.csv"
_LEADING = ("point_id", "status", "model", "strategy", "batch")
_TRAILING = ("error",)


def _columns(rows: list[dict], study: Study | None) -> list[str]:
    seen = dict.fromkeys(_LEADING)
    if study is not None:
        seen.update(dict.fromkeys(study.space))
        seen.update(dict.fromkeys(OBJECTIVES[name][0] for name in study.objectives))
    for row in rows:
        seen.update(dict.fromkeys(k for k in row if k not in _TRAILING))
    return [*seen, *_TRAILING]


def write_results(out: Path, rows: list[dict], study: Study | None = None) -> None:
    """Write ``out/results.csv`` atomically: one row per point, every parameter, objective and
    plan summary column (empty where a failed trial has none)."""
    columns = _columns(rows, study)

    def write(tmp: str) -> None:
        with open(tmp, "w", newline="") as handle:
            writer = csv.DictWriter(handle, fieldnames=columns, restval="")
            writer.writeheader()
            writer.writerows(rows)

    atomic_write(Path(out) / RESULTS, write)


def _parse(value: str):
    for kind in (int, float):
        try:
            return kind(value)
        except ValueError:
            pass
    return {"True": True, "False": False}.get(value, value)


def read_results(out: str | Path) -> list[dict]:
    """The rows of ``out/results.csv``, numbers parsed back; raise if it is missing."""
    path = Path(out) / RESULTS
    if not path.is_file():
        raise FileNotFoundError(f"no study results at {path}; run tvmc explore STUDY --out "
                                f"{out} first")
    with open(path, newline="") as handle:
        return [{k: _parse(v) for k, v in row.items()} for row in csv.DictReader(handle)]


def _study_meta(out: Path) -> dict:
    path = out / "study.json"
    if not path.is_file():
        raise FileNotFoundError(f"{out} holds no study.json: not a tvmc explore results "
                                "directory")
    return json.loads(path.read_text())


def _ok(rows: list[dict], columns: list[str]) -> list[dict]:
    return [r for r in rows if r["status"] == "ok"
            and all(isinstance(r.get(c), int | float) and math.isfinite(r[c]) for c in columns)]


def best_points(out: str | Path, model: str | None = None) -> dict[str, dict]:
    """The best recorded point for each objective of the study in ``out`` (of ``model``'s
    points only, if given)."""
    out = Path(out)
    meta, rows = _study_meta(out), read_results(out)
    if model is not None:
        rows = [r for r in rows if str(r["model"]) == model]
    best = {}
    for name in meta["objectives"]:
        column, mode = OBJECTIVES[name]
        candidates = _ok(rows, [column])
        if candidates:
            pick = min if mode == "min" else max
            best[name] = pick(candidates, key=lambda r, c=column: r[c])
    return best


def pareto_front(rows: list[dict], a: str, b: str) -> list[dict]:
    """The rows no other row beats in both objectives ``a`` and ``b``, sorted by ``a``."""
    sign = {name: 1.0 if OBJECTIVES[name][1] == "min" else -1.0 for name in (a, b)}
    ca, cb = OBJECTIVES[a][0], OBJECTIVES[b][0]
    ordered = sorted(rows, key=lambda r: (sign[a] * r[ca], sign[b] * r[cb]))
    front, best_b = [], math.inf
    for row in ordered:
        if sign[b] * row[cb] < best_b:
            front.append(row)
            best_b = sign[b] * row[cb]
    return front


def plot_pareto(out: str | Path) -> list[Path]:
    """One PNG per pair of objectives under ``out``: every successful point, each model's
    Pareto front joined."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    out = Path(out)
    meta, rows = _study_meta(out), read_results(out)
    written = []
    for a, b in itertools.combinations(meta["objectives"], 2):
        ca, cb = OBJECTIVES[a][0], OBJECTIVES[b][0]
        points = _ok(rows, [ca, cb])
        if not points:
            continue
        fig, ax = plt.subplots(figsize=(5.5, 4.0))
        for model in sorted({str(p["model"]) for p in points}):
            mine = [p for p in points if str(p["model"]) == model]
            dots = ax.scatter([p[ca] for p in mine], [p[cb] for p in mine], s=14, alpha=0.5,
                              label=model)
            front = pareto_front(mine, a, b)
            ax.plot([p[ca] for p in front], [p[cb] for p in front], "-o", ms=4, lw=1,
                    color=dots.get_facecolor()[0][:3], label=f"{model}: Pareto front")
        for column, scale in ((ca, ax.set_xscale), (cb, ax.set_yscale)):
            values = [p[column] for p in points]
            if min(values) > 0 and max(values) > 20 * min(values):
                scale("log")  # models of very different sizes share the plot
        ax.set_xlabel(f"{ca} ({OBJECTIVES[a][1]})")
        ax.set_ylabel(f"{cb} ({OBJECTIVES[b][1]})")
        ax.set_title(f"{meta['name']}: {a} vs {b}")
        ax.legend(fontsize=7)
        fig.tight_layout()
        path = out / f"pareto_{a}_{b}.png"
        atomic_write(path, lambda tmp, fig=fig: fig.savefig(tmp, dpi=110, format="png"))
        plt.close(fig)
        written.append(path)
    return written


def format_report(out: str | Path) -> str:
    """The best point for each objective, with its parameters, as text."""
    out = Path(out)
    meta, rows = _study_meta(out), read_results(out)
    statuses: dict[str, int] = {}
    for row in rows:
        statuses[row["status"]] = statuses.get(row["status"], 0) + 1
    lines = [f"study {meta['name']} ({meta['method']}): {len(rows)} points, "
             + ", ".join(f"{n} {s}" for s, n in sorted(statuses.items()))]
    axes = ["model", "strategy", "batch", *meta["parameters"]]
    models = sorted({str(r["model"]) for r in rows})
    for model in models if len(models) > 1 else [None]:
        best = best_points(out, model)
        of = f" for {model}" if model else ""
        for name, row in best.items():
            column, mode = OBJECTIVES[name]
            setting = ", ".join(f"{k}={row[k]}" for k in axes)
            lines.append(f"best {name} ({mode} {column}){of}: {row[column]:.6g}  [{setting}]  "
                         f"point {row['point_id']}")
        missing = [n for n in meta["objectives"] if n not in best]
        if missing:
            lines.append(f"no successful point{of} for {', '.join(missing)}")
    return "\n".join(lines)
