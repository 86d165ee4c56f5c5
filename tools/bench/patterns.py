"""Small synthetic ONNX models of op patterns the bundled models lack, for sweeps and tests.

Each builder returns an ``onnx.ModelProto`` (opset 17, float32 weights drawn from a fixed seed)
small enough to compile in seconds; :data:`PATTERNS` names them with their input shapes. They
cover what splitting strategies are most likely to get wrong: grouped and depthwise convs,
strides, dilation and asymmetric padding, batched matmuls with broadcasting, matmuls with a 1-D
operand, transposed weights, LSTM / GRU, reshape and transpose chains after a split, concat
along a split axis, residual adds of values laid out differently, ops with several outputs,
int64 / bool tensors and zero-size dims.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

OPSET = 17


class _Graph:
    """Nodes, initializers and a fixed-seed generator for one model."""

    def __init__(self, seed: int = 0) -> None:
        self.rng = np.random.default_rng(seed)
        self.nodes: list[onnx.NodeProto] = []
        self.inits: list[onnx.TensorProto] = []
        self.count = 0

    def name(self, prefix: str) -> str:
        self.count += 1
        return f"{prefix}{self.count}"

    def weight(self, *shape: int, scale: float = 0.3) -> str:
        return self.const(self.rng.normal(0, scale, shape).astype(np.float32))

    def const(self, array: np.ndarray) -> str:
        name = self.name("w")
        self.inits.append(numpy_helper.from_array(np.asarray(array), name))
        return name

    def op(self, op_type: str, inputs: list[str], outputs: int = 1, **attrs) -> list[str] | str:
        names = [self.name(op_type.lower()) for _ in range(outputs)]
        self.nodes.append(helper.make_node(op_type, inputs, names, **attrs))
        return names[0] if outputs == 1 else names

    def model(self, inputs: dict[str, tuple[list[int], int]], outputs: list[str]
              ) -> onnx.ModelProto:
        graph = helper.make_graph(
            self.nodes, "pattern",
            [helper.make_tensor_value_info(n, t, s) for n, (s, t) in inputs.items()],
            [helper.make_tensor_value_info(o, TensorProto.UNDEFINED, None) for o in outputs],
            self.inits)
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)])
        model.ir_version = 8
        return onnx.shape_inference.infer_shapes(model, strict_mode=True)


F = TensorProto.FLOAT


def grouped_convs() -> onnx.ModelProto:
    """Grouped (2 groups), depthwise with a channel multiplier, strided, dilated and
    asymmetrically padded convs, each followed by an activation."""
    g = _Graph()
    a = g.op("Conv", ["x", g.weight(16, 4, 3, 3)], group=2, pads=[1, 1, 1, 1])
    a = g.op("Relu", [a])
    b = g.op("Conv", [a, g.weight(32, 1, 3, 3), g.weight(32)], group=16, strides=[2, 2],
             pads=[0, 1, 1, 0])
    b = g.op("Relu", [b])
    c = g.op("Conv", [b, g.weight(16, 32, 3, 3)], dilations=[2, 2], pads=[2, 1, 2, 3])
    d = g.op("Conv", [c, g.weight(16, 1, 3, 3)], group=16, strides=[2, 1], pads=[1, 1, 1, 1])
    return g.model({"x": ([1, 8, 13, 11], F)}, [g.op("Sigmoid", [d])])


def depthwise_stride() -> onnx.ModelProto:
    """A MobileNet block: pointwise expand, depthwise stride 2 (no padding at the bottom),
    pointwise project, then a 1x1 conv with stride 2."""
    g = _Graph()
    a = g.op("Clip", [g.op("Conv", ["x", g.weight(24, 8, 1, 1)]), g.const(np.float32(0)),
                      g.const(np.float32(6))])
    b = g.op("Conv", [a, g.weight(24, 1, 3, 3)], group=24, strides=[2, 2], pads=[1, 1, 0, 0])
    c = g.op("Conv", [g.op("Relu", [b]), g.weight(8, 24, 1, 1)])
    d = g.op("Conv", [c, g.weight(12, 8, 1, 1)], strides=[2, 2])
    return g.model({"x": ([1, 8, 16, 16], F)}, [d])


def conv_residual_concat() -> onnx.ModelProto:
    """Two convs concatenated along channels (the axis an out-channel split shards), a residual
    add of a conv output and a pooled value, then Flatten -> Gemm with a transposed weight."""
    g = _Graph()
    a = g.op("Conv", ["x", g.weight(6, 4, 3, 3)], pads=[1, 1, 1, 1])
    b = g.op("Conv", ["x", g.weight(10, 4, 1, 1)])
    cat = g.op("Concat", [a, b], axis=1)
    c = g.op("Conv", [g.op("Relu", [cat]), g.weight(16, 16, 3, 3)], pads=[1, 1, 1, 1])
    res = g.op("Add", [c, cat])
    pooled = g.op("MaxPool", [res], kernel_shape=[2, 2], strides=[2, 2])
    flat = g.op("Flatten", [pooled], axis=1)
    out = g.op("Gemm", [flat, g.weight(10, 16 * 5 * 5), g.weight(10)], transB=1)
    return g.model({"x": ([1, 4, 10, 10], F)}, [out])


def batched_matmuls() -> onnx.ModelProto:
    """Batched matmuls with broadcasting (an activation batch against a shared weight, a rank-3
    weight against a rank-4 activation, activations against each other), then a reshape and
    transpose chain."""
    g = _Graph()
    a = g.op("MatMul", ["x", g.weight(8, 12)])                      # [2, 3, 5, 12]
    b = g.op("MatMul", [a, g.weight(3, 12, 6)])                     # [2, 3, 5, 6]
    kt = g.op("Transpose", [b], perm=[0, 1, 3, 2])                  # [2, 3, 6, 5]
    s = g.op("Softmax", [g.op("MatMul", [b, kt])], axis=-1)         # [2, 3, 5, 5]
    ctx = g.op("MatMul", [s, b])                                    # [2, 3, 5, 6]
    t = g.op("Transpose", [ctx], perm=[0, 2, 1, 3])                 # [2, 5, 3, 6]
    r = g.op("Reshape", [t, g.const(np.array([2, 5, 18], np.int64))])
    out = g.op("MatMul", [r, g.weight(18, 4)])
    bcast = g.op("MatMul", ["y", g.weight(2, 1, 8, 3)])            # [2, 3, 4, 3] broadcast
    return g.model({"x": ([2, 3, 5, 8], F), "y": ([3, 4, 8], F)}, [out, bcast])


def vector_matmuls() -> onnx.ModelProto:
    """Matmuls with a 1-D operand on either side (weights and activations), and a transposed
    weight."""
    g = _Graph()
    a = g.op("MatMul", ["x", g.weight(8)])                          # [4, 6, 8] @ [8] -> [4, 6]
    b = g.op("MatMul", [g.weight(4), a])                            # [4] @ [4, 6] -> [6]
    w = g.op("Transpose", [g.weight(6, 6)], perm=[1, 0])
    c = g.op("MatMul", [g.op("Tanh", [b]), w])                      # [6] @ [6, 6] -> [6]
    d = g.op("MatMul", ["x", g.op("Transpose", [g.weight(5, 8)], perm=[1, 0])])
    h = g.op("Relu", [g.op("MatMul", ["x", g.weight(8, 8)])])        # [4, 6, 8]
    v = g.op("ReduceMean", [h], axes=[0, 1], keepdims=0)             # [8]
    e = g.op("MatMul", [h, v])                                       # activations: -> [4, 6]
    f = g.op("MatMul", [g.op("ReduceMax", [h], axes=[0, 2], keepdims=0), h])  # [6] @ -> [4, 8]
    return g.model({"x": ([4, 6, 8], F)}, [c, d, e, f])


def recurrent() -> onnx.ModelProto:
    """An LSTM and a GRU (bidirectional) over a projected sequence, then a linear head."""
    g = _Graph()
    seq, hidden = 5, 6
    p = g.op("MatMul", ["x", g.weight(4, 8)])                       # [seq, 1, 8]
    y, _, _ = g.op("LSTM", [p, g.weight(1, 4 * hidden, 8), g.weight(1, 4 * hidden, hidden),
                            g.weight(1, 8 * hidden)], outputs=3, hidden_size=hidden)
    y = g.op("Squeeze", [y, g.const(np.array([1], np.int64))])      # [seq, 1, hidden]
    z, _ = g.op("GRU", [y, g.weight(2, 3 * hidden, hidden), g.weight(2, 3 * hidden, hidden),
                        g.weight(2, 6 * hidden)], outputs=2, hidden_size=hidden,
                direction="bidirectional")                          # [seq, 2, 1, hidden]
    z = g.op("Reshape", [g.op("Transpose", [z], perm=[0, 2, 1, 3]),
                         g.const(np.array([seq, 1, 2 * hidden], np.int64))])
    out = g.op("MatMul", [z, g.weight(2 * hidden, 3)])
    return g.model({"x": ([seq, 1, 4], F)}, [out])


def multi_output_ints() -> onnx.ModelProto:
    """Split with several outputs after a matmul, TopK (values and int64 indices), ArgMax,
    a bool mask through Where, an int64 Gather (an embedding lookup) and a zero-size concat."""
    g = _Graph()
    emb = g.op("Gather", [g.weight(10, 8), "ids"], axis=0)          # [3, 8]
    h = g.op("MatMul", [g.op("Add", ["x", emb]), g.weight(8, 12)])  # [3, 12]
    left, right = g.op("Split", [h, g.const(np.array([5, 7], np.int64))], outputs=2, axis=1)
    mask = g.op("Greater", [left, g.const(np.float32(0))])
    gated = g.op("Where", [mask, left, g.op("Neg", [left])])
    values, indices = g.op("TopK", [right, g.const(np.array([3], np.int64))], outputs=2,
                           axis=1)
    arg = g.op("ArgMax", [gated], axis=1, keepdims=0)
    empty = g.const(np.zeros((0, 5), np.float32))
    stacked = g.op("Concat", [gated, empty], axis=0)
    total = g.op("Add", [g.op("Cast", [indices], to=F), values])
    out = g.op("MatMul", [stacked, g.weight(5, 4)])
    return g.model({"x": ([3, 8], F), "ids": ([3], TensorProto.INT64)},
                   [out, total, arg])


def attention_block() -> onnx.ModelProto:
    """A transformer block with a fused QKV weight split three ways, heads through reshape and
    transpose, a causal bool mask, layer norm, and a residual add of differently laid-out
    values (the attention output and the block input)."""
    g = _Graph()
    seq, width, heads = 6, 16, 4
    qkv = g.op("MatMul", ["x", g.weight(width, 3 * width)])          # [1, seq, 48]
    q, k, v = g.op("Split", [qkv, g.const(np.array([width] * 3, np.int64))], outputs=3,
                   axis=2)

    def heads_of(t: str) -> str:
        r = g.op("Reshape", [t, g.const(np.array([1, seq, heads, width // heads], np.int64))])
        return g.op("Transpose", [r], perm=[0, 2, 1, 3])

    scores = g.op("MatMul", [heads_of(q), g.op("Transpose", [heads_of(k)], perm=[0, 1, 3, 2])])
    causal = g.const(np.tril(np.ones((seq, seq), bool)))
    masked = g.op("Where", [causal, scores, g.const(np.float32(-1e4))])
    ctx = g.op("MatMul", [g.op("Softmax", [masked], axis=-1), heads_of(v)])
    merged = g.op("Reshape", [g.op("Transpose", [ctx], perm=[0, 2, 1, 3]),
                              g.const(np.array([1, seq, width], np.int64))])
    attn = g.op("MatMul", [merged, g.weight(width, width)])
    res = g.op("Add", ["x", attn])
    norm = g.op("LayerNormalization", [res, g.const(np.ones(width, np.float32)),
                                       g.const(np.zeros(width, np.float32))], axis=-1)
    up = g.op("Relu", [g.op("MatMul", [norm, g.weight(width, 2 * width)])])
    out = g.op("Add", [norm, g.op("MatMul", [up, g.weight(2 * width, width)])])
    return g.model({"x": ([1, seq, width], F)}, [out])


def conv_transpose() -> onnx.ModelProto:
    """A small encoder-decoder: a strided conv, a ConvTranspose (which TVM names
    ``conv2d_transpose``) back up, a conv, and a conv whose output is transposed to NHWC."""
    g = _Graph()
    a = g.op("Relu", [g.op("Conv", ["x", g.weight(8, 4, 3, 3)], strides=[2, 2],
                           pads=[1, 1, 1, 1])])
    b = g.op("ConvTranspose", [a, g.weight(8, 6, 2, 2), g.weight(6)], strides=[2, 2])
    c = g.op("Conv", [g.op("Relu", [b]), g.weight(6, 6, 3, 3)], pads=[1, 1, 1, 1])
    d = g.op("Transpose", [g.op("Conv", [c, g.weight(4, 6, 1, 1)])], perm=[0, 2, 3, 1])
    return g.model({"x": ([1, 4, 8, 8], F)}, [d])


def grouped_upsampling() -> onnx.ModelProto:
    """A decoder that upsamples with grouped ConvTransposes: a depthwise one (a learned
    bilinear-like upsampling, groups = channels) and one of 2 groups, between convs."""
    g = _Graph()
    a = g.op("Relu", [g.op("Conv", ["x", g.weight(8, 4, 3, 3)], pads=[1, 1, 1, 1])])
    b = g.op("ConvTranspose", [a, g.weight(8, 1, 4, 4), g.weight(8)], strides=[2, 2],
             pads=[1, 1, 1, 1], group=8)
    c = g.op("ConvTranspose", [g.op("Relu", [b]), g.weight(8, 3, 2, 2)], strides=[2, 2],
             group=2)
    return g.model({"x": ([1, 4, 6, 6], F)}, [g.op("Conv", [c, g.weight(4, 6, 3, 3)],
                                                   pads=[1, 1, 1, 1])])


def layout_mix() -> onnx.ModelProto:
    """Values laid out differently meeting: a residual add of a 3x3 and a 1x1 conv, a
    squeeze-and-excite gate (global pool, 1x1 convs, a per-channel multiply), a concat along
    channels, then NCHW -> tokens (reshape, transpose), a matmul, a softmax along the tokens
    and a reduction over the features."""
    g = _Graph()
    a = g.op("Conv", ["x", g.weight(8, 8, 3, 3)], pads=[1, 1, 1, 1])
    b = g.op("Conv", ["x", g.weight(8, 8, 1, 1)])
    s = g.op("Relu", [g.op("Add", [a, b])])
    gate = g.op("GlobalAveragePool", [s])
    squeezed = g.op("Relu", [g.op("Conv", [gate, g.weight(4, 8, 1, 1)])])
    gate = g.op("Sigmoid", [g.op("Conv", [squeezed, g.weight(8, 4, 1, 1)])])
    se = g.op("Mul", [s, gate])
    cat = g.op("Concat", [se, a], axis=1)                              # [1, 16, 6, 6]
    c = g.op("Conv", [cat, g.weight(8, 16, 3, 3)], pads=[1, 1, 1, 1])
    tokens = g.op("Transpose", [g.op("Reshape", [c, g.const(np.array([1, 8, 36], np.int64))])],
                  perm=[0, 2, 1])                                      # [1, 36, 8]
    h = g.op("MatMul", [tokens, g.weight(8, 12)])
    attn = g.op("Softmax", [h], axis=1)
    out = g.op("ReduceSum", [g.op("Mul", [attn, h]), g.const(np.array([-1], np.int64))],
               keepdims=1)
    return g.model({"x": ([1, 8, 6, 6], F)}, [out])


@dataclass(frozen=True)
class Pattern:
    """A synthetic model, its builder and the static shapes of its inputs."""

    name: str
    build: Callable[[], onnx.ModelProto]
    shapes: dict[str, list[int]]
    int_high: int = 10


PATTERNS = (
    Pattern("grouped-convs", grouped_convs, {"x": [1, 8, 13, 11]}),
    Pattern("depthwise-stride", depthwise_stride, {"x": [1, 8, 16, 16]}),
    Pattern("conv-residual-concat", conv_residual_concat, {"x": [1, 4, 10, 10]}),
    Pattern("batched-matmuls", batched_matmuls, {"x": [2, 3, 5, 8], "y": [3, 4, 8]}),
    Pattern("vector-matmuls", vector_matmuls, {"x": [4, 6, 8]}),
    Pattern("recurrent", recurrent, {"x": [5, 1, 4]}),
    Pattern("multi-output-ints", multi_output_ints, {"x": [3, 8], "ids": [3]}),
    Pattern("attention-block", attention_block, {"x": [1, 6, 16]}),
    Pattern("conv-transpose", conv_transpose, {"x": [1, 4, 8, 8]}),
    Pattern("grouped-upsampling", grouped_upsampling, {"x": [1, 4, 6, 6]}),
    Pattern("layout-mix", layout_mix, {"x": [1, 8, 6, 6]}),
)
"""The synthetic models, by name."""


def get_pattern(name: str) -> Pattern:
    """The pattern named ``name``; unknown names list the valid ones."""
    for pattern in PATTERNS:
        if pattern.name == name:
            return pattern
    raise KeyError(f"unknown pattern {name!r}; valid: {', '.join(p.name for p in PATTERNS)}")
