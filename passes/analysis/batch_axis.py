"""Whether axis 0 of ``main``'s inputs is a batch: every sample computed on its own.

Data parallelism cuts the inputs along axis 0 and runs a copy of the graph on each slice; that
equals the whole graph only if no op mixes samples (a reduction, softmax or concat over the
batch, a reshape that interleaves the samples with other entries, a matmul that reduces over
the batch...). :func:`batch_axis_break` follows the batch from the inputs through ``main``
wherever the ops move it (a permute to another axis, as ``nn.MultiheadAttention`` runs sequence
first; a reshape folding it with the axis after it, as a Swin block folds its windows into the
batch: :data:`Position`) and names the first op that does not keep it, conservatively: an op it
does not know breaks it.
"""

from __future__ import annotations

import numpy as np
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


_LAYOUT_OPS = frozenset(
    f"relax.{name}" for name in (
        "nn.conv1d", "nn.conv2d", "nn.conv3d", "nn.conv1d_transpose", "nn.conv2d_transpose",
        "nn.max_pool1d", "nn.max_pool2d", "nn.max_pool3d", "nn.avg_pool1d", "nn.avg_pool2d",
        "nn.avg_pool3d", "nn.adaptive_avg_pool1d", "nn.adaptive_avg_pool2d",
        "nn.adaptive_avg_pool3d", "image.resize2d", "nn.group_norm", "nn.instance_norm",
        "nn.batch_norm", "nn.prelu",
    )
)
"""Per-sample ops whose layout puts the batch on axis 0 (N of NCHW...)."""

PER_SAMPLE_OPS = _LAYOUT_OPS | frozenset(
    f"relax.{name}" for name in (
        "nn.layer_norm", "nn.rms_norm", "nn.softmax", "nn.log_softmax", "nn.dropout", "squeeze",
        "expand_dims", "mean", "sum", "max", "min", "prod", "variance", "std", "argmax",
        "argmin", "cumsum", "cumprod", "split", "flip", "topk", "sort", "argsort", "nn.pad",
    )
)
"""Ops whose first operand carries the batch and whose other operands are weights: sample
``n`` of the output reads sample ``n`` of the input, unless an axis attribute names the batch's
axis (checked) or a reduction has no axes (all of them)."""


_BROADCAST_TO = tvm.ir.Op.get("relax.broadcast_to")


_REDUCTIONS = frozenset(f"relax.{name}" for name in (
    "mean", "sum", "max", "min", "prod", "variance", "std", "argmax", "argmin"))

Position = tuple[int, tuple[int, int]]
"""Where the batch lies in a value: ``(axis, (outer, inner))``, the batch a factor of ``axis``
(of size ``outer * batch * inner``, entry ``(o * batch + b) * inner + i`` of it sample ``b``'s):
each sample's ``inner`` entries together, as when a reshape folds the batch with the axis after
it (a Swin block's windows), and ``outer`` such blocks of all the samples, as when it folds an
axis before it with the batch (``nn.MultiheadAttention`` flattens its tokens and the batch to
the rows of its output projection)."""

ALONE = (1, 1)
"""The span of a batch that is a whole axis."""


def batch_axis_break(main: relax.Function) -> str | None:
    """``None`` when axis 0 of every input of ``main`` (or else axis 1: a sequence-first model)
    is a batch that every op keeps (on whichever axis the ops move it to) and every output
    carries; else what breaks axis 0, naming the op (e.g. ``"relax.mean (lv3) works along
    axis 0, the batch"``). A constant of the batch's size whose samples are all alike (a class
    token expanded to the batch, then folded) counts as per sample (:func:`same_per_sample`)."""
    return batch_axis(main)[0]


def batch_axis(main: relax.Function
               ) -> tuple[str | None, list[tvm.ir.expr.Constant], dict[relax.Var, Position]]:
    """:func:`batch_axis_break`'s answer, the constants it read as per sample (each copy of a
    data-parallel graph reads its own slice's samples of them), and the batch's
    :data:`Position` in each Var of ``main`` that carries it."""
    first = None
    for axis in (0, 1):  # batch first, else sequence first (nn.Transformer's default)
        per_sample: list[tvm.ir.expr.Constant] = []
        batched: dict[relax.Var, Position] = {}
        broken = _batch_axis_break(main, per_sample, batched, axis)
        if broken is None:
            return None, per_sample, batched
        first = first or (broken, per_sample, batched)
    return first


