"""Quantized ONNX models, as onnxruntime's quantization tool writes them, through the chiplet path.

onnxruntime is the oracle. It runs integer kernels where TVM dequantizes and computes in fp32, so
outputs differ by a unit or two of the output's quantization step: the bound is 1% of the output
range, not the 1e-4 of float models.
"""

import numpy as np
import onnx
import onnxruntime as ort
import pytest
import tvm
from onnx import TensorProto, helper, numpy_helper
from onnxruntime.quantization import (
    CalibrationDataReader,
    QuantFormat,
    QuantType,
    quantize_dynamic,
    quantize_static,
)
from onnxruntime.quantization.shape_inference import quant_pre_process

import tvm_chiplet
from tvm_chiplet.passes import ReduceGraph
from tvm_chiplet.passes.analysis.extract_op_graph import extract_op_graph
from tvm_chiplet.tools import models
from tvm_chiplet.tools.frontends import ModelLoadError, load_model
from tvm_chiplet.tools.tvmc import main

TARGET = "chiplet/cluster-4"


class _RandomInputs(CalibrationDataReader):
    """A few seeded inputs of ``model``, as onnxruntime's calibration reads them."""

    def __init__(self, model: onnx.ModelProto, seeds=range(100, 104)) -> None:
        self.batches = iter([models.example_inputs(model, seed=seed) for seed in seeds])

    def get_next(self) -> dict[str, np.ndarray] | None:
        return next(self.batches, None)


def quantize(model: onnx.ModelProto, directory, quant_format: QuantFormat) -> str:
    """int8 weights and activations, calibrated on random inputs; returns the file's path.

    The model is pre-processed first as onnxruntime recommends (batch norms folded into convs).
    """
    fp32, prepared = directory / "fp32.onnx", directory / "prepared.onnx"
    onnx.save(model, fp32)
    quant_pre_process(str(fp32), str(prepared), skip_symbolic_shape=True)
    path = directory / f"{quant_format.name.lower()}.onnx"
    quantize_static(str(prepared), str(path), _RandomInputs(model), quant_format=quant_format,
                    activation_type=QuantType.QInt8, weight_type=QuantType.QInt8)
    return str(path)


def onnxruntime_outputs(path: str, inputs: dict[str, np.ndarray]) -> np.ndarray:
    return ort.InferenceSession(path, providers=["CPUExecutionProvider"]).run(None, inputs)[0]


def error_over_range(ours: np.ndarray, reference: np.ndarray) -> float:
    return float(np.abs(ours - reference).max()) / float(reference.max() - reference.min())


@pytest.fixture(scope="module")
def small_cnn():
    # batch 4: the outputs span most of the calibrated range, so one quantization step of the
    # output is ~0.4% of it (at batch 1, 10 logits span a third of it and one step is ~1.2%).
    return models.get_model("small-cnn", batch=4)


@pytest.fixture(scope="module")
def qdq_cnn(small_cnn, tmp_path_factory):
    return quantize(small_cnn, tmp_path_factory.mktemp("qdq"), QuantFormat.QDQ)


def total_weight_bytes(model: str | onnx.ModelProto) -> int:
    graph = extract_op_graph(ReduceGraph()(load_model(model)))
    return sum(op.weight_bytes for op in graph.ops)


def test_qdq_model_built_for_a_chiplet_target_matches_onnxruntime(small_cnn, qdq_cnn):
    inputs = models.example_inputs(small_cnn, seed=1)
    lib = tvm_chiplet.build(qdq_cnn, target=TARGET)
    assert len(lib.plan["clusters_used"]) > 1
    ours = lib.run(inputs).outputs[0]
    assert error_over_range(ours, onnxruntime_outputs(qdq_cnn, inputs)) <= 0.01


