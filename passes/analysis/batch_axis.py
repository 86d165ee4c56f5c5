"""Whether axis 0 of ``main``'s inputs is a batch: every sample computed on its own.

Data parallelism cuts the inputs along axis 0 and runs a copy of the graph on each slice; that
equals the whole graph only if no op mixes samples (a reduction, softmax or concat over axis 0,
a reshape that folds axis 0 into others, a matmul whose axis 0 is the reduction...).
:func:`batch_axis_break` follows axis 0 from the inputs through ``main`` and names the first op
that does not keep it, conservatively: an op it does not know breaks it.
"""

from __future__ import annotations

import tvm
from tvm import relax

ELEMENTWISE_OPS = frozenset(
    f"relax.{name}" for name in (
        "add", "subtract", "multiply", "divide", "power", "maximum", "minimum", "floor_divide",
        "nn.relu", "nn.gelu", "nn.gelu_tanh", "nn.silu", "nn.leakyrelu", "sigmoid", "tanh",
        "exp", "log", "sqrt", "rsqrt", "erf", "clip", "astype", "negative", "abs", "square",
        "round", "floor", "ceil", "trunc", "sign", "where", "greater", "less", "equal",
        "not_equal", "greater_equal", "less_equal", "logical_and", "logical_or", "logical_not",
        "logical_xor", "isnan", "isinf", "isfinite", "mod", "floor_mod", "bitwise_and",
        "bitwise_or", "bitwise_xor", "bitwise_not", "left_shift", "right_shift", "sin", "cos",
        "tan", "sinh", "cosh", "asin", "acos", "atan", "asinh", "acosh", "atanh", "nn.selu",
        "nn.softplus",
    )
)
"""Ops computed element by element, with numpy broadcasting: a part of the output needs only
the same part of each operand (an operand broadcast along the split axis is read whole)."""

_QUANTIZE_OPS = frozenset({"relax.quantize", "relax.dequantize"})


def elementwise(call: relax.Call) -> bool:
    """Whether ``call`` computes element by element: an op of :data:`ELEMENTWISE_OPS`, or a
    quantize or dequantize with one scale and one zero point for the whole tensor (as a QDQ
    model quantizes its activations; per-channel ones, of weights, read the scale along their
    ``axis``)."""
    name = call.op.name
    if name in ELEMENTWISE_OPS:
        return True
    if name not in _QUANTIZE_OPS:
        return False
    for param in call.args[1:3]:
        shape = _shape(param)
        if shape is None or None in shape or any(dim != 1 for dim in shape):
            return False
    return True


PER_SAMPLE_OPS = frozenset(
    f"relax.{name}" for name in (
        "nn.conv1d", "nn.conv2d", "nn.conv3d", "nn.conv1d_transpose", "nn.conv2d_transpose",
        "nn.max_pool1d", "nn.max_pool2d", "nn.max_pool3d", "nn.avg_pool1d", "nn.avg_pool2d",
        "nn.avg_pool3d", "nn.adaptive_avg_pool1d", "nn.adaptive_avg_pool2d",
        "nn.adaptive_avg_pool3d", "image.resize2d", "nn.layer_norm", "nn.group_norm",
        "nn.instance_norm", "nn.rms_norm", "nn.batch_norm", "nn.softmax", "nn.log_softmax",
        "nn.dropout", "squeeze", "expand_dims", "mean", "sum", "max", "min", "prod",
        "variance", "std", "argmax", "argmin", "cumsum", "cumprod", "split",
        "flip", "nn.prelu", "topk", "sort", "argsort", "nn.pad",
    )
)
"""Ops whose first operand carries the batch and whose other operands are weights: sample
``n`` of the output reads sample ``n`` of the input, unless an axis attribute names axis 0
(checked) or a reduction has no axes (all of them)."""


_BROADCAST_TO = tvm.ir.Op.get("relax.broadcast_to")


def batch_axis_break(main: relax.Function) -> str | None:
    """``None`` when axis 0 of every input of ``main`` is a batch that every op keeps and every
    output carries; else what breaks it, naming the op (e.g. ``"relax.mean reduces axis 0 of
    lv3"``). A constant of the batch's size whose samples are all alike (a class token
    expanded to the batch, then folded) counts as per sample (:func:`same_per_sample`)."""
    return batch_axis(main)[0]


def batch_axis(main: relax.Function) -> tuple[str | None, list[tvm.ir.expr.Constant]]:
    """:func:`batch_axis_break`'s answer, and the constants it read as per sample (each copy
    of a data-parallel graph reads its own slice's samples of them)."""
    per_sample: list[tvm.ir.expr.Constant] = []
    return _batch_axis_break(main, per_sample), per_sample


