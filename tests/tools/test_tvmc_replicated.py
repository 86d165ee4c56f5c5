"""Copies of a pipeline on tiles of the grid (input-level data parallelism), end to end."""

import json

from tests.tools.e2e import compile_run_and_compare
from tvm_chiplet.tools import models
from tvm_chiplet.tools.tvmc import main


def test_small_model_runs_as_copies_and_matches_onnxruntime(tmp_path, capsys):
    plan = compile_run_and_compare(tmp_path, models.get_model("small-cnn"), "chiplet/mesh-4x4",
                                   "pipeline")
    copies = plan["copies"]
    assert copies > 1
    assert f"runs as {copies} copies" in capsys.readouterr().out
    per_copy = [t for t in plan["tasks"] if t["copy"] == 0]
    assert len(plan["tasks"]) == copies * len(per_copy)
    clusters = [{t["cluster"] for t in plan["tasks"] if t["copy"] == r} for r in range(copies)]
    assert sum(len(c) for c in clusters) == len(set().union(*clusters))  # copies are disjoint
    assert plan["estimate"][1]["ratio_to_bound"] < 2.0


def test_run_reports_the_inputs_the_copies_simulated(tmp_path):
    plan = compile_run_and_compare(tmp_path, models.get_model("small-cnn"), "chiplet/mesh-4x4",
                                   "pipeline")
    profile = tmp_path / "profile.json"
    assert main(["run", str(tmp_path / "m.tar"), "--batches", "32", "--profile-json",
                 str(profile), "--trace", str(tmp_path / "trace.json")]) == 0
    report = json.loads(profile.read_text())
    assert report["copies"] == plan["copies"]
    assert report["inputs"] >= 32 and report["inputs"] % plan["copies"] == 0
    assert len(report["clusters"]) == len(plan["clusters_used"])
    trace = json.loads((tmp_path / "trace.json").read_text())
    tracks = {e["tid"] for e in trace["traceEvents"] if e.get("cat") == "compute"}
    assert tracks == set(plan["clusters_used"])
