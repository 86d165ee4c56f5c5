"""Model loading: ONNX Clip and Pad come in as Relax ops, so that passes can re-shape them; shape
subgraphs are folded for static input shapes; any input name can be given a shape."""

import numpy as np
import onnx
import onnxruntime as ort
import pytest
import tvm
from onnx import TensorProto, helper
from tvm.relax.frontend.onnx import from_onnx

import tvm_chiplet
from tvm_chiplet.tools.frontends import ModelLoadError, load_model, parse_input_shapes
from tvm_chiplet.tools.tvmc import main


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


def pad_model(mode: str, opset: int = 17) -> onnx.ModelProto:
    """Pad of [2, 3, 8, 8] by 1 and 2 rows, 2 and 1 columns (a reflecting pad's rows mirror
    within the image)."""
    pads = helper.make_tensor("pads", TensorProto.INT64, [8], [0, 0, 1, 2, 0, 0, 2, 1])
    value = helper.make_tensor("value", TensorProto.FLOAT, [], [0.5])
    graph = helper.make_graph(
        [helper.make_node("Pad", ["x", "pads", "value"], ["y"], mode=mode)], "pad",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3, 8, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3, 11, 11])], [pads, value])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


@pytest.mark.parametrize("mode, relax_op", [("constant", True), ("reflect", True),
                                            ("edge", False)])
def test_pad_imports_as_a_relax_op_where_tvm_computes_it_right_and_matches_onnxruntime(
        mode, relax_op):
    """Constant and reflecting pads come in as ``R.nn.pad`` (which passes can re-shape and
    split); an edge pad keeps the importer's kernel, as TVM's Relax op computes it wrongly."""
    model = pad_model(mode)
    mod = load_model(model)
    assert ("R.nn.pad" in mod["main"].script()) == relax_op
    assert ("call_tir" in mod["main"].script()) != relax_op
    x = np.random.default_rng(0).normal(size=(2, 3, 8, 8)).astype("float32")
    vm = tvm.relax.VirtualMachine(tvm.compile(mod, "llvm"), tvm.cpu())
    expected = ort.InferenceSession(model.SerializeToString()).run(None, {"x": x})[0]
    np.testing.assert_allclose(vm["main"](tvm.runtime.tensor(x)).numpy(), expected, rtol=1e-6)


def shape_computing_model() -> onnx.ModelProto:
    """``y = x[:, :C/2] * (x + 1)[:, :C/2]`` with C and the ones computed from ``Shape(x)``, as
    exporters write it: TVM's importer alone leaves the width symbolic (data-dependent)."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 8])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, None)
    nodes = [
        helper.make_node("Shape", ["x"], ["s"]),
        helper.make_node("Gather", ["s", "one"], ["c"], axis=0),
        helper.make_node("Cast", ["c"], ["cf"], to=TensorProto.FLOAT),
        helper.make_node("Div", ["cf", "two"], ["h"]),
        helper.make_node("Cast", ["h"], ["hi"], to=TensorProto.INT64),
        helper.make_node("Range", ["zero", "hi", "one"], ["idx"]),
        helper.make_node("Gather", ["x", "idx"], ["g"], axis=1),
        helper.make_node("ConstantOfShape", ["s"], ["ones"],
                         value=helper.make_tensor("v", TensorProto.FLOAT, [1], [1.0])),
        helper.make_node("Add", ["x", "ones"], ["xa"]),
        helper.make_node("Gather", ["xa", "idx"], ["g2"], axis=1),
        helper.make_node("Mul", ["g", "g2"], ["y"]),
    ]
    constants = [helper.make_tensor("one", TensorProto.INT64, [], [1]),
                 helper.make_tensor("two", TensorProto.FLOAT, [], [2.0]),
                 helper.make_tensor("zero", TensorProto.INT64, [], [0])]
    graph = helper.make_graph(nodes, "shapes", [x], [y], initializer=constants)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def test_shape_subgraphs_fold_to_static_shapes_and_match_onnxruntime():
    model = shape_computing_model()
    raw = from_onnx(model, shape_dict={"x": [2, 8]})["main"].script()
    assert "range_len" in raw  # TVM alone leaves the width data-dependent
    notes = []
    mod = load_model(model, {"x": [2, 8]}, report=notes.append)
    assert str(mod["main"].ret_ty.shape) == "R.shape([2, 4])"
    assert notes[0].startswith("shape folding: 11 -> 4 nodes") and "Range x1" in notes[0]
    assert "ConstantOfShape x1" in notes[0]  # the ones: 16 elements, a constant
    assert "removed" in notes[0]
    lib = tvm_chiplet.build(model, target="chiplet/cluster-4", input_shapes={"x": [2, 8]})
    assert lib.plan["import_notes"] == notes
    x = np.arange(16, dtype="float32").reshape(2, 8)
    expected = ort.InferenceSession(model.SerializeToString()).run(None, {"x": x})[0]
    np.testing.assert_allclose(lib.run({"x": x}).outputs[0], expected, rtol=1e-6)


def reflect_pad_model(width: int) -> onnx.ModelProto:
    """``Pad(x, mode=reflect)`` with the pads built as torch.onnx builds them, from a
    ``ConstantOfShape`` of zeros, and ``x + zeros`` with a ``ConstantOfShape`` of ``x``'s
    (static) shape."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, width])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, None)
    zero = helper.make_tensor("zero", TensorProto.INT64, [1], [0])
    nodes = [
        helper.make_node("ConstantOfShape", ["three"], ["zeros"], value=zero),
        helper.make_node("Concat", ["zeros", "two"], ["pads"], axis=0),
        helper.make_node("Pad", ["x", "pads"], ["padded"], mode="reflect"),
        helper.make_node("ConstantOfShape", ["shape"], ["big"],
                         value=helper.make_tensor("v", TensorProto.FLOAT, [1], [0.5])),
        helper.make_node("Add", ["padded", "big"], ["y"]),
    ]
    constants = [helper.make_tensor("three", TensorProto.INT64, [1], [3]),
                 helper.make_tensor("two", TensorProto.INT64, [1], [2]),
                 helper.make_tensor("shape", TensorProto.INT64, [2], [4, width + 2])]
    graph = helper.make_graph(nodes, "pad", [x], [y], initializer=constants)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def test_a_small_constant_of_shape_folds_and_a_large_one_stays_an_op():
    width = 4096  # x + zeros: 4 x 4098 elements, above the folding limit
    model = reflect_pad_model(width)
    with pytest.raises(ValueError, match="cannot handle ShapeExpr inputs"):
        from_onnx(model, shape_dict={"x": [4, width]})
    notes = []
    mod = load_model(model, {"x": [4, width]}, report=notes.append)
    # The pads' zeros fold; the zeros of x's shape stay a ConstantOfShape (3 nodes left).
    assert notes == ["shape folding: 5 -> 3 nodes (removed Concat x1, ConstantOfShape x1)"]
    x = np.random.default_rng(0).standard_normal((4, width), dtype="float32")
    vm = tvm.relax.VirtualMachine(tvm.compile(mod, "llvm"), tvm.cpu())
    expected = ort.InferenceSession(model.SerializeToString()).run(None, {"x": x})[0]
    np.testing.assert_allclose(vm["main"](tvm.runtime.tensor(x)).numpy(), expected, rtol=1e-6)


