"""DistributeTensors: split layers stay distributed, with collectives only where layouts change."""

from itertools import pairwise

import numpy as np
import pytest
import tvm
from tvm import relax

from tvm_chiplet.passes.analysis.extract_op_graph import extract_op_graph, sliced_fractions
from tvm_chiplet.passes.distribute_tensors import (
    DistributedSplit,
    distribute,
    distribute_and_reduce,
)
from tvm_chiplet.passes.planners import PlanningError
from tvm_chiplet.passes.planners.layouts import allocation_groups
from tvm_chiplet.targets.collectives import reduce_ring
from tvm_chiplet.targets.system_generators import mesh_system
from tvm_chiplet.targets.topology import Topology
from tvm_chiplet.tools import models
from tvm_chiplet.tools.frontends import load_model

RNG = np.random.default_rng(0)


def const(*shape):
    return relax.const(RNG.normal(size=shape).astype("float32"))


def conv_chain(second: str = "in_channels"):
    """x -> conv 8->16 -> relu -> conv 16->8 (3x3) -> relu: an out/in channel or row chain."""
    bb = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType((1, 8, 12, 12), "float32"))
    with bb.function("main", [x]):
        with bb.dataflow():
            a = bb.emit(relax.op.nn.relu(relax.op.nn.conv2d(x, const(16, 8, 3, 3),
                                                            padding=[1, 1, 1, 1])))
            b = bb.emit(relax.op.nn.conv2d(a, const(8, 16, 3, 3), padding=[1, 1, 1, 1]))
            out = bb.emit_output(relax.op.nn.relu(b))
        bb.emit_func_output(out)
    return bb.get()


def module(build, shape=(1, 8, 12, 12)):
    """``main(x)`` (``x`` of ``shape``) returning ``build(bb, x)``, emitted in its dataflow
    block."""
    bb = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType(shape, "float32"))
    with bb.function("main", [x]):
        with bb.dataflow():
            out = bb.emit_output(build(bb, x))
        bb.emit_func_output(out)
    return bb.get()


def mlp():
    """Megatron's MLP: matmul (columns) -> gelu -> matmul (reduction)."""
    bb = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType((16, 32), "float32"))
    with bb.function("main", [x]):
        with bb.dataflow():
            h = bb.emit(relax.op.nn.gelu(relax.op.matmul(x, const(32, 64))))
            out = bb.emit_output(relax.op.matmul(h, const(64, 32)))
        bb.emit_func_output(out)
    return bb.get()


def run(mod, inputs):
    vm = relax.VirtualMachine(tvm.compile(mod, "llvm"), tvm.cpu())
    return vm["main"](*[tvm.runtime.tensor(v) for v in inputs]).numpy()


def crossings(reduced, clusters):
    """(bytes, producer cluster, reader cluster) of every value read on another cluster."""
    bindings = [b for block in reduced["main"].body.blocks for b in block.bindings]
    where = {b.var: c for b, c in zip(bindings, clusters, strict=True)}
    moved = []
    for binding, cluster in zip(bindings, clusters, strict=True):
        for v in relax.analysis.free_vars(binding.value):
            if v in where and where[v] != cluster:
                shape = [int(d) for d in v.ty.shape.values]
                moved.append((int(np.prod(shape)) * 4, where[v], cluster))
    return moved


def check_numerics(mod, reduced, shape):
    x = RNG.normal(size=shape).astype("float32")
    np.testing.assert_allclose(run(reduced, [x]), run(mod, [x]), rtol=1e-4, atol=1e-4)


def split_and_check(mod, splits, shape, **options):
    """``mod`` distributed by ``splits`` (home cluster 0, ``options`` to
    :func:`distribute_and_reduce`) and checked against the unsplit module on an input of
    ``shape``: the rewrite and the cluster of each of its bindings."""
    reduced, clusters = distribute_and_reduce(mod, splits, home=0, **options)
    check_numerics(mod, reduced, shape)
    return reduced, clusters


def test_out_then_in_channels_need_no_communication_until_the_partial_sums():
    mod = conv_chain()
    splits = [DistributedSplit(0, "out_channels", (0, 1)),
              DistributedSplit(1, "in_channels", (0, 1))]
    reduced, clusters = split_and_check(mod, splits, (1, 8, 12, 12))
    assert set(clusters) == {0, 1}
    # The first conv's channel halves feed the second conv's matching input halves in place.
    # The partial sums are reduce-scattered (each cluster sends the other its half, 4 of 8
    # channels), the relu runs on both halves, and the result is gathered on cluster 0.
    half = 4 * 12 * 12 * 4
    assert sorted(crossings(reduced, clusters)) == [(half, 0, 1), (half, 1, 0), (half, 1, 0)]


def test_a_partial_sum_followed_by_an_elementwise_op_is_reduce_scattered():
    mod = conv_chain()
    splits = [DistributedSplit(1, "in_channels", (2, 3))]
    reduced, clusters = split_and_check(mod, splits, (1, 8, 12, 12))
    # The input is cut on cluster 0 and its channel halves sent to 2 and 3. Each of them sends
    # the other the half of its partial sum that the other keeps (reduce-scatter), the relu runs
    # on both halves, and cluster 2, which holds the first half, gathers the result.
    half = 4 * 12 * 12 * 4
    assert sorted(crossings(reduced, clusters)) == sorted([
        (2 * half, 0, 2), (2 * half, 0, 3), (half, 2, 3), (half, 3, 2), (half, 3, 2)])


@pytest.mark.parametrize("device_dtype, width, accumulators, partial", [
    ("int8", 1, None, 4), ("fp16", 2, None, 4), ("fp32", 4, None, 4), ("int8", 1, 3, 3)])
def test_partial_sums_cross_clusters_at_the_accumulators_width(device_dtype, width,
                                                               accumulators, partial):
    mod = conv_chain()
    reduced, clusters = split_and_check(mod, [DistributedSplit(1, "in_channels", (2, 3))],
                                        (1, 8, 12, 12))
    graph = extract_op_graph(reduced, device_dtype, accumulators)
    moved = sorted((graph.graph.edges[u, v]["nbytes"], clusters[u], clusters[v])
                   for u, v in graph.graph.edges if clusters[u] != clusters[v])
    # As in the test above, at the device dtype's width, except the halves of the partial
    # sums that clusters 2 and 3 exchange: the accumulators' width (4 bytes, int32 or fp32,
    # unless the system's accumulators are narrower) whatever the device dtype.
    half = 4 * 12 * 12
    assert moved == sorted([(2 * half * width, 0, 2), (2 * half * width, 0, 3),
                            (half * partial, 2, 3), (half * partial, 3, 2),
                            (half * width, 3, 2)])


def quantized_chain(scale):
    """conv_chain with the first conv's output quantized to int8 and back between the convs
    (a QDQ model's activation), with one ``scale`` for the whole tensor (``()``) or one per
    channel (``(16,)``)."""
    def build(bb, x):
        a = bb.emit(relax.op.nn.relu(relax.op.nn.conv2d(x, const(16, 8, 3, 3),
                                                        padding=[1, 1, 1, 1])))
        step = relax.const(np.full(scale, 0.05, "float32"))
        zero = relax.const(np.full(scale, 3, "int8"))
        q = bb.emit(relax.op.quantize(a, step, zero, axis=1, out_dtype="int8"))
        d = bb.emit(relax.op.dequantize(q, step, zero, axis=1, out_dtype="float32"))
        return relax.op.nn.relu(relax.op.nn.conv2d(d, const(8, 16, 3, 3), padding=[1, 1, 1, 1]))
    return module(build)


@pytest.mark.parametrize("scale", [(), (16,)])
def test_a_quantize_with_one_scale_follows_a_split_as_an_elementwise_op(scale):
    """A QDQ model's activations: a per-tensor quantize and dequantize run on each part where
    it lies, so the channel halves move no more than without them (as in
    ``test_out_then_in_channels_need_no_communication_until_the_partial_sums``). A per-channel
    one (its scale along the split axis) is not followed: the first conv's halves are gathered
    on cluster 0 before it, and the second conv's half for cluster 1 sent from there."""
    splits = [DistributedSplit(0, "out_channels", (0, 1)),
              DistributedSplit(1, "in_channels", (0, 1))]
    reduced, clusters = split_and_check(quantized_chain(scale), splits, (1, 8, 12, 12))
    half = 4 * 12 * 12 * 4  # of the second conv's output; the first's is twice that
    gathered = [] if scale == () else [(2 * half, 1, 0), (2 * half, 0, 1)]
    assert sorted(crossings(reduced, clusters)) == sorted(
        [(half, 0, 1), (half, 1, 0), (half, 1, 0), *gathered])


def guarded_chain(guard):
    """conv_chain with ``guard`` applied to the first conv's output: torch's export of
    scaled_dot_product_attention zeroes a softmax's NaNs (``where(isnan(x), 0, x)``), and
    unary maths such as a softplus computes element by element too."""
    def build(bb, x):
        a = bb.emit(relax.op.nn.relu(relax.op.nn.conv2d(x, const(16, 8, 3, 3),
                                                        padding=[1, 1, 1, 1])))
        if guard == "isnan":
            a = bb.emit(relax.op.where(bb.emit(relax.op.isnan(a)), relax.const(0.0), a))
        else:
            a = bb.emit(relax.op.nn.softplus(a))
        return relax.op.nn.relu(relax.op.nn.conv2d(a, const(8, 16, 3, 3), padding=[1, 1, 1, 1]))
    return module(build)


@pytest.mark.parametrize("guard", ["isnan", "softplus"])
def test_a_nan_guard_and_unary_maths_follow_a_split_as_elementwise_ops(guard):
    """Between an output-channel and an input-channel split only the partial sums move, as
    without the guard (before, an isnan gathered the first conv's halves on cluster 0)."""
    splits = [DistributedSplit(0, "out_channels", (0, 1)),
              DistributedSplit(1, "in_channels", (0, 1))]
    reduced, clusters = split_and_check(guarded_chain(guard), splits, (1, 8, 12, 12))
    half = 4 * 12 * 12 * 4  # of the second conv's output
    assert sorted(crossings(reduced, clusters)) == [(half, 0, 1), (half, 1, 0), (half, 1, 0)]


def split_projection(axis):
    """A GPT-2 block's fused projection: matmul 16 -> 48 columns, split into three along
    ``axis`` (1: query, key and value of 16 columns each; 0: two halves of the rows), each
    through its own activation, joined again."""
    def build(bb, x):
        y = bb.emit(relax.op.matmul(x, const(16, 48)))
        fields = bb.emit(relax.op.split(y, 3 if axis == 1 else 2, axis=axis))
        acts = [relax.op.nn.relu, relax.op.tanh, relax.op.sigmoid][:3 if axis == 1 else 2]
        outs = [bb.emit(act(bb.emit(relax.TupleGetItem(fields, i))))
                for i, act in enumerate(acts)]
        return relax.op.concat(outs, axis=axis)
    return module(build, (8, 16))


@pytest.mark.parametrize("axis", [1, 0])
def test_a_split_of_a_sharded_value_runs_part_by_part_where_the_parts_lie(axis):
    """The projection's column halves (0-24 on cluster 0, 24-48 on cluster 1) are not
    gathered to be split. Along the columns, the query lies on cluster 0, the key on both, the
    value on cluster 1, and each activation runs where its parts lie; along the rows, both
    clusters split their own half and run every activation."""
    splits = [DistributedSplit(0, "cols", (0, 1))]
    reduced, clusters = split_and_check(split_projection(axis), splits, (8, 16))
    bindings = [b for block in reduced["main"].body.blocks for b in block.bindings]

    def runs(op):
        return {c for b, c in zip(bindings, clusters, strict=True) if op in str(b.value)}
    if axis == 1:
        assert (runs("relu"), runs("tanh"), runs("sigmoid")) == ({0}, {0, 1}, {1})
    else:
        assert runs("relu") == runs("tanh") == {0, 1}


