"""The host executor runs what plain TVM runs: 0-d inputs, tuple and shape results, models
without compute ops; outputs compared with onnxruntime."""

import json

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper

import tvm_chiplet
from tvm_chiplet.runtime.executor import InputError


def make_model(nodes, inputs, outputs, initializers=()) -> onnx.ModelProto:
    graph = helper.make_graph(nodes, "model", inputs, outputs, initializer=list(initializers))
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])


def tensor(name: str, dtype: int, shape: list) -> onnx.ValueInfoProto:
    return helper.make_tensor_value_info(name, dtype, shape)


def run_both(model: onnx.ModelProto, inputs: dict) -> tuple[list, list]:
    """Outputs of the chiplet path (built for cluster-4, run on the executor) and of
    onnxruntime."""
    module = tvm_chiplet.build(model, target="chiplet/cluster-4")
    expected = ort.InferenceSession(model.SerializeToString()).run(None, inputs)
    return module.run(inputs).outputs, expected


def test_scalar_inputs_reach_the_segment_as_0d_tensors():
    model = make_model(
        [helper.make_node("Clip", ["x", "low", "high"], ["y"])],
        [tensor("x", TensorProto.FLOAT, [3, 4]), tensor("low", TensorProto.FLOAT, []),
         tensor("high", TensorProto.FLOAT, [])],
        [tensor("y", TensorProto.FLOAT, [3, 4])],
    )
    inputs = {"x": np.linspace(-5, 5, 12, dtype="float32").reshape(3, 4),
              "low": np.array(-1.0, dtype="float32"), "high": np.array(2.0, dtype="float32")}
    outputs, expected = run_both(model, inputs)
    np.testing.assert_array_equal(outputs[0], expected[0])


def test_scalar_input_with_the_wrong_shape_is_refused_by_name():
    model = make_model(
        [helper.make_node("Add", ["x", "bias"], ["y"])],
        [tensor("x", TensorProto.FLOAT, [4]), tensor("bias", TensorProto.FLOAT, [])],
        [tensor("y", TensorProto.FLOAT, [4])],
    )
    module = tvm_chiplet.build(model, target="chiplet/cluster-4")
    with pytest.raises(InputError, match=r"input 'bias': expected shape \[\], given \[1\]"):
        module.run({"x": np.zeros(4, "float32"), "bias": np.zeros(1, "float32")})


def test_tuple_result_gives_one_numpy_array_per_output():
    model = make_model(
        [helper.make_node("Split", ["x"], ["a", "b", "c"], axis=0, num_outputs=3)],
        [tensor("x", TensorProto.FLOAT, [6, 2])],
        [tensor(name, TensorProto.FLOAT, [2, 2]) for name in "abc"],
    )
    inputs = {"x": np.arange(12, dtype="float32").reshape(6, 2)}
    outputs, expected = run_both(model, inputs)
    assert len(outputs) == 3 and all(isinstance(out, np.ndarray) for out in outputs)
    for out, ref in zip(outputs, expected, strict=True):
        np.testing.assert_array_equal(out, ref)


def test_model_without_compute_runs_with_zero_device_time():
    model = make_model(
        [helper.make_node("Shape", ["x"], ["shape"]), helper.make_node("Size", ["x"], ["size"]),
         helper.make_node("Identity", ["x"], ["same"])],
        [tensor("x", TensorProto.FLOAT, [2, 3, 4])],
        [tensor("shape", TensorProto.INT64, [3]), tensor("size", TensorProto.INT64, []),
         tensor("same", TensorProto.FLOAT, [2, 3, 4])],
    )
    inputs = {"x": np.ones((2, 3, 4), "float32")}
    module = tvm_chiplet.build(model, target="chiplet/cluster-4")
    assert module.plan["tasks"] == []
    assert [e["simulated_cycles"] for e in module.plan["estimate"]] == [0.0, 0.0]
    # No device time is no rate; plan.json stays strict JSON (no Infinity).
    assert [e["throughput_per_s"] for e in module.plan["estimate"]] == [None, None]
    json.loads(json.dumps(module.plan), parse_constant=lambda name: pytest.fail(name))
    outputs = module.run(inputs).outputs
    expected = ort.InferenceSession(model.SerializeToString()).run(None, inputs)
    assert [out.dtype for out in outputs] == [ref.dtype for ref in expected]
    for out, ref in zip(outputs, expected, strict=True):
        np.testing.assert_array_equal(out, ref)