@pytest.mark.parametrize("strategy", ["data-parallel", "tensor-parallel"])
def test_qdq_model_runs_data_and_tensor_parallel_and_matches_onnxruntime(small_cnn, qdq_cnn,
                                                                        strategy):
    """Quantize and dequantize of activations (one scale each) are elementwise: data-parallel
    copies keep the batch through them (it refused the model, naming ``relax.quantize``), and
    tensor-parallel parts quantize their own share where it lies."""
    inputs = models.example_inputs(small_cnn, seed=3)
    lib = tvm_chiplet.build(qdq_cnn, target=TARGET, strategy=strategy)
    assert len(lib.plan["clusters_used"]) > 1
    ours = lib.run(inputs).outputs[0]
    assert error_over_range(ours, onnxruntime_outputs(qdq_cnn, inputs)) <= 0.01


def test_qdq_model_through_tvmc_compile_and_run_matches_onnxruntime(small_cnn, qdq_cnn, tmp_path):
    inputs = models.example_inputs(small_cnn, seed=2)
    np.savez(tmp_path / "in.npz", **inputs)
    assert main(["compile", qdq_cnn, "--target", TARGET, "-o", str(tmp_path / "m.tar")]) == 0
    assert main(["run", str(tmp_path / "m.tar"), "--inputs", str(tmp_path / "in.npz"),
                 "--outputs", str(tmp_path / "out.npz")]) == 0
    with np.load(tmp_path / "out.npz") as data:
        ours = data["output_0"]
    assert error_over_range(ours, onnxruntime_outputs(qdq_cnn, inputs)) <= 0.01


def int8_tensor_constants(func: tvm.relax.Function) -> list[tvm.ir.GenericConst]:
    found = []

    def visit(expr) -> None:
        if isinstance(expr, tvm.ir.GenericConst) and str(expr.ty.dtype) == "int8" \
                and expr.ty.ndim > 0:
            found.append(expr)

    tvm.relax.analysis.post_order_visit(func, visit)
    return found


def test_qdq_import_keeps_the_int8_weights_as_int8_constants(qdq_cnn):
    model = onnx.load(qdq_cnn)
    int8_weights = sorted(int(np.prod(t.dims)) for t in model.graph.initializer
                          if t.data_type == TensorProto.INT8 and t.dims)
    imported = int8_tensor_constants(load_model(qdq_cnn)["main"])
    assert len(int8_weights) == 5  # four convolutions and the classifier
    assert sorted(int(np.prod(c.value.shape)) for c in imported) == int8_weights


def test_qdq_weights_count_a_quarter_of_the_fp32_weights(small_cnn, qdq_cnn):
    ratio = total_weight_bytes(qdq_cnn) / total_weight_bytes(small_cnn)
    assert 0.2 <= ratio <= 0.3


def test_dynamically_quantized_matmuls_match_onnxruntime(tmp_path):
    model = models.get_model("transformer-block", seq=8, hidden=32, heads=4, ffn=64)
    onnx.save(model, tmp_path / "fp32.onnx")
    # uint8 weights: onnxruntime's uint8 x int8 kernels saturate on x86 CPUs without VNNI (its
    # documentation recommends reduce_range there); TVM's MatMulInteger is exact.
    quantize_dynamic(str(tmp_path / "fp32.onnx"), str(tmp_path / "dyn.onnx"),
                     weight_type=QuantType.QUInt8)
    path = str(tmp_path / "dyn.onnx")
    assert "MatMulInteger" in {node.op_type for node in onnx.load(path).graph.node}
    inputs = models.example_inputs(model, seed=1)
    ours = tvm_chiplet.build(path, target=TARGET).run(inputs).outputs[0]
    assert error_over_range(ours, onnxruntime_outputs(path, inputs)) <= 0.01


def _tensor(name: str, array: np.ndarray) -> onnx.TensorProto:
    return numpy_helper.from_array(array, name)


