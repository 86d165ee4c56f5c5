"""Tests of the deterministic ONNX model generators in tvm_chiplet.tools.models."""

import numpy as np
import onnx
import onnxruntime as ort
import pytest
import tvm
import tvm.relax.frontend.onnx
from onnx import TensorProto, helper

from tvm_chiplet.tools.models import (
    IR_VERSION,
    MODELS,
    OPSET,
    bert,
    example_inputs,
    get_model,
    gpt2,
    mobilenet_v2,
    resnet18,
    resnet50,
    save_model,
    transformer_block,
)

SMALL_CONFIGS = {
    "small-cnn": {"batch": 2},
    "transformer-block": {"seq": 8, "hidden": 32, "heads": 4, "ffn": 64},
    "resnet18": {"image": 32, "width": 0.5, "num_classes": 10},
    "resnet50": {"image": 32, "width": 0.25, "num_classes": 10},
    "mobilenet-v2": {"image": 32, "width": 0.5, "num_classes": 10},
    "bert": {
        "batch": 2,
        "layers": 2,
        "hidden": 64,
        "heads": 4,
        "ffn": 128,
        "vocab": 100,
        "seq": 16,
    },
    "gpt2": {"layers": 2, "hidden": 64, "heads": 4, "vocab": 100, "seq": 16},
}


def _run_onnxruntime(model: onnx.ModelProto, inputs: dict[str, np.ndarray]) -> np.ndarray:
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return session.run(None, inputs)[0]


def _run_tvm(model: onnx.ModelProto, inputs: dict[str, np.ndarray]) -> np.ndarray:
    mod = tvm.relax.frontend.onnx.from_onnx(model)
    executable = tvm.compile(mod, "llvm")
    vm = tvm.relax.VirtualMachine(executable, tvm.cpu())
    return vm["main"](*[tvm.runtime.tensor(value) for value in inputs.values()]).numpy()


def test_registry_covers_every_architecture():
    assert sorted(MODELS) == sorted(SMALL_CONFIGS)


@pytest.mark.parametrize("name", sorted(SMALL_CONFIGS))
def test_tvm_matches_onnxruntime_with_non_degenerate_outputs(name):
    model = get_model(name, **SMALL_CONFIGS[name])
    onnx.checker.check_model(model, full_check=True)
    inputs = example_inputs(model)

    expected = _run_onnxruntime(model, inputs)
    actual = _run_tvm(model, inputs)

    assert actual.shape == expected.shape
    assert np.isfinite(expected).all()
    assert expected.std() > 0.05
    scale = np.abs(expected).max()
    np.testing.assert_allclose(actual, expected, rtol=0, atol=1e-4 * scale)


@pytest.mark.parametrize("name", sorted(SMALL_CONFIGS))
def test_model_is_well_formed(name):
    model = get_model(name, **SMALL_CONFIGS[name])
    graph = model.graph
    node_names = [node.name for node in graph.node]

    assert graph.name == name
    assert model.ir_version == IR_VERSION
    assert [(opset.domain, opset.version) for opset in model.opset_import] == [("", OPSET)]
    assert len(set(node_names)) == len(node_names)
    assert all(node_names)
    assert "Constant" not in {node.op_type for node in graph.node}
    assert {prop.key: prop.value for prop in model.metadata_props}["model_name"] == name


@pytest.mark.parametrize("name", sorted(SMALL_CONFIGS))
def test_same_arguments_give_identical_bytes(name):
    first = get_model(name, **SMALL_CONFIGS[name]).SerializeToString()
    second = get_model(name, **SMALL_CONFIGS[name]).SerializeToString()
    other_seed = get_model(name, **SMALL_CONFIGS[name], seed=1).SerializeToString()

    assert first == second
    assert first != other_seed


def test_unknown_name_raises_with_valid_names():
    with pytest.raises(ValueError, match=r"unknown model 'resnet-9'.*bert.*gpt2.*small-cnn"):
        get_model("resnet-9")


def test_full_size_cnns_have_the_torchvision_conv_counts():
    def count_convs(model: onnx.ModelProto) -> int:
        return sum(node.op_type == "Conv" for node in model.graph.node)

    assert count_convs(resnet50()) == 53
    assert count_convs(resnet18(num_classes=10)) == 20
    assert count_convs(mobilenet_v2(num_classes=10)) == 52


def test_resnet50_downsamples_at_the_first_block_of_each_stage():
    names = {node.name for node in resnet50(image=32, width=0.25).graph.node}
    downsampled = sorted(name.split(".")[0] for name in names if name.endswith("downsample.0"))

    assert downsampled == ["layer1", "layer2", "layer3", "layer4"]
    assert "layer1.0.downsample.0" in names
    assert "layer2.1.downsample.0" not in names


def test_mobilenet_v2_uses_depthwise_convs_and_relu6():
    model = mobilenet_v2(image=32, width=0.5, num_classes=10)
    depthwise = [
        node
        for node in model.graph.node
        if node.op_type == "Conv"
        and any(attr.name == "group" and attr.i > 1 for attr in node.attribute)
    ]

    assert len(depthwise) == 17
    assert sum(node.op_type == "Clip" for node in model.graph.node) == 35


