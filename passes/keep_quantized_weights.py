"""KeepQuantizedWeights: lower a module with its integer weights kept as integers."""

from __future__ import annotations

from collections import defaultdict

import tvm
from tvm import relax
from tvm.relax.expr_functor import PyExprMutator, mutator
from tvm.runtime import Tensor

from tvm_chiplet.passes.attrs import CALL_TIR
from tvm_chiplet.passes.rewrite_calls import calls_any

DEQUANTIZE = tvm.ir.Op.get("relax.dequantize")


@tvm.transform.module_pass(opt_level=0, name="KeepQuantizedWeights")
class KeepQuantizedWeights:
    """Run a lowering pipeline on a quantized module without decoding its weights in advance.

    A quantized (QDQ) model reads each weight as ``R.dequantize`` of an integer constant. Once
    legalized, that is a ``call_tir`` on constants only, which constant folding evaluates into a
    float constant, and ``FuseOps`` does not fuse a producer into a convolution or matmul: the
    fused kernels would read float weights, four times the bytes of int8 ones. This pass hides
    the integer constants that ``R.dequantize`` reads in ``main`` from the lowering, as extra
    parameters of ``main``, runs ``lowering``, merges each kernel that only decodes weights into
    the one kernel reading its result (a ``Primitive`` function, then ``FuseTIR``), and binds the
    integer constants back. Kernels are named as ``FuseOps`` names them, e.g.
    ``fused_dequantize1_conv2d_add``.

    A decoding kernel read by several kernels (a shared weight), or by the function's result,
    stays apart: it then reads the integer weight and writes a float value. A module without
    ``R.dequantize`` of an integer constant in ``main`` is lowered as ``lowering`` alone lowers it.

    Parameters
    ----------
    lowering : tvm.transform.Pass
        The pipeline to run, e.g. legalization, constant folding, ``FuseOps`` and ``FuseTIR`` as
        :class:`ReduceGraph` runs them. It must keep ``main``'s parameters.
    fuse_decode : bool, default True
        Merge decoding kernels into the kernel reading them (for a ``lowering`` that fuses);
        ``False`` leaves them apart.

    Example
    -------
    ``w = R.dequantize(R.const(w_int8), R.const(scale), R.const(zero), axis=0)`` then
    ``R.nn.conv2d(x, w)``, through ReduceGraph's steps, gives
    ``R.call_tir(cls.fused_dequantize_conv2d, (x, R.const(w_int8), ...))`` instead of
    ``R.call_tir(cls.conv2d, (x, R.const(w_float32)))``.
    """

    def __init__(self, lowering: tvm.transform.Pass, fuse_decode: bool = True) -> None:
        if not isinstance(lowering, tvm.transform.Pass):
            raise TypeError(
                "KeepQuantizedWeights needs a tvm.transform.Pass to run as its lowering, got "
                f"{type(lowering).__name__}; wrap a list of passes in tvm.transform.Sequential"
            )
        self.lowering = lowering
        self.fuse_decode = fuse_decode

    def transform_module(self, mod: tvm.IRModule, _ctx: tvm.transform.PassContext) -> tvm.IRModule:
        if not any(gvar.name_hint == "main" for gvar in mod.get_global_vars()):
            return self.lowering(mod)
        if not calls_any(mod["main"], lambda call: call.op.same_as(DEQUANTIZE)):
            return self.lowering(mod)  # asked first: the lifter walks far slower
        lifter = _WeightLifter(mod)
        main = lifter.visit_expr(mod["main"])
        if not lifter.weights:
            return self.lowering(mod)
        weights = {var: const.value for const, var in lifter.weights.items()}
        lifted = tvm.IRModule(dict(mod.functions_items()), attrs=mod.attrs)
        lifted["main"] = relax.Function([*main.params, *weights], main.body, main.ret_ty,
                                        main.is_pure, main.attrs)
        lowered = self.lowering(lifted)
        _check_parameters_kept(lowered["main"], weights)
        if self.fuse_decode:
            lowered = _merge_decoders(lowered, _plan_decoders(lowered["main"], weights))
        out = tvm.IRModule(dict(lowered.functions_items()), attrs=lowered.attrs)
        out["main"] = lowered["main"].bind_params(weights)
        return out


@mutator
class _WeightLifter(PyExprMutator):
    """Replaces each integer tensor constant read by ``R.dequantize`` by a new variable."""

    def __init__(self, mod: tvm.IRModule) -> None:
        super().__init__(mod)
        self.weights: dict[tvm.ir.GenericConst, relax.Var] = {}

    def visit_call_(self, call: relax.Call) -> relax.Expr:
        call = super().visit_call_(call)
        data = call.args[0] if call.op.same_as(DEQUANTIZE) else None
        if not (isinstance(data, tvm.ir.GenericConst) and data.ty.ndim > 0
                and str(data.ty.dtype).startswith(("int", "uint"))):
            return call
        if data not in self.weights:
            self.weights[data] = relax.Var(f"weight{len(self.weights)}", data.ty)
        return relax.Call(call.op, [self.weights[data], *call.args[1:]], call.attrs,
                          call.ty_args)