def _batch_axis_break(main: relax.Function, per_sample: list) -> str | None:
    params = list(main.params)
    if not params:
        return "main has no inputs"
    sizes = {_dim0(p) for p in params}
    if len(sizes) != 1 or None in sizes:
        return f"the inputs' axis 0 sizes differ or are unknown: {[_dim0(p) for p in params]}"
    batch = sizes.pop()
    batched: set[relax.Var] = set(params)
    tuples: dict[relax.Var, list[bool]] = {}
    for block in main.body.blocks:
        for binding in block.bindings:
            why = _visit(binding, batch, batched, tuples, per_sample)
            if why:
                return why
    outputs = main.body.body
    fields = outputs.fields if isinstance(outputs, relax.Tuple) else [outputs]
    for field in fields:
        if isinstance(field, relax.Var) and field in tuples and all(tuples[field]):
            continue
        if not (isinstance(field, relax.Var) and field in batched):
            return (f"output {getattr(field, 'name', field)} is not per sample (its axis 0 is "
                    "not the inputs' batch)")
    return None


def _dim0(expr: relax.Expr) -> int | None:
    shape = getattr(expr.ty, "shape", None)
    values = getattr(shape, "values", None)
    if not values or not isinstance(values[0], tvm.tirx.IntImm):
        return None
    return int(values[0])


def _shape(expr: relax.Expr) -> list[int | None] | None:
    shape = getattr(expr.ty, "shape", None)
    values = getattr(shape, "values", None)
    if values is None:
        return None
    return [int(v) if isinstance(v, tvm.tirx.IntImm) else None for v in values]


def _axes(attrs) -> list[int] | None:
    """The axes an op's ``axis`` / ``axes`` attribute names ([] when it has none; None when it
    has the attribute but leaves it unset: all axes)."""
    found: list[int] = []
    for key in ("axis", "axes"):
        if attrs is None or key not in dir(attrs):
            continue
        value = getattr(attrs, key)
        if value is None:
            return None
        values = value if isinstance(value, (list, tuple, tvm.ir.Array)) else [value]
        found += [int(v) for v in values]
    return found


