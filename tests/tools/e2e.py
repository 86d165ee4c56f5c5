"""Shared end-to-end steps: compile with tvmc, run the artifact, compare with onnxruntime."""

import json
import tarfile

import numpy as np
import onnx
import onnxruntime as ort

from tvm_chiplet.tools import models
from tvm_chiplet.tools.tvmc import main


def compile_run_and_compare(tmp_path, model, target: str, strategy: str, seed: int = 3,
                            extra: tuple[str, ...] = ()) -> dict:
    """Compile ``model`` for ``target`` with ``strategy`` (and ``extra`` compile arguments), run
    it on seeded inputs, assert the outputs are within 1e-4 of onnxruntime (relative to the
    output scale); return plan.json."""
    path = tmp_path / "m.onnx"
    onnx.save(model, path)
    inputs = models.example_inputs(model, seed=seed)
    np.savez(tmp_path / "in.npz", **inputs)
    assert main(["compile", str(path), "--target", target, "--target-chiplet-strategy", strategy,
                 "-o", str(tmp_path / "m.tar"), *extra]) == 0
    assert main(["run", str(tmp_path / "m.tar"), "--inputs", str(tmp_path / "in.npz"),
                 "--outputs", str(tmp_path / "out.npz")]) == 0
    reference = ort.InferenceSession(model.SerializeToString()).run(None, inputs)[0]
    with np.load(tmp_path / "out.npz") as data:
        ours = data["output_0"]
    assert float(np.abs(ours - reference).max()) / float(np.abs(reference).max()) <= 1e-4
    with tarfile.open(tmp_path / "m.tar") as tar:
        return json.load(tar.extractfile("plan.json"))
