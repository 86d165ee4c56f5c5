"""GroupNormByChannels: a group norm (an op, or written over a flattened view of each group)
takes its statistics channel by channel on the NCHW image instead."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import tvm
from tvm import relax
from tvm.relax.expr_functor import PyExprMutator, mutator

from tvm_chiplet.passes.analysis.batch_axis import elementwise
from tvm_chiplet.passes.distribute_tensors import prepare_for_splits
from tvm_chiplet.passes.rewrite_calls import main_values, rewrite_main, value_users
from tvm_chiplet.passes.split_operators import known_shape

_RESHAPE = tvm.ir.Op.get("relax.reshape")
_GROUP_NORM = tvm.ir.Op.get("relax.nn.group_norm")
_STATISTICS = ("relax.mean", "relax.variance")


@tvm.transform.module_pass(opt_level=0, name="GroupNormByChannels")
class GroupNormByChannels:
    """Rewrite each group norm of ``main`` that PyTorch's ONNX export writes as a reshape of an
    NCHW image ``x`` to ``[N, G, C/G*H*W]``, an instance norm of that (a mean and a variance
    over its last axis, elementwise ops with values of one per group), and a reshape back to
    ``x``'s shape, as the same ops on ``x`` itself: each group's mean is the mean of its
    channels' means over the rows and columns (:func:`group_mean`), and a value of one per
    group is repeated for each of its channels. A ``group_norm`` op over an NCHW image's rows
    and columns (ONNX's GroupNormalization, or torch's ``GroupNorm`` imported by TVM's own
    frontends) becomes those ops too. The result is the same, to rounding.

    Flattened, every group spans all the rows of the image, so a split of its rows or a 2-D
    split (row bands by channel slices) cannot follow the reshape and gathers the whole image on
    one cluster, at every group norm (a diffusion U-Net has one after each conv). On the image,
    the means over rows and columns are reduced tile by tile where the tiles lie
    (DistributeTensors), and only the means of the channels cross; the rest is elementwise.

    A region is rewritten only when every use of its flattened values is one of those ops, or
    the reshape back.

    Example
    -------
    ``g = R.reshape(x, [1, 8, L])``, ``m = R.mean(g, axis=[2], keepdims=True)``, ``d =
    R.subtract(g, m)``, ``y = R.reshape(d, [1, 32, H, W])`` becomes ``d = R.subtract(x,
    group_mean(R.mean(x, axis=[2, 3], keepdims=True)))``.
    """

    def transform_module(self, mod: tvm.IRModule, _ctx: tvm.transform.PassContext) -> tvm.IRModule:
        if "main" not in [gv.name_hint for gv in mod.get_global_vars()]:
            return mod
        if not any(_grouping(value) or _norm_grouping(value)
                   for value in main_values(mod).values()):
            return mod
        prepared = prepare_for_splits(mod)  # the per-group scales, folded to constants
        values = main_values(prepared)
        users = value_users(values)
        regions = {}
        for var, value in values.items():
            grouping = _grouping(value)
            region = grouping and _region(var, grouping, values, users)
            if region:
                regions.update(dict.fromkeys(region, grouping))
            elif _norm_grouping(value):
                regions[var] = _norm_grouping(value)
        if not regions:
            return mod
        return rewrite_main(prepared, _ByChannels(prepared, regions))


@dataclass(frozen=True)
class _Grouping:
    """An NCHW image's ``shape`` viewed as ``groups`` groups of its channels, flattened."""

    shape: tuple[int, ...]
    groups: int

    @property
    def flat(self) -> tuple[int, int, int]:
        n, c, h, w = self.shape
        return n, self.groups, c // self.groups * h * w

    @property
    def stat(self) -> tuple[int, int, int]:
        return self.flat[0], self.groups, 1


def _grouping(value: relax.Expr) -> _Grouping | None:
    """The grouping when ``value`` reshapes a 4-D image ``[N, C, H, W]`` of more than one
    pixel to ``[N, G, C/G*H*W]`` (``G`` dividing ``C``), else None."""
    if not (isinstance(value, relax.Call) and value.op.same_as(_RESHAPE)):
        return None
    data, out = known_shape(value.args[0]), known_shape(value)
    if data is None or out is None or len(data) != 4 or len(out) != 3:
        return None
    n, c, h, w = data
    groups = out[1]
    if out[0] != n or groups < 1 or c % groups or out[2] != c // groups * h * w or h * w == 1:
        return None
    return _Grouping(tuple(data), groups)


