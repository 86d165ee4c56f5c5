"""LegalizeOnce: legalize each distinct op signature once, as ``LegalizeOps`` would."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import tvm
from tvm import relax
from tvm.relax.expr_functor import PyExprMutator, mutator

from tvm_chiplet.passes.analysis.structural_key import StructuralKey
from tvm_chiplet.passes.attrs import CALL_TIR
from tvm_chiplet.passes.rewrite_calls import kernel_context, with_functions


@dataclass(frozen=True)
class _Lowered:
    prim: tvm.tirx.PrimFunc
    name: str
    # per argument of the call_tir: an index into the call's operands (:func:`_operands`), or a
    # scalar constant of the call that the legalization passes on
    operands: tuple[int | tvm.ir.GenericConst, ...]
    out_ty: relax.Type


@tvm.transform.module_pass(opt_level=0, name="LegalizeOnce")
class LegalizeOnce:
    """Legalize high-level op calls to ``call_tir``, once per distinct signature.

    TVM's ``LegalizeOps`` runs an op's TE legalization for every call, then merges identical
    PrimFuncs: about 1.3 ms a call, which dominates the reduction of a module whose ops are
    split into many parts (ResNet-50 split over 16 clusters: 18,000 calls, 24 s). This pass
    legalizes a call of static-shape tensors once per signature (op, attributes, operand types
    and non-tensor operands) with ``LegalizeOps`` itself, on placeholder operands, and reuses
    the PrimFunc for every call with that signature. The result is what ``LegalizeOps`` gives:
    the same PrimFuncs under the same names. Calls it cannot handle this way (symbolic shapes,
    or an op whose legalization is more than one ``call_tir`` of its operands) are left as they
    are: run ``LegalizeOps`` after it for those.

    Parameters
    ----------
    select : callable, optional
        ``select(call) -> bool``: legalize only the calls it accepts (default: every call).

    Example
    -------
    Two ``R.add`` of ``(1, 64, 56, 56)`` tensors become ``R.call_tir(cls.add, ...)`` of one
    PrimFunc, legalized once.
    """

    def __init__(self, select: Callable[[relax.Call], bool] | None = None) -> None:
        self.select = select

    def transform_module(self, mod: tvm.IRModule, _ctx: tvm.transform.PassContext) -> tvm.IRModule:
        context, functions = kernel_context(mod)  # the builder adds the legalized PrimFuncs
        legalizer = _Legalizer(context, self.select)
        legalized = {gvar: legalizer.visit_expr(func) for gvar, func in functions.items()}
        return with_functions(legalizer.builder_.get(), legalized)


def _static_tensor_type(ty: relax.Type) -> bool:
    return (isinstance(ty, relax.TensorType) and ty.shape is not None
            and all(isinstance(d, tvm.tirx.IntImm) for d in ty.shape.values))


@mutator
class _Legalizer(PyExprMutator):
    def __init__(self, mod: tvm.IRModule, select: Callable[[relax.Call], bool] | None) -> None:
        super().__init__(mod)
        self.select = select
        self.lowered: dict[tuple, tuple[_Lowered, relax.GlobalVar] | None] = {}
        self.tensors: dict[StructuralKey, tuple | None] = {}  # None: a symbolic shape

    def visit_call_(self, call: relax.Call) -> relax.Expr:
        call = super().visit_call_(call)
        if not (isinstance(call.op, tvm.ir.Op) and call.op.get_attr("FLegalize") is not None
                and (self.select is None or self.select(call))):
            return call
        key = _signature(call, self.tensors)
        if key is None:
            return call
        if key not in self.lowered:
            lowered = _legalize(_template(call))
            self.lowered[key] = lowered and (
                lowered, self.builder_.add_func(lowered.prim, lowered.name))
        found = self.lowered[key]
        if found is None:
            return call
        lowered, gvar = found
        operands = _operands(call)
        args = [operands[i] if isinstance(i, int) else i for i in lowered.operands]
        return relax.Call(CALL_TIR, [gvar, relax.Tuple(args)], ty_args=[lowered.out_ty])


def _is_scalar_const(arg: relax.Expr) -> bool:
    return isinstance(arg, tvm.ir.GenericConst) and not arg.ty.shape.values


def _signature(call: relax.Call, tensors: dict[StructuralKey, tuple | None]) -> tuple | None:
    """What the legalization of ``call`` depends on: the op, its attributes, the type of every
    tensor operand, and the value of every other operand; None if a tensor operand has no static
    shape or another operand reads a variable. Each part is a :class:`StructuralKey` (equal
    parts are structurally equal, not merely of equal hash); ``tensors`` caches each distinct
    tensor type's part."""

    def tensor(ty: relax.Type) -> tuple | None:
        key = StructuralKey(ty)
        if key not in tensors:
            tensors[key] = ("tensor", key) if _static_tensor_type(ty) else None
        return tensors[key]

    def of(arg: relax.Expr):
        if isinstance(arg, relax.Tuple):
            fields = tuple(of(f) for f in arg.fields)
            return None if any(f is None for f in fields) else ("tuple", fields)
        if _is_scalar_const(arg):
            return ("value", StructuralKey(arg))
        if isinstance(arg, (relax.Var, tvm.ir.GenericConst)):
            return tensor(arg.ty)
        if isinstance(arg.ty, relax.TensorType) or relax.analysis.free_vars(arg):
            return None
        return ("value", StructuralKey(arg))

    args = tuple(of(a) for a in call.args)
    if any(a is None for a in args):
        return None
    return (call.op.name, StructuralKey(call.attrs) if call.attrs else None,
            StructuralKey(list(call.ty_args)), args)


