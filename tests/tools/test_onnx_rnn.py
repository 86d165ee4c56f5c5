"""ONNX LSTM, GRU and RNN, which TVM's importer lacks, unrolled into Relax ops: the ONNX
backend's own cases, padded sequences against onnxruntime, and placement like any other op."""

import re

import numpy as np
import onnx
import onnxruntime as ort
import pytest
import tvm
from onnx import TensorProto, helper
from onnx.backend.test.case.node import collect_testcases
from tvm import relax

import tvm_chiplet
from tvm_chiplet.tools.frontends import ModelLoadError, load_model

RECURRENT_CASES = sorted((case for case in collect_testcases()
                          if re.search(r"lstm|gru|rnn", case.name)), key=lambda c: c.name)


def _graph_input_names(model: onnx.ModelProto) -> list[str]:
    initialized = {init.name for init in model.graph.initializer}
    return [value.name for value in model.graph.input if value.name not in initialized]


def test_the_onnx_backend_has_recurrent_cases_of_every_kind():
    names = [case.name for case in RECURRENT_CASES]
    assert len(names) >= 15
    for part in ("lstm", "gru", "rnn", "bidirectional", "batchwise", "peepholes",
                 "seq_length"):
        assert any(part in name for name in names), part


@pytest.mark.parametrize("case", RECURRENT_CASES, ids=lambda case: case.name)
def test_onnx_backend_recurrent_case_matches_its_expected_outputs(case):
    (inputs, expected), = case.data_sets[:1]
    names = _graph_input_names(case.model)
    mod = load_model(case.model, {n: list(a.shape) for n, a in zip(names, inputs, strict=True)})
    vm = relax.VirtualMachine(tvm.compile(mod, "llvm"), tvm.cpu())
    result = vm["main"](*[tvm.runtime.tensor(a) for a in inputs])
    outputs = [result.numpy()] if hasattr(result, "numpy") else [t.numpy() for t in result]
    for got, want in zip(outputs, expected, strict=False):
        np.testing.assert_allclose(got, want, rtol=1e-3, atol=1e-5)


def lstm_model(seq=5, batch=3, size=4, hidden=6, direction="bidirectional", lengths=True,
               activations=None) -> onnx.ModelProto:
    """A bidirectional LSTM with random weights and biases; its sequence lengths an input."""
    rng = np.random.default_rng(0)
    dirs = 2 if direction == "bidirectional" else 1
    weights = {
        "W": rng.normal(size=(dirs, 4 * hidden, size)).astype("float32") * 0.5,
        "R": rng.normal(size=(dirs, 4 * hidden, hidden)).astype("float32") * 0.5,
        "B": rng.normal(size=(dirs, 8 * hidden)).astype("float32") * 0.1,
    }
    inputs = [helper.make_tensor_value_info("x", TensorProto.FLOAT, [seq, batch, size])]
    if lengths:
        inputs.append(helper.make_tensor_value_info("lens", TensorProto.INT32, [batch]))
    attributes = {"hidden_size": hidden, "direction": direction}
    if activations:
        attributes["activations"] = activations
    node = helper.make_node("LSTM", ["x", "W", "R", "B", "lens" if lengths else ""],
                            ["y", "y_h", "y_c"], **attributes)
    outputs = [helper.make_tensor_value_info(name, TensorProto.FLOAT, None)
               for name in ("y", "y_h", "y_c")]
    graph = helper.make_graph([node], "lstm", inputs, outputs,
                              [onnx.numpy_helper.from_array(v, k) for k, v in weights.items()])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 14)])


def test_padded_sequences_keep_their_state_and_output_zeros_like_onnxruntime():
    model = lstm_model()
    x = np.random.default_rng(1).normal(size=(5, 3, 4)).astype("float32")
    lens = np.array([5, 2, 3], dtype="int32")
    expected = ort.InferenceSession(model.SerializeToString()).run(None, {"x": x, "lens": lens})
    lib = tvm_chiplet.build(model, target="chiplet/cluster-4")
    outputs = lib.run({"x": x, "lens": lens}).outputs
    assert len(outputs) == 3
    for got, want in zip(outputs, expected, strict=True):
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)
    assert not expected[0][2:, :, 1].any()  # the reference pads with zeros: the case is real


def test_an_unrolled_lstm_is_placed_over_clusters_like_any_op():
    model = lstm_model(seq=6, lengths=False)
    lib = tvm_chiplet.build(model, target="chiplet/mesh-4x4", strategy="pipeline")
    assert len(lib.plan["clusters_used"]) > 1
    x = np.random.default_rng(2).normal(size=(6, 3, 4)).astype("float32")
    expected = ort.InferenceSession(model.SerializeToString()).run(None, {"x": x})
    for got, want in zip(lib.run({"x": x}).outputs, expected, strict=True):
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)


def test_an_unsupported_activation_is_named():
    model = lstm_model(lengths=False, direction="forward",
                       activations=["Sigmoid", "Mish", "Tanh"])
    with pytest.raises(ModelLoadError, match=r"ONNX LSTM: activation 'mish' is not supported"):
        load_model(model)