def test_a_graph_the_optimizer_cannot_fold_is_imported_as_written(monkeypatch):
    import onnxscript.optimizer

    def fail(_model, **_options):
        raise RuntimeError("cannot fold this\nsecond line")

    monkeypatch.setattr(onnxscript.optimizer, "fold_constants", fail)
    notes = []
    mod = load_model(clip_model(0.0, 6.0), report=notes.append)
    assert notes == ["shape folding failed (cannot fold this); importing the graph as written"]
    assert "R.maximum" in mod["main"].script()


def trilu_with_computed_k_model() -> onnx.ModelProto:
    """``Trilu(x, k)`` with ``k`` an input: TVM's converter builds a mask from ``x``'s dims,
    which fails on a static 0-size dim but works on a symbolic one."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, "rows", 4])
    k = helper.make_tensor_value_info("k", TensorProto.INT64, [])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, "rows", 4])
    graph = helper.make_graph([helper.make_node("Trilu", ["x", "k"], ["y"], upper=0)],
                              "trilu", [x, k], [y])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 14)])


def test_a_graph_that_imports_only_with_symbolic_dims_is_specialised_after_import():
    model = trilu_with_computed_k_model()
    shapes = {"x": [2, 0, 4], "k": []}
    with pytest.raises(tvm.error.InternalError, match="type is not populated"):
        from_onnx(model, shape_dict=shapes)
    notes = []
    lib = tvm_chiplet.build(model, target="chiplet/cluster-4", input_shapes=shapes,
                            progress=notes.append)
    assert lib.plan["import_notes"][-1].startswith(
        "the graph did not import with static input shapes (Check failed: ")
    assert [spec.shape for spec in lib.input_specs] == [(2, 0, 4), ()]
    inputs = {"x": np.zeros((2, 0, 4), "float32"), "k": np.array(1, "int64")}
    expected = ort.InferenceSession(model.SerializeToString()).run(None, inputs)[0]
    output = lib.run(inputs).outputs[0]
    assert output.shape == expected.shape == (2, 0, 4)


def test_shapes_that_fit_no_import_raise_the_first_error(monkeypatch):
    from tvm_chiplet.tools import frontends

    def unfit(*_args):
        raise ModelLoadError("specialising failed too")

    monkeypatch.setattr(frontends, "_specialise", unfit)
    model = trilu_with_computed_k_model()
    with pytest.raises(ModelLoadError, match="could not import the model: Check failed"):
        load_model(model, {"x": [2, 0, 4], "k": []})


def test_a_shape_of_another_rank_than_the_input_is_refused_before_import():
    # Imported, a 2-D shape for the 3-D input failed deep in a converter (a conv's "input
    # padding length is expected to be either 1 or 2" for a conv net's image).
    with pytest.raises(ModelLoadError, match=r"input 'x' of the model has 3 dims, but its "
                                             r"given shape \[2, 4\] has 2"):
        load_model(trilu_with_computed_k_model(), {"x": [2, 4], "k": []})


@pytest.mark.parametrize(("text", "expected"), [
    ("x:[1,3,224,224] mask:[1,128]", {"x": [1, 3, 224, 224], "mask": [1, 128]}),
    ("x:[1,3],y:[2]", {"x": [1, 3], "y": [2]}),
    ("serving_default_input_2:0:[1,224,224,3]", {"serving_default_input_2:0": [1, 224, 224, 3]}),
    ("\"my input\":[1,10] 'a,b':[3]", {"my input": [1, 10], "a,b": [3]}),
])
def test_input_shapes_take_any_onnx_input_name(text, expected):
    assert parse_input_shapes(text) == expected


@pytest.mark.parametrize(("text", "match"), [
    ("x:[1,a]", r"input shape for 'x' must be integers"),
    ("x[1]", r"cannot parse --input-shapes 'x\[1\]'.*quote names"),
    ("x:[0,2]", r"must be positive"),
])
def test_bad_input_shapes_say_what_to_write(text, match):
    with pytest.raises(ModelLoadError, match=match):
        parse_input_shapes(text)


def test_tvmc_print_inputs_lists_names_dtypes_and_open_dims(tmp_path, capsys):
    path = tmp_path / "shapes.onnx"
    onnx.save(shape_computing_model(), path)
    assert main(["compile", "--print-inputs", str(path)]) == 0
    assert capsys.readouterr().out == "x  float32  [N,8]  (give N with --input-shapes)\n"


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
    # Shape folding with the input's shape given leaves its optional type alone.
    assert str(load_model(model, {"maybe": [4]})["main"].params[0].ty.dtype) == "float32"
    x = np.arange(4, dtype="float32")
    vm = tvm.relax.VirtualMachine(tvm.compile(mod, "llvm"), tvm.cpu())
    np.testing.assert_array_equal(vm["main"](tvm.runtime.tensor(x)).numpy(), x)


def test_inputs_keep_their_onnx_names_when_tvm_renames_them():
    model = shape_computing_model()
    for node in model.graph.node:
        node.input[:] = ["serving_default_x:0" if name == "x" else name for name in node.input]
    model.graph.input[0].name = "serving_default_x:0"
    with pytest.raises(ModelLoadError, match=r'symbolic dimension N; give its shape with '
                                             r'--input-shapes "serving_default_x:0:\[\.\.\.\]"'):
        tvm_chiplet.build(model, target="chiplet/cluster-4")
    lib = tvm_chiplet.build(model, target="chiplet/cluster-4",
                            input_shapes=parse_input_shapes("serving_default_x:0:[2,8]"))
    assert [spec.name for spec in lib.input_specs] == ["serving_default_x:0"]
    x = {"serving_default_x:0": np.arange(16, dtype="float32").reshape(2, 8)}
    expected = ort.InferenceSession(model.SerializeToString()).run(None, x)[0]
    np.testing.assert_allclose(lib.run(x).outputs[0], expected, rtol=1e-6)


def test_einsum_imports_as_a_relax_op_and_matches_onnxruntime():
    """Einsum comes in as ``R.einsum`` (which EinsumAsMatmul rewrites), not as a kernel."""
    graph = helper.make_graph(
        [helper.make_node("Einsum", ["a", "b"], ["y"], equation="bij,bjk->bik")], "einsum",
        [helper.make_tensor_value_info("a", TensorProto.FLOAT, [2, 3, 4]),
         helper.make_tensor_value_info("b", TensorProto.FLOAT, [2, 4, 5])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3, 5])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    mod = load_model(model)
    assert "R.einsum" in mod["main"].script() and "call_tir" not in mod["main"].script()
    rng = np.random.default_rng(0)
    feeds = {"a": rng.normal(size=(2, 3, 4)).astype("float32"),
             "b": rng.normal(size=(2, 4, 5)).astype("float32")}
    vm = tvm.relax.VirtualMachine(tvm.compile(mod, "llvm"), tvm.cpu())
    expected = ort.InferenceSession(model.SerializeToString()).run(None, feeds)[0]
    got = vm["main"](*[tvm.runtime.tensor(feeds[n]) for n in ("a", "b")]).numpy()
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-6)
