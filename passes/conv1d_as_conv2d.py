"""Conv1dAsConv2d: run each 1-D convolution as the 2-D convolution it is, so that it splits."""

from __future__ import annotations

import tvm
from tvm import relax

from tvm_chiplet.passes.rewrite_calls import rewrite_calls

_CONV1D = tvm.ir.Op.get("relax.nn.conv1d")


@tvm.transform.module_pass(opt_level=0, name="Conv1dAsConv2d")
class Conv1dAsConv2d:
    """Rewrite each ``conv1d`` (NCW data, OIW kernel) of ``main`` as ``conv2d`` over a width-1
    image whose rows are the 1-D positions, with the same result.

    The planners split conv2d (output or input channels, rows with a halo, 2-D tiles) and
    matmul, not conv1d: a temporal convolution network or an audio front end otherwise ran
    every convolution whole on one cluster. Here ``x: [N, C, W]`` becomes ``[N, C, W, 1]``,
    the kernel ``[O, I, K]`` becomes ``[O, I, K, 1]`` (a constant is reshaped in place), the
    stride, dilation and padding apply to the rows, and the ``[N, O, W', 1]`` result is
    squeezed back to ``[N, O, W']``: a row split is then a split along the 1-D positions.
    Other layouts are left as they are.

    Example
    -------
    ``R.nn.conv1d(x, w, strides=2, padding=[1, 1])`` becomes ``R.squeeze(R.nn.conv2d(
    R.expand_dims(x, 3), w4, strides=[2, 1], padding=[1, 0, 1, 0]), [3])``.
    """

    def transform_module(self, mod: tvm.IRModule, _ctx: tvm.transform.PassContext) -> tvm.IRModule:
        return rewrite_calls(mod, _CONV1D, _as_conv2d)


def _as_conv2d(call: relax.Call) -> relax.Expr | None:
    attrs = call.attrs
    if (str(attrs.data_layout), str(attrs.kernel_layout), str(attrs.out_layout)) != (
            "NCW", "OIW", "NCW"):
        return None
    data, weight = call.args
    if isinstance(weight, tvm.ir.expr.Constant):
        array = weight.value.numpy()
        kernel = relax.const(array.reshape(*array.shape, 1), str(weight.ty.dtype))
    else:
        kernel = relax.op.expand_dims(weight, 3)
    left, right = (int(p) for p in attrs.padding)
    conv = relax.op.nn.conv2d(
        relax.op.expand_dims(data, 3), kernel, strides=[int(attrs.strides[0]), 1],
        padding=[left, 0, right, 0], dilation=[int(attrs.dilation[0]), 1],
        groups=int(attrs.groups), data_layout="NCHW", kernel_layout="OIHW",
        out_layout="NCHW", out_dtype=attrs.out_dtype)
    return relax.op.squeeze(conv, [3])
