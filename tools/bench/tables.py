"""CSV files and markdown tables of benchmark rows, as every benchmark writes them."""

from __future__ import annotations

import csv
from collections.abc import Sequence


def columns(rows: Sequence[dict]) -> list[str]:
    """Every key of ``rows``, in first-seen order."""
    return list(dict.fromkeys(key for row in rows for key in row))


def write_csv(path: str, rows: Sequence[dict], fields: Sequence[str] | None = None) -> None:
    """``rows`` as CSV with ``fields`` (default :func:`columns`); missing values empty, keys
    outside ``fields`` left out."""
    with open(path, "w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=list(fields or columns(rows)), restval="",
                                extrasaction="ignore")
        writer.writeheader()
        writer.writerows(rows)


def markdown_table(rows: Sequence[dict], fields: Sequence[str] | None = None) -> list[str]:
    """The lines of a markdown table of ``rows`` (floats to 4 significant digits)."""
    fields = list(fields or columns(rows))

    def cell(value) -> str:
        return f"{value:.4g}" if isinstance(value, float) else str(value)

    return ["| " + " | ".join(fields) + " |", "|" + "---|" * len(fields),
            *("| " + " | ".join(cell(row.get(f, "")) for f in fields) + " |" for row in rows)]