def repeated_keys():
    """Grouped-query attention's keys (Llama's repeat_kv): a projection to 2 heads of 4,
    each head repeated for 2 query heads by expand_dims and broadcast_to, merged to 4 heads."""
    def build(bb, x):
        k = bb.emit(relax.op.reshape(relax.op.matmul(x, const(16, 8)), (8, 2, 4)))
        k = bb.emit(relax.op.expand_dims(relax.op.permute_dims(k, [1, 0, 2]), axis=1))
        k = bb.emit(relax.op.broadcast_to(k, (2, 2, 8, 4)))
        return relax.op.tanh(relax.op.reshape(k, (4, 8, 4)))
    return module(build, (8, 16))


def test_repeated_key_heads_are_broadcast_where_they_lie():
    """Each cluster repeats the key head it projected: nothing is gathered until the output,
    and the tanh runs on both clusters (before, broadcast_to gathered both heads)."""
    splits = [DistributedSplit(0, "cols", (0, 1))]
    reduced, clusters = split_and_check(repeated_keys(), splits, (8, 16))
    bindings = [b for block in reduced["main"].body.blocks for b in block.bindings]
    assert {c for b, c in zip(bindings, clusters, strict=True)
            if "tanh" in str(b.value)} == {0, 1}
    assert crossings(reduced, clusters) == [(2 * 8 * 4 * 4, 1, 0)]  # the output's half


def test_a_one_column_field_broadcast_along_its_column_is_gathered_first():
    """A split's first field is one column of the projection's first part; broadcast along
    that column (to five) it is not followed as a part of a sharded value, whose bounds would
    cover one column of five: the numerics hold."""
    def build(bb, x):
        y = bb.emit(relax.op.matmul(x, const(16, 48)))
        fields = bb.emit(relax.op.split(y, [1], axis=1))
        first = bb.emit(relax.TupleGetItem(fields, 0))
        return relax.op.tanh(relax.op.broadcast_to(first, (8, 5)))
    split_and_check(module(build, (8, 16)), [DistributedSplit(0, "cols", (0, 1))], (8, 16))


def upsampling_chain(method, mode="half_pixel", size=(24, 24), shape=(1, 8, 12, 12),
                     rounding="round"):
    """conv 8->16 -> relu -> resize (to twice the size by default) -> conv 16->8 (3x3) ->
    relu: a U-Net's or FPN's upsampling between convs."""
    def build(bb, x):
        a = bb.emit(relax.op.nn.relu(relax.op.nn.conv2d(x, const(16, 8, 3, 3),
                                                        padding=[1, 1, 1, 1])))
        up = bb.emit(relax.op.image.resize2d(a, size, method=method, rounding_method=rounding,
                                             coordinate_transformation_mode=mode))
        return relax.op.nn.relu(relax.op.nn.conv2d(up, const(8, 16, 3, 3), padding=[1, 1, 1, 1]))
    return module(build, shape)


@pytest.mark.parametrize("method", ["nearest_neighbor", "linear"])
def test_a_resize_follows_a_channel_split(method):
    """Each channel's image is resized on its own: between an output-channel and an
    input-channel split, only the partial sums move."""
    channels = [DistributedSplit(0, "out_channels", (0, 1)),
                DistributedSplit(1, "in_channels", (0, 1))]
    reduced, clusters = split_and_check(upsampling_chain(method), channels, (1, 8, 12, 12))
    half = 4 * 24 * 24 * 4  # of the second conv's output
    assert sorted(crossings(reduced, clusters)) == [(half, 0, 1), (half, 1, 0), (half, 1, 0)]


def resized_rows(reduced, clusters):
    """(cluster, output rows) of each part of the resize in ``reduced`` (a resize2d fused with
    the cut of its band from the halo's rows, or the matmul that weighs a linear resize's
    rows), in order."""
    bindings = [b for block in reduced["main"].body.blocks for b in block.bindings]
    return sorted((c, int(b.var.ty.shape.values[2]))
                  for b, c in zip(bindings, clusters, strict=True)
                  if b.value.args[0].name_hint.startswith(("matmul", "fused_resize2d")))


@pytest.mark.parametrize("method, mode, rows", [
    ("nearest_neighbor", "asymmetric", [8, 8, 8]),  # as torch exports F.interpolate's nearest
    ("nearest_neighbor", "half_pixel", [8, 8, 8]), ("linear", "half_pixel", [8, 8, 8]),
    ("cubic", "half_pixel", [8, 8, 8]), ("linear", "align_corners", [9, 8, 7]),
])
def test_a_resize_of_row_bands_resizes_each_band_where_it_lies(method, mode, rows):
    """conv (3 row bands) -> resize to twice the size -> conv (3 row bands): each band is
    resized on its cluster from its rows and the next bands' edge rows (a whole factor in a
    mode that shifts with the bands: the band with its halo, resized; aligning the corners:
    the rows its outputs' interpolation weights name, weighed by a matmul), never gathered:
    apart from the two output bands gathered home at the end, only rows of a halo cross (two
    at most, of the resize's input or of the second conv's)."""
    splits = [DistributedSplit(0, "rows", (0, 1, 2)), DistributedSplit(1, "rows", (0, 1, 2))]
    mod = upsampling_chain(method, mode, rounding="floor" if mode == "asymmetric" else "round")
    reduced, clusters = split_and_check(mod, splits, (1, 8, 12, 12))
    assert resized_rows(reduced, clusters) == list(zip((0, 1, 2), rows, strict=True))
    moved = sorted(n for n, _, _ in crossings(reduced, clusters))
    assert max(moved[:-2]) <= 2 * 16 * 24 * 4


@pytest.mark.parametrize("mode", ["half_pixel", "pytorch_half_pixel", "asymmetric"])
def test_a_linear_resize_by_no_whole_factor_weighs_each_bands_rows_where_it_lies(mode):
    """12 rows in 3 bands resized to 18 (by 1.5): each band's output rows (those whose source
    lies in it) are weighed from its rows and its neighbours' edge rows, on its cluster."""
    splits = [DistributedSplit(0, "rows", (0, 1, 2))]
    mod = upsampling_chain("linear", mode, (18, 18))
    reduced, clusters = split_and_check(mod, splits, (1, 8, 12, 12))
    assert [c for c, _ in resized_rows(reduced, clusters)] == [0, 1, 2]
    assert sum(rows for _, rows in resized_rows(reduced, clusters)) == 18


@pytest.mark.parametrize("method, mode, size", [
    ("nearest_neighbor", "half_pixel", (36, 36)),  # by 3, not a power of two
    ("nearest_neighbor", "asymmetric", (24, 24)),  # ties (rows 0.5, 1.5...) round to even
    ("nearest_neighbor", "align_corners", (24, 24)), ("cubic", "align_corners", (24, 24)),
])
def test_a_resize_that_does_not_shift_with_the_bands_nor_is_linear_is_gathered(method, mode,
                                                                                size):
    """Row bands of 6 (an odd number): rounding a tie to the even row would round the second
    band's ties the other way in a resize of its own."""
    splits = [DistributedSplit(0, "rows", (0, 1))]
    reduced, clusters = split_and_check(upsampling_chain(method, mode, size), splits,
                                        (1, 8, 12, 12))
    assert (16 * 6 * 12 * 4, 1, 0) in crossings(reduced, clusters)  # cluster 1's band, whole


def test_a_band_of_one_row_resized_aligning_the_corners_reads_two():
    """Six bands of one row resized to twice the size aligning the corners: the last band's
    one output row reads a single input row (its source, 5, is whole), which a resize of the
    columns alone cannot take (TVM divides by zero aligning one row to one); it reads two."""
    splits = [DistributedSplit(0, "rows", tuple(range(6)))]
    mod = upsampling_chain("linear", "align_corners", (12, 24), (1, 8, 6, 12))
    reduced, clusters = split_and_check(mod, splits, (1, 8, 6, 12))
    assert [c for c, _ in resized_rows(reduced, clusters)] == list(range(6))
    assert resized_rows(reduced, clusters)[-1] == (5, 1)


def padded_chain(mode, pad):
    """conv 8->16 (3x3) -> relu -> nn.pad of the rows and columns by ``pad`` (``mode``) ->
    conv 16->8 (3x3, no padding of its own): a style-transfer net's reflecting pads before its
    convs, or F.pad of a U-Net's upsampled map."""
    def build(bb, x):
        a = bb.emit(relax.op.nn.relu(relax.op.nn.conv2d(x, const(16, 8, 3, 3),
                                                        padding=[1, 1, 1, 1])))
        padded = bb.emit(relax.op.nn.pad(a, [0, 0, 0, 0, pad, pad, pad, pad], pad_mode=mode,
                                         pad_value=0.0))
        return relax.op.nn.relu(relax.op.nn.conv2d(padded, const(8, 16, 3, 3)))
    return module(build)


@pytest.mark.parametrize("mode, pad, group", [
    ("constant", 1, (0, 1, 2)), ("reflect", 1, (0, 1, 2)),
    ("reflect", 3, (0, 1, 2, 3, 4, 5)),  # bands of 2 rows reflect 3: read the next bands' rows
    ("reflect", 1, "tiles"),
])
def test_a_pad_of_row_bands_pads_each_band_where_it_lies(mode, pad, group):
    """The first band pads its top, the last its bottom, every band (or tile) its columns, on
    its own cluster. A band thinner than the rows it reflects reads them from the next
    bands."""
    dim = "tiles/2" if group == "tiles" else "rows"
    group = tuple(range(6)) if group == "tiles" else group
    splits = [DistributedSplit(0, dim, group), DistributedSplit(1, dim, group)]
    reduced, clusters = split_and_check(padded_chain(mode, pad), splits, (1, 8, 12, 12))
    bindings = [b for block in reduced["main"].body.blocks for b in block.bindings]
    pads = sorted(c for b, c in zip(bindings, clusters, strict=True)
                  if b.value.args[0].name_hint.startswith(
                      ("pad", "reflect_pad", "fused_pad", "fused_reflect_pad")))
    assert pads == sorted(group)  # gathered, it padded on one cluster


def test_a_negative_pad_of_row_bands_crops_the_gathered_image():
    """A negative width crops (ONNX allows it): a band may hold fewer rows than it loses, so
    the image is gathered and cropped whole, with the numerics unchanged."""
    splits = [DistributedSplit(0, "rows", (0, 1, 2, 3, 4, 5))]
    reduced, _ = split_and_check(padded_chain("constant", -3), splits, (1, 8, 12, 12))
    bindings = [b for block in reduced["main"].body.blocks for b in block.bindings]
    assert len([b for b in bindings if b.value.args[0].name_hint.startswith(
        ("pad", "fused_pad"))]) == 1


def prelu_chain():
    """conv_chain with a PReLU (one slope per channel) in place of the first relu."""
    def build(bb, x):
        a = bb.emit(relax.op.nn.conv2d(x, const(16, 8, 3, 3), padding=[1, 1, 1, 1]))
        p = bb.emit(relax.op.nn.prelu(a, const(16), axis=1))
        return relax.op.nn.relu(relax.op.nn.conv2d(p, const(8, 16, 3, 3), padding=[1, 1, 1, 1]))
    return module(build)


