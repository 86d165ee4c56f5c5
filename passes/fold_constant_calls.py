"""FoldConstantCalls: evaluate ``call_tir`` on constants at compile time, one build per PrimFunc."""

from __future__ import annotations

import tvm
from tvm import relax
from tvm.relax.expr_functor import PyExprMutator, mutator

from tvm_chiplet.passes.attrs import CALL_TIR
from tvm_chiplet.passes.rewrite_calls import calls_any


@tvm.transform.module_pass(opt_level=0, name="FoldConstantCalls")
class FoldConstantCalls:
    """Replace every ``R.call_tir`` whose arguments are all constants by its computed value.

    It folds what ``relax.transform.FoldConstant`` folds for legalized modules: a call whose
    result is one tensor and whose arguments are constants, or variables bound to folded values
    (so chains fold in one pass). TVM's pass builds the PrimFunc again for every call; this one
    builds each PrimFunc once and reuses it. ResNet-50 has 213 such calls (the batch-norm
    constants) over 7 PrimFuncs: 0.6 s here against 10 s. Run TVM's ``FoldConstant`` after it
    for everything else (it then finds these calls gone). Bindings to folded values stay; dead
    code elimination removes the unused ones.

    Parameters
    ----------
    target : str or tvm.target.Target, default "llvm"
        Target the PrimFuncs are built for to be evaluated (on the host CPU).

    Example
    -------
    ``lv = R.call_tir(cls.add, (R.const(v), R.const(e)), ...)`` then ``R.call_tir(cls.sqrt,
    (lv,), ...)`` become ``lv = R.const(v + e)`` and ``R.const(sqrt(v + e))``.
    """

    def __init__(self, target: str | tvm.target.Target = "llvm") -> None:
        self.target = tvm.target.Target(target) if isinstance(target, str) else target

    def transform_module(self, mod: tvm.IRModule, _ctx: tvm.transform.PassContext) -> tvm.IRModule:
        folder = _Folder(mod, self.target)
        updated = tvm.IRModule(dict(mod.functions_items()), attrs=mod.attrs)
        for gvar, func in mod.functions_items():
            # A chain folds from a call on constants only: without one, nothing folds (a
            # realised plan's weights are cut as constants, and its 167 k calls read Vars).
            if isinstance(func, relax.Function) and calls_any(func, _on_constants):
                updated[gvar] = folder.fold(func)
        return updated


def _on_constants(call: relax.Call) -> bool:
    """Whether ``call`` is a ``call_tir`` whose arguments are all constants."""
    return (call.op.same_as(CALL_TIR) and len(call.args) == 2
            and isinstance(call.args[1], relax.Tuple)
            and all(isinstance(arg, tvm.ir.GenericConst) for arg in call.args[1].fields))


@mutator
class _Folder(PyExprMutator):
    """Folds constant calls of one function at a time; keeps built PrimFuncs across them."""

    def __init__(self, mod: tvm.IRModule, target: tvm.target.Target) -> None:
        super().__init__(mod)
        self.source = mod
        self.target = target
        self.built: dict[str, tvm.runtime.Module] = {}
        self.folded: dict[relax.Var, tvm.ir.GenericConst] = {}

    def fold(self, func: relax.Function) -> relax.Function:
        self.folded = {}
        return self.visit_expr(func)

    def visit_var_(self, var: relax.Var) -> relax.Expr:
        return self.folded.get(var, var)

    def visit_dataflow_var_(self, var: relax.DataflowVar) -> relax.Expr:
        return self.folded.get(var, var)

    def visit_var_binding_(self, binding: relax.VarBinding) -> None:
        value = self.visit_expr(binding.value)
        if isinstance(value, tvm.ir.GenericConst):
            self.folded[binding.var] = value
        self.builder_.emit_normalized(relax.VarBinding(binding.var, value))

    def visit_call_(self, call: relax.Call) -> relax.Expr:
        call = super().visit_call_(call)
        if not self._foldable(call):
            return call
        name = call.args[0].name_hint
        if name not in self.built:
            prim = self.source[call.args[0]].with_attr("global_symbol", "main")
            self.built[name] = tvm.compile(tvm.IRModule({"main": prim}), target=self.target)
        shape = [int(dim) for dim in call.ty.shape.values]
        out = tvm.runtime.empty(shape, str(call.ty.dtype))
        self.built[name]["main"](*[arg.value for arg in call.args[1].fields], out)
        return relax.const(out)

    def _foldable(self, call: relax.Call) -> bool:
        """A call_tir of a PrimFunc of the module, on constants, giving one static-shape tensor."""
        if not (call.op.same_as(CALL_TIR) and len(call.args) == 2):
            return False
        callee, ty = call.args[0], call.ty
        return (
            isinstance(self.source.functions.get(callee), tvm.tirx.PrimFunc)
            and isinstance(ty, relax.TensorType)
            and ty.shape is not None
            and all(isinstance(dim, tvm.tirx.IntImm) for dim in ty.shape.values)
            and all(isinstance(arg, tvm.ir.GenericConst) for arg in call.args[1].fields)
        )
