"""The strategies benchmark's planner set and models."""

import csv

import numpy as np
import onnx
import onnxruntime as ort
import pytest

from tvm_chiplet.passes.planners import AutoPlanner
from tvm_chiplet.tools import models
from tvm_chiplet.tools.bench.heldout_models import main as export
from tvm_chiplet.tools.bench.strategies import main, make_planners


def test_auto_default_is_auto_as_tvmc_compile_plans_it():
    planners = make_planners(["auto", "auto-default"], batches=8, ilp_time_limit=5.0)
    default = planners["auto-default"]
    assert isinstance(default, AutoPlanner) and default.batches == 8
    every = [p.name for p in default._planners()]
    assert every == [p.name for p in AutoPlanner(batches=8)._planners()]
    # The benchmark's own auto is a smaller set.
    assert set(every) > {p.name for p in planners["auto"]._planners()}


def test_an_onnx_file_is_benchmarked_under_its_stem(tmp_path):
    # A model that is not bundled (here the bundled small CNN, saved as a user's file) runs
    # through the same cases; data-parallel, which rebuilds a bundled model with a larger
    # batch, is skipped for it, and a missing file is named.
    path = tmp_path / "my-cnn.onnx"
    onnx.save(models.get_model("small-cnn"), path)
    out = tmp_path / "out"
    assert main(["--models", str(path), "--presets", "cluster-4", "--device-dtypes", "int8",
                 "--strategies", "single", "data-parallel", "--batches", "2",
                 "--out", str(out)]) == 0
    with open(out / "strategies.csv") as handle:
        rows = list(csv.DictReader(handle))
    assert [(row["model"], row["strategy"]) for row in rows] == [("my-cnn", "single")]
    assert float(rows[0]["latency_vs_bound"]) >= 1.0
    with pytest.raises(SystemExit, match="no ONNX file"):
        main(["--models", str(tmp_path / "missing.onnx"), "--out", str(out)])


def test_heldout_models_export_onnx_that_onnxruntime_runs(tmp_path):
    # The held-out models are PyTorch modules exported as a user would: a U-Net (transposed
    # convs, skip concats) written to an ONNX file that runs, with no batch norm left in it.
    assert export(["--models", "unet", "--out", str(tmp_path)]) == 0
    model = onnx.load(tmp_path / "unet.onnx")
    ops = {node.op_type for node in model.graph.node}
    assert {"ConvTranspose", "Concat"} <= ops and "BatchNormalization" not in ops
    inputs = models.example_inputs(model)
    (out,) = ort.InferenceSession(model.SerializeToString()).run(None, inputs)
    assert out.shape == (1, 2, 128, 128)


def test_heldout_encoders_are_exported_sequence_first(tmp_path):
    # torch's nn.TransformerEncoder runs sequence first: at batch 1 its projections multiply
    # one-row matrices, which PlanSplitPlacement plans flattened and as given.
    assert export(["--models", "encoder-64", "--out", str(tmp_path)]) == 0
    model = onnx.load(tmp_path / "encoder-64.onnx")
    dims = [d.dim_value for d in model.graph.input[0].type.tensor_type.shape.dim]
    assert dims == [16, 1, 64]
    inputs = models.example_inputs(model)
    (out,) = ort.InferenceSession(model.SerializeToString()).run(None, inputs)
    assert out.shape == (16, 1, 64) and np.isfinite(out).all()
