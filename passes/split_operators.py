"""SplitOperators: split conv2d and matmul calls into parallel parts (tensor parallelism)."""

from __future__ import annotations

import functools
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import tvm
from tvm import relax
from tvm.relax.expr_functor import PyExprMutator, mutator

from tvm_chiplet.passes.analysis.extract_op_graph import tensor_dims
from tvm_chiplet.passes.attrs import PARTIAL_SUM
from tvm_chiplet.passes.planners.placement import (
    REDUCTION_DIMS,
    PlanningError,
    block_dims,
    blocks_by,
    tile_channels,
    tiles_by,
)

_CONV2D = tvm.ir.Op.get("relax.nn.conv2d")
_CONV2D_TRANSPOSE = tvm.ir.Op.get("relax.nn.conv2d_transpose")
_CONV3D = tvm.ir.Op.get("relax.nn.conv3d")
_MATMUL = tvm.ir.Op.get("relax.matmul")

_SUMMED_DIMS = set(REDUCTION_DIMS)


def part_name(name: str, dim: str, index: int, plain: str = "_part") -> str:
    """The name of part ``index`` of ``name`` split along ``dim``: a partial sum's
    (:data:`~.attrs.PARTIAL_SUM`) along a summed dimension, else with ``plain``."""
    return f"{name}{PARTIAL_SUM if dim in _SUMMED_DIMS else plain}{index}"


@dataclass(frozen=True)
class AnchorInfo:
    """A splittable call in ``main`` and the dimensions it can be split along.

    Attributes
    ----------
    index : int
        Anchor number: position among the conv2d / matmul bindings of ``main``'s dataflow blocks.
    op : str
        ``"conv2d"``, ``"conv2d_transpose"``, ``"conv3d"`` or ``"matmul"``.
    dims : dict of str to int
        Each dimension that can be split at this anchor (a subset of ``SPLIT_DIMS[op]``, in that
        order) and its size, the largest legal ``parts``. Empty for unsupported layouts.
    output_shape : tuple of int
        Shape of the call's result; ``-1`` for a symbolic dimension.
    activations : bool
        Whether this is a matmul with no constant operand (of two activations, such as
        attention's scores and context, or with weights passed as parameters):
        DistributeTensors can then run it following a sharded operand's layout, part by part,
        without a split of its own.
    halo : tuple of int
        A conv2d's (input rows a row band reads beyond its share, input rows): its kernel's
        extent less its stride, for a row split's halo; ``(0, 0)`` otherwise.
    """

    index: int
    op: str
    dims: dict[str, int]
    output_shape: tuple[int, ...]
    activations: bool = False
    halo: tuple[int, int] = (0, 0)


@dataclass(frozen=True)
class AnchorSplit:
    """Split anchor ``anchor`` along ``dim`` (a key of its ``AnchorInfo.dims``) into ``parts``."""

    anchor: int
    dim: str
    parts: int


def static_shape(expr: relax.Expr) -> list[int | None] | None:
    """Dimensions of a tensor-typed expression (``None`` where symbolic), or ``None`` if unknown."""
    ty = expr.ty
    if not isinstance(ty, relax.TensorType) or not isinstance(ty.shape, relax.ShapeExpr):
        return None
    dims = tensor_dims(ty)
    return None if dims is None else list(dims)


def known_shape(expr: relax.Expr) -> tuple[int, ...] | None:
    """:func:`static_shape` when every dimension is known, else None."""
    shape = static_shape(expr)
    return None if shape is None or None in shape else tuple(shape)


