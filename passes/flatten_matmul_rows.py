"""FlattenMatmulRows: a matmul of one-row matrices by 2-D weights becomes a matmul of many rows."""

from __future__ import annotations

import math

import tvm
from tvm import relax
from tvm.relax.expr_functor import PyExprMutator, mutator

from tvm_chiplet.passes.rewrite_calls import main_values, value_users
from tvm_chiplet.passes.split_operators import known_shape, static_shape

_MATMUL = tvm.ir.Op.get("relax.matmul")
_RESHAPE = tvm.ir.Op.get("relax.reshape")
_BY_CONSTANT = tuple(tvm.ir.Op.get(f"relax.{name}")
                     for name in ("add", "subtract", "multiply", "divide"))
"""Elementwise ops that a bias or a scale of the matmul's columns reaches it through."""


@tvm.transform.module_pass(opt_level=0, name="FlattenMatmulRows")
class FlattenMatmulRows:
    """Rewrite each ``matmul`` in ``main`` of ``x: [..., 1, K]`` (more than one leading element)
    by 2-D weights ``w: [K, N]`` as the matmul of ``x`` reshaped to ``[rows, K]`` by ``w``, with
    the bias adds and scales of its columns that follow it, and reshaped back. Reshapes of its
    result read the flat product directly. The result is the same.

    torch's ``nn.MultiheadAttention`` runs sequence first (``batch_first=False``, as
    ``nn.TransformerEncoderLayer`` and torchvision's ViT do): its projections multiply
    ``[tokens, batch, E]``, at batch 1 ``tokens`` matrices of one row each. Planned so, their
    tokens are a batch axis that attention's reshapes and transposes move to the rows of its
    scores, and the projections cannot be split by rows and columns, as a transformer's are, to
    keep attention on every cluster (by query rows and heads); as one matmul of ``tokens`` rows,
    they are.

    Example
    -------
    ``y = R.add(b, R.matmul(x, w))`` (``x``: ``[T, 1, E]``) read as ``R.reshape(y, [T, H, E / H])``
    becomes ``f = R.add(b, R.matmul(R.reshape(x, [T, E]), w))`` read as ``R.reshape(f, [T, H,
    E / H])``.
    """

    def transform_module(self, mod: tvm.IRModule, _ctx: tvm.transform.PassContext) -> tvm.IRModule:
        if "main" not in [gv.name_hint for gv in mod.get_global_vars()]:
            return mod
        values = main_values(mod)
        users = value_users(values)
        chains = {}
        for var, value in values.items():
            if _one_row_matmul(var, value):
                chain = [var]
                while _by_columns(chain[-1], users.get(chain[-1], []), values):
                    chain.append(users[chain[-1]][0])
                chains[var] = chain
        if not chains:
            return mod
        out = mod.clone()
        out["main"] = _Flattener(mod, chains).visit_expr(mod["main"])
        return relax.transform.DeadCodeElimination(["main"])(out)


def _one_row_matmul(var: relax.Var, value: relax.Expr) -> bool:
    """Whether ``var = value`` is a matmul of ``[..., 1, K]`` (more than one leading element) by
    2-D ``[K, N]``, all of it static, inside a dataflow block."""
    if not (isinstance(var, relax.DataflowVar) and isinstance(value, relax.Call)
            and value.op.same_as(_MATMUL)):
        return False
    x, w = (known_shape(arg) for arg in value.args)
    return (x is not None and w is not None
            and len(x) >= 3 and len(w) == 2 and x[-2] == 1 and math.prod(x[:-2]) > 1)


def _by_columns(var: relax.Var, users: list[relax.Var], values: dict) -> bool:
    """Whether ``var``'s one user is an elementwise op of it and a constant over its last axis
    only (a bias add, a scale), inside a dataflow block, of ``var``'s shape."""
    if len(users) != 1 or not isinstance(users[0], relax.DataflowVar):
        return False
    call = values[users[0]]
    if not (isinstance(call, relax.Call) and any(call.op.same_as(op) for op in _BY_CONSTANT)):
        return False
    constants = [a for a in call.args if isinstance(a, tvm.ir.expr.Constant)]
    if len(constants) != 1 or not any(a.same_as(var) for a in call.args):
        return False
    shape = static_shape(constants[0])
    return (shape is not None and len(shape) <= len(static_shape(var))
            and all(d == 1 for d in shape[:-1]) and static_shape(users[0]) == static_shape(var))


@mutator
class _Flattener(PyExprMutator):
    """Emits each chain (a matmul and the column-wise ops after it) on ``[rows, N]``; its last
    var is the flat value reshaped back, or, read by a reshape, that reshape of the flat value."""

    def __init__(self, mod: tvm.IRModule, chains: dict) -> None:
        super().__init__(mod)
        self.chains = chains
        self.inside = {var: chain[0] for chain in chains.values() for var in chain}
        self.flat: dict[relax.Var, relax.Var] = {}  # a chain's var -> its flat value
        self.rows_of: dict[relax.Expr, relax.Var] = {}  # a matmul's input -> as [rows, K]

    def visit_var_binding_(self, binding: relax.VarBinding) -> None:
        var, value = binding.var, binding.value
        head = self.inside.get(var)
        if head is None:
            if (isinstance(value, relax.Call) and value.op.same_as(_RESHAPE)
                    and isinstance(value.args[0], relax.Var) and value.args[0] in self.flat):
                # A reshape of a reshaped flat value is a reshape of the flat value.
                flat = self.flat[value.args[0]]
                self.flat[var] = flat
                self.set_var_remap(var, self.builder_.emit(
                    relax.op.reshape(flat, value.args[1]), var.name))
                return
            super().visit_var_binding_(binding)
            return
        shape = static_shape(var)
        if var.same_as(head):
            x, w = value.args
            x = self.visit_expr(x)
            if x not in self.rows_of:  # the projections of one input share its reshape
                self.rows_of[x] = self.builder_.emit(relax.op.reshape(
                    x, [math.prod(shape[:-1]), static_shape(x)[-1]]))
            rows = self.rows_of[x]
            flat = self.builder_.emit(relax.Call(value.op, [rows, w], value.attrs), var.name)
        else:
            before = self.flat[head]
            args = [_flat_constant(a) if isinstance(a, tvm.ir.expr.Constant) else before
                    for a in value.args]
            flat = self.builder_.emit(relax.Call(value.op, args, value.attrs), var.name)
        self.flat[head] = flat
        if var.same_as(self.chains[head][-1]):
            self.flat[var] = flat
            self.set_var_remap(var, self.builder_.emit(relax.op.reshape(flat, shape),
                                                       var.name))


def _flat_constant(value: tvm.ir.expr.Constant) -> tvm.ir.expr.Constant:
    """A constant over the last axis only (``[1, .., 1, N]``) as ``[N]``."""
    return relax.const(value.value.numpy().reshape(-1), str(value.ty.dtype))
