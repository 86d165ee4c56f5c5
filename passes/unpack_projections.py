"""UnpackProjections: a packed projection whose output columns are taken apart becomes one matmul
per part."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import tvm
from tvm import relax
from tvm.relax.expr_functor import PyExprMutator, mutator

from tvm_chiplet.passes.distribute_tensors import prepare_for_splits
from tvm_chiplet.passes.rewrite_calls import is_view, main_values, rewrite_main, value_users
from tvm_chiplet.passes.split_operators import known_shape

_MATMUL = tvm.ir.Op.get("relax.matmul")
_ADD = tvm.ir.Op.get("relax.add")
_TAKE = tvm.ir.Op.get("relax.take")
_PERMUTE = tvm.ir.Op.get("relax.permute_dims")


@tvm.transform.module_pass(opt_level=0, name="UnpackProjections")
class UnpackProjections:
    """Rewrite each ``take`` in ``main`` that picks one contiguous block of the output columns
    of a matmul by constant weights (and its constant bias), through ops that reshape or permute
    that output, as a matmul by those columns of the weights alone. The result is the same.

    torch's ``nn.MultiheadAttention`` (and so ``nn.TransformerEncoderLayer`` and torchvision's
    ViT) projects queries, keys and values with one packed matmul, then reshapes its output to
    ``[..., 3, E]``, permutes the 3 to the front and takes each of them. Planned as one op, that
    matmul's column parts hold a mix of queries, keys and values, and attention's heads cannot
    follow its split; as three matmuls, each is split like a transformer's separate Q, K and V
    projections (by heads). Which block a ``take`` picks is found by carrying element indices
    of the matmul's output through the ops between them, so any chain of reshapes, expand_dims,
    squeezes and permutes qualifies, and nothing else is rewritten. Constant subexpressions are
    folded first (:func:`~.distribute_tensors.prepare_for_splits`: ONNX computes the index of a
    ``Gather`` from shapes).

    Example
    -------
    ``y = R.add(b, R.matmul(x, w))`` (``w``: ``[D, 3E]``), ``q = R.take(R.permute_dims(
    R.reshape(y, [T, 3, E]), [1, 0, 2]), 0, axis=0)`` becomes ``q = R.reshape(R.add(b[:E],
    R.matmul(x, w[:, :E])), [T, E])``.
    """

    def transform_module(self, mod: tvm.IRModule, _ctx: tvm.transform.PassContext) -> tvm.IRModule:
        if "main" not in [gv.name_hint for gv in mod.get_global_vars()]:
            return mod
        values = main_values(mod)
        if not any(_source(value, values) is not None for value in values.values()
                   if isinstance(value, relax.Call) and value.op.same_as(_TAKE)):
            return mod  # no take of a projection: nothing to fold first
        prepared = prepare_for_splits(mod)
        values = main_values(prepared)
        parts = {}
        for var, value in values.items():
            if (isinstance(var, relax.DataflowVar) and isinstance(value, relax.Call)
                    and value.op.same_as(_TAKE)):
                part = _taken_part(value, values)
                if part is not None:
                    parts[var] = part
        users = value_users(values)
        # Only where every use of the packed output is a take rewritten: else the packed matmul
        # would run beside its parts.
        parts = {var: part for var, part in parts.items()
                 if _taken_apart(part.root, parts, users, values)}
        if not parts:
            return mod
        return rewrite_main(prepared, _Unpacker(prepared, parts))


@dataclass(frozen=True)
class _Part:
    """A take's value as its own projection: ``reshape(matmul(x, weight) + bias, shape)``
    (``bias_first``: the add's operands in that order, as the model wrote them)."""

    x: relax.Expr
    weight: relax.Expr
    bias: relax.Expr | None
    bias_first: bool
    shape: tuple[int, ...]
    root: relax.Var  # the packed projection's output


def _source(take: relax.Call, values: dict) -> tuple[list, relax.Var, tuple] | None:
    """``(chain, root, projection)``: the calls from ``take`` back to a constant-weight
    projection (take first), the projection's output and :func:`_projection` of it; None
    when an op other than a reshape or permute lies between them."""
    chain, value = [take], take.args[0]
    while isinstance(value, relax.Var) and isinstance(values.get(value), relax.Call):
        call = values[value]
        if call.op.same_as(_ADD) or call.op.same_as(_MATMUL):
            break
        if not is_view(call):
            return None
        chain.append(call)
        value = call.args[0]
    projection = _projection(value, values)
    return None if projection is None else (chain, value, projection)


def _taken_part(take: relax.Call, values: dict) -> _Part | None:
    """The projection ``take`` amounts to, or None when it picks no contiguous block of a
    constant-weight matmul's output columns."""
    index = take.args[1]
    source = _source(take, values)
    if (source is None or not isinstance(index, tvm.ir.expr.Constant)
            or index.value.numpy().ndim != 0):
        return None
    chain, value, (x, weight, bias, bias_first) = source
    shape = known_shape(value)
    if shape is None or any(known_shape(call) is None for call in chain):
        return None
    # Carry each output element's index through the chain; the take must pick one block of
    # whole columns, in order.
    ids = np.arange(int(np.prod(shape))).reshape(shape)
    picked = ids
    for call in reversed(chain):
        if call.op.same_as(_PERMUTE):
            axes = None if call.attrs.axes is None else [int(a) for a in call.attrs.axes]
            picked = np.transpose(picked, axes)
        elif call.op.same_as(_TAKE):
            picked = np.take(picked, int(index.value.numpy()), axis=int(call.attrs.axis))
        else:
            picked = picked.reshape(known_shape(call))
    columns = shape[-1]
    width = picked.size * columns // ids.size
    first = int(picked.flat[0]) % columns if picked.size else 0
    if width in (0, columns) or not np.array_equal(
            picked, ids[..., first:first + width].reshape(picked.shape)):
        return None
    cut = slice(first, first + width)
    sliced_weight = relax.const(np.ascontiguousarray(weight.value.numpy()[:, cut]),
                                str(weight.ty.dtype))
    sliced_bias = None if bias is None else relax.const(
        np.ascontiguousarray(bias.value.numpy()[cut]), str(bias.ty.dtype))
    return _Part(x, sliced_weight, sliced_bias, bias_first, tuple(picked.shape), value)


def _taken_apart(root: relax.Var, parts: dict, users: dict, values: dict) -> bool:
    """Whether every use of ``root`` (and of the matmul under its bias add) leads, through
    reshapes and permutes only, to a take in ``parts``."""
    product = values[root]
    if product.op.same_as(_ADD):
        inner = next(a for a in product.args if isinstance(a, relax.Var))
        if users.get(inner, []) != [root]:
            return False
    stack = [root]
    while stack:
        for user in users.get(stack.pop(), []):
            call = values[user]
            if user in parts:
                continue
            if not is_view(call):
                return False
            stack.append(user)
    return bool(users.get(root))


def _projection(value: relax.Expr, values: dict) -> tuple | None:
    """``(x, weight, bias, bias_first)`` when ``value`` is ``matmul(x, weight)``, plus a bias
    along its columns, by a constant 2-D weight (bias None without one)."""
    call = values.get(value) if isinstance(value, relax.Var) else None
    bias, bias_first = None, False
    if isinstance(call, relax.Call) and call.op.same_as(_ADD):
        left, right = call.args
        bias_first = isinstance(left, tvm.ir.expr.Constant)
        bias, product = (left, right) if bias_first else (right, left)
        if not isinstance(bias, tvm.ir.expr.Constant) or known_shape(bias) is None \
                or len(known_shape(bias)) != 1:
            return None
        call = values.get(product) if isinstance(product, relax.Var) else None
    if not (isinstance(call, relax.Call) and call.op.same_as(_MATMUL)):
        return None
    x, weight = call.args
    if not isinstance(weight, tvm.ir.expr.Constant) or known_shape(weight) is None \
            or len(known_shape(weight)) != 2:
        return None
    if bias is not None and known_shape(bias)[0] != known_shape(weight)[1]:
        return None
    return x, weight, bias, bias_first


@mutator
class _Unpacker(PyExprMutator):
    def __init__(self, mod: tvm.IRModule, parts: dict) -> None:
        super().__init__(mod)
        self.parts = parts

    def visit_var_binding_(self, binding: relax.VarBinding) -> None:
        part = self.parts.get(binding.var)
        if part is None:
            super().visit_var_binding_(binding)
            return
        product = self.builder_.emit(relax.op.matmul(self.visit_expr(part.x), part.weight))
        if part.bias is not None:
            operands = (part.bias, product) if part.bias_first else (product, part.bias)
            product = self.builder_.emit(relax.op.add(*operands))
        self.set_var_remap(binding.var, self.builder_.emit(
            relax.op.reshape(product, part.shape)))
