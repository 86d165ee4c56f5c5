"""The trained-model bench on tiny synthetic ONNX models (no downloads): each path is measured
against onnxruntime, failures name their stage and cause, the report counts both paths."""

import csv

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from tvm_chiplet.tools.bench.trained import (
    Case,
    TrainedModel,
    defaulted_dims,
    measure,
    random_inputs,
    relative_error,
    rows_of,
    run_models,
    strategy_path,
    summary_lines,
    write,
)


def tiny_model(op: str = "Relu", domain: str = "") -> onnx.ModelProto:
    """``op(x @ w)`` with a symbolic batch dim, as exporters write it."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 8])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 4])
    w = onnx.numpy_helper.from_array(
        np.random.default_rng(1).standard_normal((8, 4)).astype("float32"), "w")
    graph = helper.make_graph([helper.make_node("MatMul", ["x", "w"], ["h"]),
                               helper.make_node(op, ["h"], ["y"], domain=domain)],
                              "tiny", [x], [y], initializer=[w])
    opsets = [helper.make_opsetid("", 17)] + ([helper.make_opsetid(domain, 1)] if domain else [])
    return helper.make_model(graph, opset_imports=opsets)


def test_both_paths_match_onnxruntime_on_a_tiny_model():
    case = Case("tiny", tiny_model(), {"x": [2, 8]})
    for path in ("plain", "chiplet"):
        result = measure(case, path, "chiplet/cluster-4")
        assert result["status"] == "match", result
        assert result["max_rel_err"] < 1e-6 and result["error"] == ""


def test_a_failure_names_its_stage_and_cause():
    unsupported = measure(Case("lpnorm", tiny_model("LpNormalization"), {"x": [2, 8]}),
                          "chiplet", "chiplet/cluster-4")
    assert unsupported["status"] == "import" and unsupported["max_rel_err"] is None
    assert unsupported["error"].startswith("ModelLoadError: the model uses operator(s) "
                                           "LpNormalization")
    plain = measure(Case("lpnorm", tiny_model("LpNormalization"), {"x": [2, 8]}), "plain")
    assert plain["status"] == "import" and plain["error"].startswith("OpNotImplemented: ")
    # onnxruntime has no such op either: the reference is what fails
    custom = measure(Case("custom", tiny_model("MyOp", "com.example"), {"x": [2, 8]}), "plain")
    assert custom["status"] == "reference"


def test_random_inputs_follow_shapes_values_and_dtypes():
    x = helper.make_tensor_value_info("bytes", TensorProto.INT32, ["n", 4])
    sr = helper.make_tensor_value_info("sr", TensorProto.INT64, [])
    y = helper.make_tensor_value_info("y", TensorProto.INT32, ["n", 4])
    graph = helper.make_graph([helper.make_node("Identity", ["bytes"], ["y"])], "ints", [x, sr],
                              [y])
    model = helper.make_model(graph)
    case = Case("ints", model, {"bytes": [3, 4], "sr": []}, values={"sr": 16000}, int_high=257)
    data, rate = random_inputs(case, model)
    assert data.shape == (3, 4) and data.dtype == np.int32 and 0 <= data.min() <= data.max() < 257
    assert rate.shape == () and int(rate) == 16000
    assert defaulted_dims(model, case.shapes) == "n=3"


def test_relative_error_is_relative_to_the_largest_reference_value():
    assert relative_error(np.array([1.0, 2.001]), np.array([1.0, 2.0])) == pytest.approx(5e-4)
    assert relative_error(np.zeros(2), np.zeros(2)) == 0.0
    assert relative_error(np.zeros(3), np.zeros(2)) == float("inf")


def test_run_models_in_workers_and_write_csv_and_markdown(tmp_path):
    path = tmp_path / "tiny.onnx"
    onnx.save(tiny_model(), path)
    model = TrainedModel("tiny", "test model", "tiny==1.0", "tiny.onnx", "MIT", {"x": [2, 8]})
    lines = []
    measured, completed = run_models([Case("tiny", str(path), model.shapes)], jobs=1,
                                     timeout=300.0, progress=lines.append)
    assert completed and [line.split(":")[0] for line in lines] == [
        "[trained] tiny (plain)", "[trained] tiny (chiplet)"]
    rows = rows_of([model], [str(path)], measured)
    assert [(r["plain_status"], r["chiplet_status"], r["defaulted"]) for r in rows] == [
        ("match", "match", "batch=2")]
    write(str(tmp_path), rows, summary_lines(rows, 1.0, "chiplet/cluster-4", 1e-4, 1, completed))
    with open(tmp_path / "trained.csv") as handle:
        assert [row["model"] for row in csv.DictReader(handle)] == ["tiny"]
    report = (tmp_path / "trained.md").read_text()
    assert "| matches onnxruntime | 1 | 1 |" in report


def test_each_strategy_is_measured_and_reported_with_its_failures(tmp_path):
    path = tmp_path / "tiny.onnx"
    onnx.save(tiny_model(), path)
    model = TrainedModel("tiny", "test model", "tiny==1.0", "tiny.onnx", "MIT", {"x": [2, 8]})
    strategies = ("single", "data-parallel")
    assert measure(Case("tiny", str(path), model.shapes), strategy_path("single"),
                   "chiplet/cluster-4")["status"] == "match"
    ok = {"status": "match", "max_rel_err": 1e-7, "scale": 1.0, "error": "", "notes": "",
          "seconds": 1.0}
    refused = {**ok, "status": "compile", "max_rel_err": None,
               "error": "PlanningError: data-parallel needs a batch"}
    measured = {(0, "plain"): ok, (0, "chiplet"): ok, (0, strategy_path("single")): ok,
                (0, strategy_path("data-parallel")): refused}
    rows = rows_of([model], [str(path)], measured, strategies)
    assert rows[0]["single_status"] == "match" and rows[0]["data-parallel_status"] == "compile"
    write(str(tmp_path), rows, summary_lines(rows, 1.0, "chiplet/cluster-4", 1e-4, 1, True,
                                             strategies), strategies)
    report = (tmp_path / "trained.md").read_text()
    assert "| single | 1 | 0 | 0 |" in report and "| data-parallel | 0 | 0 | 1 |" in report
    assert "| tiny | data-parallel | compile fails |  | PlanningError: data-parallel needs" \
        in report
    with open(tmp_path / "trained.csv") as handle:
        assert next(csv.DictReader(handle))["data-parallel_status"] == "compile"