def _norm_grouping(value: relax.Expr) -> _Grouping | None:
    """The grouping of a ``group_norm`` of an NCHW image of more than one pixel over its rows
    and columns (TVM's import of ONNX's GroupNormalization, or of torch's ``GroupNorm``), else
    None. Only with its scale and shift: TVM's kernel applies them even when told not to, so a
    rewrite that did not would change the result."""
    if not (isinstance(value, relax.Call) and value.op.same_as(_GROUP_NORM)):
        return None
    if not (value.attrs.center and value.attrs.scale):
        return None
    shape, attrs = known_shape(value.args[0]), value.attrs
    if shape is None or len(shape) != 4 or shape[2] * shape[3] == 1 or int(
            attrs.channel_axis) % 4 != 1 or sorted(int(a) % 4 for a in attrs.axes) != [2, 3]:
        return None
    return _Grouping(tuple(shape), int(attrs.num_groups))


def _per_group(operand: relax.Expr, grouping: _Grouping) -> bool:
    """Whether ``operand`` is a constant of one value per group, or one for all (broadcast
    along each group's flattened elements)."""
    shape = known_shape(operand)
    if not isinstance(operand, tvm.ir.expr.Constant) or shape is None:
        return False
    if int(np.prod(shape)) == 1:
        return True
    return len(shape) <= 3 and shape[-1] == 1 and len(shape) >= 2 and shape[-2] == \
        grouping.groups and all(d == 1 for d in shape[:-2])


def _region(start: relax.Var, grouping: _Grouping, values: dict, users: dict
            ) -> list[relax.Var] | None:
    """The Vars from ``start`` (the reshape to groups) to the reshapes back, when every use of
    a flattened value or a statistic of it is an op :class:`GroupNormByChannels` rewrites;
    else None."""
    kinds = {start: "flat"}
    region = [start]
    order = {var: i for i, var in enumerate(values)}
    pending = sorted(users.get(start, []), key=order.__getitem__)
    ends = 0
    while pending:
        var = pending.pop(0)
        if var in kinds:
            continue
        value = values[var]
        if not isinstance(value, relax.Call):
            return None
        shape = known_shape(var)
        inside = [a for a in value.args if isinstance(a, relax.Var) and a in kinds]
        if value.op.same_as(_RESHAPE):
            if shape != grouping.shape or kinds[inside[0]] != "flat":
                return None
            kinds[var] = "end"
            ends += 1
        elif value.op.name in _STATISTICS:
            axes = value.attrs.axis
            if (kinds[inside[0]] != "flat" or axes is None or [int(a) % 3 for a in axes] != [2]
                    or not value.attrs.keepdims):
                return None
            kinds[var] = "stat"
        elif elementwise(value) and shape in (grouping.flat, grouping.stat):
            others = [a for a in value.args if not (isinstance(a, relax.Var) and a in kinds)]
            if not all(_per_group(a, grouping) for a in others):
                return None
            kinds[var] = "flat" if shape == grouping.flat else "stat"
        else:
            return None
        region.append(var)
        if kinds[var] != "end":
            pending = sorted({*pending, *users.get(var, [])}, key=order.__getitem__)
    return region if ends else None