def test_constant_result_next_to_a_computed_one():
    model = make_model(
        [helper.make_node("Relu", ["x"], ["y"]),
         helper.make_node("Constant", [], ["c"],
                          value=helper.make_tensor("v", TensorProto.FLOAT, [2], [1.5, -2.0]))],
        [tensor("x", TensorProto.FLOAT, [4])],
        [tensor("y", TensorProto.FLOAT, [4]), tensor("c", TensorProto.FLOAT, [2])],
    )
    inputs = {"x": np.array([-1.0, 2.0, -3.0, 4.0], "float32")}
    outputs, expected = run_both(model, inputs)
    for out, ref in zip(outputs, expected, strict=True):
        np.testing.assert_array_equal(out, ref)


def test_data_dependent_tail_runs_on_the_cluster_of_the_last_planned_op():
    weight = helper.make_tensor("w", TensorProto.FLOAT, [4, 4],
                                np.linspace(-1, 1, 16, dtype="float32").ravel())
    model = make_model(
        [helper.make_node("MatMul", ["x", "w"], ["h"]), helper.make_node("Relu", ["h"], ["r"]),
         helper.make_node("NonZero", ["r"], ["nz"]),
         helper.make_node("Transpose", ["nz"], ["y"], perm=[1, 0])],
        [tensor("x", TensorProto.FLOAT, [3, 4])],
        [tensor("y", TensorProto.INT64, ["n", 2])],
        [weight],
    )
    inputs = {"x": np.linspace(-2, 2, 12, dtype="float32").reshape(3, 4)}
    module = tvm_chiplet.build(model, target="chiplet/cluster-4")
    plan = module.plan
    planned = [task for task in plan["tasks"] if task["copy"] == 0]
    assert plan["data_dependent_ops"] and planned
    assert plan["segments"][-1]["cluster"] == planned[-1]["cluster"]
    expected = ort.InferenceSession(model.SerializeToString()).run(None, inputs)
    np.testing.assert_array_equal(module.run(inputs).outputs[0], expected[0])


def test_slice_by_input_values_matches_onnxruntime():
    model = make_model(
        [helper.make_node("Slice", ["x", "starts", "ends"], ["y"])],
        [tensor("x", TensorProto.FLOAT, [6, 5]), tensor("starts", TensorProto.INT64, [2]),
         tensor("ends", TensorProto.INT64, [2])],
        [tensor("y", TensorProto.FLOAT, [None, None])],
    )
    inputs = {"x": np.arange(30, dtype="float32").reshape(6, 5),
              "starts": np.array([1, 0], "int64"), "ends": np.array([4, 3], "int64")}
    outputs, expected = run_both(model, inputs)
    np.testing.assert_array_equal(outputs[0], expected[0])


@pytest.mark.parametrize("flag", [True, False])
def test_control_flow_after_planned_ops_matches_onnxruntime(flag):
    weight = helper.make_tensor("w", TensorProto.FLOAT, [4, 4],
                                np.linspace(-1, 1, 16, dtype="float32").ravel())

    def branch(op: str) -> onnx.GraphProto:
        return helper.make_graph([helper.make_node(op, ["h"], [f"{op}_out"])], op, [],
                                 [tensor(f"{op}_out", TensorProto.FLOAT, [3, 4])])

    model = make_model(
        [helper.make_node("MatMul", ["x", "w"], ["h"]),
         helper.make_node("If", ["flag"], ["y"], then_branch=branch("Relu"),
                          else_branch=branch("Neg"))],
        [tensor("x", TensorProto.FLOAT, [3, 4]), tensor("flag", TensorProto.BOOL, [])],
        [tensor("y", TensorProto.FLOAT, [3, 4])],
        [weight],
    )
    inputs = {"x": np.linspace(-2, 2, 12, dtype="float32").reshape(3, 4),
              "flag": np.array(flag)}
    module = tvm_chiplet.build(model, target="chiplet/cluster-4")
    assert module.plan["data_dependent_ops"]
    expected = ort.InferenceSession(model.SerializeToString()).run(None, inputs)
    np.testing.assert_allclose(module.run(inputs).outputs[0], expected[0], rtol=1e-6)
