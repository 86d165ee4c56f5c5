"""SliceStridedConvs: a strided conv that skips pixels reads only those it uses, sliced first."""

from __future__ import annotations

import tvm
from tvm import relax

from tvm_chiplet.passes.rewrite_calls import rewrite_calls
from tvm_chiplet.passes.split_operators import conv2d_like

_CONV2D = tvm.ir.Op.get("relax.nn.conv2d")


@tvm.transform.module_pass(opt_level=0, name="SliceStridedConvs")
class SliceStridedConvs:
    """Rewrite each ``conv2d`` of ``main`` whose kernel is 1 wide along a spatial axis with a
    stride ``s > 1`` and no padding there (ResNet's downsampling shortcuts: 1x1, stride 2) as a
    ``strided_slice`` of every ``s``-th row or column of its input, then the conv with stride 1
    along that axis. The result is the same.

    Such a conv reads ``1 / s`` of its input per axis and skips the rest, but a split that
    fetches the conv's input moves all of it: on ResNet-50 the three shortcuts gathered 0.8, 0.4
    and 0.2 MB where they read a quarter of that. As its own op, the slice follows its input's
    layout where that lies (each part or tile keeps its own rows of the progression,
    DistributeTensors), so only the pixels read cross a link, and the planners cost the conv's
    input at its sliced size.

    Example
    -------
    ``R.nn.conv2d(x, w, strides=[2, 2])`` with a 1x1 kernel becomes ``R.nn.conv2d(
    R.strided_slice(x, (2, 3), (0, 0), (H, W), (2, 2)), w)``.
    """

    def transform_module(self, mod: tvm.IRModule, _ctx: tvm.transform.PassContext) -> tvm.IRModule:
        return rewrite_calls(mod, _CONV2D, _sliced_conv)


def _sliced_axes(call: relax.Call) -> list[tuple[int, int, int, int]]:
    """``(stride index, data axis, extent, stride)`` of each spatial axis along which
    ``conv2d`` call ``call`` reads only every stride-th pixel (kernel extent 1, stride > 1, no
    padding); empty when its shapes are not static."""
    attrs = call.attrs
    data_shape = getattr(call.args[0].ty, "shape", None)
    kernel_shape = getattr(call.args[1].ty, "shape", None)
    if data_shape is None or kernel_shape is None or not all(
            isinstance(d, tvm.tirx.IntImm) for d in [*data_shape, *kernel_shape]):
        return []
    data_layout, kernel_layout = str(attrs.data_layout), str(attrs.kernel_layout)
    pads = [int(p) for p in attrs.padding]  # top, left, bottom, right
    axes = []
    for i, dim in enumerate("HW"):
        stride = int(attrs.strides[i])
        extent = int(kernel_shape[kernel_layout.index(dim)])
        if extent == 1 and stride > 1 and pads[i] == pads[i + 2] == 0:
            axis = data_layout.index(dim)
            axes.append((i, axis, int(data_shape[axis]), stride))
    return axes


def _sliced_conv(call: relax.Call) -> relax.Expr | None:
    axes = _sliced_axes(call)
    if not axes:
        return None
    sliced = relax.op.strided_slice(
        call.args[0], axes=[axis for _, axis, _, _ in axes], begin=[0] * len(axes),
        end=[extent for _, _, extent, _ in axes], strides=[s for _, _, _, s in axes])
    strides = [int(s) for s in call.attrs.strides]
    for i, _, _, _ in axes:
        strides[i] = 1
    return conv2d_like(call, sliced, call.args[1], strides=strides)
