"""The data-parallel strategy end to end: batch split over clusters, numerics of onnxruntime."""

import numpy as np
import onnx
import onnxruntime as ort
import pytest

from tvm_chiplet.tools import models
from tvm_chiplet.tools.tvmc import main


@pytest.mark.parametrize(
    "name, batch, preset, replicas",
    [("small-cnn", 6, "cluster-4", 4), ("small-cnn", 6, "mesh-4x4", 6),
     ("transformer-block", 3, "cluster-4", 3)],
)
def test_data_parallel_matches_onnxruntime(tmp_path, capsys, name, batch, preset, replicas):
    model = models.get_model(name, batch=batch)
    path = tmp_path / "m.onnx"
    onnx.save(model, path)
    inputs = models.example_inputs(model, seed=2)
    np.savez(tmp_path / "in.npz", **inputs)
    assert main(["compile", str(path), "--target", f"chiplet/{preset}",
                 "--target-chiplet-strategy", "data-parallel", "-o", str(tmp_path / "m.tar")]) == 0
    summary = capsys.readouterr().out
    assert "strategy data-parallel" in summary
    assert f"on {replicas} clusters" in summary
    assert main(["run", str(tmp_path / "m.tar"), "--inputs", str(tmp_path / "in.npz"),
                 "--outputs", str(tmp_path / "out.npz")]) == 0
    reference = ort.InferenceSession(model.SerializeToString()).run(None, inputs)[0]
    with np.load(tmp_path / "out.npz") as data:
        ours = data["output_0"]
    assert float(np.abs(ours - reference).max()) / float(np.abs(reference).max()) <= 1e-4


def test_data_parallel_with_batch_one_says_why_and_what_works(tmp_path, capsys):
    path = tmp_path / "m.onnx"
    onnx.save(models.get_model("small-cnn"), path)
    code = main(["compile", str(path), "--target", "chiplet/cluster-4",
                 "--target-chiplet-strategy", "data-parallel", "-o", str(tmp_path / "m.tar")])
    err = capsys.readouterr().err
    assert code == 2
    assert "batch of at least" in err and "has batch 1" in err and "pipeline" in err
    assert not (tmp_path / "m.tar").exists()
