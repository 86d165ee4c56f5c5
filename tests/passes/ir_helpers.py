"""Shared IR fixtures for per-pass tests."""

import tvm
from onnx import TensorProto, helper
from tvm import relax

from tvm_chiplet.passes import ReduceGraph
from tvm_chiplet.tools.frontends import load_model


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


def nonzero_model_reduced() -> tvm.IRModule:
    """ReLU -> NonZero -> Transpose: the result's shape depends on the input's values."""
    graph = helper.make_graph(
        [helper.make_node("Relu", ["x"], ["r"]), helper.make_node("NonZero", ["r"], ["nz"]),
         helper.make_node("Transpose", ["nz"], ["y"], perm=[1, 0])],
        "nonzero", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [3, 4])],
        [helper.make_tensor_value_info("y", TensorProto.INT64, ["n", 2])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    return ReduceGraph()(load_model(model))
