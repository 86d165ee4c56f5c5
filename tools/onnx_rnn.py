"""ONNX LSTM, GRU and RNN for TVM's ONNX importer, which has none: Relax ops unrolled over the
static sequence length.

Each direction computes ``X W^T`` for all time steps in one matmul, then runs the recurrence one
step at a time (``H R^T`` and the gate arithmetic of the ONNX specification, activations,
``clip``, peepholes, ``input_forget``, ``linear_before_reset``), so every op is an ordinary
Relax op that the planners place and split like any other. Both layouts, both directions and
bidirectional are handled. With ``sequence_lens`` (unless it is a constant of full lengths), a
sequence's steps past its length keep its state and output zeros, as the specification says.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator

import tvm
from tvm import relax
from tvm.relax.frontend.onnx import onnx_frontend
from tvm.relax.frontend.onnx.onnx_frontend import OnnxOpConverter


def _text(value) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


# name -> (function of (x, alpha, beta), default alpha, default beta); None: takes no parameter.
_ACTIVATIONS: dict[str, tuple[Callable, float | None, float | None]] = {
    "sigmoid": (lambda x, a, b: relax.op.sigmoid(x), None, None),
    "tanh": (lambda x, a, b: relax.op.tanh(x), None, None),
    "relu": (lambda x, a, b: relax.op.nn.relu(x), None, None),
    "softsign": (lambda x, a, b: relax.op.divide(x, relax.op.add(relax.op.abs(x), _one(x))),
                 None, None),
    "softplus": (lambda x, a, b: relax.op.log(relax.op.add(relax.op.exp(x), _one(x))),
                 None, None),
    "affine": (lambda x, a, b: relax.op.add(relax.op.multiply(x, _c(x, a)), _c(x, b)),
               1.0, 0.0),
    "leakyrelu": (lambda x, a, b: relax.op.nn.leakyrelu(x, a), 0.01, None),
    "thresholdedrelu": (lambda x, a, b: relax.op.where(relax.op.greater(x, _c(x, a)), x,
                                                       relax.op.zeros_like(x)), 1.0, None),
    "scaledtanh": (lambda x, a, b: relax.op.multiply(
        _c(x, a), relax.op.tanh(relax.op.multiply(x, _c(x, b)))), 1.0, 1.0),
    "hardsigmoid": (lambda x, a, b: relax.op.clip(
        relax.op.add(relax.op.multiply(x, _c(x, a)), _c(x, b)), 0.0, 1.0), 0.2, 0.5),
    "elu": (lambda x, a, b: relax.op.where(
        relax.op.greater(x, relax.op.zeros_like(x)), x,
        relax.op.multiply(_c(x, a), relax.op.subtract(relax.op.exp(x), _one(x)))), 1.0, None),
}


def _c(x: relax.Expr, value: float) -> relax.Expr:
    return relax.const(value, x.ty.dtype)


def _one(x: relax.Expr) -> relax.Expr:
    return _c(x, 1.0)


def _full_lengths(lengths, seq: int) -> bool:
    """Whether ``sequence_lens`` is absent or a constant of ``seq`` everywhere."""
    if lengths is None:
        return True
    if not isinstance(lengths, tvm.ir.GenericConst):
        return False
    return all(int(v) == seq for v in lengths.data.numpy().reshape(-1))


class _Recurrent(OnnxOpConverter):
    """Shared unrolling of LSTM (4 gates), GRU (3) and RNN (1)."""

    op: str = ""
    gates: int = 1
    default_activations: tuple[str, ...] = ()

    @classmethod
    def _impl_v1(cls, bb, inputs, attr, params):
        return cls._convert(bb, list(inputs) + [None] * 8, attr)

    @classmethod
    def _fail(cls, what: str):
        raise NotImplementedError(f"ONNX {cls.op}: {what}")

    @classmethod
    def _convert(cls, bb, inputs, attr):
        x, w, r, bias, lengths, h0 = inputs[:6]
        hidden = int(attr["hidden_size"])
        direction = _text(attr.get("direction", "forward"))
        if direction not in ("forward", "reverse", "bidirectional"):
            cls._fail(f"unknown direction {direction!r}")
        layout = int(attr.get("layout", 0))
        if layout == 1:
            x = bb.emit(relax.op.permute_dims(x, [1, 0, 2]))
            h0 = bb.emit(relax.op.permute_dims(h0, [1, 0, 2])) if h0 is not None else None
        shape = [int(d) for d in x.ty.shape.values]
        if len(shape) != 3:
            cls._fail(f"X must be 3-d, got shape {shape}")
        seq, batch, _ = shape
        if _full_lengths(lengths, seq):
            lengths = None
        directions = 2 if direction == "bidirectional" else 1
        activations = [_text(a).lower() for a in attr.get("activations", [])] or \
            list(cls.default_activations) * directions
        per_direction = len(cls.default_activations)
        if len(activations) != per_direction * directions:
            cls._fail(f"expected {per_direction * directions} activations, got {activations}")
        functions = cls._activations(activations, attr)
        clip = attr.get("clip")
        state = cls._extra_state(inputs, layout, bb)
        results, finals, extras = [], [], []
        for d in range(directions):
            reverse = direction == "reverse" or d == 1
            mine = functions[d * per_direction:(d + 1) * per_direction]
            steps, last, extra = cls._direction(bb, x, w, r, bias, h0, state, d, hidden, seq,
                                                batch, reverse, mine, clip, attr, lengths)
            results.append(bb.emit(relax.op.concat(
                [relax.op.expand_dims(h, 0) for h in steps], axis=0)))  # [seq, batch, H]
            finals.append(relax.op.expand_dims(last, 0))
            extras += [relax.op.expand_dims(e, 0) for e in extra]
        y = bb.emit(relax.op.concat([relax.op.expand_dims(v, 1) for v in results], axis=1))
        y_h = bb.emit(relax.op.concat(finals, axis=0))  # [directions, batch, H]
        outputs = [y, y_h]
        if extras:
            outputs.append(bb.emit(relax.op.concat(extras, axis=0)))
        if layout == 1:
            outputs = [bb.emit(relax.op.permute_dims(outputs[0], [2, 0, 1, 3]))] + \
                [bb.emit(relax.op.permute_dims(o, [1, 0, 2])) for o in outputs[1:]]
        return relax.Tuple(outputs)

    @classmethod
    def _activations(cls, names: list[str], attr) -> list[Callable]:
        alphas = list(attr.get("activation_alpha", []))
        betas = list(attr.get("activation_beta", []))
        functions = []
        for name in names:
            if name not in _ACTIVATIONS:
                cls._fail(f"activation {name!r} is not supported; expected one of "
                          f"{', '.join(sorted(_ACTIVATIONS))}")
            function, alpha, beta = _ACTIVATIONS[name]
            a = float(alphas.pop(0)) if alpha is not None and alphas else alpha
            b = float(betas.pop(0)) if beta is not None and betas else beta
            functions.append(lambda v, f=function, a=a, b=b: f(v, a, b))
        return functions

    @classmethod
    def _extra_state(cls, inputs, layout, bb):
        return None

    @staticmethod
    def _row(bb, tensor, d: int, begin: int | None = None, end: int | None = None):
        """``tensor[d, begin:end]`` (the whole row without bounds)."""
        row = relax.op.squeeze(relax.op.strided_slice(tensor, [0], [d], [d + 1]), [0])
        if begin is not None:
            row = relax.op.strided_slice(row, [0], [begin], [end])
        return bb.emit(row)

    @classmethod
    def _direction(cls, bb, x, w, r, bias, h0, state, d, hidden, seq, batch, reverse,
                   functions, clip, attr, lengths):
        g = cls.gates
        w_d = cls._row(bb, w, d)  # [g*H, I]
        r_d = cls._row(bb, r, d)  # [g*H, H]
        inputs = bb.emit(relax.op.reshape(x, [seq * batch, int(x.ty.shape.values[2])]))
        xw = relax.op.matmul(inputs, relax.op.permute_dims(w_d, [1, 0]))
        if bias is not None:
            xw = relax.op.add(xw, cls._row(bb, bias, d, 0, g * hidden))
        xw = bb.emit(relax.op.reshape(xw, [seq, batch, g * hidden]))
        r_bias = cls._row(bb, bias, d, g * hidden, 2 * g * hidden) if bias is not None else None
        dtype = x.ty.dtype
        h = cls._row(bb, h0, d) if h0 is not None else \
            bb.emit(relax.op.zeros(relax.ShapeExpr([batch, hidden]), dtype))
        carry = cls._initial_carry(bb, state, d, batch, hidden, dtype)
        steps: list = [None] * seq
        for t in (reversed(range(seq)) if reverse else range(seq)):
            xw_t = bb.emit(relax.op.squeeze(relax.op.strided_slice(xw, [0], [t], [t + 1]), [0]))
            new_h, new_carry = cls._step(bb, xw_t, h, carry, r_d, r_bias, d, hidden, functions,
                                         clip, state, attr)
            if lengths is None:
                h, carry, steps[t] = new_h, new_carry, new_h
                continue
            # Steps at or past a sequence's length leave its state as it was and output 0.
            live = bb.emit(relax.op.expand_dims(
                relax.op.less(relax.const(t, lengths.ty.dtype), lengths), 1))
            steps[t] = bb.emit(relax.op.where(live, new_h, relax.op.zeros_like(new_h)))
            h = bb.emit(relax.op.where(live, new_h, h))
            if carry is not None:
                carry = bb.emit(relax.op.where(live, new_carry, carry))
        return steps, h, cls._final_extra(carry)

    @classmethod
    def _initial_carry(cls, bb, state, d, batch, hidden, dtype):
        return None

    @classmethod
    def _final_extra(cls, carry) -> list:
        return []

    @staticmethod
    def _gate(values, k: int, hidden: int):
        return relax.op.strided_slice(values, [1], [k * hidden], [(k + 1) * hidden])

    @staticmethod
    def _clip(value, clip):
        return value if clip is None else relax.op.clip(value, -float(clip), float(clip))


class LSTM(_Recurrent):
    op, gates, default_activations = "LSTM", 4, ("sigmoid", "tanh", "tanh")

    @classmethod
    def _extra_state(cls, inputs, layout, bb):
        c0, peepholes = inputs[6], inputs[7]
        if layout == 1 and c0 is not None:
            c0 = bb.emit(relax.op.permute_dims(c0, [1, 0, 2]))
        return c0, peepholes

    @classmethod
    def _initial_carry(cls, bb, state, d, batch, hidden, dtype):
        c0 = state[0]
        return cls._row(bb, c0, d) if c0 is not None else \
            bb.emit(relax.op.zeros(relax.ShapeExpr([batch, hidden]), dtype))

    @classmethod
    def _final_extra(cls, carry) -> list:
        return [carry]

    @classmethod
    def _step(cls, bb, xw_t, h, c, r_d, r_bias, d, hidden, functions, clip, state, attr):
        f, g, act_h = functions
        gates = relax.op.add(xw_t, relax.op.matmul(h, relax.op.permute_dims(r_d, [1, 0])))
        if r_bias is not None:
            gates = relax.op.add(gates, r_bias)
        gates = bb.emit(gates)
        i_, o_, f_, c_ = (bb.emit(cls._gate(gates, k, hidden)) for k in range(4))
        peepholes = state[1]
        if peepholes is not None:
            p_i, p_o, p_f = (cls._row(bb, peepholes, d, k * hidden, (k + 1) * hidden)
                             for k in range(3))
            i_ = relax.op.add(i_, relax.op.multiply(p_i, c))
            f_ = relax.op.add(f_, relax.op.multiply(p_f, c))
        i = bb.emit(f(cls._clip(i_, clip)))
        if int(attr.get("input_forget", 0)):
            forget = bb.emit(relax.op.subtract(relax.const(1.0, xw_t.ty.dtype), i))
        else:
            forget = bb.emit(f(cls._clip(f_, clip)))
        candidate = g(cls._clip(c_, clip))
        c = bb.emit(relax.op.add(relax.op.multiply(forget, c), relax.op.multiply(i, candidate)))
        if peepholes is not None:
            o_ = relax.op.add(o_, relax.op.multiply(p_o, c))
        o = f(cls._clip(o_, clip))
        return bb.emit(relax.op.multiply(o, act_h(c))), c


class GRU(_Recurrent):
    op, gates, default_activations = "GRU", 3, ("sigmoid", "tanh")

    @classmethod
    def _step(cls, bb, xw_t, h, carry, r_d, r_bias, d, hidden, functions, clip, state, attr):
        f, g = functions
        r_zr = relax.op.strided_slice(r_d, [0], [0], [2 * hidden])
        r_h = relax.op.strided_slice(r_d, [0], [2 * hidden], [3 * hidden])
        zr = relax.op.add(relax.op.strided_slice(xw_t, [1], [0], [2 * hidden]),
                          relax.op.matmul(h, relax.op.permute_dims(r_zr, [1, 0])))
        rb_h = None
        if r_bias is not None:
            zr = relax.op.add(zr, relax.op.strided_slice(r_bias, [0], [0], [2 * hidden]))
            rb_h = relax.op.strided_slice(r_bias, [0], [2 * hidden], [3 * hidden])
        zr = bb.emit(zr)
        z = bb.emit(f(cls._clip(cls._gate(zr, 0, hidden), clip)))
        reset = bb.emit(f(cls._clip(cls._gate(zr, 1, hidden), clip)))
        r_h_t = relax.op.permute_dims(r_h, [1, 0])
        if int(attr.get("linear_before_reset", 0)):
            hr = relax.op.matmul(h, r_h_t)
            if rb_h is not None:
                hr = relax.op.add(hr, rb_h)
            hr = relax.op.multiply(reset, hr)
        else:
            hr = relax.op.matmul(relax.op.multiply(reset, h), r_h_t)
            if rb_h is not None:
                hr = relax.op.add(hr, rb_h)
        candidate = bb.emit(g(cls._clip(relax.op.add(cls._gate(xw_t, 2, hidden), hr), clip)))
        one = relax.const(1.0, xw_t.ty.dtype)
        h = bb.emit(relax.op.add(relax.op.multiply(relax.op.subtract(one, z), candidate),
                                 relax.op.multiply(z, h)))
        return h, carry


class RNN(_Recurrent):
    op, gates, default_activations = "RNN", 1, ("tanh",)

    @classmethod
    def _step(cls, bb, xw_t, h, carry, r_d, r_bias, d, hidden, functions, clip, state, attr):
        value = relax.op.add(xw_t, relax.op.matmul(h, relax.op.permute_dims(r_d, [1, 0])))
        if r_bias is not None:
            value = relax.op.add(value, r_bias)
        return bb.emit(functions[0](cls._clip(value, clip))), carry


RECURRENT_OPS = {"LSTM": LSTM, "GRU": GRU, "RNN": RNN}


@contextlib.contextmanager
def recurrent_converters() -> Iterator[None]:
    """TVM's ONNX importer with :data:`RECURRENT_OPS` added to its converters."""
    original = onnx_frontend._get_convert_map

    def with_recurrent():
        return {**original(), **RECURRENT_OPS}

    onnx_frontend._get_convert_map = with_recurrent
    try:
        yield
    finally:
        onnx_frontend._get_convert_map = original