def qlinear_conv_model() -> onnx.ModelProto:
    """QuantizeLinear -> QLinearConv -> DequantizeLinear, as QuantFormat.QOperator writes."""
    rng = np.random.default_rng(0)
    scalars = {"x_scale": np.float32(0.05), "x_zp": np.int8(0), "w_scale": np.float32(0.01),
               "w_zp": np.int8(0), "y_scale": np.float32(0.1), "y_zp": np.int8(0)}
    initializers = [_tensor(name, np.array(value)) for name, value in scalars.items()]
    initializers.append(_tensor("w", rng.integers(-127, 128, (4, 3, 3, 3), dtype=np.int8)))
    nodes = [
        helper.make_node("QuantizeLinear", ["x", "x_scale", "x_zp"], ["xq"], name="x_quant"),
        helper.make_node("QLinearConv",
                         ["xq", "x_scale", "x_zp", "w", "w_scale", "w_zp", "y_scale", "y_zp"],
                         ["yq"], name="conv_quant", pads=[1] * 4),
        helper.make_node("DequantizeLinear", ["yq", "y_scale", "y_zp"], ["y"], name="y_dequant"),
    ]
    return _model(nodes, [1, 3, 8, 8], [1, 4, 8, 8], initializers)


def conv_integer_model() -> onnx.ModelProto:
    """DynamicQuantizeLinear -> ConvInteger, as quantize_dynamic writes for a Conv."""
    rng = np.random.default_rng(0)
    initializers = [_tensor("w", rng.integers(-127, 128, (4, 3, 3, 3), dtype=np.int8)),
                    _tensor("w_zp", np.array(0, np.int8))]
    nodes = [
        helper.make_node("DynamicQuantizeLinear", ["x"], ["xq", "x_scale", "x_zp"],
                         name="x_quant"),
        helper.make_node("ConvInteger", ["xq", "w", "x_zp", "w_zp"], ["acc"],
                         name="conv_quant", pads=[1] * 4),
        helper.make_node("Cast", ["acc"], ["y"], name="acc_cast", to=TensorProto.FLOAT),
    ]
    return _model(nodes, [1, 3, 8, 8], [1, 4, 8, 8], initializers)


def _model(nodes, in_shape, out_shape, initializers) -> onnx.ModelProto:
    graph = helper.make_graph(
        nodes, "quantized", [helper.make_tensor_value_info("x", TensorProto.FLOAT, in_shape)],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, out_shape)], initializers)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


@pytest.mark.parametrize(
    "make_model, op, node",
    [(qlinear_conv_model, "QLinearConv", "conv_quant"),
     (conv_integer_model, "ConvInteger", "conv_quant")],
)
def test_quantized_op_tvm_lacks_is_named_with_the_qdq_remedy(make_model, op, node):
    model = make_model()
    onnx.checker.check_model(model, full_check=True)
    with pytest.raises(ModelLoadError, match=f"quantized operator\\(s\\) {op} .*{node} \\({op}\\)"
                       ".*QuantFormat.QDQ"):
        load_model(model)


def test_quantized_and_other_unsupported_ops_are_named_apart():
    model = qlinear_conv_model()
    model.graph.node.append(helper.make_node("FancyUnknownOp", ["y"], ["z"], name="mystery"))
    model.graph.output[0].name = "z"
    with pytest.raises(ModelLoadError) as err:
        load_model(model)
    message = str(err.value)
    assert "operator(s) FancyUnknownOp that" in message and "mystery (FancyUnknownOp)" in message
    assert "quantized operator(s) QLinearConv that" in message and "QuantFormat.QDQ" in message


def test_tvmc_compile_of_a_qoperator_model_exits_with_the_op_named(small_cnn, tmp_path, capsys):
    path = quantize(small_cnn, tmp_path, QuantFormat.QOperator)
    code = main(["compile", path, "--target", TARGET, "-o", str(tmp_path / "m.tar")])
    err = capsys.readouterr().err
    assert code == 2 and "QLinearConv" in err and "QuantFormat.QDQ" in err
    assert "Traceback" not in err and not (tmp_path / "m.tar").exists()