def _operands(call: relax.Call) -> list[relax.Expr]:
    """The tensor operands of ``call`` (also inside tuples) but scalar constants, in order."""
    found: list[relax.Expr] = []

    def collect(arg: relax.Expr) -> None:
        if isinstance(arg, relax.Tuple):
            for field in arg.fields:
                collect(field)
        elif isinstance(arg, (relax.Var, tvm.ir.GenericConst)) and not _is_scalar_const(arg):
            found.append(arg)

    for arg in call.args:
        collect(arg)
    return found


def _template(call: relax.Call) -> relax.Call:
    """``call`` with every operand of :func:`_operands` replaced by a fresh Var of its type."""
    count = 0

    def replace(arg: relax.Expr) -> relax.Expr:
        nonlocal count
        if isinstance(arg, relax.Tuple):
            return relax.Tuple([replace(f) for f in arg.fields])
        if isinstance(arg, (relax.Var, tvm.ir.GenericConst)) and not _is_scalar_const(arg):
            count += 1
            return relax.Var(f"p{count - 1}", arg.ty)
        return arg

    return relax.Call(call.op, [replace(a) for a in call.args], call.attrs, call.ty_args)


def _legalize(template: relax.Call) -> _Lowered | None:
    """Legalize ``template`` with ``LegalizeOps``; None unless it becomes one ``call_tir`` of
    a PrimFunc whose arguments are template operands."""
    params = _operands(template)  # the fresh Vars of :func:`_template`
    bb = relax.BlockBuilder()
    try:
        with bb.function("main", params):
            with bb.dataflow():
                out = bb.emit_output(template)
            bb.emit_func_output(out)
        legal = relax.transform.LegalizeOps()(bb.get())
    except Exception:
        return None
    bindings = [b for block in legal["main"].body.blocks for b in block.bindings]
    if len(bindings) != 1:
        return None
    value = bindings[0].value
    if not (isinstance(value, relax.Call) and value.op.same_as(CALL_TIR)
            and len(value.args) == 2 and isinstance(value.args[1], relax.Tuple)):
        return None
    index = {p: i for i, p in enumerate(params)}
    operands: list[int | tvm.ir.GenericConst] = []
    for arg in value.args[1].fields:
        if isinstance(arg, tvm.ir.GenericConst):  # a scalar constant of the call, passed on
            operands.append(arg)
        elif isinstance(arg, relax.Var) and arg in index:
            operands.append(index[arg])
        else:
            return None
    gvar = value.args[0]
    return _Lowered(legal[gvar], gvar.name_hint, tuple(operands), value.ty_args[0])