@pytest.mark.parametrize("dim", ["out_channels", "rows", "tiles/2"])
def test_a_prelu_follows_every_layout_each_part_reading_its_channels_slopes(dim):
    """Between an output-channel and an input-channel split only the partial sums move, as
    without the PReLU; after a row or 2-D split, each part (a band, a tile of a channel slice)
    runs its own PReLU: every cluster of the group runs one, none gathers the first conv's
    output."""
    group = (0, 1) if dim == "out_channels" else (0, 1, 2, 3)
    second = "in_channels" if dim == "out_channels" else dim
    splits = [DistributedSplit(0, dim, group), DistributedSplit(1, second, group)]
    reduced, clusters = split_and_check(prelu_chain(), splits, (1, 8, 12, 12))
    bindings = [b for block in reduced["main"].body.blocks for b in block.bindings]
    assert {c for b, c in zip(bindings, clusters, strict=True)
            if "prelu" in str(b.value)} == set(group)
    if dim == "out_channels":
        half = 4 * 12 * 12 * 4
        assert sorted(crossings(reduced, clusters)) == [(half, 0, 1), (half, 1, 0), (half, 1, 0)]


def grouped_block():
    """ResNeXt's bottleneck: conv 8->16 -> relu -> grouped 3x3 conv (4 groups of 4 channels)
    -> relu -> conv 16->8."""
    def build(bb, x):
        a = bb.emit(relax.op.nn.relu(relax.op.nn.conv2d(x, const(16, 8, 1, 1))))
        g = bb.emit(relax.op.nn.relu(relax.op.nn.conv2d(a, const(16, 4, 3, 3),
                                                        padding=[1, 1, 1, 1], groups=4)))
        return relax.op.nn.conv2d(g, const(8, 16, 1, 1))
    return module(build)


@pytest.mark.parametrize("dim, last", [("out_channels", "in_channels"), ("tiles/2", "tiles/2")])
def test_a_grouped_conv_split_at_whole_groups_reads_its_groups_where_they_lie(dim, last):
    """Split alike, each part of the grouped conv computes whole groups (1 of 4 over 4 output
    channel slices, 2 over a 2-D split's 2) from their own input channels, which the part of
    the conv before it on the same cluster wrote: between the two only a 2-D split's halo rows
    cross, and after an output-channel split nothing but the last conv's partial sums does."""
    group = (0, 1, 2, 3)
    splits = [DistributedSplit(0, dim, group), DistributedSplit(1, dim, group),
              DistributedSplit(2, last, group)]
    reduced, clusters = split_and_check(grouped_block(), splits, (1, 8, 12, 12))
    bindings = [b for block in reduced["main"].body.blocks for b in block.bindings]
    parts = [b.value.args[1].fields for b in bindings
             if "conv2d1" in b.value.args[0].name_hint]  # the grouped conv's parts
    assert len(parts) == 4
    channels = 16 // (4 if dim == "out_channels" else 2)
    assert all(int(data.ty.shape.values[1]) == int(weight.ty.shape.values[0]) == channels
               for data, weight, *_ in parts)
    if dim == "out_channels":
        summed = 8 * 12 * 12 * 4
        assert sorted(crossings(reduced, clusters)) == [(summed, 1, 0), (summed, 2, 0),
                                                        (summed, 3, 0)]


def test_an_all_gather_is_one_concat_per_reader_of_the_parts_where_they_lie():
    mod = conv_chain()
    group = (0, 1, 2, 3)
    splits = [DistributedSplit(0, "out_channels", group),
              DistributedSplit(1, "out_channels", group)]
    reduced, clusters = split_and_check(mod, splits, (1, 8, 12, 12))
    bindings = [b for block in reduced["main"].body.blocks for b in block.bindings]
    where = {b.var: c for b, c in zip(bindings, clusters, strict=True)}
    # Every part of the second conv reads the whole first output: one concat kernel on its
    # cluster, reading the three other parts where they were computed (no copies in between,
    # no identity calls left from the reduction), all four calls of one PrimFunc.
    gathers = [b for b in bindings if b.value.op.same_as(tvm.ir.Op.get("relax.call_tir"))
               and "concatenate" in b.value.args[0].name_hint
               and int(b.var.ty.shape.values[1]) == 16]  # the first conv's 16 channels
    assert sorted(where[b.var] for b in gathers) == [0, 1, 2, 3]
    for b in gathers:
        assert sorted(where[v] for v in b.value.args[1].fields) == [0, 1, 2, 3]
    assert len({b.value.args[0] for b in gathers}) == 1
    # On the device the pieces land in place in the gathered buffer: the concat moves nothing
    # on its cluster (the messages carry the bytes); the convolutions read and write theirs.
    ops = extract_op_graph(reduced).ops
    gathered = {b.var for b in gathers}
    assert [(ops[i].bytes_moved, ops[i].flops) for i, b in enumerate(bindings)
            if b.var in gathered] == [(0, 0.0)] * 4
    assert all(ops[i].bytes_moved > 0 for i, b in enumerate(bindings)
               if "conv2d" in b.value.args[0].name_hint)
    assert not [b for b in bindings
                if b.value.op.same_as(tvm.ir.Op.get("relax.call_pure_packed"))]
    # Before the reduction, a gather is one binding per reader, not an identity marker per
    # remote part (k^2 bindings of a k-way gather): only the model input is marked where read.
    distributed, _ = distribute(mod, splits)
    marked = {str(b.value.args[1].name) for block in distributed["main"].body.blocks
              for b in block.bindings if isinstance(b.value, relax.Call)
              and b.value.op.same_as(tvm.ir.Op.get("relax.call_pure_packed"))
              and str(b.value.args[0].global_symbol) == "chiplet.boundary"}
    assert marked == {"x"}


def test_row_splits_exchange_only_the_halo_rows():
    mod = conv_chain()
    splits = [DistributedSplit(0, "rows", (0, 1)), DistributedSplit(1, "rows", (0, 1))]
    reduced, clusters = split_and_check(mod, splits, (1, 8, 12, 12))
    # A 3x3 conv with padding 1 needs one row of its neighbour's 16-channel half: 16 x 12.
    halo = [m for m in crossings(reduced, clusters) if m[0] == 16 * 12 * 4]
    assert sorted(halo) == [(16 * 12 * 4, 0, 1), (16 * 12 * 4, 1, 0)]


def test_the_parts_that_hold_the_same_weights_share_one_weight_key():
    # Row parts hold the whole weights, output-channel parts a half each; a tiles/2 part p
    # holds column slice p % 2. The device pools the weights of parts with one key.
    def holders(mod, splits, shape):
        reduced, clusters = split_and_check(mod, splits, shape)
        keys: dict[str, list[int]] = {}
        for op, cluster in zip(extract_op_graph(reduced).ops, clusters, strict=True):
            if op.weight_key:
                keys.setdefault(op.weight_key, []).append(cluster)
        return sorted(sorted(clusters) for clusters in keys.values())

    rows_then_out = [DistributedSplit(0, "rows", (0, 1)),
                     DistributedSplit(1, "out_channels", (0, 1))]
    assert holders(conv_chain(), rows_then_out, (1, 8, 12, 12)) == [[0], [0, 1], [1]]
    tiles = [DistributedSplit(0, "tiles/2", (0, 1, 2, 3)),
             DistributedSplit(1, "tiles/2", (0, 1, 2, 3))]
    assert holders(mlp(), tiles, (16, 32)) == [[0, 2], [0, 2], [1, 3], [1, 3]]


def test_megatron_mlp_columns_then_reduction_moves_only_the_final_sum():
    mod = mlp()
    splits = [DistributedSplit(0, "cols", (0, 1, 2, 3)),
              DistributedSplit(1, "reduction", (0, 1, 2, 3))]
    reduced, clusters = split_and_check(mod, splits, (16, 32))
    moved = crossings(reduced, clusters)
    # The output (16 x 32) is summed from four partials: three of them cross to cluster 0.
    assert sorted(moved) == [(16 * 32 * 4, c, 0) for c in (1, 2, 3)]


def split_attention(clusters, dim="cols"):
    """The transformer block with its query, key and value projections split along ``dim``
    over ``clusters``, checked against the unsplit module; its rewrite, where each binding
    runs, and the clusters of the softmaxes."""
    mod = load_model(models.get_model("transformer-block"))
    splits = [DistributedSplit(a, dim, tuple(clusters)) for a in (0, 1, 2)]
    reduced, where = distribute_and_reduce(mod, splits, home=0)
    x = models.example_inputs(models.get_model("transformer-block"), seed=3)
    np.testing.assert_allclose(run(reduced, list(x.values())), run(mod, list(x.values())),
                               rtol=1e-4, atol=1e-4)
    bindings = [b for block in reduced["main"].body.blocks for b in block.bindings]
    softmax = [c for b, c in zip(bindings, where, strict=True)
               if "softmax" in str(b.value.args[0])]
    return reduced, where, sorted(softmax)


def test_attention_heads_stay_split_through_reshape_and_transpose():
    # Columns = heads (4 heads of 16). Scores, softmax and context run per head on every
    # cluster; the heads' contexts (16 x 16 each) are gathered once, for the output projection
    # that runs whole on cluster 0.
    reduced, clusters, softmax = split_attention(range(4))
    assert softmax == [0, 1, 2, 3]
    assert sorted(crossings(reduced, clusters)) == [(16 * 16 * 4, c, 0) for c in (1, 2, 3)]


def test_parts_that_cut_through_a_head_are_recut_at_whole_heads_not_gathered():
    # 8 parts of 8 columns: each head (16 columns) spans two parts. The reshape to heads re-cuts
    # them at whole heads on the first four clusters: every head's softmax runs on its own
    # cluster, each fetching the half of its head that the next part holds.
    reduced, clusters, softmax = split_attention(range(8))
    assert softmax == [0, 1, 2, 3]
    recut = [m for m in crossings(reduced, clusters) if m[0] == 16 * 8 * 4]
    assert {(src, dst) for _, src, dst in recut} >= {(1, 0), (3, 1), (5, 2), (7, 3)}


def test_projections_split_in_2d_run_attention_by_query_bands_and_heads():
    # Two row bands (8 tokens each) by two column slices (2 heads of 16 each): the reshapes to
    # heads keep every tile where it lies, so attention runs on all four clusters, each on its
    # band's queries of its two heads. Each fetches the keys and the values of its heads from
    # the other band's cluster of its slice (8 tokens x 32 columns each), and the contexts are
    # gathered once for the output projection, whole on cluster 0.
    reduced, clusters, softmax = split_attention(range(4), "tiles/2")
    assert softmax == [0, 1, 2, 3]
    tile = 8 * 32 * 4
    exchanged = [(tile, a, b) for a, b in ((0, 2), (2, 0), (1, 3), (3, 1))] * 2
    assert sorted(crossings(reduced, clusters)) == sorted(
        exchanged + [(tile, c, 0) for c in (1, 2, 3)])


def test_2d_slices_that_cut_through_heads_are_recut_inside_each_band():
    # Two row bands by eight slices of 8 columns: each head (16 columns) spans two slices. Each
    # band's slices are re-cut at whole heads on the members holding each head's first
    # columns (every other member), each fetching the other half of its head from the next
    # member of its band only; attention runs on those four members of both bands.
    reduced, clusters, softmax = split_attention(range(16), "tiles/8")
    assert softmax == [0, 2, 4, 6, 8, 10, 12, 14]
    halves = [m for m in crossings(reduced, clusters) if m[0] == 8 * 8 * 4]
    recut = {(c + 1, c) for c in softmax}
    assert recut <= {(src, dst) for _, src, dst in halves}


