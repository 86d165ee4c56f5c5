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
    assert notes["result"] in ("optimal", "time-limited", "heuristic")
    assert notes["solver"] == "highs" and notes["stage_model"] == "contiguous"
    assert 0 <= notes["gap"] <= 1e-4
    assert notes["lower_bound"] <= notes["objective"] * (1 + 1e-9)
    assert notes["physical_bound"] > 0
    out = capsys.readouterr().out
    line = next(line for line in out.splitlines() if line.startswith("  ilp (highs"))
    assert re.search(r": (optimal|heuristic); best plan in the ILP's model [\d,]+ cycles per "
                     r"input, gap 0\.00% to its proven lower bound [\d,]+ \(contiguous "
                     r"stages\); physical lower bound [\d,]+", line), line
