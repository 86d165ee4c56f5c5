"""GroupNormByChannels: a group norm over a flattened view of each group, as PyTorch exports it,
takes its statistics on the image instead; the same numerics, and after a row split or 2-D split
no band is gathered for it."""

import numpy as np
import pytest
from tvm import relax

from tests.passes.test_distribute_tensors import const, crossings, module, run, split_and_check
from tvm_chiplet.passes import GroupNormByChannels
from tvm_chiplet.passes.distribute_tensors import DistributedSplit

RNG = np.random.default_rng(0)


def torch_group_norm(bb, a, groups=4, scales=True):
    """GroupNorm(groups, 16) of ``a`` ([1, 16, H, W]) as torch's ONNX export writes it and TVM
    imports it: a reshape to [1, groups, L], an instance norm of that (with its per-group scale
    and bias of ones and zeros), a reshape back, the per-channel affine."""
    n, c, h, w = (int(d) for d in a.ty.shape.values)
    flat = bb.emit(relax.op.reshape(a, [n, groups, c // groups * h * w]))
    mean = bb.emit(relax.op.mean(flat, axis=[2], keepdims=True))
    centred = bb.emit(relax.op.subtract(flat, mean))
    var = bb.emit(relax.op.variance(flat, axis=[-1], keepdims=True))
    std = bb.emit(relax.op.sqrt(relax.op.add(var, relax.const(1e-5))))
    norm = bb.emit(relax.op.divide(centred, std))
    if scales:
        norm = bb.emit(relax.op.multiply(norm, relax.const(np.ones((groups, 1), "float32"))))
        norm = bb.emit(relax.op.add(norm, const(groups, 1)))
    image = bb.emit(relax.op.reshape(norm, [n, c, h, w]))
    return bb.emit(relax.op.add(relax.op.multiply(image, const(c, 1, 1)), const(c, 1, 1)))


def norm_chain(bb, x, **options):
    """conv 8->16 (3x3) -> group norm -> relu -> conv 16->8: a diffusion U-Net's block."""
    a = bb.emit(relax.op.nn.conv2d(x, const(16, 8, 3, 3), padding=[1, 1, 1, 1]))
    normed = torch_group_norm(bb, a, **options)
    return relax.op.nn.conv2d(relax.op.nn.relu(normed), const(8, 16, 3, 3), padding=[1, 1, 1, 1])


def shapes_of_reshapes(mod):
    return [[int(d) for d in b.var.ty.shape.values] for block in mod["main"].body.blocks
            for b in block.bindings if isinstance(b.value, relax.Call)
            and b.value.op.name == "relax.reshape"]


@pytest.mark.parametrize("groups, scales", [(4, True), (4, False), (1, True), (16, True)])
def test_a_flattened_group_norm_takes_its_statistics_on_the_image(groups, scales):
    mod = module(lambda bb, x: norm_chain(bb, x, groups=groups, scales=scales))
    rewritten = GroupNormByChannels()(mod)
    # No view of the image flattened by groups is left; only the per-channel means grouped.
    assert all(shape[2] == 16 // groups for shape in shapes_of_reshapes(rewritten)
               if len(shape) == 3)
    assert [1, 16, 12, 12] not in shapes_of_reshapes(rewritten)
    x = RNG.normal(size=(1, 8, 12, 12)).astype("float32")
    np.testing.assert_allclose(run(rewritten, [x]), run(mod, [x]), rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("dim, group", [("rows", (0, 1, 2)), ("tiles/2", tuple(range(6)))])
def test_a_group_norm_of_row_bands_is_not_gathered(dim, group):
    """Split by rows or in 2-D, the group norm's statistics are reduced band by band and only
    per-channel means cross; the flattened form gathered a band on the home cluster."""
    mod = GroupNormByChannels()(module(norm_chain))
    splits = [DistributedSplit(0, dim, group), DistributedSplit(1, dim, group)]
    reduced, clusters = split_and_check(mod, splits, (1, 8, 12, 12))
    part = 16 * 12 * 12 * 4 // len(group)  # a band of 4 rows, or a tile of it by 8 channels
    sent = [s for n, s, d in crossings(reduced, clusters) if n == part and d == 0]
    assert sent == ([] if dim == "rows" else [1])  # the second conv's tiles read band 0's


def group_norm_op_chain(bb, x, center=True, scale=True):
    """norm_chain with a ``group_norm`` op (4 groups), as TVM imports ONNX's
    GroupNormalization."""
    a = bb.emit(relax.op.nn.conv2d(x, const(16, 8, 3, 3), padding=[1, 1, 1, 1]))
    normed = bb.emit(relax.op.nn.group_norm(a, const(16), const(16), 4, 1, [2, 3],
                                            center=center, scale=scale))
    return relax.op.nn.conv2d(relax.op.nn.relu(normed), const(8, 16, 3, 3), padding=[1, 1, 1, 1])


def test_a_group_norm_op_takes_its_statistics_on_the_image():
    mod = module(group_norm_op_chain)
    rewritten = GroupNormByChannels()(mod)
    ops = [b.value.op.name for block in rewritten["main"].body.blocks for b in block.bindings]
    assert "relax.nn.group_norm" not in ops
    x = RNG.normal(size=(1, 8, 12, 12)).astype("float32")
    np.testing.assert_allclose(run(rewritten, [x]), run(mod, [x]), rtol=1e-4, atol=1e-4)
    splits = [DistributedSplit(0, "rows", (0, 1, 2)), DistributedSplit(1, "rows", (0, 1, 2))]
    reduced, clusters = split_and_check(rewritten, splits, (1, 8, 12, 12))
    band = 16 * 4 * 12 * 4
    assert not [s for n, s, d in crossings(reduced, clusters) if n == band and d == 0]


def test_a_group_norm_op_told_not_to_scale_or_shift_is_left_as_it_is():
    """TVM's kernel scales and shifts regardless: rewritten faithfully, it would not."""
    mod = module(lambda bb, x: group_norm_op_chain(bb, x, center=False))
    assert GroupNormByChannels()(mod).same_as(mod)


def test_a_flattened_value_used_elsewhere_is_left_as_it_is():
    """A flattened group's value that the model also returns (or that any op other than the
    instance norm's reads) keeps the whole region as written."""
    def build(bb, x):
        a = bb.emit(relax.op.nn.conv2d(x, const(16, 8, 3, 3), padding=[1, 1, 1, 1]))
        flat = bb.emit(relax.op.reshape(a, [1, 4, 576]))
        mean = bb.emit(relax.op.mean(flat, axis=[2], keepdims=True))
        centred = bb.emit(relax.op.subtract(flat, mean))
        back = bb.emit(relax.op.reshape(centred, [1, 16, 12, 12]))
        return relax.Tuple([back, bb.emit(relax.op.nn.softmax(centred, axis=2))])
    mod = module(build)
    assert GroupNormByChannels()(mod).same_as(mod)
