"""UnpackProjections: a packed Q/K/V projection taken apart becomes one matmul per part, with the
same numerics; takes of anything else are left as they are."""

import numpy as np
import pytest
import tvm
from tvm import relax

from tests.passes.test_distribute_tensors import const, module, run
from tvm_chiplet.passes import UnpackProjections
from tvm_chiplet.passes.pipeline import prepare_splits

RNG = np.random.default_rng(0)
TOKENS, WIDTH = 6, 8


def take(s, i, axis=0):
    return relax.op.take(s, relax.const(i, "int64"), axis=axis)


def packed_attention(bb, x, bias_first=True, used=3):
    """torch's nn.MultiheadAttention in ONNX, one head: ``x @ w + b`` ([T, 1, 3E]), reshaped
    to [T, 1, 3, E], a leading axis added, the 3 moved to the front, squeezed, and each of
    q, k, v taken; then scores and context. ``used``: how many of q, k, v are taken (the
    rest read from the packed output otherwise)."""
    y = bb.emit(relax.op.matmul(x, const(WIDTH, 3 * WIDTH)))
    bias = const(3 * WIDTH)
    y = bb.emit(relax.op.add(bias, y) if bias_first else relax.op.add(y, bias))
    r = bb.emit(relax.op.reshape(y, (TOKENS, 1, 3, WIDTH)))
    e = bb.emit(relax.op.expand_dims(r, 0))
    p = bb.emit(relax.op.permute_dims(e, [3, 1, 2, 0, 4]))
    s = bb.emit(relax.op.squeeze(p, [3]))
    q, k, v = (bb.emit(take(s, i)) for i in range(3))
    if used < 3:
        v = bb.emit(relax.op.strided_slice(y, [2], [2 * WIDTH], [3 * WIDTH]))
    q, k, v = (bb.emit(relax.op.permute_dims(t, [1, 0, 2])) for t in (q, k, v))
    scores = bb.emit(relax.op.nn.softmax(relax.op.matmul(q, relax.op.permute_dims(
        k, [0, 2, 1]))))
    return relax.op.matmul(scores, v)


def calls(mod, op):
    return [b.value for block in mod["main"].body.blocks for b in block.bindings
            if isinstance(b.value, relax.Call) and b.value.op.name == op]


@pytest.mark.parametrize("bias_first", [True, False])
def test_a_packed_qkv_projection_becomes_three_projections_with_the_same_result(bias_first):
    mod = module(lambda bb, x: packed_attention(bb, x, bias_first), (TOKENS, 1, WIDTH))
    unpacked = UnpackProjections()(mod)
    assert not calls(unpacked, "relax.take")
    weights = [tuple(int(d) for d in m.args[1].ty.shape) for m in calls(unpacked, "relax.matmul")
               if isinstance(m.args[1], tvm.ir.expr.Constant)]
    assert weights == [(WIDTH, WIDTH)] * 3  # the packed [8, 24] matmul is gone
    x = RNG.normal(size=(TOKENS, 1, WIDTH)).astype("float32")
    np.testing.assert_allclose(run(unpacked, [x]), run(mod, [x]), rtol=1e-5, atol=1e-5)
    # The models' pipeline applies it before planning splits.
    assert not calls(prepare_splits()(mod), "relax.take")


def test_a_packed_output_read_otherwise_too_is_left_packed():
    # v is sliced from the packed output, not taken: the packed matmul runs anyway, so its
    # q and k stay takes rather than running twice.
    mod = module(lambda bb, x: packed_attention(bb, x, used=2), (TOKENS, 1, WIDTH))
    assert len(calls(UnpackProjections()(mod), "relax.take")) == 3


def test_a_take_of_interleaved_columns_is_left_as_it_is():
    # [T, 3E] reshaped to [T, E, 3]: taking index 0 of the last axis picks every third column,
    # no block of the weights.
    def interleaved(bb, x):
        y = bb.emit(relax.op.matmul(x, const(WIDTH, 3 * WIDTH)))
        r = bb.emit(relax.op.reshape(y, (TOKENS, WIDTH, 3)))
        return take(r, 0, axis=2)

    mod = module(interleaved, (TOKENS, WIDTH))
    assert len(calls(UnpackProjections()(mod), "relax.take")) == 1


def test_a_packed_output_returned_in_a_tuple_too_is_left_packed():
    def returned(bb, x):
        y = bb.emit(relax.op.matmul(x, const(WIDTH, 3 * WIDTH)))
        r = bb.emit(relax.op.reshape(y, (TOKENS, 1, 3, WIDTH)))
        q = bb.emit(take(bb.emit(relax.op.permute_dims(r, [2, 0, 1, 3])), 0))
        return bb.emit(relax.Tuple([q, y]))

    mod = module(returned, (TOKENS, 1, WIDTH))
    assert len(calls(UnpackProjections()(mod), "relax.take")) == 1