def test_a_matmul_of_activations_does_not_follow_an_operand_sharded_on_its_reduction_axis():
    """q's columns and q^T's rows are the reduction axes of q @ k^T and h @ q^T: the matmuls
    read them gathered (a part would sum over only some of the reduction)."""
    bb = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType((16, 32), "float32"))
    with bb.function("main", [x]):
        with bb.dataflow():
            q = bb.emit(relax.op.matmul(x, const(32, 64)))
            k = bb.emit(relax.op.matmul(x, const(32, 64)))
            h = bb.emit(relax.op.matmul(x, const(32, 64)))
            scores = bb.emit(relax.op.matmul(q, relax.op.permute_dims(k)))
            mixed = bb.emit(relax.op.matmul(h, relax.op.permute_dims(q)))
            out = bb.emit_output(relax.op.add(scores, mixed))
        bb.emit_func_output(out)
    mod = bb.get()
    splits = [DistributedSplit(0, "cols", (0, 1)), DistributedSplit(1, "rows", (2, 3))]
    reduced, _ = distribute_and_reduce(mod, splits, home=0)
    check_numerics(mod, reduced, (16, 32))


@pytest.mark.parametrize("split, message", [
    (DistributedSplit(7, "rows", (0, 1)), r"anchor 7"),
    (DistributedSplit(0, "heads", (0, 1)), r"heads"),
    (DistributedSplit(0, "out_channels", tuple(range(17))), r"17"),
    (DistributedSplit(0, "tiles/3", (0, 1, 2, 3)), r"anchor 0 .*tiles/3.*multiple of 3"),
    (DistributedSplit(1, "tiles/2", tuple(range(26))), r"anchor 1 .*12 rows.*13 row bands"),
    (DistributedSplit(0, "blocks/3", (0, 1, 2, 3)), r"anchor 0 .*blocks/3.*multiple of 3"),
    (DistributedSplit(0, "blocks/2", tuple(range(20))),
     r"anchor 0 .*8 in channels and 16 out channels.*10 input-channel groups of 2 slices"),
])
def test_bad_splits_name_the_anchor_and_the_dimension(split, message):
    with pytest.raises(PlanningError, match=message):
        distribute_and_reduce(conv_chain(), [split])


def test_a_2d_split_of_a_matmul_without_columns_is_refused_naming_the_anchor():
    mod = module(lambda bb, x: relax.op.matmul(x, const(32)), shape=(16, 32))
    with pytest.raises(PlanningError,
                       match=r"anchor 0 \(matmul.*'tiles/2'.*legal dims here: rows, reduction"):
        distribute_and_reduce(mod, [DistributedSplit(0, "tiles/2", (0, 1, 2, 3))])


def test_a_blocks_split_of_a_depthwise_conv_is_refused_naming_the_anchor():
    def depthwise(bb, x):
        return relax.op.nn.conv2d(x, const(8, 1, 3, 3), padding=[1, 1, 1, 1], groups=8)

    with pytest.raises(PlanningError, match=r"anchor 0 \(conv2d.*'blocks/2'.*legal dims here: "
                                            r"batch, out_channels, rows"):
        distribute_and_reduce(module(depthwise), [DistributedSplit(0, "blocks/2", (0, 1, 2, 3))])


def test_2d_splits_of_matmuls_gather_each_band_among_its_clusters():
    mod = mlp()
    group = (0, 1, 2, 3)  # two row bands (8 of 16 rows) of two column slices
    splits = [DistributedSplit(0, "tiles/2", group), DistributedSplit(1, "tiles/2", group)]
    reduced, clusters = split_and_check(mod, splits, (16, 32))
    # Each part of the second matmul reads its band of the first's output (8 rows, 64
    # columns): the other slice, 8 x 32 floats, from its band's other cluster only; cluster 0
    # then gathers the three other tiles of the output (8 x 16).
    assert sorted(crossings(reduced, clusters)) == [
        (512, 1, 0), (512, 2, 0), (512, 3, 0),
        (1024, 0, 1), (1024, 1, 0), (1024, 2, 3), (1024, 3, 2)]


def test_a_reshaped_model_input_is_reshaped_where_each_part_reads_it():
    """x [16, 1, 32] -> reshape to [16, 32] -> matmul split by columns over 4 clusters: each
    part reshapes the model input where it runs (the input is read anywhere, and so is its
    reshape), so nothing crosses but the output's parts gathered on cluster 0."""
    def block(bb, x):
        return relax.op.matmul(bb.emit(relax.op.reshape(x, [16, 32])), const(32, 64))

    reduced, clusters = split_and_check(module(block, (16, 1, 32)),
                                        [DistributedSplit(0, "cols", (0, 1, 2, 3))], (16, 1, 32))
    assert sorted(crossings(reduced, clusters)) == [(16 * 16 * 4, c, 0) for c in (1, 2, 3)]


def test_2d_tiles_stay_put_through_torchs_unit_batch_axis():
    """matmul 32->64 (2-D) -> reshape to [16, 1, 64] and a transpose to [1, 16, 64]
    (torch's sequence-first attention layout, with its batch of 1) -> gelu -> reshape back ->
    matmul 64->32 (2-D): each tile is reshaped, transposed and activated where it lies, as the
    tiles of the second matmul's band read it; nothing is re-cut or gathered on the way."""
    def block(bb, x):
        h = bb.emit(relax.op.matmul(x, const(32, 64)))
        t = bb.emit(relax.op.permute_dims(relax.op.reshape(h, [16, 1, 64]), [1, 0, 2]))
        g = bb.emit(relax.op.reshape(relax.op.nn.gelu(t), [16, 64]))
        return relax.op.matmul(g, const(64, 32))

    group = (0, 1, 2, 3)  # two row bands (8 of 16 rows) of two column slices
    splits = [DistributedSplit(0, "tiles/2", group), DistributedSplit(1, "tiles/2", group)]
    reduced, clusters = split_and_check(module(block, (16, 32)), splits, (16, 32))
    bindings = [b for block in reduced["main"].body.blocks for b in block.bindings]
    where = {b.var: c for b, c in zip(bindings, clusters, strict=True)}
    gelus = [b for b in bindings if "gelu" in b.value.args[0].name_hint]
    assert sorted(where[b.var] for b in gelus) == list(group)
    # Fused with the reshapes around it: each reads and writes its own 8 x 32 tile.
    assert all([int(d) for d in b.var.ty.shape.values] == [8, 32] for b in gelus)
    # As test_2d_splits_of_matmuls_gather_each_band_among_its_clusters: each part of the
    # second matmul fetches the other slice of its band, cluster 0 the output's other tiles.
    assert sorted(crossings(reduced, clusters)) == [
        (512, 1, 0), (512, 2, 0), (512, 3, 0),
        (1024, 0, 1), (1024, 1, 0), (1024, 2, 3), (1024, 3, 2)]


def test_a_layer_norm_after_2d_splits_runs_on_each_clusters_rows_of_its_band():
    # The residual stream of two_residual_norms with 2-D splits: the first norm runs in the
    # first split's two row bands, each on its band's first member; after each block's add,
    # its norm over the columns reads every column of a row, so each band's 8 rows are re-cut
    # into 4 rows per cluster of the band (an exchange inside the band), and the next 2-D
    # split gathers its band from those; nothing whole-size crosses.
    mod = two_residual_norms()
    group = (0, 1, 2, 3)
    splits = [DistributedSplit(0, "tiles/2", group), DistributedSplit(1, "tiles/2", group)]
    reduced, clusters = split_and_check(mod, splits, (16, 32))
    bindings = [b for block in reduced["main"].body.blocks for b in block.bindings]
    norms = [(c, [int(d) for d in b.var.ty.shape.values])
             for b, c in zip(bindings, clusters, strict=True)
             if isinstance(b.value, relax.Call) and b.value.args
             and "layer_norm" in getattr(b.value.args[0], "name_hint", "")]
    first = sorted(n for n in norms if n[1][0] == 8)
    assert first == [(0, [8, 32]), (2, [8, 32])]
    after = [n for n in norms if n[1][0] != 8]
    assert sorted(after) == sorted((c, [4, 32]) for c in group for _ in range(2))
    band = 8 * 32 * 4
    assert all(size <= band for size, _, _ in crossings(reduced, clusters))


def test_2d_splits_gather_each_band_among_its_clusters_and_halos_from_the_next_bands():
    mod = conv_chain()
    group = (0, 1, 2, 3)  # two row bands of two output-channel slices
    splits = [DistributedSplit(0, "tiles/2", group), DistributedSplit(1, "tiles/2", group)]
    reduced, clusters = split_and_check(mod, splits, (1, 8, 12, 12))
    received = {c: sum(m[0] for m in crossings(reduced, clusters) if m[2] == c) for c in group}
    # Each part of the second conv reads its band of the first output (6 of 12 rows, all 16
    # channels): the other slice of its band (6 rows x 8 channels) and the halo row of the other
    # band (16 channels), 12 columns of 4 bytes; cluster 0 then gathers the output (3 tiles of
    # 6 rows x 4 channels). Nobody reads the whole first output (12 x 16 rows x channels).
    row = 12 * 4
    assert received == {0: (6 * 8 + 16) * row + 3 * 6 * 4 * row, 1: (6 * 8 + 16) * row,
                        2: (6 * 8 + 16) * row, 3: (6 * 8 + 16) * row}


def split_around_a_pool(mod):
    """``mod`` (conv, pool, conv on a 1x8x16x16 input) with both convs cut into 2 row bands by
    2 channel slices over clusters 0-3, checked against the unsplit module: the rewrite, the
    cluster of each binding, where each binding runs, and the pool bindings."""
    group = (0, 1, 2, 3)
    splits = [DistributedSplit(0, "tiles/2", group), DistributedSplit(1, "tiles/2", group)]
    reduced, clusters = split_and_check(mod, splits, (1, 8, 16, 16))
    bindings = [b for block in reduced["main"].body.blocks for b in block.bindings]
    where = {b.var: c for b, c in zip(bindings, clusters, strict=True)}
    return reduced, clusters, where, [b for b in bindings
                                      if "pool2d" in b.value.args[0].name_hint]


def test_a_max_pool_between_2d_splits_pools_each_tile_with_its_halo():
    """conv 8->16 (2-D) -> max pool 3x3 stride 2 -> conv 16->8 (2-D), ResNet's stem."""
    bb = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType((1, 8, 16, 16), "float32"))
    with bb.function("main", [x]):
        with bb.dataflow():
            a = bb.emit(relax.op.nn.conv2d(x, const(16, 8, 3, 3), padding=[1, 1, 1, 1]))
            p = bb.emit(relax.op.nn.max_pool2d(a, pool_size=[3, 3], strides=[2, 2],
                                               padding=[1, 1, 1, 1]))
            out = bb.emit_output(relax.op.nn.conv2d(p, const(8, 16, 3, 3), padding=[1, 1, 1, 1]))
        bb.emit_func_output(out)
    reduced, clusters, where, pools = split_around_a_pool(bb.get())
    # One pool per tile, where the tile lies: 4 of the 8 pooled rows, 8 of the 16 channels.
    assert sorted(where[b.var] for b in pools) == [0, 1, 2, 3]
    assert all([int(d) for d in b.var.ty.shape.values] == [1, 8, 4, 8] for b in pools)
    # Each reads its own tile; the second band's also read the last row of the first (8
    # channels x 16 columns of 4 bytes: pooled rows 4-7 start at input row 7), from the
    # clusters of the same channels. Nothing larger than a tile of the conv output (8 rows x
    # 8 channels) crosses, let alone the whole output.
    moved = crossings(reduced, clusters)
    assert {(0, 2), (1, 3)} <= {(s, d) for n, s, d in moved if n == 8 * 16 * 4}
    assert max(n for n, _, _ in moved) <= 8 * 8 * 16 * 4