def _batch_axis_break(main: relax.Function, per_sample: list, batched: dict, axis: int
                      ) -> str | None:
    """Why axis ``axis`` of ``main``'s inputs is not a batch, or None when it is (``batched``
    then holds its position in every value that carries it)."""
    params = list(main.params)
    if not params:
        return "main has no inputs"
    sizes = [(_shape(p) or [])[axis:axis + 1] for p in params]
    if any(len(s) != 1 or s[0] is None for s in sizes) or len({s[0] for s in sizes}) != 1:
        return f"the inputs' axis {axis} sizes differ or are unknown: {sizes}"
    batch = sizes[0][0]
    if axis and batch < 2:
        return f"axis {axis} of the inputs has size {batch}"
    batched.update(dict.fromkeys(params, (axis, ALONE)))
    tuples: dict[relax.Var, list[Position | None]] = {}
    for block in main.body.blocks:
        for binding in block.bindings:
            why = _visit(binding, batch, batched, tuples, per_sample)
            if why:
                return why
    outputs = main.body.body
    fields = outputs.fields if isinstance(outputs, relax.Tuple) else [outputs]
    for field in fields:
        if isinstance(field, relax.Var) and field in tuples and all(
                p is not None and p[1] == ALONE for p in tuples[field]):
            continue
        if not (isinstance(field, relax.Var) and batched.get(field, (0, None))[1] == ALONE):
            return (f"output {getattr(field, 'name', field)} is not per sample (no axis of it "
                    "is the inputs' batch)")
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


def _visit(binding: relax.VarBinding, batch: int, batched: dict, tuples: dict,
           per_sample: list) -> str | None:
    var, value = binding.var, binding.value
    if isinstance(value, relax.TupleGetItem):
        source = value.tuple_value
        if isinstance(source, relax.Var) and source in tuples and \
                tuples[source][value.index] is not None:
            batched[var] = tuples[source][value.index]
        return None
    if isinstance(value, relax.Tuple):
        tuples[var] = [batched.get(f) if isinstance(f, relax.Var) else None
                       for f in value.fields]
        return None
    if isinstance(value, relax.Var):
        if value in batched:
            batched[var] = batched[value]
        return None
    if not isinstance(value, relax.Call):
        return None
    carried = [any(f in batched for f in a.fields) if isinstance(a, relax.Tuple)
               else a in batched for a in value.args]
    if not any(carried):
        if _broadcast_per_sample(binding, batch):
            batched[var] = (0, ALONE)
        return None  # computed from weights only: the same in every copy
    if not isinstance(value.op, tvm.ir.Op):
        return f"{var.name} calls {value.op}, which data-parallel cannot look into"
    name = value.op.name
    where = f"{name} ({var.name})"
    if isinstance(value.args[0], tvm.ir.GlobalVar):  # call_tir: name the kernel it calls
        where = f"{name} of {value.args[0].name_hint} ({var.name})"
    found = _position(value, var, batch, batched, tuples, per_sample, where)
    if isinstance(found, str):
        return found
    if isinstance(var.ty, tvm.ir.TupleType):
        tuples[var] = found
        return None
    out = _shape(var)
    axis, (outer, inner) = found
    if out is None or not 0 <= axis < len(out) or out[axis] != outer * batch * inner:
        size = out[axis] if out is not None and 0 <= axis < len(out) else None
        return (f"{where} gives axis {axis} of size {size}, not the batch {batch}"
                + (f" times {outer * inner}" if outer * inner > 1 else ""))
    batched[var] = found
    return None