def _check_parameters_kept(main: relax.Function, weights: dict[relax.Var, Tensor]) -> None:
    params = list(main.params)
    lost = [var.name for var in weights if not any(var.same_as(param) for param in params)]
    if lost:
        raise ValueError(
            "the lowering run by KeepQuantizedWeights removed or replaced the parameters "
            f"{', '.join(lost)} it added to main for the integer weights; give it a lowering "
            "that keeps main's parameters (binding them is this pass's last step)"
        )


def _plan_decoders(
    main: relax.Function, weights: dict[relax.Var, Tensor]
) -> dict[relax.Var, relax.Call]:
    """The bindings of ``main`` to merge into their reader, ``{var: call_tir}`` in order.

    A decoder is a ``call_tir`` on lifted weights and constants (at least one weight) whose
    value one other ``call_tir`` reads, and nothing else.
    """
    bindings = [binding for block in main.body.blocks for binding in block.bindings]
    readers: dict[relax.Var, list[relax.Expr]] = defaultdict(list)
    for binding in bindings:
        for var in relax.analysis.free_vars(binding.value):
            readers[var].append(binding.value)
    for var in relax.analysis.free_vars(main.body.body):
        readers[var].append(main.body.body)

    def is_decoder(binding) -> bool:
        args = _call_tir_args(binding.value)
        if args is None or not any(arg in weights for arg in args):
            return False
        if not all(arg in weights or isinstance(arg, tvm.ir.GenericConst) for arg in args):
            return False
        uses = readers[binding.var]
        return len(uses) == 1 and binding.var in (_call_tir_args(uses[0]) or [])

    return {binding.var: binding.value for binding in bindings if is_decoder(binding)}


def _call_tir_args(value: relax.Expr) -> list[relax.Expr] | None:
    """The arguments of a ``call_tir`` without symbolic shape arguments, else None."""
    if isinstance(value, relax.Call) and value.op.same_as(CALL_TIR) and len(value.args) == 2:
        return list(value.args[1].fields)
    return None


def _merge_decoders(mod: tvm.IRModule, decoders: dict[relax.Var, relax.Call]) -> tvm.IRModule:
    if not decoders:
        return mod
    merger = _DecoderMerger(mod, decoders)
    main = merger.visit_expr(mod["main"])
    merged = tvm.IRModule(dict(merger.builder_.get().functions_items()), attrs=mod.attrs)
    merged["main"] = main
    return relax.transform.FuseTIR()(merged)


@mutator
class _DecoderMerger(PyExprMutator):
    """Drops the planned decoder bindings and calls a ``Primitive`` function of decoders and
    reader in place of each reader."""

    def __init__(self, mod: tvm.IRModule, decoders: dict[relax.Var, relax.Call]) -> None:
        super().__init__(mod)
        self.decoders = decoders

    def visit_var_binding_(self, binding: relax.VarBinding) -> None:
        if binding.var in self.decoders:
            return
        args = _call_tir_args(binding.value)
        if args is None or not any(arg in self.decoders for arg in args):
            super().visit_var_binding_(binding)
            return
        value = self.builder_.normalize(self._merged_call(binding.value, args))
        self.builder_.emit_normalized(relax.VarBinding(binding.var, value))

    def _merged_call(self, reader: relax.Call, args: list[relax.Expr]) -> relax.Call:
        outer = []
        for arg in args:
            outer += _call_tir_args(self.decoders[arg]) if arg in self.decoders else [arg]
        outer = [self.visit_expr(arg) for arg in outer]
        params = [relax.Var(f"p{i}", arg.ty) for i, arg in enumerate(outer)]
        callees = [self.decoders[arg].args[0] for arg in args if arg in self.decoders]
        name = "fused_" + "_".join(
            callee.name_hint.removeprefix("fused_") for callee in [*callees, reader.args[0]])
        builder = relax.BlockBuilder()
        with builder.function(name, params, {"Primitive": True}, private=True):
            with builder.dataflow():
                inner, start = [], 0
                for arg in args:
                    if arg in self.decoders:
                        decoder = self.decoders[arg]
                        count = len(decoder.args[1].fields)
                        inner.append(builder.emit(relax.call_tir(
                            decoder.args[0], params[start:start + count], decoder.ty)))
                    else:
                        count = 1
                        inner.append(params[start])
                    start += count
                out = builder.emit_output(relax.call_tir(reader.args[0], inner, reader.ty))
            builder.emit_func_output(out)
        gvar = self.builder_.add_func(builder.get()[name], name)
        return relax.Call(gvar, outer)