@pytest.mark.parametrize("pool", ["max", "avg", "avg counting padding"])
@pytest.mark.parametrize("ceil_mode", [False, True])
def test_a_pool_between_2d_splits_pools_each_tile_where_it_lies(pool, ceil_mode):
    """conv 8->16 (2-D) -> 3x3 pool, stride 2, no padding (SqueezeNet's max pools: in ceil
    mode the last window overhangs the input; Inception's average pools) -> conv 16->8 (2-D).
    An average that counts its padding is gathered where the overhang would count."""
    def block(bb, x):
        a = bb.emit(relax.op.nn.conv2d(x, const(16, 8, 3, 3), padding=[1, 1, 1, 1]))
        options = {"pool_size": [3, 3], "strides": [2, 2], "ceil_mode": ceil_mode}
        p = bb.emit(relax.op.nn.max_pool2d(a, **options) if pool == "max" else
                    relax.op.nn.avg_pool2d(a, count_include_pad=pool != "avg", **options))
        return relax.op.nn.conv2d(p, const(8, 16, 3, 3), padding=[1, 1, 1, 1])

    reduced, clusters, where, pools = split_around_a_pool(module(block, (1, 8, 16, 16)))
    if ceil_mode and pool == "avg counting padding":
        assert len(pools) == 1  # whole, its input gathered
        return
    assert sorted(where[b.var] for b in pools) == [0, 1, 2, 3]
    # 16 rows pool to 7 (8 in ceil mode), in bands of 4 and 3 (4 and 4).
    assert sorted(int(b.var.ty.shape.values[2]) for b in pools) == (
        [4, 4, 4, 4] if ceil_mode else [3, 3, 4, 4])
    assert max(n for n, _, _ in crossings(reduced, clusters)) <= 8 * 8 * 16 * 4


def test_a_group_norm_of_channel_parts_that_cut_through_its_groups_runs_on_whole_groups():
    """conv 8->12 (out channels over 5 clusters: 3, 3, 2, 2, 2 channels) -> a group norm as
    torch exports it (reshape to 3 groups of 4 channels, mean and variance over each group,
    reshape back) -> conv 12->8 (out channels): the group norm runs on 3 parts of whole
    groups, re-cut from the channel parts, where it ran on one part of the batch of 1."""
    def block(bb, x):
        a = bb.emit(relax.op.nn.conv2d(x, const(12, 8, 3, 3), padding=[1, 1, 1, 1]))
        r = bb.emit(relax.op.reshape(a, [1, 3, 4 * 12 * 12]))
        d = bb.emit(relax.op.subtract(r, relax.op.mean(r, axis=[2], keepdims=True)))
        n = bb.emit(relax.op.divide(d, relax.op.sqrt(relax.op.add(
            relax.op.variance(r, axis=[2], keepdims=True), relax.const(1e-5, "float32")))))
        g = bb.emit(relax.op.reshape(n, [1, 12, 12, 12]))
        return relax.op.nn.conv2d(g, const(8, 12, 3, 3), padding=[1, 1, 1, 1])

    splits = [DistributedSplit(0, "out_channels", (0, 1, 2, 3, 4)),
              DistributedSplit(1, "out_channels", (0, 1, 2, 3, 4))]
    reduced, clusters = split_and_check(module(block), splits, (1, 8, 12, 12))
    bindings = [b for block in reduced["main"].body.blocks for b in block.bindings]
    where = {b.var: c for b, c in zip(bindings, clusters, strict=True)}
    means = [b for b in bindings if "mean" in b.value.args[0].name_hint]
    assert sorted(where[b.var] for b in means) == [0, 1, 2]
    assert all([int(d) for d in b.var.ty.shape.values] == [1, 1, 1] for b in means)


@pytest.mark.parametrize("pool", ["max", "avg"])
def test_a_pool_between_row_splits_pools_each_band_with_its_halo(pool):
    """conv 8->16 (rows) -> 3x3 pool, stride 1, padding 1 (an Inception branch's pool) ->
    conv 16->8 (rows) -> global average pool: each band pools where it lies, reading one halo
    row from each neighbour, where the pool ran whole on one cluster after a gather; the
    global pool reduces each band where it lies and sums the bands."""
    def block(bb, x):
        a = bb.emit(relax.op.nn.conv2d(x, const(16, 8, 3, 3), padding=[1, 1, 1, 1]))
        options = {"pool_size": [3, 3], "strides": [1, 1], "padding": [1, 1, 1, 1]}
        p = bb.emit(relax.op.nn.max_pool2d(a, **options) if pool == "max" else
                    relax.op.nn.avg_pool2d(a, count_include_pad=False, **options))
        c = bb.emit(relax.op.nn.conv2d(p, const(8, 16, 3, 3), padding=[1, 1, 1, 1]))
        return relax.op.nn.adaptive_avg_pool2d(c, output_size=[1, 1])

    group = (0, 1, 2, 3)
    splits = [DistributedSplit(0, "rows", group), DistributedSplit(1, "rows", group)]
    reduced, clusters = split_and_check(module(block, (1, 8, 16, 16)), splits, (1, 8, 16, 16))
    bindings = [b for block in reduced["main"].body.blocks for b in block.bindings]
    where = {b.var: c for b, c in zip(bindings, clusters, strict=True)}
    pools = [b for b in bindings if f"{pool}_pool2d" in b.value.args[0].name_hint]
    assert sorted(where[b.var] for b in pools) == list(group)
    assert all([int(d) for d in b.var.ty.shape.values] == [1, 16, 4, 16] for b in pools)
    # Nothing larger than a band of the conv's output (4 rows) plus a halo row each side
    # crosses: no cluster gathers the whole 16 rows.
    assert max(n for n, _, _ in crossings(reduced, clusters)) <= 16 * 6 * 16 * 4


