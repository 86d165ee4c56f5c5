"""Shared IR fixtures for per-pass tests."""

import tvm
from tvm import relax


def strip_call_attrs(mod: tvm.IRModule) -> tvm.IRModule:
    """The module without call attributes (TVMScript cannot print them) and without the
    ``chiplet.placement`` module attribute, to compare with a TVMScript ``Expected``."""

    @relax.expr_functor.mutator
    class _Strip(relax.PyExprMutator):
        def visit_call_(self, call):
            call = super().visit_call_(call)
            if call.attrs is None:
                return call
            return relax.Call(call.op, call.args, None, call.ty_args, ret_ty=call.ty)

    out = mod.clone()
    for gvar, func in mod.functions_items():
        if isinstance(func, relax.Function):
            out.update_func(gvar, _Strip().visit_expr(func))
    return out.without_attr("chiplet.placement")
