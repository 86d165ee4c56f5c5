"""Random small ONNX models for fuzzing the strategies' numerics: CNNs with the shapes
held-out models have (odd sizes, strided, dilated, grouped and depthwise convs with
asymmetric pads, squeeze-excitation, channel shuffle, splits, upsampling, transposed convs,
pads, slices, pools, residuals and concats) and pre-norm transformer layers."""

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

CNN_LAYERS = ("conv", "conv", "conv", "pool", "residual", "concat", "activation", "excite",
              "shuffle", "split", "upsample", "pad", "transposed", "slice")


class _Graph:
    """Nodes and initializers of a model being built, with fresh names."""

    def __init__(self, rng: np.random.Generator):
        self.rng, self.nodes, self.initializers, self.count = rng, [], [], 0

    def fresh(self, prefix: str) -> str:
        self.count += 1
        return f"{prefix}{self.count}"

    def const(self, array: np.ndarray) -> str:
        name = self.fresh("w")
        self.initializers.append(numpy_helper.from_array(array, name))
        return name

    def weights(self, shape: tuple[int, ...], fan_in: int) -> str:
        return self.const(self.rng.normal(0, fan_in ** -0.5, shape).astype(np.float32))

    def vector(self, n: int, low: float = -0.1, high: float = 0.1) -> str:
        return self.const(self.rng.uniform(low, high, n).astype(np.float32))

    def add(self, op: str, inputs: list[str], outputs: int = 1, **attrs) -> str | list[str]:
        names = [self.fresh(op.lower()) for _ in range(outputs)]
        self.nodes.append(helper.make_node(op, inputs, names, **attrs))
        return names[0] if outputs == 1 else names

    def model(self, name: str, source: onnx.ValueInfoProto, result: str) -> onnx.ModelProto:
        """The checked model computing ``result`` from ``source``, its output shape inferred."""
        def build(shape):
            output = helper.make_tensor_value_info(result, TensorProto.FLOAT, shape)
            graph = helper.make_graph(self.nodes, name, [source], [output], self.initializers)
            model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
            model.ir_version = 8
            return model
        inferred = onnx.shape_inference.infer_shapes(build(None))
        model = build([d.dim_value for d in inferred.graph.output[0].type.tensor_type.shape.dim])
        onnx.checker.check_model(model, full_check=True)
        return model


def _extent(size: int, kernel: int, stride: int, pads: int, dilation: int) -> int:
    return (size + pads - dilation * (kernel - 1) - 1) // stride + 1


