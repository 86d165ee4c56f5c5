"""SeparateBroadcastEpilogues: keep a broadcast that grows a conv's or matmul's result out of its
fused kernel."""

from __future__ import annotations

import math

import tvm
from tvm import relax

from tvm_chiplet.passes.attrs import CALL_TIR
from tvm_chiplet.passes.split_operators import static_shape

_OUT_EWISE_FUSABLE, _BROADCAST, _INJECTIVE = 4, 1, 2  # TVM's OpPatternKind values


@tvm.transform.module_pass(opt_level=0, name="SeparateBroadcastEpilogues")
class SeparateBroadcastEpilogues:
    """Mark an elementwise or broadcasting ``call_tir`` injective when it grows the result of a
    conv2d, matmul or reduction (possibly through elementwise ops) to a larger shape, so that
    ``FuseOps`` leaves it out of that kernel's epilogue (``AnnotateTIROpPattern`` calls a
    broadcasting multiply elementwise).

    A squeeze-and-excitation gate (EfficientNet, MobileNetV3) multiplies a whole activation by
    the sigmoid of a 1x1 conv of its pooled channels: fused, the tiny conv's op reads and
    writes the whole activation, and its weights make planners split it by output channels,
    which moves the activation between layouts twice. Kept apart, the multiply is an
    elementwise op that follows the activation's layout where it lies, reading its channels of
    the gate. Epilogues that keep the shape (a bias, a residual add, an activation function)
    fuse as before. Run after ``AnnotateTIROpPattern`` and before ``FuseOps``.

    Example
    -------
    ``g = conv2d(mean(x), w)`` (``[1, C, 1, 1]``), ``y = multiply(x, sigmoid(g))``: the
    multiply's PrimFunc becomes injective; the conv fuses with the sigmoid only.
    """

    def transform_module(self, mod: tvm.IRModule, _ctx: tvm.transform.PassContext) -> tvm.IRModule:
        grown: set[tvm.ir.GlobalVar] = set()
        for func in mod.functions.values():
            if isinstance(func, relax.Function):
                grown |= _growing_broadcasts(mod, func)
        if not grown:
            return mod
        updated = tvm.IRModule(dict(mod.functions_items()), attrs=mod.attrs)
        for gvar in grown:
            updated[gvar] = mod[gvar].with_attr("op_pattern", _INJECTIVE)
        return updated


def _pattern(mod: tvm.IRModule, call: relax.Call, patterns: dict[str, int | None]
             ) -> tuple[tvm.ir.GlobalVar | None, int | None]:
    """The PrimFunc a ``call_tir`` calls and its op pattern, each PrimFunc's looked up once
    (``patterns``, by name: a split module calls a few hundred PrimFuncs 100 k times)."""
    if not (isinstance(call, relax.Call) and call.op.same_as(CALL_TIR)):
        return None, None
    gvar = call.args[0]
    name = gvar.name_hint
    if name not in patterns:
        func = mod[gvar]
        pattern = func.attrs.get("op_pattern") if func.attrs is not None else None
        patterns[name] = None if pattern is None else int(pattern)
    return gvar, patterns[name]


def _elements(expr: relax.Expr) -> int | None:
    shape = static_shape(expr)
    return None if shape is None or None in shape else math.prod(shape)


def _growing_broadcasts(mod: tvm.IRModule, func: relax.Function) -> set[tvm.ir.GlobalVar]:
    """The elementwise PrimFuncs that ``func`` calls on a conv's, matmul's or reduction's
    result (or a same-size elementwise chain of one) to make a larger tensor."""
    anchored: set[relax.Var] = set()  # results of an anchor, or of its same-size epilogue
    found = set()
    patterns: dict[str, int | None] = {}
    for block in func.body.blocks:
        for binding in block.bindings:
            if not isinstance(binding, relax.VarBinding):
                continue
            gvar, pattern = _pattern(mod, binding.value, patterns)
            if pattern is None:
                continue
            if pattern == _OUT_EWISE_FUSABLE:
                anchored.add(binding.var)
                continue
            if pattern > _BROADCAST:
                continue
            size = _elements(binding.var)
            operands = [a for a in binding.value.args[1].fields if a in anchored]
            sizes = [_elements(a) for a in operands]
            if size is not None and any(s is not None and s < size for s in sizes):
                found.add(gvar)
            elif size is not None and size in sizes:
                anchored.add(binding.var)
    return found
