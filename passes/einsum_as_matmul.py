"""EinsumAsMatmul: run each einsum of one or two operands as the permutes, reshapes, sums and
matmul it stands for, so that it splits."""

from __future__ import annotations

import math
import string

import numpy as np
import tvm
from tvm import relax

from tvm_chiplet.passes.rewrite_calls import rewrite_calls
from tvm_chiplet.passes.split_operators import known_shape

_EINSUM = tvm.ir.Op.get("relax.einsum")


@tvm.transform.module_pass(opt_level=0, name="EinsumAsMatmul")
class EinsumAsMatmul:
    """Rewrite each ``einsum`` of ``main`` with one or two operands as ``permute_dims``,
    ``reshape``, ``sum`` and ``matmul``, with the same result.

    The planners split matmuls (rows, columns, the reduction; heads as a batch axis), not an
    einsum kernel: attention or a projection written with ``torch.einsum`` ran whole on one
    cluster (two einsum transformer blocks, int8 batch 1 on mesh-4x4: 12.0x the lower bound,
    against 1.32x for the same blocks written with matmuls). The subscripts are classified as
    a matmul sees them: *batch* (in both operands and the output), *contracted* (in both, not
    in the output), *left* and *right* (in one operand and the output); a subscript in one
    operand only and not in the output is summed out first. The left operand is arranged as
    ``[batch..., left, contracted]``, the right as ``[batch..., contracted, right]`` (several
    subscripts of one kind flattened into one axis where they must be), and the product is
    reshaped and permuted to the output's order. Steps that change nothing are left out, so
    ``btd,df->btf`` is one matmul and ``bqhd,bkhd->bhqk`` two permutes and a matmul, as the
    same layers written with matmuls are. A constant operand is rearranged in place.

    Left as they are (still correct, run as TVM's einsum kernel): three or more operands, a
    subscript repeated in one operand (a diagonal or trace), and sizes that differ between
    operands (broadcasting).

    Example
    -------
    ``R.einsum((q, k), "bqhd,bkhd->bhqk")`` becomes ``R.matmul(R.permute_dims(q, [0, 2, 1,
    3]), R.permute_dims(k, [0, 2, 3, 1]))``.
    """

    def transform_module(self, mod: tvm.IRModule, _ctx: tvm.transform.PassContext) -> tvm.IRModule:
        return rewrite_calls(mod, _EINSUM, _as_matmul)


def _as_matmul(call: relax.Call) -> relax.Expr | None:
    operands = call.args[0]
    if not isinstance(operands, relax.Tuple) or len(operands.fields) not in (1, 2):
        return None
    shapes = [known_shape(x) for x in operands.fields]
    out_shape = known_shape(call)
    if any(s is None for s in [*shapes, out_shape]):
        return None
    parsed = _parse(str(call.attrs.subscripts), [len(s) for s in shapes])
    if parsed is None:
        return None
    terms, out = parsed
    sizes: dict[str, int] = {}
    for term, shape in zip(terms, shapes, strict=True):
        for letter, size in zip(term, shape, strict=True):
            if sizes.setdefault(letter, size) != size:
                return None  # broadcasting: the kernel handles it
    if tuple(sizes[letter] for letter in out) != out_shape:
        return None
    fields = list(operands.fields)
    for i, term in enumerate(terms):
        others = set(out).union(*(t for j, t in enumerate(terms) if j != i))
        summed = [a for a, letter in enumerate(term) if letter not in others]
        if summed:
            fields[i] = relax.op.sum(fields[i], axis=summed)
            terms[i] = "".join(letter for letter in term if letter in others)
    if len(fields) == 1:
        return _permuted(fields[0], terms[0], out)
    (a, b), (ta, tb) = fields, terms
    batch = [letter for letter in out if letter in ta and letter in tb]
    left = [letter for letter in out if letter in ta and letter not in tb]
    right = [letter for letter in out if letter in tb and letter not in ta]
    contracted = [letter for letter in ta if letter in tb and letter not in out]
    k = math.prod(sizes[letter] for letter in contracted)
    lead = [sizes[letter] for letter in batch]
    if batch:
        a_shape = [*lead, math.prod(sizes[letter] for letter in left), k]
    else:  # a 2-D right operand: the left subscripts stay axes of their own
        a_shape = [*(sizes[letter] for letter in left), k] if left else [1, k]
    b_shape = [*lead, k, math.prod(sizes[letter] for letter in right)]
    product = relax.op.matmul(_arrange(a, ta, [*batch, *left, *contracted], a_shape, sizes),
                              _arrange(b, tb, [*batch, *contracted, *right], b_shape, sizes))
    order = [*batch, *left, *right]
    result = _reshaped(product, [*a_shape[:-1], b_shape[-1]],
                       [sizes[letter] for letter in order])
    return _permuted(result, order, out)


def _parse(subscripts: str, ranks: list[int]) -> tuple[list[str], str] | None:
    """The subscripts of each operand and of the output, each ellipsis spelled out in letters
    the equation does not use; None for an equation this pass leaves alone (a subscript
    repeated in one operand, or ellipses of different ranks)."""
    text = subscripts.replace(" ", "")
    lhs, arrow, out = text.partition("->")
    terms = lhs.split(",")
    if len(terms) != len(ranks):
        return None
    spare = [c for c in string.ascii_letters if c not in text]
    ellipses = {rank - len(term.replace("...", "")) for term, rank in zip(terms, ranks,
                                                                          strict=True)
                if "..." in term}
    if len(ellipses) > 1:
        return None
    dots = "".join(spare[:ellipses.pop()]) if ellipses else ""
    terms = [term.replace("...", dots) for term in terms]
    if not arrow:  # implicit output: the ellipsis, then the subscripts used once, sorted
        once = [c for c in set("".join(terms)) if "".join(terms).count(c) == 1 and c not in dots]
        out = dots + "".join(sorted(once))
    out = out.replace("...", dots)
    if any(len(set(t)) != len(t) for t in [*terms, out]) or any(
            len(t) != r for t, r in zip(terms, ranks, strict=True)):
        return None
    if not set(out) <= set("".join(terms)):
        return None
    return terms, out


def _arrange(value: relax.Expr, term: str, order: list[str], shape: list[int],
             sizes: dict[str, int]) -> relax.Expr:
    """``value`` (subscripts ``term``, of ``sizes``) permuted to ``order`` and reshaped to
    ``shape``; a constant is rearranged in place."""
    if isinstance(value, tvm.ir.expr.Constant):
        array = value.value.numpy().transpose([term.index(letter) for letter in order])
        return relax.const(np.ascontiguousarray(array.reshape(shape)), str(value.ty.dtype))
    return _reshaped(_permuted(value, term, order), [sizes[letter] for letter in order], shape)


def _permuted(value: relax.Expr, term: str, order: list[str] | str) -> relax.Expr:
    """``value`` (subscripts ``term``) with its axes in ``order`` (a sum's survivors first)."""
    perm = [term.index(letter) for letter in order]
    return value if perm == list(range(len(term))) else relax.op.permute_dims(value, perm)


def _reshaped(value: relax.Expr, shape: list[int], target: list[int]) -> relax.Expr:
    return value if list(shape) == list(target) else relax.op.reshape(value, target)