def _position(call: relax.Call, var: relax.Var, batch: int, batched: dict, tuples: dict,
              per_sample: list, where: str) -> Position | list | str:
    """Where ``call`` (bound to ``var``) puts the batch its operands carry (a list of them for
    a tuple), or why it does not keep it."""
    name, attrs, args = call.op.name, call.attrs, call.args
    out = _shape(var)
    data = args[0]
    if isinstance(var.ty, tvm.ir.TupleType):
        if name not in PER_SAMPLE_OPS or any(a in batched for a in args[1:]
                                             if isinstance(a, relax.Var)):
            return f"{where} mixes the samples of its operands"
        axis, span = batched[data]
        axes = _axes(attrs)
        if axes is None or axis in [a % len(_shape(data)) for a in axes]:
            return f"{where} works along axis {axis}, the batch"
        if name in _LAYOUT_OPS and axis != 0:
            return f"{where} needs the batch on axis 0, not {axis}"
        # batch_norm's other fields are its running statistics, per channel
        return [(axis, span) if i == 0 or name != "relax.nn.batch_norm" else None
                for i in range(len(var.ty.fields))]
    if not isinstance(var.ty, relax.TensorType):
        return f"{where} reads the shape of a batched value, which each copy's slice changes"
    if out is None or any(isinstance(a, relax.Var) and _shape(a) is None for a in args):
        return f"{where} reads or gives a tensor of unknown rank"
    rank = len(out)
    if elementwise(call):
        return _elementwise(call, batch, batched, per_sample, where, rank)
    if name == "relax.matmul":
        return _matmul(call, batched, where, rank)
    if name in ("relax.reshape", "relax.permute_dims", "relax.broadcast_to",
                "relax.strided_slice"):
        if any(isinstance(a, relax.Var) and a in batched for a in args[1:]):
            return f"{where} mixes the samples of its operands"
        axis, span = batched[data]
        shape = _shape(data)
        if name in ("relax.reshape", "relax.broadcast_to") and not isinstance(
                args[1], relax.ShapeExpr):
            return f"{where} takes its shape from a value computed as the model runs"
        if name == "relax.reshape":
            # The entries before the batch's and after it, in row-major order: the output axis
            # holding the batch is the one that starts inside the entries before it and holds
            # the batch whole.
            before = int(np.prod(shape[:axis])) * span[0]
            for k in range(len(out)):
                start = int(np.prod(out[:k]))
                if before % start == 0 and out[k] % (before // start * batch) == 0:
                    return k, (before // start, out[k] // (before // start * batch))
            return f"{where} interleaves the samples with other entries"
        if name == "relax.permute_dims":
            axes = list(range(rank))[::-1] if attrs.axes is None else [
                int(a) % rank for a in attrs.axes]
            return axes.index(axis), span
        if name == "relax.broadcast_to":
            moved = axis + rank - len(shape)
            if out[moved] != shape[axis]:
                return f"{where} broadcasts a batched operand along the batch"
            return moved, span
        axes = args[1]
        axes = axes.values if isinstance(axes, relax.ShapeExpr) else getattr(axes, "fields", None)
        if axes is None or any(int(getattr(a, "value", a)) % len(shape) == axis for a in axes):
            return f"{where} slices the batch axis"
        return axis, span
    if name == "relax.concat":
        fields = data.fields if isinstance(data, relax.Tuple) else []
        positions = {batched[f] for f in fields if isinstance(f, relax.Var) and f in batched}
        alike = [f for f in fields if not (isinstance(f, relax.Var) and f in batched)]
        if len(positions) != 1 or (alike and (positions != {(0, ALONE)} or not all(
                same_per_sample(f, batch) for f in alike))):
            return f"{where} joins batched and unbatched values"
        per_sample += alike
        axis, span = positions.pop()
        if int(attrs.axis) % rank == axis:
            return f"{where} concatenates along the batch axis"
        return axis, span
    if name == "relax.take":
        indices = args[1]
        taken = None if attrs.axis is None else int(attrs.axis) % len(_shape(data))
        if taken is None:
            return f"{where} gathers along the batch axis"
        if data in batched and indices not in batched:
            axis, span = batched[data]
            if taken == axis:
                return f"{where} gathers along the batch axis"
            return (axis, span) if axis < taken else (axis - 1 + len(_shape(indices)), span)
        if indices in batched and data not in batched:
            axis, span = batched[indices]
            return taken + axis, span
        return f"{where} gathers along the batch axis"
    if name in PER_SAMPLE_OPS:
        return _per_sample_op(call, var, batched, where)
    return f"{where} is not known to keep the batch axis"


def _elementwise(call: relax.Call, batch: int, batched: dict, per_sample: list, where: str,
                 rank: int) -> Position | str:
    """The batch's position in an elementwise op's output: where its batched operands put it,
    aligned as numpy broadcasts; its other operands must be broadcast along it (or be a
    constant of per-sample rows alike, with the batch on axis 0)."""
    positions = set()
    for arg in call.args:
        if isinstance(arg, relax.Var) and arg in batched:
            axis, span = batched[arg]
            positions.add((axis + rank - len(_shape(arg)), span))
    if len(positions) != 1:
        return f"{where} combines operands batched along different axes"
    axis, span = positions.pop()
    for arg in call.args:
        if (isinstance(arg, relax.Var) and arg in batched) or not isinstance(
                arg, (relax.Var, tvm.ir.expr.Constant)):
            continue
        shape = _shape(arg)
        if shape is None:
            continue
        aligned = axis - (rank - len(shape))
        if aligned < 0 or shape[aligned] == 1:
            continue
        if (axis, span) == (0, ALONE) and len(shape) == rank and same_per_sample(arg, batch):
            per_sample.append(arg)
            continue
        return f"{where} reads an operand of batch size that is not per sample"
    return axis, span


def _matmul(call: relax.Call, batched: dict, where: str, rank: int) -> Position | str:
    """The batch's position in a matmul's output, or why it mixes samples: a batched operand's
    reduction axis is the batch, or an unbatched operand is read along it."""
    left, right = call.args
    a, b = _shape(left), _shape(right)
    if left in batched:
        axis, span = batched[left]
        if len(a) < 2 or axis == len(a) - 1:
            return f"{where} reduces over the batch axis of its left operand"
        if axis == len(a) - 2:  # its rows
            if right in batched:
                return f"{where} multiplies two operands batched along different axes"
            return (rank - 1 if len(b) == 1 else rank - 2), span
        moved = axis + rank - len(a)  # a batch axis of the product
        aligned = moved - (rank - len(b))
        if right in batched:
            if batched[right] != (aligned, span):
                return f"{where} multiplies two operands batched along different axes"
        elif aligned >= 0 and b[aligned] != 1:
            return f"{where} reads an unbatched right operand along the batch axis"
        return moved, span
    axis, span = batched[right]
    if len(b) < 2 or axis == len(b) - 2:
        return f"{where} reduces over the batch axis of its right operand"
    if axis == len(b) - 1:  # its columns
        return rank - 1, span
    moved = axis + rank - len(b)
    aligned = moved - (rank - len(a))
    if aligned >= 0 and len(a) >= 2 and a[aligned] != 1:
        return f"{where} reads an unbatched left operand along the batch axis"
    return moved, span


def _per_sample_op(call: relax.Call, var: relax.Var, batched: dict, where: str
                   ) -> Position | str:
    """The batch's position in the output of an op of :data:`PER_SAMPLE_OPS` (its first
    operand batched, the others weights), or why it does not keep it."""
    name, attrs, data = call.op.name, call.attrs, call.args[0]
    if any(isinstance(a, relax.Var) and a in batched for a in call.args[1:]):
        return f"{where} mixes the samples of its operands"
    axis, span = batched[data]
    shape, out = _shape(data), _shape(var)
    axes = _axes(attrs)
    if name == "relax.squeeze" and axes is None:
        axes = [i for i, d in enumerate(shape) if d == 1]
    if axes is None:
        return f"{where} works along axis {axis}, the batch"
    # expand_dims names the new axes' positions in its output, the others in their input.
    if name == "relax.expand_dims":
        moved = axis
        for new in sorted(a % len(out) for a in axes):
            if new <= moved:
                moved += 1
        return moved, span
    axes = [a % len(shape) for a in axes]
    if axis in axes:
        return f"{where} works along axis {axis}, the batch"
    if name in _LAYOUT_OPS and axis != 0:
        return f"{where} needs the batch on axis 0, not {axis}"
    if name == "relax.nn.pad" and any(int(p) for p in attrs.pad_width[2 * axis:2 * axis + 2]):
        return f"{where} pads the batch axis"
    if len(out) == len(shape):
        return axis, span
    if name == "relax.squeeze" or (name in _REDUCTIONS and not attrs.keepdims):
        return axis - sum(a < axis for a in axes), span
    return f"{where} changes the rank around the batch axis"


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
