"""Rewrite the calls of one operator in ``main``: the shared walk of the graph-rewrite passes."""

from __future__ import annotations

from collections.abc import Callable

import tvm
from tvm import relax
from tvm.relax.expr_functor import PyExprMutator, mutator


def rewrite_calls(mod: tvm.IRModule, op: tvm.ir.Op,
                  rewrite: Callable[[relax.Call], relax.Expr | None]) -> tvm.IRModule:
    """``mod`` with each call of ``op`` in ``main`` replaced by ``rewrite(call)`` (the call's
    operands already rewritten; None leaves it as it is). The new expression is normalized,
    its inner calls bound as values of their own. ``mod`` itself when nothing is rewritten."""
    if "main" not in [gv.name_hint for gv in mod.get_global_vars()]:
        return mod
    rewriter = _Rewriter(mod, op, rewrite)
    main = rewriter.visit_expr(mod["main"])
    if not rewriter.rewritten:
        return mod
    out = mod.clone()
    out["main"] = main
    return out


@mutator
class _Rewriter(PyExprMutator):
    def __init__(self, mod: tvm.IRModule, op: tvm.ir.Op,
                 rewrite: Callable[[relax.Call], relax.Expr | None]) -> None:
        super().__init__(mod)
        self.op, self.rewrite = op, rewrite
        self.rewritten = 0

    def visit_call_(self, call: relax.Call) -> relax.Expr:
        call = super().visit_call_(call)
        if not call.op.same_as(self.op):
            return call
        new = self.rewrite(call)
        if new is None:
            return call
        self.rewritten += 1
        return self.builder_.normalize(new)
