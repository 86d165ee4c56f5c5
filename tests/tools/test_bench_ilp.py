"""tools/bench/ilp.py: one row per case, written as CSV and markdown."""

import csv

import pytest

from tests.passes.test_ilp_planner import RESIDUAL, make_problem
from tvm_chiplet.tools.bench import ilp


@pytest.mark.parametrize("formulation", ["decomposition", "milp"])
def test_row_reports_the_proof_and_the_comparison(formulation):
    row = ilp.bench_case(make_problem(RESIDUAL, sram_bytes=8000), "highs", 10.0, formulation)
    assert row["formulation"] == formulation and row["status"] == "Optimal"
    assert row["gap"] == pytest.approx(0, abs=1e-4)
    assert row["ilp_lower_bound"] <= row["ilp_objective"] * (1 + 1e-9)
    assert row["ilp_objective"] <= row["dp_objective"]
    assert row["physical_bound"] > 0
    assert row["ilp_sim_vs_heuristic"] == pytest.approx(
        row["ilp_sim_cycles"] / row["heuristic_sim_cycles"])


def test_results_are_written_as_csv_and_markdown(tmp_path):
    row = ilp.bench_case(make_problem(RESIDUAL, sram_bytes=8000), "highs", 10.0, "decomposition")
    ilp.write_results([{"model": "residual", **row}], str(tmp_path), "smoke", 10.0)
    with open(tmp_path / "ilp-smoke.csv") as handle:
        rows = list(csv.DictReader(handle))
    assert rows[0]["model"] == "residual" and rows[0]["formulation"] == "decomposition"
    text = (tmp_path / "ilp-smoke.md").read_text()
    assert text.startswith("# ILP planner benchmark (smoke)") and "| residual |" in text