def test_bert_base_has_about_110m_parameters():
    model = bert()
    parameters = sum(int(np.prod(tensor.dims)) for tensor in model.graph.initializer)

    assert 105e6 < parameters < 115e6
    assert sum(node.op_type == "LayerNormalization" for node in model.graph.node) == 25


@pytest.mark.parametrize(
    ("name", "kwargs"),
    [
        ("transformer-block", SMALL_CONFIGS["transformer-block"]),
        ("bert", {"layers": 12, "hidden": 64, "heads": 4, "ffn": 256, "vocab": 100, "seq": 64}),
        ("gpt2", {"layers": 12, "hidden": 64, "heads": 4, "vocab": 100, "seq": 64}),
    ],
)
def test_deep_transformer_outputs_still_vary_across_positions(name, kwargs):
    model = get_model(name, **kwargs)
    output = _run_onnxruntime(model, example_inputs(model))

    across_positions = output.std(axis=1).mean()
    assert across_positions > 0.5 * np.sqrt(np.mean(output**2))


def test_gpt2_is_causal():
    model = gpt2(**SMALL_CONFIGS["gpt2"])
    ids = example_inputs(model)["input_ids"]
    changed = ids.copy()
    changed[0, -1] = (changed[0, -1] + 1) % 100

    before = _run_onnxruntime(model, {"input_ids": ids})
    after = _run_onnxruntime(model, {"input_ids": changed})

    np.testing.assert_array_equal(before[:, :-1], after[:, :-1])
    assert not np.allclose(before[:, -1], after[:, -1])


def test_gpt2_lm_head_is_tied_to_the_token_embedding():
    model = gpt2(**SMALL_CONFIGS["gpt2"])
    transposes = [node for node in model.graph.node if node.name == "lm_head.transpose"]

    assert [node.input[0] for node in transposes] == ["wte.weight"]
    assert model.graph.output[0].name == "logits"


def test_example_inputs_draw_ids_within_the_vocab():
    model = bert(**SMALL_CONFIGS["bert"])
    inputs = example_inputs(model, seed=3)

    assert list(inputs) == ["input_ids"]
    ids = inputs["input_ids"]
    assert ids.dtype == np.int64 and ids.shape == (2, 16)
    assert ids.min() >= 0 and ids.max() < 100
    assert len(np.unique(ids)) > 1
    np.testing.assert_array_equal(ids, example_inputs(model, seed=3)["input_ids"])


def test_example_inputs_draw_standard_normal_floats():
    inputs = example_inputs(transformer_block(batch=2, seq=8, hidden=32, heads=4, ffn=64))

    assert inputs["x"].dtype == np.float32 and inputs["x"].shape == (2, 8, 32)
    assert 0.8 < inputs["x"].std() < 1.2


@pytest.mark.parametrize("elem_type, dtype", [
    (TensorProto.FLOAT16, np.float16), (TensorProto.DOUBLE, np.float64)])
def test_example_inputs_draw_floats_of_the_inputs_own_width(elem_type, dtype):
    graph = helper.make_graph(
        [helper.make_node("Relu", ["x"], ["y"], name="relu")], "half",
        [helper.make_tensor_value_info("x", elem_type, [2, 500])],
        [helper.make_tensor_value_info("y", elem_type, [2, 500])])
    x = example_inputs(helper.make_model(graph))["x"]
    assert x.dtype == dtype and x.shape == (2, 500) and 0.8 < x.std() < 1.2


def test_example_inputs_without_vocab_metadata_raise():
    model = bert(**SMALL_CONFIGS["bert"])
    del model.metadata_props[:]

    with pytest.raises(ValueError, match="vocab_size"):
        example_inputs(model)


def test_example_inputs_with_dynamic_dimension_raise():
    graph = helper.make_graph(
        [helper.make_node("Relu", ["x"], ["y"], name="relu")],
        "dynamic",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 4])],
    )

    with pytest.raises(ValueError, match="dynamic dimension 'batch'"):
        example_inputs(helper.make_model(graph))


@pytest.mark.parametrize(
    ("builder", "kwargs", "message"),
    [
        (transformer_block, {"hidden": 30, "heads": 4}, "divisible by heads"),
        (
            bert,
            {"seq": 600, "layers": 1, "hidden": 8, "heads": 2, "ffn": 8, "vocab": 10},
            "max_positions",
        ),
        (resnet18, {"width": 0.0}, "width must be positive"),
    ],
)
def test_invalid_arguments_raise(builder, kwargs, message):
    with pytest.raises(ValueError, match=message):
        builder(**kwargs)


def test_save_model_round_trips(tmp_path):
    model = get_model("small-cnn")
    path = save_model(model, tmp_path / "models" / "small-cnn.onnx")

    assert onnx.load(str(path)).SerializeToString() == model.SerializeToString()