def _visit(binding: relax.VarBinding, batch: int, batched: set, tuples: dict,
           per_sample: list) -> str | None:
    var, value = binding.var, binding.value
    if isinstance(value, relax.TupleGetItem):
        source = value.tuple_value
        if isinstance(source, relax.Var) and source in tuples and tuples[source][value.index]:
            batched.add(var)
        return None
    if isinstance(value, relax.Tuple):
        tuples[var] = [isinstance(f, relax.Var) and f in batched for f in value.fields]
        return None
    if isinstance(value, relax.Var):
        if value in batched:
            batched.add(var)
        return None
    if not isinstance(value, relax.Call):
        return None
    carried = [any(f in batched for f in a.fields) if isinstance(a, relax.Tuple)
               else a in batched for a in value.args]
    if not any(carried):
        if _broadcast_per_sample(binding, batch):
            batched.add(var)
        return None  # computed from weights only: the same in every copy
    if not isinstance(value.op, tvm.ir.Op):
        return f"{var.name} calls {value.op}, which data-parallel cannot look into"
    name, attrs = value.op.name, value.attrs
    where = f"{name} ({var.name})"
    if isinstance(value.args[0], tvm.ir.GlobalVar):  # call_tir: name the kernel it calls
        where = f"{name} of {value.args[0].name_hint} ({var.name})"
    out = _shape(var)
    if isinstance(var.ty, tvm.ir.TupleType):
        if name not in PER_SAMPLE_OPS or any(carried[1:]):
            return f"{where} mixes the samples of its operands"
        axes = _axes(attrs)
        if axes is None or any(_is_axis0(a, value.args[0]) for a in axes):
            return f"{where} works along axis 0, the batch"
        # batch_norm's other fields are its running statistics, per channel
        tuples[var] = [i == 0 or name != "relax.nn.batch_norm"
                       for i in range(len(var.ty.fields))]
        return None
    if out is None or not out or out[0] != batch:
        return f"{where} gives axis 0 of size {out[0] if out else None}, not the batch {batch}"
    rank = len(out)
    if elementwise(value):
        for arg, is_batched in zip(value.args, carried, strict=True):
            shape = _shape(arg) if isinstance(arg, (relax.Var, tvm.ir.expr.Constant)) else None
            if shape is None or is_batched:
                if is_batched and len(shape or []) != rank:
                    return f"{where} broadcasts a batched operand along the batch"
                continue
            if len(shape) == rank and shape[0] != 1:
                if not same_per_sample(arg, batch):
                    return f"{where} reads an operand of batch size that is not per sample"
                per_sample.append(arg)
        batched.add(var)
        return None
    if name == "relax.matmul":
        a, b = (_shape(x) for x in value.args)
        if carried[1] and not (carried[0] and len(a) == len(b) == rank >= 3):
            return f"{where} reduces over the batch axis of its right operand"
        if carried[0] and len(a) < 2:
            return f"{where} reduces over the batch axis of its 1-D left operand"
        if carried[0] and len(a) < rank:
            return f"{where} broadcasts its batched left operand"
        batched.add(var)
        return None
    if name == "relax.reshape":
        data = _shape(value.args[0])
        if not carried[0] or not data or data[0] != batch:
            return f"{where} does not keep the batch axis"
        batched.add(var)
        return None
    if name == "relax.permute_dims":
        axes = attrs.axes
        if axes is None or int(axes[0]) % rank != 0:
            return f"{where} moves the batch axis"
        batched.add(var)
        return None
    if name == "relax.concat":
        fields = value.args[0].fields if isinstance(value.args[0], relax.Tuple) else []
        if not fields or not all((isinstance(f, relax.Var) and f in batched)
                                 or same_per_sample(f, batch) for f in fields):
            return f"{where} joins batched and unbatched values"
        per_sample += [f for f in fields if same_per_sample(f, batch)]
        if int(attrs.axis) % rank == 0:
            return f"{where} concatenates along the batch axis"
        batched.add(var)
        return None
    if name == "relax.take":
        data, indices = value.args
        data_batched, indices_batched = carried
        axis = int(attrs.axis) if attrs.axis is not None else None
        if data_batched and not indices_batched and axis is not None and axis % len(
                _shape(data)) != 0:
            batched.add(var)
            return None
        if indices_batched and not data_batched and axis is not None and axis % len(
                _shape(data)) == 0 and len(_shape(indices)) >= 1:
            batched.add(var)
            return None
        return f"{where} gathers along the batch axis"
    if name == "relax.strided_slice":
        axes = value.args[1]
        axes = axes.values if isinstance(axes, relax.ShapeExpr) else getattr(axes, "fields", None)
        if axes is None or any(_is_axis0(int(getattr(a, "value", a)), value.args[0])
                               for a in axes):
            return f"{where} slices the batch axis"
        batched.add(var)
        return None
    if name == "relax.broadcast_to":
        data = _shape(value.args[0])
        if not data or len(data) != rank or data[0] != batch:
            return f"{where} broadcasts a batched operand along the batch"
        batched.add(var)
        return None
    if name in PER_SAMPLE_OPS:
        if any(carried[1:]):
            return f"{where} mixes the samples of its operands"
        axes = _axes(attrs)
        # expand_dims names the new axes' positions in its output, the others in their input.
        axis_of = var if name == "relax.expand_dims" else value.args[0]
        if axes is None or any(_is_axis0(a, axis_of) for a in axes):
            return f"{where} works along axis 0, the batch"
        if name == "relax.nn.pad" and any(int(p) for p in attrs.pad_width[:2]):
            return f"{where} pads the batch axis"
        batched.add(var)
        return None
    return f"{where} is not known to keep the batch axis"


def _broadcast_per_sample(binding: relax.VarBinding, batch: int) -> bool:
    """Whether ``binding`` broadcasts a value without the batch to it (a class token expanded
    to the batch, as a PyTorch program keeps it): its samples are all alike, and each copy
    broadcasts it to its own slice's size (``ReplicateDataParallel`` resizes the shape)."""
    value = binding.value
    if not value.op.same_as(_BROADCAST_TO):
        return False
    data, out = _shape(value.args[0]), _shape(binding.var)
    return bool(data is not None and out and out[0] == batch
                and (len(data) < len(out) or data[0] == 1))


def same_per_sample(expr: relax.Expr, batch: int) -> bool:
    """Whether ``expr`` is a constant whose axis 0 is ``batch`` samples all alike."""
    if not isinstance(expr, tvm.ir.expr.Constant) or _dim0(expr) != batch:
        return False
    array = expr.value.numpy()
    return bool((array == array[:1]).all())


def _is_axis0(axis: int, data: relax.Expr) -> bool:
    shape = _shape(data) or []
    return axis % max(len(shape), 1) == 0