@pytest.mark.parametrize("dim", ["rows", "tiles/2"])
def test_a_pool_with_fewer_output_rows_than_bands_pools_on_the_first_bands(dim):
    """conv 8->16 (6 rows in 4 bands, or 2-D tiles of 4 bands by 2 slices) -> 2x2 max pool,
    stride 2 (3 rows): the first three bands' members pool one row each, reading their two
    input rows from wherever they lie; the pool ran whole on one cluster after a gather."""
    def block(bb, x):
        a = bb.emit(relax.op.nn.conv2d(x, const(16, 8, 3, 3), padding=[1, 1, 1, 1]))
        return relax.op.nn.relu(relax.op.nn.max_pool2d(a, [2, 2], [2, 2]))

    group = (0, 1, 2, 3) if dim == "rows" else tuple(range(8))
    splits = [DistributedSplit(0, dim, group)]
    reduced, clusters = split_and_check(module(block, (1, 8, 6, 6)), splits, (1, 8, 6, 6))
    bindings = [b for block in reduced["main"].body.blocks for b in block.bindings]
    where = {b.var: c for b, c in zip(bindings, clusters, strict=True)}
    pools = [b for b in bindings if "max_pool2d" in b.value.args[0].name_hint]
    assert sorted(where[b.var] for b in pools) == list(group[:len(group) * 3 // 4])
    assert all(int(b.var.ty.shape.values[2]) == 1 for b in pools)


@pytest.mark.parametrize("dim", ["out_channels", "batch"])
def test_a_transposed_conv_is_split_and_the_next_conv_reads_its_parts(dim):
    """conv 8->16 (rows) -> transposed conv 16->8, 2x2 at stride 2 (a U-Net's upsampling),
    split -> conv 8->8 (rows): numerics unchanged, and each part of the transposed conv
    computes its share where it runs."""
    def block(bb, x):
        a = bb.emit(relax.op.nn.relu(relax.op.nn.conv2d(x, const(16, 8, 3, 3),
                                                        padding=[1, 1, 1, 1])))
        u = bb.emit(relax.op.nn.conv2d_transpose(a, const(16, 8, 2, 2), strides=[2, 2]))
        return relax.op.nn.conv2d(u, const(8, 8, 3, 3), padding=[1, 1, 1, 1])

    shape = (2, 8, 6, 6)
    mod = module(block, shape)
    group = (0, 1, 2, 3) if dim == "out_channels" else (0, 1)
    splits = [DistributedSplit(0, "rows", (0, 1, 2, 3)), DistributedSplit(1, dim, group),
              DistributedSplit(2, "rows", (0, 1, 2, 3))]
    reduced, clusters = split_and_check(mod, splits, shape)
    bindings = [b for block in reduced["main"].body.blocks for b in block.bindings]
    where = {b.var: c for b, c in zip(bindings, clusters, strict=True)}
    parts = [b for b in bindings if "conv2d_transpose" in b.value.args[0].name_hint]
    assert sorted(where[b.var] for b in parts) == list(group)
    channels = 2 if dim == "out_channels" else 8
    assert all(int(b.var.ty.shape.values[1]) == channels for b in parts)


def test_a_depthwise_transposed_conv_reads_the_channels_of_its_parts_where_they_lie():
    """conv 8->16 (output channels) -> depthwise transposed conv 16->16, 4x4 at stride 2 (a
    learned upsampling), split alike over four clusters: each part upsamples its own 4
    channels, so nothing crosses until the output is gathered. Before, a grouped transposed
    conv was not split: it ran whole on one cluster, gathering its input."""
    def block(bb, x):
        a = bb.emit(relax.op.nn.relu(relax.op.nn.conv2d(x, const(16, 8, 3, 3),
                                                        padding=[1, 1, 1, 1])))
        return relax.op.nn.conv2d_transpose(a, const(16, 1, 4, 4), strides=[2, 2],
                                            padding=[1, 1, 1, 1], groups=16)

    shape = (1, 8, 6, 6)
    group = (0, 1, 2, 3)
    splits = [DistributedSplit(0, "out_channels", group),
              DistributedSplit(1, "out_channels", group)]
    reduced, clusters = split_and_check(module(block, shape), splits, shape)
    moved = crossings(reduced, clusters)
    assert sorted(size for size, _, _ in moved) == [4 * 12 * 12 * 4] * 3  # the output's parts


@pytest.mark.parametrize("dim", ["out_channels", "batch"])
def test_a_conv3d_is_split_and_the_next_one_reads_its_parts(dim):
    """Two 3x3x3 conv3d layers of a video net, each split alike over two clusters: numerics
    unchanged, each part computing its share where it runs. What crosses: the second's half of
    the output, gathered; and, split by output channels, the first's halves, all-gathered (the
    second reads every channel); split by the batch, nothing between them."""
    def block(bb, x):
        a = bb.emit(relax.op.nn.relu(relax.op.nn.conv3d(x, const(8, 4, 3, 3, 3),
                                                        padding=[1, 1, 1, 1, 1, 1])))
        return relax.op.nn.conv3d(a, const(6, 8, 3, 3, 3), padding=[1, 1, 1, 1, 1, 1])

    shape = (2, 4, 3, 6, 6)
    group = (0, 1)
    splits = [DistributedSplit(0, dim, group), DistributedSplit(1, dim, group)]
    reduced, clusters = split_and_check(module(block, shape), splits, shape)
    bindings = [b for block in reduced["main"].body.blocks for b in block.bindings]
    parts = [(b, c) for b, c in zip(bindings, clusters, strict=True)
             if "conv3d" in b.value.args[0].name_hint]
    assert sorted(c for _, c in parts) == [0, 0, 1, 1]
    first_half, output_half = (2 * 4 * 3 * 6 * 6 * 4, 2 * 3 * 3 * 6 * 6 * 4)  # fp32 bytes
    exchanged = [(first_half, 0, 1), (first_half, 1, 0)] if dim == "out_channels" else []
    assert sorted(crossings(reduced, clusters)) == sorted([(output_half, 1, 0), *exchanged])


def fire(bb, x):
    """SqueezeNet's Fire module: squeeze 1x1 8->4, expand 1x1 and 3x3 4->8 each, their
    outputs concatenated along the channels, then a 1x1 conv 16->8."""
    s = bb.emit(relax.op.nn.relu(relax.op.nn.conv2d(x, const(4, 8, 1, 1))))
    a = bb.emit(relax.op.nn.relu(relax.op.nn.conv2d(s, const(8, 4, 1, 1))))
    b = bb.emit(relax.op.nn.relu(relax.op.nn.conv2d(s, const(8, 4, 3, 3),
                                                    padding=[1, 1, 1, 1])))
    c = bb.emit(relax.op.concat([a, b], axis=1))
    return relax.op.nn.conv2d(c, const(8, 16, 1, 1))


@pytest.mark.parametrize("dim", ["rows", "tiles/2", "out_channels"])
def test_a_concat_of_distributed_branches_is_not_gathered(dim):
    """Both branches of a Fire module split alike: the concat of their outputs joins each
    part where it lies (rows), or is no op at all (the channel slices of both branches are
    the concat's: tiles and output channels); nothing of its size crosses, and the next conv
    reads it as it would any distributed value."""
    mod = module(fire)
    group = (0, 1, 2, 3)
    splits = [DistributedSplit(anchor, dim, group) for anchor in range(4)]
    reduced, clusters = split_and_check(mod, splits, (1, 8, 12, 12))
    if dim == "rows":  # one concat per band of rows, where it lies
        bindings = [b for block in reduced["main"].body.blocks for b in block.bindings]
        joined = [b for b in bindings if "concatenate" in b.value.args[0].name_hint
                  and int(b.var.ty.shape.values[1]) == 16]  # not a halo's gather (4 channels)
        assert sorted(int(b.var.ty.shape.values[2]) for b in joined) == [3, 3, 3, 3]
    # What crosses is what the next conv's parts read of the other parts (a halo row, a band
    # of a slice, a slice): at most a quarter of one branch's output (8 channels x 12 x 12),
    # where a gathered concat sends the parts a half to the whole of it (2304, 4608 and 9216
    # bytes for rows, tiles and output channels).
    moved = crossings(reduced, clusters)
    assert max(n for n, _, d in moved if d != 0) <= 8 * 12 * 12 * 4 // 4


@pytest.mark.parametrize("second", ["tiles/2", "out_channels"])
def test_a_concat_of_branches_in_different_layouts_joins_each_share_where_it_lies(second):
    """One branch split by rows, the other by tiles or output channels (a U-Net's skip joined
    to an upsampling): the concat runs once per row band of the row-split branch, on its
    cluster, each reading its rows of the other branch from wherever they lie; nothing is
    gathered whole (at most a band of both branches, 3 rows x 16 channels, crosses)."""
    mod = module(fire)
    splits = [DistributedSplit(0, "rows", (0, 1, 2, 3)), DistributedSplit(1, "rows", (0, 1, 2, 3)),
              DistributedSplit(2, second, (0, 1, 2, 3)),
              DistributedSplit(3, "out_channels", (0, 1, 2, 3))]
    reduced, clusters = split_and_check(mod, splits, (1, 8, 12, 12))
    bindings = [b for block in reduced["main"].body.blocks for b in block.bindings]
    where = {b.var: c for b, c in zip(bindings, clusters, strict=True)}
    joined = [b for b in bindings if "concatenate" in b.value.args[0].name_hint
              and [int(d) for d in b.var.ty.shape.values][1:3] == [16, 3]]
    assert sorted(where[b.var] for b in joined) == [0, 1, 2, 3]
    assert max(n for n, _, d in crossings(reduced, clusters) if d != 0) <= 16 * 3 * 12 * 4


def test_a_concat_of_branches_tiled_in_different_bands_joins_each_band_where_it_lies():
    """Both branches cut into row bands by channel slices, 2 bands of the one and 4 of the
    other: the concat runs per share of the first branch's rows (its tiles re-cut along the
    rows inside each band), not gathered whole."""
    mod = module(fire)
    splits = [DistributedSplit(0, "rows", (0, 1, 2, 3)),
              DistributedSplit(1, "tiles/2", (0, 1, 2, 3)),
              DistributedSplit(2, "tiles/2", tuple(range(8))),
              DistributedSplit(3, "out_channels", (0, 1, 2, 3))]
    reduced, clusters = split_and_check(mod, splits, (1, 8, 12, 12))
    bindings = [b for block in reduced["main"].body.blocks for b in block.bindings]
    joined = [b for b in bindings if "concatenate" in b.value.args[0].name_hint
              and int(b.var.ty.shape.values[1]) == 16 and int(b.var.ty.shape.values[2]) < 12]
    assert len(joined) >= 2
    assert max(n for n, _, d in crossings(reduced, clusters) if d != 0) < 16 * 12 * 12 * 4 // 2


def test_a_depthwise_conv_between_2d_splits_convolves_each_tile_where_it_lies():
    """conv 8->16 (2-D) -> depthwise 3x3 (2-D) -> conv 16->8 (2-D): MobileNet's block."""
    def block(bb, x):
        a = bb.emit(relax.op.nn.conv2d(x, const(16, 8, 1, 1)))
        d = bb.emit(relax.op.nn.conv2d(a, const(16, 1, 3, 3), padding=[1, 1, 1, 1], groups=16))
        return relax.op.nn.conv2d(d, const(8, 16, 1, 1))

    mod = module(block)
    group = (0, 1, 2, 3)  # two row bands of two channel slices
    splits = [DistributedSplit(i, "tiles/2", group) for i in range(3)]
    reduced, clusters = split_and_check(mod, splits, (1, 8, 12, 12))
    moved = crossings(reduced, clusters)
    # The depthwise tiles read their own 8 channels: from the other band, only its halo row
    # of those channels (8 x 12 columns of 4 bytes), never the other slice's channels. The
    # last conv's bands gather their other slice (6 rows of 8 channels), and cluster 0 the
    # output.
    halo, band = 8 * 12 * 4, 6 * 8 * 12 * 4
    assert sorted((s, d) for n, s, d in moved if n == halo) == [(0, 2), (1, 3), (2, 0), (3, 1)]
    assert sorted((s, d) for n, s, d in moved if n == band) == [(0, 1), (1, 0), (2, 3), (3, 2)]
    assert {n for n, _, d in moved if d != 0} == {halo, band}


def pooled_head(pool: str):
    """conv 8->16 (3x3) -> relu -> global average pool (``pool``) -> reshape -> matmul 16->10:
    a classifier's head."""
    def head(bb, x):
        a = bb.emit(relax.op.nn.relu(relax.op.nn.conv2d(x, const(16, 8, 3, 3),
                                                        padding=[1, 1, 1, 1])))
        if pool == "mean":
            p = bb.emit(relax.op.mean(a, axis=[2, 3], keepdims=True))
        elif pool == "sum":  # the channels end up on axis 1 of a 2-D value
            p = bb.emit(relax.op.sum(a, axis=[2, 3], keepdims=False))
        elif pool == "max":
            p = bb.emit(relax.op.max(a, axis=[-1, -2], keepdims=True))
        else:
            p = bb.emit(relax.op.nn.adaptive_avg_pool2d(a, output_size=[1, 1]))
        return relax.op.matmul(bb.emit(relax.op.reshape(p, [1, 16])), const(16, 10))

    return module(head)


@pytest.mark.parametrize("pool", ["mean", "sum", "max", "adaptive_avg_pool2d"])
def test_a_global_pool_of_a_2d_split_reduces_each_tile_where_it_lies(pool):
    mod = pooled_head(pool)
    group = (0, 1, 2, 3, 4, 5)  # three row bands of two output-channel slices
    splits = [DistributedSplit(0, "tiles/2", group), DistributedSplit(1, "reduction", (0, 1))]
    reduced, clusters = split_and_check(mod, splits, (1, 8, 12, 12))
    # Each tile (4 rows x 8 channels) is pooled where it lies; only the pooled slices (8
    # channels of 4 bytes) cross, to the first band's cluster of the same channels, which the
    # matmul's reduction split reads in place; then its partial sums (10 outputs) meet.
    # Not a tile crosses, let alone the whole conv output.
    moved = crossings(reduced, clusters)
    assert sorted((s, d) for n, s, d in moved if n == 8 * 4) == [(2, 0), (3, 1), (4, 0), (5, 1)]
    assert sorted(n for n, _, _ in moved if n != 8 * 4) == [10 * 4]


def instance_norm_chain(keepdims: bool):
    """conv 8->16 (3x3) -> instance norm (a mean and a variance over the rows and columns, as
    TVM's ONNX importer writes InstanceNormalization) -> relu -> conv 16->8: a style-transfer
    net's or a U-Net's block."""
    def build(bb, x):
        a = bb.emit(relax.op.nn.conv2d(x, const(16, 8, 3, 3), padding=[1, 1, 1, 1]))
        mean = bb.emit(relax.op.mean(a, axis=[2, 3], keepdims=True))
        var = bb.emit(relax.op.variance(a, axis=[2, 3], keepdims=keepdims))
        if not keepdims:
            var = bb.emit(relax.op.reshape(var, [1, 16, 1, 1]))
        norm = bb.emit(relax.op.divide(relax.op.subtract(a, mean),
                                       relax.op.sqrt(relax.op.add(var, relax.const(1e-5)))))
        return relax.op.nn.conv2d(relax.op.nn.relu(norm), const(8, 16, 3, 3),
                                  padding=[1, 1, 1, 1])
    return module(build)


@pytest.mark.parametrize("dim, group", [("rows", (0, 1, 2)), ("tiles/2", tuple(range(6)))])
@pytest.mark.parametrize("keepdims", [True, False])
def test_an_instance_norm_of_row_bands_reduces_each_band_where_it_lies(dim, group, keepdims):
    """The mean and the variance of row bands (or 2-D tiles) are summed band by band on the
    first band's members; the variance in two passes, each band's squared deviations from the
    mean sent back to it. Only those per-channel sums and means cross, with the rows and
    slices the second conv reads; no band or tile is gathered on the home cluster, as it
    was for the variance."""
    splits = [DistributedSplit(0, dim, group), DistributedSplit(1, dim, group)]
    reduced, clusters = split_and_check(instance_norm_chain(keepdims), splits, (1, 8, 12, 12))
    part = 16 * 12 * 12 * 4 // len(group)  # a band of 4 rows, or a tile of it by 8 channels
    sent = [s for n, s, d in crossings(reduced, clusters) if n == part and d == 0]
    assert sent == ([] if dim == "rows" else [1])  # the second conv's tiles read band 0's
    sums = [n for n, _, _ in crossings(reduced, clusters) if n < 16 * 12 * 4]
    assert set(sums) == ({16 * 4} if dim == "rows" else {8 * 4, 8 * 12 * 4})


@pytest.mark.parametrize("first, second", [
    ("tiles/2", "out_channels"), ("tiles/2", "in_channels"), ("rows", "tiles/2"),
    ("tiles/4", "tiles/2"),
])
def test_2d_splits_meet_other_layouts_with_numerics_unchanged(first, second):
    mod = conv_chain()
    group = tuple(range(8)) if "4" in first else (0, 1, 2, 3)
    splits = [DistributedSplit(0, first, group), DistributedSplit(1, second, (0, 1, 2, 3))]
    reduced, _ = distribute_and_reduce(mod, splits, home=0)
    check_numerics(mod, reduced, (1, 8, 12, 12))


def test_blocks_splits_reduce_each_slice_among_its_parts_and_the_next_reads_its_groups_there():
    mod = conv_chain()
    group = (0, 1, 2, 3)  # two input-channel groups of two output-channel slices
    splits = [DistributedSplit(0, "blocks/2", group), DistributedSplit(1, "blocks/2", group)]
    reduced, clusters = split_and_check(mod, splits, (1, 8, 12, 12))
    # The first conv's parts (group, slice) are (0, 0) (0, 1) (1, 0) (1, 1) on clusters 0-3:
    # slice 0's partial sums (8 of 16 channels) meet on 0 and 2, each keeping 4 channels, and
    # slice 1's on 1 and 3. The second conv takes its groups across them, (p % 2, p // 2):
    # its group 0 (channels 0-7) on clusters 0 and 2, which hold them between them, each
    # fetching the other's 4 channels; its slices' partial sums (4 of 8 channels) meet on 0
    # and 1, and on 2 and 3. Cluster 0 then gathers the output. Every message is 2 or 4
    # channels of 12 x 12 floats.
    quarter = 4 * 12 * 12 * 4
    pairs = [(0, 2), (2, 0), (1, 3), (3, 1)]
    assert sorted(crossings(reduced, clusters)) == sorted(
        [(quarter, s, d) for s, d in pairs] * 2
        + [(quarter // 2, s, d) for s, d in [(0, 1), (1, 0), (2, 3), (3, 2)]]
        + [(quarter // 2, s, 0) for s in (1, 2, 3)])


@pytest.mark.parametrize("first, second, group", [
    ("blocks/2", "out_channels", (0, 1, 2, 3)), ("out_channels", "blocks/2", (0, 1, 2, 3)),
    ("tiles/2", "blocks/2", (0, 1, 2, 3)), ("blocks/2", "tiles/2", (0, 1, 2, 3)),
    ("blocks/3", "blocks/2", tuple(range(6))), ("blocks/2", "in_channels", (0, 1, 2, 3)),
    ("blocks/8", "blocks/4", tuple(range(16))),  # 8 slices of 2 channels of the first output
])
def test_blocks_splits_meet_other_layouts_with_numerics_unchanged(first, second, group):
    mod = conv_chain()
    second_group = group if second.startswith("blocks") else (0, 1, 2, 3)
    splits = [DistributedSplit(0, first, group), DistributedSplit(1, second, second_group)]
    split_and_check(mod, splits, (1, 8, 12, 12))


def test_blocks_splits_of_matmuls_keep_numerics_and_move_less_than_column_splits():
    mod = mlp()
    group = tuple(range(8))
    blocks = [DistributedSplit(0, "blocks/4", group), DistributedSplit(1, "blocks/4", group)]
    columns = [DistributedSplit(0, "cols", group), DistributedSplit(1, "cols", group)]
    moved = [sum(n for n, _, _ in crossings(*split_and_check(mod, splits, (16, 32))))
             for splits in (blocks, columns)]
    assert moved[0] < moved[1]


def residual_norm():
    """A row-parallel matmul (reduction) -> + x -> layer norm over the last axis: the end of a
    transformer block."""
    bb = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType((16, 32), "float32"))
    with bb.function("main", [x]):
        with bb.dataflow():
            h = bb.emit(relax.op.add(relax.op.matmul(x, const(32, 32)), x))
            out = bb.emit_output(relax.op.nn.layer_norm(h, const(32), const(32), axes=[-1]))
        bb.emit_func_output(out)
    return bb.get()


def test_a_partial_sum_before_a_layer_norm_is_scattered_along_the_rows_it_keeps():
    mod = residual_norm()
    splits = [DistributedSplit(0, "reduction", (0, 1, 2, 3))]
    reduced, clusters = split_and_check(mod, splits, (16, 32))
    names = [b.value.args[0].name_hint for block in reduced["main"].body.blocks
             for b in block.bindings if isinstance(b.value, relax.Call) and b.value.args]
    # The norm runs on each cluster's 4 rows (not gathered whole on one cluster): four norms,
    # and the only whole-size value that crosses is none; each cluster sends 3 row quarters.
    assert sum("layer_norm" in n for n in names) == 4
    quarter = 4 * 32 * 4
    sent = [m for m in crossings(reduced, clusters) if m[0] == quarter]
    assert len(sent) >= 12 and all(m[0] <= quarter for m in crossings(reduced, clusters))


def two_residual_norms():
    """A transformer's residual stream over two blocks: y = norm(x); each block adds a
    row-parallel matmul (reduction) and a bias to the stream, then norms it."""
    def build(bb, x):
        stream = bb.emit(relax.op.nn.layer_norm(x, const(32), const(32), axes=[-1]))
        for _ in range(2):
            h = bb.emit(relax.op.add(relax.op.matmul(stream, const(32, 32)), const(32)))
            stream = bb.emit(relax.op.nn.layer_norm(relax.op.add(h, stream), const(32),
                                                    const(32), axes=[-1]))
        return stream
    return module(build, shape=(16, 32))


def test_a_residual_stream_stays_sharded_along_the_rows_once_scattered():
    # The first residual add reads the whole stream (one norm, on cluster 0) and the reduced
    # matmul's rows, sharded over four clusters: gathering those rows (3 quarters) moves less
    # than scattering the stream (4 quarters), but then every later add and norm would run
    # whole on one cluster too. The stream is scattered once instead: both blocks' adds and
    # norms run on each cluster's rows, and nothing whole-size crosses after the first norm.
    mod = two_residual_norms()
    splits = [DistributedSplit(0, "reduction", (0, 1, 2, 3)),
              DistributedSplit(1, "reduction", (0, 1, 2, 3))]
    reduced, clusters = split_and_check(mod, splits, (16, 32))
    bindings = [b for block in reduced["main"].body.blocks for b in block.bindings]
    norms = [c for b, c in zip(bindings, clusters, strict=True)
             if isinstance(b.value, relax.Call) and b.value.args
             and "layer_norm" in getattr(b.value.args[0], "name_hint", "")]
    assert len(norms) == 1 + 2 * 4 and set(norms) == {0, 1, 2, 3}
    whole = 16 * 32 * 4
    assert all(size < whole for size, _, _ in crossings(reduced, clusters))


@pytest.mark.parametrize("parts", [2, 4])
def test_a_layer_norm_over_the_columns_a_matmul_split_normalises_them_where_they_lie(parts):
    """matmul split by columns -> layer norm over them (a latent array's features after a
    column-parallel projection, as a Perceiver's) -> matmul split by its reduction: each part
    sums its features, the statistics of each row are added on one cluster and sent back, and
    the norm's output feeds the next matmul's parts where it lies. Before, the columns were
    gathered whole on one cluster for the norm (quarters of 512 bytes crossed)."""
    def block(bb, x):
        h = bb.emit(relax.op.matmul(x, const(32, 32)))
        normed = bb.emit(relax.op.nn.layer_norm(h, const(32), const(32), axes=[-1],
                                                epsilon=1e-3))
        return relax.op.matmul(normed, const(32, 4))

    mod = module(block, (16, 32))
    group = tuple(range(parts))
    splits = [DistributedSplit(0, "cols", group), DistributedSplit(1, "reduction", group)]
    reduced, clusters = split_and_check(mod, splits, (16, 32))
    # Each row's sum and sum of squared deviations (16 x 4 bytes) crosses, twice per part;
    # then the last matmul's partial sums (16 x 4 x 4 bytes).
    moved = crossings(reduced, clusters)
    assert moved and all(size <= 16 * 4 * 4 for size, _, _ in moved)
    assert sum(size == 16 * 4 for size, _, _ in moved) == 4 * (parts - 1)


def test_a_layer_norm_over_two_axes_one_of_them_sharded_reads_its_parts_of_gamma_and_beta():
    def block(bb, x):
        h = bb.emit(relax.op.matmul(x, const(32, 32)))
        return relax.op.nn.layer_norm(h, const(16, 32), const(16, 32), axes=[0, 1])

    mod = module(block, (16, 32))
    reduced, clusters = split_and_check(mod, [DistributedSplit(0, "cols", (0, 1, 2))], (16, 32))
    # One sum and one sum of squares per part cross (4 bytes each); the rest is the output's
    # gather.
    assert sorted(size for size, _, _ in crossings(reduced, clusters))[:8] == [4] * 8


@pytest.mark.parametrize("indices, gathered", [
    (np.array(0), False),  # a classifier's class token, x[:, 0]
    (np.array([5, 6]), False),  # both in the second of four parts of 4 rows
    (np.array([3, 4]), True),  # in two parts
])
def test_a_take_of_rows_in_one_part_runs_where_that_part_lies(indices, gathered):
    def block(bb, x):
        h = bb.emit(relax.op.matmul(x, const(32, 32)))
        token = bb.emit(relax.op.take(h, relax.const(indices, "int64"), axis=0))
        return relax.op.matmul(token, const(32, 8))

    mod = module(block, (16, 32))
    reduced, clusters = split_and_check(mod, [DistributedSplit(0, "rows", (0, 1, 2, 3))],
                                        (16, 32))
    # Before: the 16 rows were gathered whole (3 parts of 4 x 32 x 4 bytes crossed).
    assert any(size == 4 * 32 * 4 for size, _, _ in crossings(reduced, clusters)) == gathered


def test_a_split_of_tiles_is_re_cut_along_the_rows_not_gathered():
    """matmul 2-D split -> split of its columns into halves (a rotary embedding's) -> each
    half times a weight, added: the tiles are re-cut along their rows inside each band (an
    all-to-all there) and split row by row. Before, the whole [16, 32] was gathered on one
    cluster for the split, and its halves read from there."""
    def block(bb, x):
        h = bb.emit(relax.op.matmul(x, const(32, 32)))
        halves = bb.emit(relax.op.split(h, 2, axis=-1))
        first = bb.emit(relax.TupleGetItem(halves, 0))
        second = bb.emit(relax.TupleGetItem(halves, 1))
        return relax.op.add(relax.op.multiply(first, second), first)

    mod = module(block, (16, 32))
    reduced, clusters = split_and_check(mod, [DistributedSplit(0, "tiles/2", (0, 1, 2, 3))],
                                        (16, 32))
    # Inside each band of 8 rows, each of its 2 members sends half of its tile (4 x 16) to
    # the other; then the output's row parts are gathered (3 x 4 x 16).
    sizes = sorted(size for size, _, _ in crossings(reduced, clusters))
    assert sizes == [4 * 16 * 4] * 7


def test_a_residual_add_follows_the_operand_whose_layout_the_layer_norm_after_it_keeps():
    """A residual stream split by columns plus a block's output tiled by rows, then a layer
    norm over the columns (a ViT's stream, split by its patch conv's channels): the add follows
    the tiles, so the norm runs on each band's rows, not whole on one cluster."""
    def block(bb, x):
        stream = bb.emit(relax.op.matmul(x, const(32, 32)))
        out = bb.emit(relax.op.matmul(stream, const(32, 32)))
        summed = bb.emit(relax.op.add(stream, out))
        normed = bb.emit(relax.op.nn.layer_norm(summed, relax.const(np.ones(32, "float32")),
                                                relax.const(np.zeros(32, "float32")), axes=[-1]))
        return relax.op.matmul(normed, const(32, 8))

    mod = module(block, (16, 32))
    group = (0, 1, 2, 3)
    splits = [DistributedSplit(0, "cols", group), DistributedSplit(1, "tiles/2", group),
              DistributedSplit(2, "rows", group)]
    reduced, clusters = split_and_check(mod, splits, (16, 32))
    bindings = [b for block in reduced["main"].body.blocks for b in block.bindings]
    where = {b.var: c for b, c in zip(bindings, clusters, strict=True)}
    norms = [b for b in bindings if "layer_norm" in b.value.args[0].name_hint]
    assert len({where[b.var] for b in norms}) > 1
    assert all(int(b.var.ty.shape.values[0]) < 16 for b in norms)


def test_each_cluster_sends_what_others_need_before_computing_its_own_part():
    mod = conv_chain()
    splits = [DistributedSplit(0, "rows", (0, 1, 2, 3)), DistributedSplit(1, "rows", (0, 1, 2, 3))]
    reduced, clusters = split_and_check(mod, splits, (1, 8, 12, 12))
    # Each cluster's bindings come in order of their depth in the data flow, so no cluster's
    # cut for part p + 1 waits behind its own part p (which waits for the others' cuts); the
    # clusters' runs are long (few segments).
    bindings = [b for block in reduced["main"].body.blocks for b in block.bindings]
    depth: dict = {}
    for binding in bindings:
        depth[binding.var] = 1 + max((depth[v] for v in relax.analysis.free_vars(
            binding.value) if v in depth), default=-1)
    for cluster in set(clusters):
        levels = [depth[b.var] for b, c in zip(bindings, clusters, strict=True) if c == cluster]
        assert levels == sorted(levels)
    switches = sum(a != b for a, b in pairwise(clusters))
    assert switches < len(bindings) / 3


def test_a_reduce_scatter_over_a_ring_sums_the_slices_hop_by_hop_between_neighbours():
    # The second conv split over 8 clusters of a 4x4 mesh by input channels: its 8 partial
    # sums are reduce-scattered into 8 one-channel parts (576 B each). With the topology, each
    # slice is summed on its way around a ring of the 8 clusters, so every message of the
    # reduce-scatter goes to a neighbour; without it, every cluster sends its slices directly,
    # some across two or more links. Both compute the unsplit result.
    system = mesh_system(4, 4)
    topology = Topology(system)
    group = next(g for g in allocation_groups(topology) if len(g) == 8)
    assert reduce_ring(topology, group) is not None
    mod = conv_chain()
    splits = [DistributedSplit(1, "in_channels", group)]
    hops = {}
    for name, given in (("ring", topology), ("direct", None)):
        reduced, clusters = distribute_and_reduce(mod, splits, home=0, topology=given)
        check_numerics(mod, reduced, (1, 8, 12, 12))
        slices = [(src, dst) for nbytes, src, dst in crossings(reduced, clusters)
                  if nbytes == 12 * 12 * 4 and dst != 0]  # the final gather goes to 0
        hops[name] = sorted(len(topology.route(src, dst)) for src, dst in slices)
        if given is not None:
            # Each step of the ring is one kernel that adds its own slice to the running sum:
            # it reads the slice of its partial (1 of 8 channels), not the whole partial.
            steps = [b.value for block in reduced["main"].body.blocks for b in block.bindings
                     if "strided_slice_add" in getattr(b.value.args[0], "name_hint", "")]
            assert len(steps) >= 8 * 6
            kernel = reduced[steps[0].args[0]]
            assert sliced_fractions(kernel) == {1: 1 / 8}
    assert set(hops["ring"]) == {1}
    assert max(hops["direct"]) > 1


def test_taking_the_query_key_and_value_out_of_one_projection_keeps_the_rows_split():
    """torch's attention projects the query, key and value in one matmul and takes each out of
    it along a stacked axis (ONNX Gather with a constant index): each part takes from its own
    rows, where it lies, instead of the projection being gathered whole."""
    def block(bb, x):
        qkv = bb.emit(relax.op.reshape(relax.op.matmul(x, const(32, 96)), [16, 3, 32]))
        stacked = bb.emit(relax.op.permute_dims(qkv, [1, 0, 2]))  # [3, 16, 32]
        q, k = (bb.emit(relax.op.take(stacked, relax.const(i, "int64"), axis=0)) for i in (0, 1))
        return relax.op.add(q, k)

    mod = module(block, (16, 32))
    reduced, clusters = split_and_check(mod, [DistributedSplit(0, "rows", (0, 1, 2, 3))], (16, 32))
    bindings = [b for block in reduced["main"].body.blocks for b in block.bindings]
    where = {b.var: c for b, c in zip(bindings, clusters, strict=True)}
    takes = [b for b in bindings if "take" in b.value.args[0].name_hint]
    # Two takes per part (the query and the key of its 4 rows), on each part's cluster.
    assert sorted(where[b.var] for b in takes) == [0, 0, 1, 1, 2, 2, 3, 3]
    assert all([int(d) for d in b.var.ty.shape.values] == [4, 32] for b in takes)
    # Nothing crosses but the sum's rows, gathered home as the model's output.
    assert {d for _, _, d in crossings(reduced, clusters)} == {0}


def embedded_block():
    """Token ids -> embedding lookup + position embeddings -> layer norm -> a matmul (anchor 0)
    -> residual add of its output and the norm's -> layer norm -> a matmul (anchor 1): a
    transformer's embeddings and first layer, in brief."""
    bb = relax.BlockBuilder()
    ids = relax.Var("ids", relax.TensorType((1, 16), "int64"))
    ones, zeros = relax.const(np.ones(32, "float32")), relax.const(np.zeros(32, "float32"))
    with bb.function("main", [ids]):
        with bb.dataflow():
            tokens = bb.emit(relax.op.take(const(50, 32), ids, axis=0))
            embedded = bb.emit(relax.op.nn.layer_norm(
                relax.op.add(tokens, const(1, 16, 32)), ones, zeros, axes=[-1]))
            layer = bb.emit(relax.op.matmul(embedded, const(32, 32)))
            normed = bb.emit(relax.op.nn.layer_norm(relax.op.add(embedded, layer), ones, zeros,
                                                    axes=[-1]))
            out = bb.emit_output(relax.op.matmul(normed, const(32, 8)))
        bb.emit_func_output(out)
    return bb.get()


@pytest.mark.parametrize("first, takes", [
    ("tiles/2", [(0, 8), (2, 8)]),  # bands of 8 tokens on each band's first member
    ("rows", [(0, 4), (1, 4), (2, 4), (3, 4)]),
    ("cols", [(0, 16)]),  # the matmul reads every row on every part: one whole lookup
])
def test_token_ids_are_looked_up_in_the_row_bands_of_the_first_split_matmul(first, takes):
    """The lookup and the norm before the first layer run band by band where its row split
    reads them, not whole on one cluster that scatters the result; the residual add after
    the layer then follows the layer's output in its parts, not the norm's bands."""
    mod = embedded_block()
    group = (0, 1, 2, 3)
    splits = [DistributedSplit(0, first, group), DistributedSplit(1, "rows", group)]
    reduced, clusters = distribute_and_reduce(mod, splits, home=0)
    ids = RNG.integers(0, 50, size=(1, 16)).astype("int64")
    np.testing.assert_allclose(run(reduced, [ids]), run(mod, [ids]), rtol=1e-4, atol=1e-4)
    bindings = [b for block in reduced["main"].body.blocks for b in block.bindings]
    where = {b.var: c for b, c in zip(bindings, clusters, strict=True)}
    looked_up = sorted((where[b.var], int(b.var.ty.shape.values[1])) for b in bindings
                       if "take" in b.value.args[0].name_hint)
    assert looked_up == takes
    if first == "tiles/2":
        norms = [b for b in bindings if "layer_norm" in b.value.args[0].name_hint]
        assert {where[b.var] for b in norms[2:]} == set(group)  # the second norm, per cluster


@pytest.mark.parametrize("dim, group, rows, centred", [
    ("rows", (0, 1, 2, 3), [2, 1, 2, 1], True),
    ("tiles/2", tuple(range(8)), [2, 2, 1, 1, 2, 2, 1, 1], True),  # 4 bands of 2 slices
    ("rows", (0, 1, 2, 3), [2, 2, 1, 1], False),
])
def test_a_strided_conv_after_a_row_split_takes_the_rows_its_clusters_hold(dim, group, rows,
                                                                           centred):
    """12 rows in 4 bands of 3, then a stride-2 conv of 6 rows over the same clusters: even
    bounds (2, 2, 1, 1) would have band 1 read input rows 3 to 7, two of them from band 2;
    each band takes the output rows centred on its own input rows instead (2, 1, 2, 1), so
    only single halo rows cross between the parts of row splits. A placement with even row
    bounds (``centred_rows=False``) keeps even bounds."""
    def block(bb, x):
        a = bb.emit(relax.op.nn.relu(relax.op.nn.conv2d(x, const(16, 8, 3, 3),
                                                        padding=[1, 1, 1, 1])))
        return relax.op.nn.conv2d(a, const(8, 16, 3, 3), strides=[2, 2], padding=[1, 1, 1, 1])

    splits = [DistributedSplit(0, dim, group), DistributedSplit(1, dim, group)]
    reduced, clusters = split_and_check(module(block), splits, (1, 8, 12, 12),
                                        centred_rows=centred)
    bindings = [b for block in reduced["main"].body.blocks for b in block.bindings]
    second = sorted((c, int(b.var.ty.shape.values[2]))
                    for b, c in zip(bindings, clusters, strict=True)
                    if "conv2d" in b.value.args[0].name_hint
                    and int(b.var.ty.shape.values[3]) == 6)  # the strided conv's width
    assert second == list(enumerate(rows))
    if dim == "rows" and centred:
        row = 16 * 12 * 4  # one row of the relu's output
        assert max(size for size, _, _ in crossings(reduced, clusters)) <= row


@pytest.mark.parametrize("centred, rows", [(True, [2, 1, 2, 1]), (False, [2, 2, 1, 1])])
def test_a_strided_pool_of_row_bands_takes_the_rows_each_band_holds(centred, rows):
    """As the strided conv above: a 3x3 max pool (stride 2) of 12 rows in 4 bands of 3 pools
    the output rows centred on each band's own rows (2, 1, 2, 1), not even bounds; a
    placement with even row bounds (``centred_rows=False``) gets even bounds."""
    def block(bb, x):
        a = bb.emit(relax.op.nn.conv2d(x, const(16, 8, 3, 3), padding=[1, 1, 1, 1]))
        return relax.op.nn.max_pool2d(a, pool_size=[3, 3], strides=[2, 2], padding=[1, 1, 1, 1])

    group = (0, 1, 2, 3)
    reduced, clusters = split_and_check(module(block), [DistributedSplit(0, "rows", group)],
                                        (1, 8, 12, 12), centred_rows=centred)
    bindings = [b for block in reduced["main"].body.blocks for b in block.bindings]
    pooled = sorted((c, int(b.var.ty.shape.values[2]))
                    for b, c in zip(bindings, clusters, strict=True)
                    if "pool" in b.value.args[0].name_hint)
    assert pooled == list(enumerate(rows))
