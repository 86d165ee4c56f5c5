"""SliceStridedConvs: a strided 1x1 conv's input sliced to the pixels it reads, same numerics;
after a split, each part slices its own pixels where they lie, so only those cross a link."""

import numpy as np
import pytest
from tvm import relax

from tests.passes.test_distribute_tensors import check_numerics, const, crossings, module, run
from tvm_chiplet.passes import SliceStridedConvs, get_pipeline
from tvm_chiplet.passes.distribute_tensors import DistributedSplit, distribute_and_reduce
from tvm_chiplet.runtime.device import simulate_workload
from tvm_chiplet.targets.system_toml import load_system

RNG = np.random.default_rng(0)


def shortcut(bb, x):
    """conv 3x3 8->16 -> relu -> conv 1x1 stride 2 16->32: ResNet's downsampling shortcut
    after a layer, on 9 rows (an odd count: the last band ends on a kept row)."""
    a = bb.emit(relax.op.nn.relu(relax.op.nn.conv2d(x, const(16, 8, 3, 3),
                                                    padding=[1, 1, 1, 1])))
    return relax.op.nn.conv2d(a, const(32, 16, 1, 1), strides=[2, 2])


def ops(mod):
    return [b.value.op.name for block in mod["main"].body.blocks for b in block.bindings
            if isinstance(b.value, relax.Call)]