def group_mean(means: relax.Expr, grouping: _Grouping, bb: relax.BlockBuilder) -> relax.Expr:
    """Per-channel ``means`` (``[N, C, 1, 1]``) averaged over each group's channels, taken
    again for each of them (``[N, C, 1, 1]``). Repeated by a ``take``, not a reshape: fused into
    the elementwise ops that read it, a reshape would name them after itself, and the planners
    read a fused reshape as breaking a split of the rows (``layouts._BREAKS``)."""
    n, c, _, _ = grouping.shape
    g = grouping.groups
    grouped = bb.emit(relax.op.reshape(means, [n, g, c // g, 1]))
    averaged = bb.emit(relax.op.mean(grouped, axis=[2], keepdims=True))
    group_of = relax.const(np.arange(c, dtype="int64") // (c // g))
    return relax.op.take(averaged, group_of, axis=1, mode="clip")  # in range: no warning


@mutator
class _ByChannels(PyExprMutator):
    def __init__(self, mod: tvm.IRModule, regions: dict) -> None:
        super().__init__(mod)
        self.regions = regions
        self.means: dict[relax.Expr, relax.Expr] = {}  # of each image, for its variance too

    def visit_var_binding_(self, binding: relax.VarBinding) -> None:
        grouping = self.regions.get(binding.var)
        if grouping is None:
            super().visit_var_binding_(binding)
            return
        value = binding.value
        if value.op.same_as(_GROUP_NORM):
            self.set_var_remap(binding.var, self._group_norm(value, grouping, binding.var.name))
            return
        operands = [self._operand(a, grouping) for a in value.args]
        if value.op.same_as(_RESHAPE):  # to groups, or back: the image itself
            self.set_var_remap(binding.var, operands[0])
        elif value.op.name == "relax.mean":
            self.set_var_remap(binding.var, self._mean(operands[0], grouping))
        elif value.op.name == "relax.variance":
            self.set_var_remap(binding.var, self._variance(operands[0], grouping))
        else:
            self.set_var_remap(binding.var, self.builder_.emit(
                relax.Call(value.op, operands, value.attrs), binding.var.name))

    def _mean(self, image: relax.Expr, grouping: _Grouping) -> relax.Expr:
        """The mean of each group of ``image``, per channel (``[N, C, 1, 1]``), once per image."""
        if image not in self.means:
            bb = self.builder_
            self.means[image] = bb.emit(group_mean(
                bb.emit(relax.op.mean(image, axis=[2, 3], keepdims=True)), grouping, bb))
        return self.means[image]

    def _variance(self, image: relax.Expr, grouping: _Grouping) -> relax.Expr:
        """The variance of each group of ``image``, per channel: the mean of its squared
        deviations from the group's mean."""
        bb = self.builder_
        deviation = bb.emit(relax.op.subtract(image, self._mean(image, grouping)))
        squares = bb.emit(relax.op.mean(relax.op.square(deviation), axis=[2, 3], keepdims=True))
        return bb.emit(group_mean(squares, grouping, bb))

    def _group_norm(self, call: relax.Call, grouping: _Grouping, name: str) -> relax.Expr:
        """``group_norm`` ``call`` as the ops on its image: centred by the group's mean, scaled
        by its standard deviation, then by ``gamma`` and shifted by ``beta`` per channel."""
        bb, attrs = self.builder_, call.attrs
        image = self.visit_expr(call.args[0])
        epsilon = relax.const(float(attrs.epsilon), str(call.args[0].ty.dtype))
        deviation = bb.emit(relax.op.subtract(image, self._mean(image, grouping)))
        out = relax.op.divide(deviation, relax.op.sqrt(relax.op.add(
            self._variance(image, grouping), epsilon)))
        out = relax.op.multiply(bb.emit(out), self._per_channel(call.args[1]))
        return bb.emit(relax.op.add(bb.emit(out), self._per_channel(call.args[2])), name)

    def _per_channel(self, arg: relax.Expr) -> relax.Expr:
        """A ``[C]`` scale or shift as ``[C, 1, 1]``, broadcast along an image's rows and
        columns (a constant reshaped here, not by an op)."""
        if isinstance(arg, tvm.ir.expr.Constant):
            array = arg.value.numpy()
            return relax.const(array.reshape(array.size, 1, 1), str(arg.ty.dtype))
        return relax.op.reshape(self.visit_expr(arg), [known_shape(arg)[0], 1, 1])

    def _operand(self, arg: relax.Expr, grouping: _Grouping) -> relax.Expr:
        """``arg`` on the image: a Var as rewritten; a constant of one value per group as one
        per channel, ``[C, 1, 1]``; a single value as it is."""
        if not isinstance(arg, tvm.ir.expr.Constant):
            return self.visit_expr(arg)
        array = arg.value.numpy()
        if array.size == 1:
            return arg
        c = grouping.shape[1]
        per_channel = np.repeat(array.reshape(grouping.groups), c // grouping.groups)
        return relax.const(per_channel.reshape(c, 1, 1), str(arg.ty.dtype))
