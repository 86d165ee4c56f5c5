"""The ILP strategy through tvmc: plan.json and the compile summary report its proof."""

import json
import re
import tarfile

import onnx

from tvm_chiplet.tools import models
from tvm_chiplet.tools.tvmc import main


def test_compile_summary_reports_gap_bounds_and_result(tmp_path, capsys):
    path = tmp_path / "m.onnx"
    onnx.save(models.get_model("small-cnn"), path)
    assert main(["compile", str(path), "--target", "chiplet/mesh-4x4",
                 "--target-chiplet-strategy", "ilp", "-o", str(tmp_path / "m.tar")]) == 0
    with tarfile.open(tmp_path / "m.tar") as tar:
        notes = json.load(tar.extractfile("plan.json"))["placement"]["notes"]
    assert notes["result"] in ("optimal", "time-limited", "heuristic", "split-ilp")
    assert notes["solver"] == "highs" and notes["stage_model"] == "contiguous"
    assert 0 <= notes["gap"] <= 1e-4
    assert notes["lower_bound"] <= notes["objective"] * (1 + 1e-9)
    assert notes["physical_bound"] > 0
    out = capsys.readouterr().out
    line = next(line for line in out.splitlines() if line.startswith("  ilp (highs"))
    assert re.search(r": (optimal|heuristic|split-ilp); best plan in the ILP's model [\d,]+ "
                     r"cycles per "
                     r"input, gap 0\.00% to its proven lower bound [\d,]+ \(contiguous "
                     r"stages\); physical lower bound [\d,]+", line), line


def test_for_one_input_the_ilp_also_plans_each_ops_strategy_and_group(tmp_path, capsys):
    path = tmp_path / "m.onnx"
    onnx.save(models.get_model("small-cnn"), path)
    assert main(["compile", str(path), "--target", "chiplet/mesh-4x4",
                 "--target-chiplet-strategy", "ilp", "--objective", "latency",
                 "-o", str(tmp_path / "m.tar")]) == 0
    with tarfile.open(tmp_path / "m.tar") as tar:
        plan = json.load(tar.extractfile("plan.json"))
    notes = plan["placement"]["notes"]
    assert notes["objective_kind"] == "latency" and notes["split_plan_kept"]
    assert notes["split_plan"]["ilp"]["status"] == "Optimal"
    out = capsys.readouterr().out
    line = next(line for line in out.splitlines() if line.startswith("  ilp (highs"))
    assert re.search(r": split-ilp; .* kept the plan of its integer program over each op's "
                     r"partition strategy and parallel group \(simulated [\d,]+ cycles, the "
                     r"stage plan's [\d,]+\)", line), line