def replica_batches(batch: int, replicas: int) -> list[int]:
    """Batch of each replica: as equal as possible, larger ones first (7 over 3 -> 3, 2, 2)."""
    return [batch // replicas + (1 if r < batch % replicas else 0) for r in range(replicas)]


def _conv2d_dims(call: relax.Call) -> dict[str, int]:
    attrs = call.attrs
    layouts = (str(attrs.data_layout), str(attrs.kernel_layout), str(attrs.out_layout))
    data, weight, out = (static_shape(e) for e in (*call.args, call))
    if layouts != ("NCHW", "OIHW", "NCHW") or None in (data, weight, out):
        return {}
    groups = int(attrs.groups)
    sizes = {
        "batch": data[0] if out[0] is not None else None,
        # A grouped conv (depthwise or not) splits its output channels at whole groups.
        "out_channels": weight[0] if groups == 1 else groups,
        "in_channels": data[1] if groups == 1 and weight[1] is not None else None,
        "rows": out[2] if None not in (data[2], weight[2]) else None,
    }
    return {dim: size for dim, size in sizes.items() if size is not None}


def group_channels(call: relax.Call) -> tuple[int, int]:
    """(output, input) channels of each group of a conv2d or transposed conv2d: an
    output-channel split of a grouped conv counts whole groups, part ``[b, e)`` writing output
    channels ``[b * out, e * out)`` from input channels ``[b * in, e * in)``; ``(1, 1)`` for a
    plain conv, whose split counts channels."""
    groups = int(call.attrs.groups)
    if groups == 1:
        return 1, 1
    weight = static_shape(call.args[1])
    if call.op.same_as(_CONV2D_TRANSPOSE):  # IOHW: [in, out / groups, kh, kw]
        return weight[1], weight[0] // groups
    return weight[0] // groups, weight[1]


def group_slices(call: relax.Call, begin: int, end: int
                 ) -> tuple[tuple[int, int], tuple[int, int]]:
    """(input channels, output channels) of groups ``[begin, end)`` of a grouped conv2d
    (:func:`group_channels`)."""
    out, into = group_channels(call)
    return (begin * into, end * into), (begin * out, end * out)


def _ungrouped_shapes(call: relax.Call, layouts: tuple[str, str, str]
                      ) -> tuple[list, list, list] | None:
    """(data, weight, output) shapes of a conv ``call`` in ``layouts`` (data, kernel, output)
    with one group and static shapes; None otherwise."""
    attrs = call.attrs
    found = (str(attrs.data_layout), str(attrs.kernel_layout), str(attrs.out_layout))
    shapes = tuple(static_shape(e) for e in (*call.args, call))
    if found != layouts or int(attrs.groups) != 1 or None in shapes:
        return None
    return shapes


def _conv2d_transpose_dims(call: relax.Call) -> dict[str, int]:
    """A transposed conv2d (a U-Net's upsampling) splits by its output channels (its weights,
    IOHW, along axis 1; a grouped one at whole groups, each reading its own input channels: a
    learned depthwise upsampling's) or its batch; not its rows, which overlapping windows
    would share."""
    attrs = call.attrs
    found = (str(attrs.data_layout), str(attrs.kernel_layout), str(attrs.out_layout))
    data, weight, out = (static_shape(e) for e in (*call.args, call))
    if found != ("NCHW", "IOHW", "NCHW") or None in (data, weight, out):
        return {}
    groups = int(attrs.groups)
    sizes = {"batch": data[0] if out[0] is not None else None,
             "out_channels": weight[1] if groups == 1 else groups}
    return {dim: size for dim, size in sizes.items() if size is not None}


def _conv3d_dims(call: relax.Call) -> dict[str, int]:
    """A conv3d (a video or volume net's) splits by its output channels or its batch (not
    grouped: its groups would need slicing the input too)."""
    shapes = _ungrouped_shapes(call, ("NCDHW", "OIDHW", "NCDHW"))
    if shapes is None:
        return {}
    data, weight, out = shapes
    sizes = {"out_channels": weight[0], "batch": data[0] if out[0] is not None else None}
    return {dim: size for dim, size in sizes.items() if size is not None}


def conv3d_part(call: relax.Call, dim: str, begin: int, end: int, cut, keep) -> relax.Expr:
    """Part ``[begin, end)`` of ``dim`` of the conv3d ``call``: its batch (the data cut along
    axis 0) or its output channels (the weights cut along axis 0); ``cut(value, axis, begin,
    end)`` cuts an operand, ``keep(value)`` passes the other whole."""
    data, weight = call.args
    if dim == "batch":
        operands = [cut(data, 0, begin, end), keep(weight)]
    else:
        operands = [keep(data), cut(weight, 0, begin, end)]
    return relax.Call(call.op, operands, call.attrs, call.ty_args)


def _conv2d_halo(call: relax.Call) -> tuple[int, int]:
    """(rows a row band reads beyond its share, input rows) of a conv2d (see
    :attr:`AnchorInfo.halo`)."""
    data, weight = static_shape(call.args[0]), static_shape(call.args[1])
    if data is None or weight is None or None in (data[2], weight[2]):
        return 0, 0
    extent = (weight[2] - 1) * int(call.attrs.dilation[0]) + 1
    return max(extent - int(call.attrs.strides[0]), 0), data[2]


def matmul_batch_operands(a: list, b: list, out: list) -> list[int] | None:
    """Operands (0 = a, 1 = b) whose axis 0 is the output's axis 0 and is split with it.

    An operand of lower rank, or whose axis 0 has size 1 against a larger output batch, is
    broadcast along that axis and is passed whole to every part.
    """
    rank = max(len(a), len(b))
    if rank < 3 or out[0] is None:
        return None
    aligned = [i for i, shape in enumerate((a, b)) if len(shape) == rank]
    if any((a, b)[i][0] is None for i in aligned):
        return None
    return [i for i in aligned if (a, b)[i][0] == out[0]]


def _matmul_dims(call: relax.Call) -> dict[str, int]:
    a, b, out = (static_shape(e) for e in (*call.args, call))
    if None in (a, b, out):
        return {}
    sizes = {
        "batch": out[0] if matmul_batch_operands(a, b, out) is not None else None,
        "rows": a[-2] if len(a) >= 2 else None,
        "cols": b[-1] if len(b) >= 2 else None,
        "reduction": a[-1] if b[max(len(b) - 2, 0)] is not None else None,
    }
    return {dim: size for dim, size in sizes.items() if size is not None}


def anchor_bindings(mod: tvm.IRModule) -> list[tuple[relax.VarBinding, AnchorInfo]]:
    names = [gv.name_hint for gv in mod.get_global_vars()]
    if "main" not in names:
        raise PlanningError(f"SplitOperators needs a 'main' function, the module has {names}")
    found = []
    for block in mod["main"].body.blocks:
        if not isinstance(block, relax.DataflowBlock):
            continue
        for binding in block.bindings:
            call = binding.value
            if not isinstance(binding, relax.VarBinding) or not isinstance(call, relax.Call):
                continue
            if call.op.same_as(_CONV2D):
                op, dims = "conv2d", _conv2d_dims(call)
            elif call.op.same_as(_CONV2D_TRANSPOSE):
                op, dims = "conv2d_transpose", _conv2d_transpose_dims(call)
            elif call.op.same_as(_CONV3D):
                op, dims = "conv3d", _conv3d_dims(call)
            elif call.op.same_as(_MATMUL):
                op, dims = "matmul", _matmul_dims(call)
            else:
                continue
            out = static_shape(call) or []
            shape = tuple(-1 if d is None else d for d in out)
            activations = op == "matmul" and not any(isinstance(a, tvm.ir.expr.Constant)
                                                     for a in call.args)
            found.append((binding, AnchorInfo(len(found), op, dims, shape, activations,
                                              _conv2d_halo(call) if op == "conv2d" else (0, 0))))
    return found


def find_anchors(mod: tvm.IRModule) -> list[AnchorInfo]:
    """The conv2d and matmul calls of ``main`` that ``SplitOperators`` can split, in order.

    Parameters
    ----------
    mod : tvm.IRModule
        A high-level Relax module (before legalization), e.g. from ``from_onnx``.

    Returns
    -------
    list of AnchorInfo
        One per ``relax.nn.conv2d`` / ``relax.matmul`` binding of ``main``'s dataflow blocks, in
        binding order; ``AnchorInfo.index`` is the number an ``AnchorSplit`` refers to.
    """
    return [info for _, info in anchor_bindings(mod)]


def check_split(split: AnchorSplit, anchors: list[AnchorInfo]) -> None:
    if not 0 <= split.anchor < len(anchors):
        numbered = f", numbered 0..{len(anchors) - 1}" if anchors else ""
        raise PlanningError(
            f"anchor {split.anchor} is out of range: the module has {len(anchors)} anchors "
            f"(conv2d / matmul calls in main's dataflow blocks){numbered}; see find_anchors(mod)"
        )
    info = anchors[split.anchor]
    by = tiles_by(split.dim)
    if by is not None:
        channels = tile_channels(info.dims)
        _check_2d(split, info, by, ("rows", channels), "row band",
                  "a 2-D split cuts a conv2d (plain or grouped) or a matmul into row bands and "
                  "output-channel (column) slices")
        return
    by = blocks_by(split.dim)
    if by is not None:
        _check_2d(split, info, by, block_dims(info.dims), "input-channel group",
                  "a blocks split cuts the weights of a plain conv2d or of a matmul with "
                  "weights along input and output channels (reduction and columns)")
        return
    if split.dim not in info.dims:
        legal = ", ".join(info.dims) or "none (unsupported layout or symbolic shapes)"
        raise PlanningError(
            f"anchor {split.anchor} ({info.op}, output {list(info.output_shape)}) cannot be split "
            f"along {split.dim!r}: no partition strategy of {info.op} reads or writes that "
            f"layout here; legal dims here: {legal}"
        )
    size = info.dims[split.dim]
    if split.parts > size:
        raise PlanningError(
            f"anchor {split.anchor} ({info.op}) has {split.dim} of size {size}, so it cannot be "
            f"split into {split.parts} parts; use at most {size} parts"
        )


def _check_2d(split: AnchorSplit, info: AnchorInfo, by: int, dims: tuple | None, unit: str,
              what: str) -> None:
    """Check a 2-D split of ``info``: ``split.parts / by`` of ``unit`` (along ``dims[0]``) of
    ``by`` slices each (along ``dims[1]``). ``dims`` None, or its slices None: the op has no
    such split, and ``what`` says which ops do."""
    if dims is None or dims[1] is None:
        raise PlanningError(
            f"anchor {split.anchor} ({info.op}, output {list(info.output_shape)}) cannot be "
            f"split along {split.dim!r}: {what}; legal dims here: " + ", ".join(info.dims))
    outer, inner = dims
    count = split.parts // by
    if split.parts % by or count < 2:
        raise PlanningError(
            f"anchor {split.anchor} ({info.op}): a {split.dim} split needs a multiple of {by} "
            f"parts, at least {2 * by} (two {unit}s or more), not {split.parts}")
    if by > info.dims[inner] or count > info.dims[outer]:
        raise PlanningError(
            f"anchor {split.anchor} ({info.op}) has {info.dims[outer]} "
            f"{outer.replace('_', ' ')} and {info.dims[inner]} {inner.replace('_', ' ')}, so it "
            f"cannot be split into {count} {unit}s of {by} slices")


def even_bounds(size: int, parts: int) -> list[tuple[int, int]]:
    """``[begin, end)`` of each part: sizes as equal as possible, larger ones first."""
    bounds, begin = [], 0
    for part in replica_batches(size, parts):
        bounds.append((begin, begin + part))
        begin += part
    return bounds


@mutator
class _Splitter(PyExprMutator):
    """Replace each planned anchor binding by its parts and a combine bound to the same Var."""

    def __init__(self, plan: dict[relax.Var, tuple[str, list[tuple[int, int]]]]) -> None:
        super().__init__()
        self.plan = plan

    def visit_var_binding_(self, binding: relax.VarBinding) -> None:
        if binding.var not in self.plan:
            super().visit_var_binding_(binding)
            return
        dim, bounds = self.plan[binding.var]
        call = self.visit_expr(binding.value)
        name = binding.var.name
        rewrite = (_conv2d_parts if call.op.same_as(_CONV2D) else _conv2d_transpose_parts
                   if call.op.same_as(_CONV2D_TRANSPOSE) else _conv3d_parts
                   if call.op.same_as(_CONV3D) else _matmul_parts)
        parts, axis = rewrite(self, call, dim, bounds, name)
        if dim in _SUMMED_DIMS:
            combined = parts[0]
            for part in parts[1:-1]:
                combined = self.builder_.emit(relax.op.add(combined, part),
                                              f"{name}{PARTIAL_SUM}_sum")
            combined = relax.op.add(combined, parts[-1])
        else:
            combined = relax.op.concat(parts, axis=axis)
        self.builder_.emit_normalized(
            relax.VarBinding(binding.var, self.builder_.normalize(combined))
        )

    def slice_axis(self, value: relax.Expr, axis: int, bounds: tuple[int, int], name: str
                   ) -> relax.Expr:
        """``value[begin:end]`` along ``axis``: a new constant, or an emitted strided_slice."""
        begin, end = bounds
        if isinstance(value, tvm.ir.expr.Constant):
            array = value.value.numpy()
            index = [slice(None)] * array.ndim
            index[axis] = slice(begin, end)
            return relax.const(np.ascontiguousarray(array[tuple(index)]), str(value.ty.dtype))
        sliced = relax.op.strided_slice(value, axes=[axis], begin=[begin], end=[end])
        return self.builder_.emit(sliced, name)

    def pad_rows(self, value: relax.Expr, top: int, bottom: int, name: str) -> relax.Expr:
        """``value`` (NCHW) padded with zeros on H."""
        if isinstance(value, tvm.ir.expr.Constant):
            array = np.pad(value.value.numpy(), [(0, 0), (0, 0), (top, bottom), (0, 0)])
            return relax.const(array, str(value.ty.dtype))
        padded = relax.op.nn.pad(value, [0, 0, 0, 0, top, bottom, 0, 0], pad_value=0.0)
        return self.builder_.emit(padded, name)


def conv2d_like(call: relax.Call, data: relax.Expr, weight: relax.Expr, **changes) -> relax.Expr:
    """The conv2d ``call`` on ``data`` and ``weight`` (a part's slices), with its attributes
    but those in ``changes`` (e.g. ``padding``, ``groups``)."""
    attrs = call.attrs
    options = {
        "strides": [int(s) for s in attrs.strides],
        "padding": [int(p) for p in attrs.padding],
        "dilation": [int(d) for d in attrs.dilation],
        "groups": int(attrs.groups),
        "data_layout": str(attrs.data_layout),
        "kernel_layout": str(attrs.kernel_layout),
        "out_layout": str(attrs.out_layout),
        "out_dtype": attrs.out_dtype,
    }
    options.update(changes)
    return relax.op.nn.conv2d(data, weight, **options)


def conv2d_transpose_like(call: relax.Call, data: relax.Expr, weight: relax.Expr,
                          groups: int | None = None) -> relax.Expr:
    """The transposed conv2d ``call`` on ``data`` and ``weight`` (a part's slices), with its
    attributes (its ``groups`` given for a part of a grouped one)."""
    attrs = call.attrs
    return relax.op.nn.conv2d_transpose(
        data, weight, strides=[int(s) for s in attrs.strides],
        padding=[int(p) for p in attrs.padding],
        output_padding=[int(p) for p in attrs.output_padding],
        dilation=[int(d) for d in attrs.dilation],
        groups=int(attrs.groups) if groups is None else groups,
        data_layout=str(attrs.data_layout), kernel_layout=str(attrs.kernel_layout),
        out_layout=str(attrs.out_layout), out_dtype=attrs.out_dtype)


def _conv2d_transpose_parts(splitter: _Splitter, call: relax.Call, dim: str,
                            bounds: list[tuple[int, int]], name: str
                            ) -> tuple[list[relax.Var], int]:
    """The transposed conv2d of each part (its batch, or its output channels: weights along
    axis 1; of a grouped one, whole groups: their input channels, and the weights' rows of
    them), and the output axis they are concatenated along."""
    data, weight = call.args
    parts = []
    for i, (begin, end) in enumerate(bounds):
        groups = None
        if dim == "batch":
            part_data, part_weight = splitter.slice_axis(data, 0, (begin, end),
                                                         f"{name}_data{i}"), weight
        elif int(call.attrs.groups) > 1:
            inputs = group_slices(call, begin, end)[0]
            part_data = splitter.slice_axis(data, 1, inputs, f"{name}_data{i}")
            part_weight = splitter.slice_axis(weight, 0, inputs, f"{name}_weight{i}")
            groups = end - begin
        else:
            part_data, part_weight = data, splitter.slice_axis(weight, 1, (begin, end),
                                                               f"{name}_weight{i}")
        part = conv2d_transpose_like(call, part_data, part_weight, groups)
        parts.append(splitter.builder_.emit(part, part_name(name, dim, i)))
    return parts, {"batch": 0, "out_channels": 1}[dim]


def _cut_axis(splitter: _Splitter, name: str, value: relax.Expr, axis: int, begin: int,
              end: int) -> relax.Expr:
    return splitter.slice_axis(value, axis, (begin, end), name)


def _conv3d_parts(splitter: _Splitter, call: relax.Call, dim: str,
                  bounds: list[tuple[int, int]], name: str) -> tuple[list[relax.Var], int]:
    """The conv3d of each part, and the output axis they are concatenated along."""
    parts = []
    for i, (begin, end) in enumerate(bounds):
        cut = functools.partial(_cut_axis, splitter, f"{name}_cut{i}")
        part = conv3d_part(call, dim, begin, end, cut, lambda value: value)
        parts.append(splitter.builder_.emit(part, part_name(name, dim, i)))
    return parts, {"batch": 0, "out_channels": 1}[dim]


def _conv2d_parts(splitter: _Splitter, call: relax.Call, dim: str,
                  bounds: list[tuple[int, int]], name: str) -> tuple[list[relax.Var], int]:
    """The conv2d of each part, and the output axis they are concatenated along."""
    data, weight = call.args
    groups = int(call.attrs.groups)
    top, left, bottom, right = (int(p) for p in call.attrs.padding)
    stride, dilation = int(call.attrs.strides[0]), int(call.attrs.dilation[0])
    if dim == "rows" and (top or bottom):
        data = splitter.pad_rows(data, top, bottom, f"{name}_padded")
    parts = []
    for i, (begin, end) in enumerate(bounds):
        part_data, part_weight, changes = data, weight, {}
        if dim == "batch":
            part_data = splitter.slice_axis(data, 0, (begin, end), f"{name}_data{i}")
        elif dim == "out_channels" and groups > 1:
            # Groups [begin, end) of a grouped conv read only their own input channels: each
            # part is again grouped, over its own groups (a depthwise conv's: its channels).
            inputs, outputs = group_slices(call, begin, end)
            part_data = splitter.slice_axis(data, 1, inputs, f"{name}_data{i}")
            part_weight = splitter.slice_axis(weight, 0, outputs, f"{name}_weight{i}")
            changes = {"groups": end - begin}
        elif dim == "in_channels":
            part_data = splitter.slice_axis(data, 1, (begin, end), f"{name}_data{i}")
            part_weight = splitter.slice_axis(weight, 1, (begin, end), f"{name}_weight{i}")
        elif dim == "out_channels":
            part_weight = splitter.slice_axis(weight, 0, (begin, end), f"{name}_weight{i}")
        else:
            # Output rows [begin, end) read the input rows under them plus the kernel's halo.
            extent = (static_shape(weight)[2] - 1) * dilation + 1
            rows = (begin * stride, (end - 1) * stride + extent)
            part_data = splitter.slice_axis(data, 2, rows, f"{name}_data{i}")
            changes = {"padding": [0, left, 0, right]}
        part = conv2d_like(call, part_data, part_weight, **changes)
        parts.append(splitter.builder_.emit(part, part_name(name, dim, i)))
    return parts, {"batch": 0, "out_channels": 1, "in_channels": 1, "rows": 2}[dim]


def _matmul_parts(splitter: _Splitter, call: relax.Call, dim: str,
                  bounds: list[tuple[int, int]], name: str) -> tuple[list[relax.Var], int]:
    """The matmul of each part, and the output axis they are concatenated along."""
    operands = list(call.args)
    a, b, out = (static_shape(e) for e in (*operands, call))
    # The axis of each operand that is sliced (None: passed whole) and the output's axis.
    if dim == "batch":
        sliced = matmul_batch_operands(a, b, out)
        axes = [0 if i in sliced else None for i in range(2)]
        out_axis = 0
    elif dim == "rows":
        axes = [len(a) - 2, None]
        out_axis = len(out) - (1 if len(b) == 1 else 2)
    elif dim == "cols":
        axes = [None, len(b) - 1]
        out_axis = len(out) - 1
    else:
        axes = [len(a) - 1, max(len(b) - 2, 0)]
        out_axis = 0
    parts = []
    for i, span in enumerate(bounds):
        args = [
            operand if axis is None
            else splitter.slice_axis(operand, axis, span, f"{name}_{role}{i}")
            for operand, axis, role in zip(operands, axes, ("a", "b"), strict=True)
        ]
        part = relax.Call(call.op, args, call.attrs)
        parts.append(splitter.builder_.emit(part, part_name(name, dim, i)))
    return parts, out_axis


@tvm.transform.module_pass(opt_level=0, name="SplitOperators")
class SplitOperators:
    """Split conv2d and matmul calls of ``main`` into parts that can run on different clusters.

    Each ``AnchorSplit`` names an anchor (the n-th ``relax.nn.conv2d`` / ``relax.matmul`` binding
    of ``main``'s dataflow blocks, see :func:`find_anchors`), a dimension and a part count. The
    anchor's binding is replaced, in place, by one call per part on slices of its operands (sizes
    as equal as possible, larger first) and a combine bound to the original Var, so later uses
    are untouched: ``concat`` for batch, out_channels, rows and cols; a chain of ``add`` for
    in_channels and reduction. Constant operands (weights) are sliced at rewrite time into new
    constants; other operands through ``strided_slice``. A conv2d row split pads H explicitly
    and gives each part its input rows plus the kernel's halo. Run it on the high-level module,
    before ReduceGraph.

    Parameters
    ----------
    splits : sequence of AnchorSplit
        At most one per anchor. ``parts == 1`` leaves the anchor as it is; an empty sequence
        leaves the module as it is.

    Raises
    ------
    PlanningError
        At construction for a duplicate anchor or ``parts < 1``; when applied, for an anchor out
        of range, a dimension not legal at that anchor or more parts than the dimension's size.

    Example
    -------
    ``y = R.matmul(x, w)`` with ``w: [8, 6]`` and ``AnchorSplit(0, "cols", 2)`` becomes
    ``w0 = R.strided_slice(w, [1], [0], [3]); y0 = R.matmul(x, w0); w1 = ...;
    y1 = R.matmul(x, w1); y = R.concat((y0, y1), axis=1)``.
    """

    def __init__(self, splits: Sequence[AnchorSplit]) -> None:
        splits = tuple(splits)
        for split in splits:
            if not isinstance(split, AnchorSplit):
                raise TypeError(f"splits must hold AnchorSplit objects, got {split!r}")
            for field, kind in (("anchor", int), ("dim", str), ("parts", int)):
                value = getattr(split, field)
                if not isinstance(value, kind) or isinstance(value, bool):
                    raise TypeError(
                        f"AnchorSplit.{field} must be {kind.__name__}, got {value!r} in {split}"
                    )
            if split.parts < 1:
                raise PlanningError(
                    f"anchor {split.anchor} asks for {split.parts} parts; parts must be >= 1 "
                    "(1 leaves the anchor unsplit)"
                )
        anchors = [s.anchor for s in splits]
        duplicates = sorted({a for a in anchors if anchors.count(a) > 1})
        if duplicates:
            raise PlanningError(
                f"anchor(s) {duplicates} appear more than once in the splits; give one "
                "AnchorSplit per anchor"
            )
        self.splits = splits

    def transform_module(self, mod: tvm.IRModule, _ctx: tvm.transform.PassContext) -> tvm.IRModule:
        if not self.splits:
            return mod
        anchors = anchor_bindings(mod)
        infos = [info for _, info in anchors]
        for split in self.splits:
            check_split(split, infos)
        plan = {
            anchors[s.anchor][0].var: (s.dim, even_bounds(infos[s.anchor].dims[s.dim], s.parts))
            for s in self.splits
            if s.parts > 1
        }
        if not plan:
            return mod
        main_gv = mod.get_global_var("main")
        main = _Splitter(plan).visit_expr(mod["main"])
        functions = {gv: main if gv.same_as(main_gv) else f for gv, f in mod.functions_items()}
        return tvm.IRModule(functions, attrs=mod.attrs, global_infos=mod.global_infos)
