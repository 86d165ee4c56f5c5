"""Model loading: ONNX Clip comes in as Relax ops, so that passes can re-shape it."""

import numpy as np
import onnx
import onnxruntime as ort
import pytest
import tvm
from onnx import TensorProto, helper
from tvm.relax.frontend.onnx import from_onnx

from tvm_chiplet.tools.frontends import load_model


def clip_model(low: float, high: float) -> onnx.ModelProto:
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 5])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 5])
    bounds = [helper.make_tensor("low", TensorProto.FLOAT, [], [low]),
              helper.make_tensor("high", TensorProto.FLOAT, [], [high])]
    graph = helper.make_graph([helper.make_node("Clip", ["x", "low", "high"], ["y"])], "clip",
                              [x], [y], initializer=bounds)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])


@pytest.mark.parametrize("low, high", [(0.0, 6.0), (-1.0, float("nan"))])
def test_clip_imports_as_relax_ops_and_matches_onnxruntime(low, high):
    model = clip_model(low, high)
    mod = load_model(model)
    script = mod["main"].script()
    assert "call_tir" not in script and "R.maximum" in script and "R.minimum" in script
    x = np.linspace(-10, 10, 10, dtype="float32").reshape(2, 5)
    vm = tvm.relax.VirtualMachine(tvm.compile(mod, "llvm"), tvm.cpu())
    expected = ort.InferenceSession(model.SerializeToString()).run(None, {"x": x})[0]
    np.testing.assert_array_equal(vm["main"](tvm.runtime.tensor(x)).numpy(), expected)


def test_tvms_own_importer_is_left_as_it_was():
    load_model(clip_model(0.0, 6.0))
    assert "call_tir" in from_onnx(clip_model(0.0, 6.0))["main"].script()


@pytest.mark.filterwarnings("ignore:Input maybe has unknown rank")
def test_optional_input_gets_the_dtype_the_model_declares():
    element = helper.make_tensor_type_proto(TensorProto.FLOAT, [4])
    optional = helper.make_value_info("maybe", helper.make_optional_type_proto(element))
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [4])
    graph = helper.make_graph([helper.make_node("OptionalGetElement", ["maybe"], ["y"])],
                              "optional", [optional], [y])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    assert from_onnx(model)["main"].params[0].ty.dtype is None
    mod = load_model(model)
    assert str(mod["main"].params[0].ty.dtype) == "float32"
    x = np.arange(4, dtype="float32")
    vm = tvm.relax.VirtualMachine(tvm.compile(mod, "llvm"), tvm.cpu())
    np.testing.assert_array_equal(vm["main"](tvm.runtime.tensor(x)).numpy(), x)
