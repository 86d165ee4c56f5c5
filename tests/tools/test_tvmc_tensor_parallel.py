"""Strategies that split ops (tensor-parallel, layer-sequential) end to end against onnxruntime."""

import json
import tarfile

import numpy as np
import onnx
import onnxruntime as ort
import pytest

from tvm_chiplet.tools import models
from tvm_chiplet.tools.tvmc import main


@pytest.mark.parametrize(
    "name, preset, strategy",
    [("small-cnn", "mesh-4x4", "tensor-parallel"), ("small-cnn", "cluster-4", "layer-sequential"),
     ("transformer-block", "cluster-4", "tensor-parallel"),
     ("transformer-block", "mesh-4x4", "layer-sequential")],
)
def test_split_strategies_match_onnxruntime(tmp_path, capsys, name, preset, strategy):
    model = models.get_model(name)
    path = tmp_path / "m.onnx"
    onnx.save(model, path)
    inputs = models.example_inputs(model, seed=3)
    np.savez(tmp_path / "in.npz", **inputs)
    assert main(["compile", str(path), "--target", f"chiplet/{preset}",
                 "--target-chiplet-strategy", strategy, "-o", str(tmp_path / "m.tar")]) == 0
    assert f"strategy {strategy}" in capsys.readouterr().out
    with tarfile.open(tmp_path / "m.tar") as tar:
        plan = json.load(tar.extractfile("plan.json"))
    assert plan["placement"]["notes"]["splits"] >= 1
    assert len(plan["clusters_used"]) >= 2
    assert main(["run", str(tmp_path / "m.tar"), "--inputs", str(tmp_path / "in.npz"),
                 "--outputs", str(tmp_path / "out.npz")]) == 0
    reference = ort.InferenceSession(model.SerializeToString()).run(None, inputs)[0]
    with np.load(tmp_path / "out.npz") as data:
        ours = data["output_0"]
    assert float(np.abs(ours - reference).max()) / float(np.abs(reference).max()) <= 1e-4
