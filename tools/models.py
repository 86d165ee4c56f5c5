"""Deterministic generators of standard ONNX architectures with seeded random weights.

Every generator builds its graph with ``onnx.helper`` and ``onnx.numpy_helper`` only and returns an
``onnx.ModelProto`` (opset 17, IR version 8) whose weights are initializers drawn from
``numpy.random.default_rng(seed)``. The same arguments give byte-identical
``model.SerializeToString()``. Weight scales follow He (convolutions) and LeCun (linear layers)
initialisation; batch-norm running statistics follow an analytic estimate of the activation scale
and residual branches are damped, so activations neither explode nor vanish even in ResNet-50
(logit std ~1.6) or 12-layer BERT / GPT-2 (whose outputs also keep varying across tokens).

Node names follow the torchvision / Hugging Face layout (``layer1.0.conv1``, ``layers.3.attn.q``)
and are unique; the output tensor of a node carries the node's name unless it is a graph output.
The model's ``graph.name`` is its registry name and ``metadata_props`` records ``model_name``,
``model_config`` (JSON of the arguments) and, for token models, ``vocab_size``.

Examples
--------
>>> from tvm_chiplet.tools.models import get_model, example_inputs
>>> model = get_model("resnet18", image=32, num_classes=10)
>>> inputs = example_inputs(model)
>>> inputs["x"].shape
(1, 3, 32, 32)
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import NamedTuple

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

__all__ = [
    "IR_VERSION",
    "MODELS",
    "OPSET",
    "bert",
    "example_inputs",
    "get_model",
    "gpt2",
    "mobilenet_v2",
    "resnet18",
    "resnet50",
    "save_model",
    "small_cnn",
    "transformer_block",
]

OPSET = 17
"""ONNX opset of every generated model."""

IR_VERSION = 8
"""ONNX IR version paired with opset 17; accepted by onnxruntime and the TVM frontend."""

_RESIDUAL_GAMMA = 0.5
"""Scale of the last batch-norm gamma in a residual branch; keeps 16 stacked blocks bounded."""

_QUERY_KEY_GAIN = 2.0
"""Gain of the query and key weights: attention scores get a standard deviation near 4, so heads
attend selectively instead of averaging every token."""

_ATTENTION_OUT_GAIN = 0.3
"""Gain of the attention output projection. Near-uniform attention adds the same vector to every
token; damping it prevents rank collapse, so BERT-base's last hidden state still varies across
tokens (std across positions ~0.55 of the output scale instead of ~0.03)."""


class _Moment(NamedTuple):
    """Expected second moment of an activation, split into a rectified and a symmetric part.

    Batch norms set their running variance from it, so each re-normalises its input as a trained
    network's would. Rectified (post-ReLU) parts survive a residual Relu whole; symmetric parts
    (conv and batch-norm outputs) are halved by it.
    """

    rectified: float
    symmetric: float

    @property
    def total(self) -> float:
        return self.rectified + self.symmetric


class _GraphBuilder:
    """Collect nodes and initializers of one graph, drawing weights from one seeded generator.

    Parameters
    ----------
    name : str
        Graph name (the registry name of the model).
    seed : int
        Seed of the ``numpy.random.Generator`` all weights are drawn from, in build order.
    """

    def __init__(self, name: str, seed: int) -> None:
        self.name = name
        self.rng = np.random.default_rng(seed)
        self.nodes: list[onnx.NodeProto] = []
        self.initializers: list[TensorProto] = []
        self.inputs: list[onnx.ValueInfoProto] = []
        self.outputs: list[onnx.ValueInfoProto] = []
        self._tensor_names: set[str] = set()
        self._node_names: set[str] = set()
        self._constants: dict[str, bytes] = {}
        self.moments: dict[str, _Moment] = {}

    def _claim_tensor(self, name: str) -> None:
        if name in self._tensor_names:
            raise RuntimeError(f"tensor name {name!r} is defined twice in graph {self.name!r}")
        self._tensor_names.add(name)

    def input(self, name: str, elem_type: int, shape: Sequence[int]) -> str:
        self._claim_tensor(name)
        self.inputs.append(helper.make_tensor_value_info(name, elem_type, list(shape)))
        return name

    def output(self, name: str, elem_type: int, shape: Sequence[int]) -> None:
        self.outputs.append(helper.make_tensor_value_info(name, elem_type, list(shape)))

    def param(self, name: str, array: np.ndarray) -> str:
        """Add ``array`` as an initializer called ``name`` and return the name."""
        self._claim_tensor(name)
        self.initializers.append(numpy_helper.from_array(np.ascontiguousarray(array), name))
        return name

    def constant(self, name: str, array: np.ndarray | float | Sequence[int]) -> str:
        """Add a shared constant initializer once; later calls with the same value reuse it."""
        if isinstance(array, float):
            value = np.asarray(array, dtype=np.float32)
        elif isinstance(array, np.ndarray):
            value = array
        else:
            value = np.asarray(array, dtype=np.int64)
        key = value.dtype.str.encode() + str(value.shape).encode() + value.tobytes()
        if name in self._constants:
            if self._constants[name] != key:
                raise RuntimeError(f"constant {name!r} is redefined with a different value")
            return name
        self._constants[name] = key
        return self.param(name, value)

    def normal(self, name: str, shape: Sequence[int], std: float, mean: float = 0.0) -> str:
        values = self.rng.standard_normal(tuple(shape), dtype=np.float32)
        values *= np.float32(std)
        if mean:
            values += np.float32(mean)
        return self.param(name, values)

    def uniform(self, name: str, shape: Sequence[int], low: float, high: float) -> str:
        values = self.rng.random(tuple(shape), dtype=np.float32)
        return self.param(name, values * np.float32(high - low) + np.float32(low))

    def node(
        self, op_type: str, name: str, inputs: Sequence[str], output: str | None = None, **attrs
    ) -> str:
        """Append a single-output node; its output tensor is ``output`` or, by default, ``name``."""
        if name in self._node_names:
            raise RuntimeError(f"node name {name!r} is used twice in graph {self.name!r}")
        self._node_names.add(name)
        output = output or name
        self._claim_tensor(output)
        self.nodes.append(helper.make_node(op_type, list(inputs), [output], name=name, **attrs))
        return output

    def moment(self, tensor: str) -> _Moment:
        """Tracked second moment of ``tensor``; graph inputs are standard normal."""
        return self.moments.get(tensor, _Moment(0.0, 1.0))

    def build(self, config: dict[str, object], vocab_size: int | None = None) -> onnx.ModelProto:
        graph = helper.make_graph(
            self.nodes, self.name, self.inputs, self.outputs, initializer=self.initializers
        )
        model = helper.make_model(
            graph,
            opset_imports=[helper.make_opsetid("", OPSET)],
            producer_name="tvm_chiplet.tools.models",
            ir_version=IR_VERSION,
        )
        metadata = {"model_name": self.name, "model_config": json.dumps(config, sort_keys=True)}
        if vocab_size is not None:
            metadata["vocab_size"] = str(vocab_size)
        helper.set_model_props(model, metadata)
        return model


def _check_positive(**values: float) -> None:
    for key, value in values.items():
        if value <= 0:
            raise ValueError(f"{key} must be positive, got {value}; pass a value > 0")


# --------------------------------------------------------------------------------------------
# Convolutional building blocks


def _conv(
    b: _GraphBuilder,
    x: str,
    name: str,
    cin: int,
    cout: int,
    kernel: int,
    stride: int = 1,
    group: int = 1,
    bias: bool = False,
) -> str:
    """Convolution with "same"-style padding ``kernel // 2`` and He-normal weights."""
    fan_in = cin // group * kernel * kernel
    inputs = [
        x,
        b.normal(f"{name}.weight", (cout, cin // group, kernel, kernel), math.sqrt(2 / fan_in)),
    ]
    if bias:
        inputs.append(b.normal(f"{name}.bias", (cout,), 0.05))
    pad = kernel // 2
    y = b.node(
        "Conv",
        name,
        inputs,
        kernel_shape=[kernel, kernel],
        strides=[stride, stride],
        pads=[pad, pad, pad, pad],
        group=group,
    )
    # He initialisation: Var(y) = fan_in * (2 / fan_in) * E[x^2].
    b.moments[y] = _Moment(0.0, 2 * b.moment(x).total + (0.05**2 if bias else 0.0))
    return y


def _batch_norm(b: _GraphBuilder, x: str, name: str, channels: int, gamma: float = 1.0) -> str:
    """Inference batch norm whose running variance is near the expected variance of ``x``.

    The output then has a second moment near ``gamma**2``: every batch norm re-normalises the
    activations as a trained network's would, instead of passing on the growth of residual sums.
    """
    expected = b.moment(x).total
    inputs = [
        x,
        b.uniform(f"{name}.weight", (channels,), 0.8 * gamma, 1.2 * gamma),
        b.normal(f"{name}.bias", (channels,), 0.05),
        b.normal(f"{name}.running_mean", (channels,), 0.05 * math.sqrt(expected)),
        b.uniform(f"{name}.running_var", (channels,), 0.8 * expected, 1.2 * expected),
    ]
    y = b.node("BatchNormalization", name, inputs, epsilon=1e-5)
    b.moments[y] = _Moment(0.0, gamma**2)
    return y


def _relu(b: _GraphBuilder, x: str, name: str) -> str:
    y = b.node("Relu", name, [x])
    b.moments[y] = _rectify(b.moment(x))
    return y


def _relu6(b: _GraphBuilder, x: str, name: str) -> str:
    y = b.node("Clip", name, [x, b.constant("const.zero", 0.0), b.constant("const.six", 6.0)])
    b.moments[y] = _rectify(b.moment(x))
    return y


def _rectify(moment: _Moment) -> _Moment:
    return _Moment(moment.rectified + moment.symmetric / 2, 0.0)


def _add(b: _GraphBuilder, x: str, y: str, name: str) -> str:
    out = b.node("Add", name, [x, y])
    b.moments[out] = _Moment(*(sum(parts) for parts in zip(b.moment(x), b.moment(y), strict=True)))
    return out


def _max_pool(b: _GraphBuilder, x: str, name: str, kernel: int, stride: int, pad: int) -> str:
    y = b.node(
        "MaxPool",
        name,
        [x],
        kernel_shape=[kernel, kernel],
        strides=[stride, stride],
        pads=[pad, pad, pad, pad],
    )
    b.moments[y] = _Moment(b.moment(x).total * _max_gain(kernel * kernel), 0.0)
    return y


def _max_gain(count: int) -> float:
    """``E[max(0, z_1..z_count)^2] / E[max(0, z)^2]`` for iid standard normal ``z``."""
    grid = np.linspace(0.0, 10.0, 2001)
    cdf = 0.5 * (1.0 + np.array([math.erf(v / math.sqrt(2.0)) for v in grid]))
    pdf = np.exp(-0.5 * grid**2) / math.sqrt(2 * math.pi)
    integrand = grid**2 * count * pdf * cdf ** (count - 1)
    return float(np.sum((integrand[1:] + integrand[:-1]) / 2) * (grid[1] - grid[0])) / 0.5


def _classifier(b: _GraphBuilder, x: str, features: int, num_classes: int, batch: int) -> None:
    """GlobalAveragePool, Flatten and a Gemm head writing the graph output ``logits``."""
    pooled = b.node("GlobalAveragePool", "avgpool", [x])
    flat = b.node("Flatten", "flatten", [pooled], axis=1)
    weight = b.normal("fc.weight", (num_classes, features), math.sqrt(1 / features))
    bias = b.normal("fc.bias", (num_classes,), 0.05)
    b.node("Gemm", "fc", [flat, weight, bias], output="logits", transB=1)
    b.output("logits", TensorProto.FLOAT, (batch, num_classes))


def _image_input(b: _GraphBuilder, batch: int, channels: int, image: int) -> str:
    return b.input("x", TensorProto.FLOAT, (batch, channels, image, image))


# --------------------------------------------------------------------------------------------
# CNN models


def small_cnn(
    batch: int = 1, image: int = 32, channels: int = 3, num_classes: int = 10, seed: int = 0
) -> onnx.ModelProto:
    """A small CNN: Conv+BN+Relu, MaxPool, a residual block, a strided conv and a Gemm head.

    Parameters
    ----------
    batch, image, channels : int
        Input ``x`` is float32 NCHW ``[batch, channels, image, image]``.
    num_classes : int
        Width of the output ``logits`` ``[batch, num_classes]``.
    seed : int
        Seed of the weights.

    Returns
    -------
    onnx.ModelProto
        The model, ``graph.name == "small-cnn"``.
    """
    _check_positive(batch=batch, image=image, channels=channels, num_classes=num_classes)
    b = _GraphBuilder("small-cnn", seed)
    x = _image_input(b, batch, channels, image)
    y = _relu(b, _batch_norm(b, _conv(b, x, "conv1", channels, 16, 3), "bn1", 16), "relu1")
    skip = _max_pool(b, y, "maxpool", kernel=2, stride=2, pad=0)
    y = _relu(b, _batch_norm(b, _conv(b, skip, "conv2", 16, 16, 3), "bn2", 16), "relu2")
    y = _conv(b, y, "conv3", 16, 16, 3, bias=True)
    y = _relu(b, _add(b, y, skip, "residual"), "relu3")
    y = _relu(b, _conv(b, y, "conv4", 16, 32, 3, stride=2, bias=True), "relu4")
    _classifier(b, y, 32, num_classes, batch)
    return b.build(
        {
            "batch": batch,
            "image": image,
            "channels": channels,
            "num_classes": num_classes,
            "seed": seed,
        }
    )


def _basic_block(b: _GraphBuilder, x: str, name: str, cin: int, planes: int, stride: int) -> str:
    y = _batch_norm(b, _conv(b, x, f"{name}.conv1", cin, planes, 3, stride), f"{name}.bn1", planes)
    y = _relu(b, y, f"{name}.relu1")
    y = _conv(b, y, f"{name}.conv2", planes, planes, 3)
    y = _batch_norm(b, y, f"{name}.bn2", planes, gamma=_RESIDUAL_GAMMA)
    return _residual(b, x, y, name, cin, planes, stride)


def _bottleneck(b: _GraphBuilder, x: str, name: str, cin: int, planes: int, stride: int) -> str:
    out = planes * 4
    y = _batch_norm(b, _conv(b, x, f"{name}.conv1", cin, planes, 1), f"{name}.bn1", planes)
    y = _relu(b, y, f"{name}.relu1")
    y = _conv(b, y, f"{name}.conv2", planes, planes, 3, stride)
    y = _relu(b, _batch_norm(b, y, f"{name}.bn2", planes), f"{name}.relu2")
    y = _conv(b, y, f"{name}.conv3", planes, out, 1)
    y = _batch_norm(b, y, f"{name}.bn3", out, gamma=_RESIDUAL_GAMMA)
    return _residual(b, x, y, name, cin, out, stride)


def _residual(
    b: _GraphBuilder, x: str, branch: str, name: str, cin: int, cout: int, stride: int
) -> str:
    """Add the identity (or a 1x1 conv + BN downsample when the shape changes), then Relu."""
    if stride != 1 or cin != cout:
        x = _conv(b, x, f"{name}.downsample.0", cin, cout, 1, stride)
        x = _batch_norm(b, x, f"{name}.downsample.1", cout)
    return _relu(b, _add(b, branch, x, f"{name}.add"), f"{name}.relu")


def _resnet(
    name: str,
    block: Callable[[_GraphBuilder, str, str, int, int, int], str],
    expansion: int,
    depths: tuple[int, int, int, int],
    batch: int,
    image: int,
    num_classes: int,
    width: float,
    seed: int,
) -> onnx.ModelProto:
    _check_positive(batch=batch, image=image, num_classes=num_classes, width=width)
    b = _GraphBuilder(name, seed)
    x = _image_input(b, batch, 3, image)
    stem = max(1, round(64 * width))
    y = _batch_norm(b, _conv(b, x, "conv1", 3, stem, 7, stride=2), "bn1", stem)
    y = _max_pool(b, _relu(b, y, "relu"), "maxpool", kernel=3, stride=2, pad=1)
    cin = stem
    for stage, depth in enumerate(depths):
        planes = max(1, round(64 * 2**stage * width))
        for index in range(depth):
            stride = 2 if stage > 0 and index == 0 else 1
            y = block(b, y, f"layer{stage + 1}.{index}", cin, planes, stride)
            cin = planes * expansion
    _classifier(b, y, cin, num_classes, batch)
    return b.build(
        {"batch": batch, "image": image, "num_classes": num_classes, "width": width, "seed": seed}
    )


def resnet18(
    batch: int = 1, image: int = 224, num_classes: int = 1000, width: float = 1.0, seed: int = 0
) -> onnx.ModelProto:
    """ResNet-18 in the torchvision layout (BasicBlock, depths 2-2-2-2).

    Parameters
    ----------
    batch, image : int
        Input ``x`` is float32 NCHW ``[batch, 3, image, image]``; any ``image >= 1`` works.
    num_classes : int
        Width of the output ``logits``.
    width : float
        Multiplier of the channel counts 64-128-256-512 (rounded, at least 1).
    seed : int
        Seed of the weights.

    Returns
    -------
    onnx.ModelProto
        The model (20 Conv nodes), ``graph.name == "resnet18"``.
    """
    return _resnet(
        "resnet18", _basic_block, 1, (2, 2, 2, 2), batch, image, num_classes, width, seed
    )


def resnet50(
    batch: int = 1, image: int = 224, num_classes: int = 1000, width: float = 1.0, seed: int = 0
) -> onnx.ModelProto:
    """ResNet-50 in the torchvision v1.5 layout (Bottleneck with stride on the 3x3, 3-4-6-3).

    Parameters
    ----------
    batch, image : int
        Input ``x`` is float32 NCHW ``[batch, 3, image, image]``.
    num_classes : int
        Width of the output ``logits``.
    width : float
        Multiplier of the bottleneck widths 64-128-256-512 (outputs are 4x these).
    seed : int
        Seed of the weights.

    Returns
    -------
    onnx.ModelProto
        The model (53 Conv nodes), ``graph.name == "resnet50"``.
    """
    return _resnet("resnet50", _bottleneck, 4, (3, 4, 6, 3), batch, image, num_classes, width, seed)


def _make_divisible(value: float, divisor: int = 8) -> int:
    """Round channels as torchvision's MobileNetV2 does (nearest multiple, at most 10% down)."""
    rounded = max(divisor, int(value + divisor / 2) // divisor * divisor)
    return rounded + divisor if rounded < 0.9 * value else rounded


_MOBILENET_V2_SETTINGS = (
    (1, 16, 1, 1),
    (6, 24, 2, 2),
    (6, 32, 3, 2),
    (6, 64, 4, 2),
    (6, 96, 3, 1),
    (6, 160, 3, 2),
    (6, 320, 1, 1),
)
"""(expansion t, output channels c, repeats n, first stride s) of each stage."""


def mobilenet_v2(
    batch: int = 1, image: int = 224, num_classes: int = 1000, width: float = 1.0, seed: int = 0
) -> onnx.ModelProto:
    """MobileNetV2 in the torchvision layout: inverted residuals, depthwise convs, ReLU6 as Clip.

    Parameters
    ----------
    batch, image : int
        Input ``x`` is float32 NCHW ``[batch, 3, image, image]``.
    num_classes : int
        Width of the output ``logits``.
    width : float
        Width multiplier; channel counts are rounded to multiples of 8 as in torchvision.
    seed : int
        Seed of the weights.

    Returns
    -------
    onnx.ModelProto
        The model (52 Conv nodes), ``graph.name == "mobilenet-v2"``.
    """
    _check_positive(batch=batch, image=image, num_classes=num_classes, width=width)
    b = _GraphBuilder("mobilenet-v2", seed)
    x = _image_input(b, batch, 3, image)
    cin = _make_divisible(32 * width)
    y = _batch_norm(b, _conv(b, x, "features.0.0", 3, cin, 3, stride=2), "features.0.1", cin)
    y = _relu6(b, y, "features.0.2")
    index = 1
    for expansion, channels, repeats, first_stride in _MOBILENET_V2_SETTINGS:
        cout = _make_divisible(channels * width)
        for repeat in range(repeats):
            stride = first_stride if repeat == 0 else 1
            y = _inverted_residual(b, y, f"features.{index}", cin, cout, stride, expansion)
            cin = cout
            index += 1
    last = _make_divisible(1280 * max(1.0, width))
    y = _batch_norm(
        b, _conv(b, y, f"features.{index}.0", cin, last, 1), f"features.{index}.1", last
    )
    y = _relu6(b, y, f"features.{index}.2")
    _classifier(b, y, last, num_classes, batch)
    return b.build(
        {"batch": batch, "image": image, "num_classes": num_classes, "width": width, "seed": seed}
    )


def _inverted_residual(
    b: _GraphBuilder, x: str, name: str, cin: int, cout: int, stride: int, expansion: int
) -> str:
    hidden = cin * expansion
    y = x
    layer = 0
    if expansion != 1:
        y = _conv(b, y, f"{name}.conv.{layer}.0", cin, hidden, 1)
        y = _relu6(b, _batch_norm(b, y, f"{name}.conv.{layer}.1", hidden), f"{name}.conv.{layer}.2")
        layer += 1
    y = _conv(b, y, f"{name}.conv.{layer}.0", hidden, hidden, 3, stride, group=hidden)
    y = _relu6(b, _batch_norm(b, y, f"{name}.conv.{layer}.1", hidden), f"{name}.conv.{layer}.2")
    y = _conv(b, y, f"{name}.conv.{layer + 1}", hidden, cout, 1)
    use_residual = stride == 1 and cin == cout
    gamma = _RESIDUAL_GAMMA if use_residual else 1.0
    y = _batch_norm(b, y, f"{name}.conv.{layer + 2}", cout, gamma=gamma)
    return _add(b, x, y, f"{name}.add") if use_residual else y


# --------------------------------------------------------------------------------------------
# Transformer building blocks


def _linear(
    b: _GraphBuilder, x: str, name: str, fan_in: int, fan_out: int, gain: float = 1.0
) -> str:
    """``x @ W + bias`` with LeCun-normal ``W`` of shape ``[fan_in, fan_out]`` times ``gain``."""
    weight = b.normal(f"{name}.weight", (fan_in, fan_out), gain * math.sqrt(1 / fan_in))
    bias = b.normal(f"{name}.bias", (fan_out,), 0.02)
    return b.node("Add", name, [b.node("MatMul", f"{name}.matmul", [x, weight]), bias])


def _layer_norm(b: _GraphBuilder, x: str, name: str, hidden: int, epsilon: float) -> str:
    scale = b.normal(f"{name}.weight", (hidden,), 0.05, mean=1.0)
    bias = b.normal(f"{name}.bias", (hidden,), 0.05)
    return b.node("LayerNormalization", name, [x, scale, bias], axis=-1, epsilon=epsilon)


def _gelu(b: _GraphBuilder, x: str, name: str) -> str:
    """Exact GELU in the Erf form ``x * 0.5 * (1 + erf(x / sqrt(2)))`` (opset 17 has no Gelu)."""
    y = b.node("Div", f"{name}.div", [x, b.constant("const.sqrt2", math.sqrt(2.0))])
    y = b.node("Erf", f"{name}.erf", [y])
    y = b.node("Add", f"{name}.add", [y, b.constant("const.one", 1.0)])
    y = b.node("Mul", f"{name}.mul", [x, y])
    return b.node("Mul", name, [y, b.constant("const.half", 0.5)])


def _attention(
    b: _GraphBuilder,
    x: str,
    name: str,
    shape: tuple[int, int, int],
    heads: int,
    mask: str | None,
) -> str:
    """Multi-head self-attention over ``x`` of shape ``(batch, seq, hidden)``."""
    batch, seq, hidden = shape
    head_dim = hidden // heads
    split = b.constant(
        f"const.shape.{batch}x{seq}x{heads}x{head_dim}", [batch, seq, heads, head_dim]
    )
    merge = b.constant(f"const.shape.{batch}x{seq}x{hidden}", [batch, seq, hidden])

    def project(role: str, perm: list[int], gain: float) -> str:
        y = _linear(b, x, f"{name}.{role}", hidden, hidden, gain)
        y = b.node("Reshape", f"{name}.{role}.split_heads", [y, split])
        return b.node("Transpose", f"{name}.{role}.transpose", [y], perm=perm)

    query = project("q", [0, 2, 1, 3], _QUERY_KEY_GAIN)
    key = project("k", [0, 2, 3, 1], _QUERY_KEY_GAIN)
    value = project("v", [0, 2, 1, 3], 1.0)
    scores = b.node("MatMul", f"{name}.scores", [query, key])
    scale = b.constant(f"const.attn_scale.{head_dim}", 1.0 / math.sqrt(head_dim))
    scores = b.node("Mul", f"{name}.scale", [scores, scale])
    if mask is not None:
        scores = b.node("Add", f"{name}.mask", [scores, mask])
    probs = b.node("Softmax", f"{name}.softmax", [scores], axis=-1)
    context = b.node("MatMul", f"{name}.context", [probs, value])
    context = b.node("Transpose", f"{name}.merge_transpose", [context], perm=[0, 2, 1, 3])
    context = b.node("Reshape", f"{name}.merge_heads", [context, merge])
    return _linear(b, context, f"{name}.out", hidden, hidden, _ATTENTION_OUT_GAIN)


def _encoder_layer(
    b: _GraphBuilder,
    x: str,
    name: str,
    shape: tuple[int, int, int],
    heads: int,
    ffn: int,
    epsilon: float,
    pre_ln: bool,
    mask: str | None = None,
) -> str:
    """One transformer layer: attention and a Gelu FFN, each with a residual and a LayerNorm.

    Post-LN (BERT): ``x = LN(x + Attn(x)); x = LN(x + FFN(x))``. Pre-LN (GPT-2):
    ``x = x + Attn(LN(x)); x = x + FFN(LN(x))``. ``mask`` is an additive attention mask.
    """
    hidden = shape[2]

    def ffn_block(y: str) -> str:
        y = _gelu(b, _linear(b, y, f"{name}.ffn.fc1", hidden, ffn), f"{name}.ffn.gelu")
        return _linear(b, y, f"{name}.ffn.fc2", ffn, hidden)

    if pre_ln:
        attn = _attention(
            b, _layer_norm(b, x, f"{name}.ln1", hidden, epsilon), f"{name}.attn", shape, heads, mask
        )
        x = b.node("Add", f"{name}.attn.residual", [x, attn])
        out = ffn_block(_layer_norm(b, x, f"{name}.ln2", hidden, epsilon))
        return b.node("Add", f"{name}.ffn.residual", [x, out])
    attn = _attention(b, x, f"{name}.attn", shape, heads, mask)
    x = _layer_norm(
        b, b.node("Add", f"{name}.attn.residual", [x, attn]), f"{name}.ln1", hidden, epsilon
    )
    out = ffn_block(x)
    return _layer_norm(
        b, b.node("Add", f"{name}.ffn.residual", [x, out]), f"{name}.ln2", hidden, epsilon
    )


def _check_transformer(hidden: int, heads: int, seq: int, max_positions: int | None) -> None:
    if hidden % heads:
        raise ValueError(
            f"hidden must be divisible by heads, got hidden={hidden}, heads={heads}; "
            f"choose heads among the divisors of {hidden}"
        )
    if max_positions is not None and seq > max_positions:
        raise ValueError(
            f"seq must be at most max_positions, got seq={seq} > max_positions={max_positions}; "
            "raise max_positions or shorten seq"
        )


def _rename_output(b: _GraphBuilder, tensor: str, output: str) -> None:
    """Give the graph output its public name by renaming the last node's output."""
    last = b.nodes[-1]
    if last.output[0] != tensor:
        raise RuntimeError(
            f"expected the last node to produce {tensor!r}, found {last.output[0]!r}"
        )
    last.output[0] = output


# --------------------------------------------------------------------------------------------
# Transformer models


def transformer_block(
    batch: int = 1, seq: int = 16, hidden: int = 64, heads: int = 4, ffn: int = 256, seed: int = 0
) -> onnx.ModelProto:
    """One post-LN (BERT-style) transformer encoder layer.

    Parameters
    ----------
    batch, seq, hidden : int
        Input ``x`` and output ``y`` are float32 ``[batch, seq, hidden]``.
    heads : int
        Attention heads; must divide ``hidden``.
    ffn : int
        Inner width of the Gelu feed-forward network.
    seed : int
        Seed of the weights.

    Returns
    -------
    onnx.ModelProto
        The model, ``graph.name == "transformer-block"``.
    """
    _check_positive(batch=batch, seq=seq, hidden=hidden, heads=heads, ffn=ffn)
    _check_transformer(hidden, heads, seq, None)
    b = _GraphBuilder("transformer-block", seed)
    x = b.input("x", TensorProto.FLOAT, (batch, seq, hidden))
    y = _encoder_layer(b, x, "layer", (batch, seq, hidden), heads, ffn, 1e-12, pre_ln=False)
    _rename_output(b, y, "y")
    b.output("y", TensorProto.FLOAT, (batch, seq, hidden))
    return b.build(
        {"batch": batch, "seq": seq, "hidden": hidden, "heads": heads, "ffn": ffn, "seed": seed}
    )


def bert(
    batch: int = 1,
    seq: int = 128,
    layers: int = 12,
    hidden: int = 768,
    heads: int = 12,
    ffn: int = 3072,
    vocab: int = 30522,
    max_positions: int = 512,
    seed: int = 0,
) -> onnx.ModelProto:
    """BERT encoder (BERT-base with the defaults, ~109M parameters) without pooler.

    Word, position and token-type (all type 0) embeddings are gathered, summed and layer-normed,
    then ``layers`` post-LN encoder layers run; the output is the last hidden state.

    Parameters
    ----------
    batch, seq : int
        Input ``input_ids`` is int64 ``[batch, seq]`` with ids in ``[0, vocab)``.
    layers, hidden, heads, ffn : int
        Encoder depth, model width, attention heads (dividing ``hidden``) and FFN width.
    vocab : int
        Vocabulary size, recorded as ``metadata_props["vocab_size"]``.
    max_positions : int
        Rows of the position embedding table; ``seq`` must not exceed it.
    seed : int
        Seed of the weights.

    Returns
    -------
    onnx.ModelProto
        The model with output ``last_hidden_state`` float32 ``[batch, seq, hidden]``,
        ``graph.name == "bert"``.
    """
    _check_positive(
        batch=batch,
        seq=seq,
        layers=layers,
        hidden=hidden,
        heads=heads,
        ffn=ffn,
        vocab=vocab,
        max_positions=max_positions,
    )
    _check_transformer(hidden, heads, seq, max_positions)
    b = _GraphBuilder("bert", seed)
    ids = b.input("input_ids", TensorProto.INT64, (batch, seq))
    words = b.normal("embeddings.word_embeddings.weight", (vocab, hidden), 0.02)
    positions = b.normal("embeddings.position_embeddings.weight", (max_positions, hidden), 0.02)
    types = b.normal("embeddings.token_type_embeddings.weight", (2, hidden), 0.02)
    position_ids = b.constant("embeddings.position_ids", np.arange(seq, dtype=np.int64))
    type_ids = b.constant("embeddings.token_type_ids", np.zeros(seq, dtype=np.int64))
    y = b.node("Gather", "embeddings.word", [words, ids], axis=0)
    y = b.node(
        "Add",
        "embeddings.add_position",
        [y, b.node("Gather", "embeddings.position", [positions, position_ids], axis=0)],
    )
    y = b.node(
        "Add",
        "embeddings.add_token_type",
        [y, b.node("Gather", "embeddings.token_type", [types, type_ids], axis=0)],
    )
    y = _layer_norm(b, y, "embeddings.ln", hidden, 1e-12)
    for layer in range(layers):
        y = _encoder_layer(
            b, y, f"layers.{layer}", (batch, seq, hidden), heads, ffn, 1e-12, pre_ln=False
        )
    _rename_output(b, y, "last_hidden_state")
    b.output("last_hidden_state", TensorProto.FLOAT, (batch, seq, hidden))
    config = {
        "batch": batch,
        "seq": seq,
        "layers": layers,
        "hidden": hidden,
        "heads": heads,
        "ffn": ffn,
        "vocab": vocab,
        "max_positions": max_positions,
        "seed": seed,
    }
    return b.build(config, vocab_size=vocab)


def gpt2(
    batch: int = 1,
    seq: int = 64,
    layers: int = 12,
    hidden: int = 768,
    heads: int = 12,
    vocab: int = 50257,
    ffn: int | None = None,
    max_positions: int = 1024,
    seed: int = 0,
) -> onnx.ModelProto:
    """GPT-2 decoder (GPT-2 small with the defaults, ~124M parameters) with a tied LM head.

    Token and position embeddings, ``layers`` pre-LN decoder layers with a constant additive causal
    mask (-1e4 above the diagonal, finite to avoid NaN), a final LayerNorm and logits computed by
    a MatMul with the transposed token embedding.

    Parameters
    ----------
    batch, seq : int
        Input ``input_ids`` is int64 ``[batch, seq]`` with ids in ``[0, vocab)``.
    layers, hidden, heads : int
        Decoder depth, model width and attention heads (dividing ``hidden``).
    vocab : int
        Vocabulary size, recorded as ``metadata_props["vocab_size"]``.
    ffn : int or None
        FFN width; ``None`` means ``4 * hidden``.
    max_positions : int
        Rows of the position embedding table; ``seq`` must not exceed it.
    seed : int
        Seed of the weights.

    Returns
    -------
    onnx.ModelProto
        The model with output ``logits`` float32 ``[batch, seq, vocab]``, ``graph.name == "gpt2"``.
    """
    ffn = 4 * hidden if ffn is None else ffn
    _check_positive(
        batch=batch,
        seq=seq,
        layers=layers,
        hidden=hidden,
        heads=heads,
        ffn=ffn,
        vocab=vocab,
        max_positions=max_positions,
    )
    _check_transformer(hidden, heads, seq, max_positions)
    b = _GraphBuilder("gpt2", seed)
    ids = b.input("input_ids", TensorProto.INT64, (batch, seq))
    tokens = b.normal("wte.weight", (vocab, hidden), 0.02)
    positions = b.normal("wpe.weight", (max_positions, hidden), 0.01)
    position_ids = b.constant("position_ids", np.arange(seq, dtype=np.int64))
    causal = np.triu(np.full((seq, seq), -1e4, dtype=np.float32), k=1)[None, None]
    mask = b.constant("causal_mask", causal)
    y = b.node("Gather", "wte", [tokens, ids], axis=0)
    y = b.node(
        "Add", "add_position", [y, b.node("Gather", "wpe", [positions, position_ids], axis=0)]
    )
    for layer in range(layers):
        y = _encoder_layer(
            b, y, f"h.{layer}", (batch, seq, hidden), heads, ffn, 1e-5, pre_ln=True, mask=mask
        )
    y = _layer_norm(b, y, "ln_f", hidden, 1e-5)
    head = b.node("Transpose", "lm_head.transpose", [tokens], perm=[1, 0])
    b.node("MatMul", "lm_head", [y, head], output="logits")
    b.output("logits", TensorProto.FLOAT, (batch, seq, vocab))
    config = {
        "batch": batch,
        "seq": seq,
        "layers": layers,
        "hidden": hidden,
        "heads": heads,
        "vocab": vocab,
        "ffn": ffn,
        "max_positions": max_positions,
        "seed": seed,
    }
    return b.build(config, vocab_size=vocab)


# --------------------------------------------------------------------------------------------
# Registry and helpers


MODELS: dict[str, Callable[..., onnx.ModelProto]] = {
    "small-cnn": small_cnn,
    "transformer-block": transformer_block,
    "resnet18": resnet18,
    "resnet50": resnet50,
    "mobilenet-v2": mobilenet_v2,
    "bert": bert,
    "gpt2": gpt2,
}
"""Registry of model generators by name; read it, do not modify it."""


def get_model(name: str, **kwargs) -> onnx.ModelProto:
    """Build the registered model ``name`` with keyword arguments for its generator.

    Parameters
    ----------
    name : str
        A key of :data:`MODELS`, e.g. ``"resnet50"``.
    **kwargs
        Arguments of the generator, e.g. ``image=64`` or ``layers=2``.

    Returns
    -------
    onnx.ModelProto
        The generated model.

    Raises
    ------
    ValueError
        If ``name`` is not registered; the message lists the valid names.
    """
    if name not in MODELS:
        raise ValueError(f"unknown model {name!r}; expected one of {', '.join(sorted(MODELS))}")
    return MODELS[name](**kwargs)


_OTHER_FLOATS = {TensorProto.FLOAT16: np.float16, TensorProto.DOUBLE: np.float64}


def example_inputs(model: onnx.ModelProto, seed: int = 0) -> dict[str, np.ndarray]:
    """Random valid inputs for a model of this module, keyed by graph input name.

    Float inputs are standard normal, in their own width (float32, float16 or float64); int64
    inputs are token ids uniform in ``[0, vocab_size)`` where ``vocab_size`` is read from the
    model's ``metadata_props``.

    Parameters
    ----------
    model : onnx.ModelProto
        A model with static input shapes (every generated model has them).
    seed : int
        Seed of the inputs.

    Returns
    -------
    dict of str to numpy.ndarray
        One array per graph input that is not an initializer, in graph order.

    Raises
    ------
    ValueError
        If an input has a dynamic dimension or an unsupported type, or an int64 input has no
        ``vocab_size`` metadata.
    """
    rng = np.random.default_rng(seed)
    initializers = {tensor.name for tensor in model.graph.initializer}
    metadata = {prop.key: prop.value for prop in model.metadata_props}
    inputs: dict[str, np.ndarray] = {}
    for value in model.graph.input:
        if value.name in initializers:
            continue
        tensor_type = value.type.tensor_type
        shape = []
        for dim in tensor_type.shape.dim:
            if not dim.HasField("dim_value"):
                raise ValueError(
                    f"input {value.name!r} has a dynamic dimension {dim.dim_param!r}; expected "
                    "static shapes; fix the shape in the model before asking for inputs"
                )
            shape.append(dim.dim_value)
        elem_type = tensor_type.elem_type
        if elem_type == TensorProto.FLOAT:
            inputs[value.name] = rng.standard_normal(shape, dtype=np.float32)
        elif elem_type in _OTHER_FLOATS:
            inputs[value.name] = rng.standard_normal(shape).astype(_OTHER_FLOATS[elem_type])
        elif elem_type == TensorProto.INT64:
            if "vocab_size" not in metadata:
                raise ValueError(
                    f"int64 input {value.name!r} needs metadata_props['vocab_size'] to draw ids; "
                    "none found; set it with onnx.helper.set_model_props"
                )
            vocab = int(metadata["vocab_size"])
            inputs[value.name] = rng.integers(0, vocab, shape, dtype=np.int64)
        else:
            found = TensorProto.DataType.Name(elem_type)
            raise ValueError(
                f"input {value.name!r} has element type {found}; expected FLOAT, FLOAT16, "
                "DOUBLE or INT64"
            )
    return inputs


def save_model(model: onnx.ModelProto, path: str | os.PathLike) -> Path:
    """Write ``model`` to ``path`` (parent folders are created) and return the path."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    onnx.save_model(model, str(path))
    return path