def test_a_strided_1x1_conv_reads_a_strided_slice_with_the_same_result():
    mod = module(shortcut, (1, 8, 9, 10))
    rewritten = SliceStridedConvs()(mod)
    assert ops(rewritten) == ["relax.nn.conv2d", "relax.nn.relu", "relax.strided_slice",
                              "relax.nn.conv2d"]
    conv = [b.value for b in rewritten["main"].body.blocks[0].bindings][-1]
    assert [int(s) for s in conv.attrs.strides] == [1, 1]
    x = RNG.normal(size=(1, 8, 9, 10)).astype("float32")
    np.testing.assert_allclose(run(rewritten, [x]), run(mod, [x]), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("kernel, strides, padding", [
    ((3, 3), [2, 2], [1, 1, 1, 1]),  # reads every pixel
    ((1, 1), [1, 1], [0, 0, 0, 0]),  # no stride
    ((1, 1), [2, 2], [1, 1, 1, 1]),  # padded: its reads do not fall on a progression
])
def test_convs_that_read_every_pixel_are_left_as_they_are(kernel, strides, padding):
    mod = module(lambda bb, x: relax.op.nn.conv2d(x, const(4, 8, *kernel), strides=strides,
                                                  padding=padding))
    assert SliceStridedConvs()(mod).same_as(mod)


def test_only_the_axis_read_with_gaps_is_sliced():
    # A 1x3 kernel with stride 2 on both axes skips rows but reads every column.
    mod = module(lambda bb, x: relax.op.nn.conv2d(x, const(4, 8, 1, 3), strides=[2, 2]))
    rewritten = SliceStridedConvs()(mod)
    sliced = rewritten["main"].body.blocks[0].bindings[0].value
    assert [int(a) for a in sliced.args[1].fields] == [2]
    assert [int(s) for s in rewritten["main"].body.blocks[0].bindings[1].value.attrs.strides
            ] == [1, 2]
    x = RNG.normal(size=(1, 8, 12, 12)).astype("float32")
    np.testing.assert_allclose(run(rewritten, [x]), run(mod, [x]), rtol=1e-5, atol=1e-5)


# The 3x3 layer's output, float32: 16 channels x 9 x 10 pixels; the shortcut reads 5 x 5.
LAYER = 16 * 9 * 10 * 4
READ = 16 * 5 * 5 * 4


@pytest.mark.parametrize("first, second, saved", [
    # Sharded along the channels: each of 4 parts fetched 3/4 of the layer, now of its slice.
    ("out_channels", "out_channels", 3 * (LAYER - READ)),
    ("tiles/2", "out_channels", 3 * (LAYER - READ)),
    # Tiled 2 x 2: each tile fetches the other slice (8 channels) of its band's input rows:
    # rows 0-4 and 6-8 of 10 columns before, rows 0, 2, 4 and 6, 8 of 5 columns now.
    ("tiles/2", "tiles/2", 2 * 8 * 4 * ((5 + 3) * 10 - (3 + 2) * 5)),
    # Along the rows, each band already read its own rows only, where they lie.
    ("rows", "rows", 0),
])
def test_each_part_slices_its_own_pixels_before_they_cross(first, second, saved):
    moved = []
    for mod in (module(shortcut, (1, 8, 9, 10)), SliceStridedConvs()(module(shortcut,
                                                                            (1, 8, 9, 10)))):
        splits = [DistributedSplit(0, first, (0, 1, 2, 3)),
                  DistributedSplit(1, second, (0, 1, 2, 3))]
        reduced, clusters = distribute_and_reduce(mod, splits, home=0)
        check_numerics(mod, reduced, (1, 8, 9, 10))
        moved.append(sum(size for size, _, _ in crossings(reduced, clusters)))
    assert moved[0] - moved[1] == saved


def test_a_band_left_without_a_kept_row_drops_out():
    # 9 rows in 4 bands of 3, 2, 2, 2 rows (0-2, 3-4, 5-6, 7-8): with stride 4, rows 0, 4
    # and 8 are kept; the band of rows 5-6 has none, and the shortcut's rows split 3 ways.
    def build(bb, x):
        a = bb.emit(relax.op.nn.relu(relax.op.nn.conv2d(x, const(16, 8, 3, 3),
                                                        padding=[1, 1, 1, 1])))
        return relax.op.nn.relu(relax.op.nn.conv2d(a, const(8, 16, 1, 1), strides=[4, 4]))

    mod = SliceStridedConvs()(module(build, (1, 8, 9, 10)))
    reduced, clusters = distribute_and_reduce(mod, [DistributedSplit(0, "rows", (0, 1, 2, 3))],
                                              home=0)
    check_numerics(mod, reduced, (1, 8, 9, 10))
    # Row 4 (of 3 columns: 0, 4, 8) from band 1 and row 8 from band 3 reach the shortcut on
    # cluster 0 (band 0, with row 0); band 2 sends nothing.
    assert sorted(crossings(reduced, clusters)) == [(16 * 3 * 4, 1, 0), (16 * 3 * 4, 3, 0)]


def test_the_default_pipeline_slices_before_it_plans_and_matches():
    # chiplet-default (prepare_splits first): the shortcut's kernels, split or not, read 5
    # columns of rows of the slice, not the 10 columns of the layer.
    mod = module(shortcut, (1, 8, 9, 10))
    out = get_pipeline("chiplet-default", system=load_system("cluster-4"),
                       strategy="tensor-parallel", simulator=simulate_workload)(mod)
    x = RNG.normal(size=(1, 8, 9, 10)).astype("float32")
    np.testing.assert_allclose(run(out, [x]), run(mod, [x]), rtol=1e-5, atol=1e-5)
    reads = [[int(d) for d in arg.ty.shape] for func in out.functions.values()
             if isinstance(func, relax.Function) for block in func.body.blocks
             for b in block.bindings if isinstance(b.value, relax.Call)
             and "conv2d" in getattr(b.value.args[0], "name_hint", "")
             for arg in b.value.args[1].fields if arg.ty.shape[-1] != 1]
    shortcut_reads = [shape for shape in reads if shape[1] == 16]
    assert shortcut_reads and all(shape[-1] == 5 for shape in shortcut_reads)


def test_a_slice_of_a_layer_already_gathered_is_cut_from_that_copy():
    # ResNet's first block of a stage: the block's first conv and the shortcut both read the
    # layer. Where the block gathers it whole (an output-channel split), the shortcut's parts
    # read that copy with strides: the same kernels and messages as without the slice (no
    # slice copied out of it, nothing more crossing).
    def block(bb, x):
        a = bb.emit(relax.op.nn.relu(relax.op.nn.conv2d(x, const(16, 8, 3, 3),
                                                        padding=[1, 1, 1, 1])))
        main = bb.emit(relax.op.nn.conv2d(a, const(8, 16, 3, 3), strides=[2, 2],
                                          padding=[1, 1, 1, 1]))
        return relax.op.add(main, relax.op.nn.conv2d(a, const(8, 16, 1, 1), strides=[2, 2]))

    moved, kernels = [], []
    for mod in (module(block, (1, 8, 9, 10)), SliceStridedConvs()(module(block, (1, 8, 9, 10)))):
        splits = [DistributedSplit(i, "out_channels", (0, 1, 2, 3)) for i in range(3)]
        reduced, clusters = distribute_and_reduce(mod, splits, home=0)
        check_numerics(mod, reduced, (1, 8, 9, 10))
        moved.append(sum(size for size, _, _ in crossings(reduced, clusters)))
        kernels.append(sorted(str(b.value.args[0]) for block in reduced["main"].body.blocks
                              for b in block.bindings if isinstance(b.value, relax.Call)))
    assert moved[1] == moved[0] and kernels[1] == kernels[0]


@pytest.mark.parametrize("begin, end, stride, kept", [
    (6, 12, 1, [1]),  # an LSTM's gate: the part holding it
    (5, 19, 1, [0, 1, 2, 3]),  # rows 5 and 18 at the ends
    (3, 24, 4, [0, 1, 2, 3]),  # rows 3, 7, 11, 15, 19, 23: each part keeps its own
    (0, 12, 7, [0, 1]),  # rows 0 and 7
])
def test_a_slice_of_a_sharded_value_keeps_the_parts_that_hold_its_terms(begin, end, stride,
                                                                         kept):
    def build(bb, x):
        a = bb.emit(relax.op.nn.relu(relax.op.nn.conv2d(x, const(4, 8, 3, 3),
                                                        padding=[1, 1, 1, 1])))
        s = bb.emit(relax.op.strided_slice(a, axes=[2], begin=[begin], end=[end],
                                           strides=[stride]))
        # A bias of the slice's shape: each part adds its own rows of it.
        return relax.op.add(s, const(1, 4, len(range(begin, end, stride)), 5))

    mod = module(build, (1, 8, 24, 5))
    reduced, clusters = distribute_and_reduce(mod, [DistributedSplit(0, "rows", (0, 1, 2, 3))],
                                              home=0)
    check_numerics(mod, reduced, (1, 8, 24, 5))
    # Rows of 6 per part: only the parts holding terms send any (their own), where the result
    # is gathered.
    moved = crossings(reduced, clusters)
    assert {src for _, src, _ in moved} <= set(kept)
    assert sum(size for size, _, _ in moved) < 4 * 5 * len(range(begin, end, stride)) * 4