def random_cnn(seed: int, large: bool = False) -> onnx.ModelProto:
    """A CNN of 3 to 8 random layers and a classifier; ``large`` takes 24-56 pixel images and
    up to 128 channels, so that the planners split its convs over many clusters."""
    rng = np.random.default_rng(seed)
    g = _Graph(rng)
    low, high = (24, 57) if large else (9, 25)
    c = int(rng.choice([1, 3, 4, 8]))
    h, w = (int(size) for size in rng.integers(low, high, 2))
    source = helper.make_tensor_value_info("input", TensorProto.FLOAT, [1, c, h, w])
    x, seen = "input", []  # seen: (value, channels, height, width) of earlier values
    widths = [4, 6, 8, 12, 16, 24, 32, 48] + ([64, 96, 128] if large else [])
    for _ in range(int(rng.integers(3, 9))):
        kind = rng.choice(CNN_LAYERS)
        before = (x, c, h, w)
        if kind == "conv":
            kh = int(rng.choice([1, 3, 3, 5]))
            kw = kh if rng.random() < 0.8 else int(rng.choice([1, 3]))
            stride, dilation = int(rng.choice([1, 1, 2])), int(rng.choice([1, 1, 1, 2]))
            if rng.random() < 0.6:  # "same"
                pads = [dilation * (kh - 1) // 2, dilation * (kw - 1) // 2] * 2
            else:
                pads = [int(rng.integers(0, k)) for k in (kh, kw, kh, kw)]
            oh = _extent(h, kh, stride, pads[0] + pads[2], dilation)
            ow = _extent(w, kw, stride, pads[1] + pads[3], dilation)
            if min(oh, ow) < 1:
                continue
            out, group, draw = int(rng.choice(widths)), 1, rng.random()
            if draw < 0.2:
                out, group = c, c  # depthwise
            elif draw < 0.3 and c % 2 == 0 and out % 2 == 0:
                group = 2
            inputs = [x, g.weights((out, c // group, kh, kw), c // group * kh * kw)]
            if rng.random() < 0.7:
                inputs.append(g.vector(out))
            x = g.add("Conv", inputs, kernel_shape=[kh, kw], strides=[stride, stride],
                      pads=pads, dilations=[dilation, dilation], group=group)
            c, h, w = out, oh, ow
            if rng.random() < 0.5:
                x = g.add("BatchNormalization", [x, g.vector(c, 0.5, 1.5), g.vector(c),
                                                 g.vector(c), g.vector(c, 0.5, 1.5)])
            if rng.random() < 0.7:
                x = g.add("Relu", [x])
        elif kind == "activation":
            op = str(rng.choice(["Sigmoid", "Clip", "LeakyRelu", "Tanh", "HardSwish"]))
            bounds = [g.const(np.array(b, np.float32)) for b in (0, 6)] if op == "Clip" else []
            x = g.add(op, [x, *bounds])
        elif kind == "pool" and min(h, w) >= 2:
            if rng.random() < 0.5:
                x = g.add("MaxPool", [x], kernel_shape=[3, 3], strides=[2, 2], pads=[1] * 4)
                h, w = _extent(h, 3, 2, 2, 1), _extent(w, 3, 2, 2, 1)
            else:
                x = g.add("AveragePool", [x], kernel_shape=[2, 2], strides=[2, 2])
                h, w = h // 2, w // 2
        elif kind in ("residual", "concat"):
            fits = [v for v in seen if v[0] != x and v[2:] == (h, w)
                    and (kind == "concat" or v[1] == c)]
            if fits:
                other = fits[int(rng.integers(len(fits)))]
                if kind == "residual":
                    x = g.add("Add", [x, other[0]])
                else:
                    x, c = g.add("Concat", [x, other[0]], axis=1), c + other[1]
        elif kind == "excite":
            r = max(1, c // 4)
            t = g.add("GlobalAveragePool", [x])
            t = g.add("Relu", [g.add("Conv", [t, g.weights((r, c, 1, 1), c), g.vector(r)],
                                     kernel_shape=[1, 1])])
            t = g.add("Conv", [t, g.weights((c, r, 1, 1), r)], kernel_shape=[1, 1])
            x = g.add("Mul", [x, g.add("Sigmoid", [t])])
        elif kind == "shuffle" and c % 2 == 0:
            t = g.add("Reshape", [x, g.const(np.array([1, 2, c // 2, h, w], np.int64))])
            t = g.add("Transpose", [t], perm=[0, 2, 1, 3, 4])
            x = g.add("Reshape", [t, g.const(np.array([1, c, h, w], np.int64))])
        elif kind == "split" and c >= 2:
            first, second = g.add("Split", [x, g.const(np.array([c // 2, c - c // 2]))],
                                  outputs=2, axis=1)
            x = g.add("Concat", [g.add("Relu", [second]), first], axis=1)
        elif kind == "upsample" and h * w <= 900:
            x = g.add("Resize", [x, "", g.const(np.array([1, 1, 2, 2], np.float32))],
                      mode=str(rng.choice(["nearest", "linear"])))
            h, w = 2 * h, 2 * w
        elif kind == "pad":
            pads = [0, 0, *rng.integers(0, 3, 2), 0, 0, *rng.integers(0, 3, 2)]
            mode = str(rng.choice(["constant", "reflect", "edge"])) if min(h, w) > 3 else "constant"
            x = g.add("Pad", [x, g.const(np.array(pads, np.int64))], mode=mode)
            h, w = h + pads[2] + pads[6], w + pads[3] + pads[7]
        elif kind == "transposed":
            out = int(rng.choice([4, 8, 16]))
            x = g.add("ConvTranspose", [x, g.weights((c, out, 2, 2), 4 * c)],
                      kernel_shape=[2, 2], strides=[2, 2])
            c, h, w = out, 2 * h, 2 * w
        elif kind == "slice" and min(h, w) > 4:
            x = g.add("Slice", [x, g.const(np.array([1, 1])), g.const(np.array([h - 1, w - 2])),
                                g.const(np.array([2, 3]))])
            h, w = h - 2, w - 3
        if x != before[0]:
            seen.append(before)
    if rng.random() < 0.7:
        x, h, w = g.add("GlobalAveragePool", [x]), 1, 1
    x = g.add("Flatten", [x])
    classes = int(rng.choice([5, 10, 16]))
    x = g.add("Gemm", [x, g.weights((classes, c * h * w), c * h * w), g.vector(classes)],
              transB=1)
    return g.model(f"cnn{seed}", source, x)


def random_transformer(seed: int) -> onnx.ModelProto:
    """One or two pre-norm transformer layers: multi-head attention and an MLP, each with a
    residual, on a random sequence length and width."""
    rng = np.random.default_rng(seed)
    g = _Graph(rng)
    s, heads, hd = int(rng.integers(3, 18)), int(rng.choice([1, 2, 4])), int(rng.choice([4, 8, 12]))
    d = heads * hd
    source = helper.make_tensor_value_info("input", TensorProto.FLOAT, [1, s, d])

    def linear(t: str, width: int, out: int) -> str:
        y = g.add("MatMul", [t, g.weights((width, out), width)])
        return g.add("Add", [y, g.vector(out)]) if rng.random() < 0.8 else y

    def by_heads(t: str) -> str:
        t = g.add("Reshape", [t, g.const(np.array([1, s, heads, hd], np.int64))])
        return g.add("Transpose", [t], perm=[0, 2, 1, 3])

    x = "input"
    for _ in range(int(rng.integers(1, 3))):
        normed = g.add("LayerNormalization", [x, g.vector(d, 0.5, 1.5), g.vector(d)], axis=-1)
        q, k, v = (by_heads(linear(normed, d, d)) for _ in range(3))
        scores = g.add("MatMul", [q, g.add("Transpose", [k], perm=[0, 1, 3, 2])])
        scores = g.add("Mul", [scores, g.const(np.array(hd ** -0.5, np.float32))])
        o = g.add("MatMul", [g.add("Softmax", [scores], axis=-1), v])
        o = g.add("Reshape", [g.add("Transpose", [o], perm=[0, 2, 1, 3]),
                              g.const(np.array([1, s, d], np.int64))])
        x = g.add("Add", [linear(o, d, d), x])
        hidden = int(rng.choice([2, 4])) * d
        y = g.add(str(rng.choice(["Relu", "Sigmoid", "Tanh"])), [linear(x, d, hidden)])
        x = g.add("Add", [linear(y, hidden, d), x])
    return g.model(f"transformer{seed}", source, x)
