import numpy as np
import onnxruntime
import pytest
import tvm
from tvm import relax
from tvm.script import ir as I
from tvm.script import relax as R
from tvm.script import tirx as T

from tvm_chiplet.passes import ReduceGraph
from tvm_chiplet.passes.planners.placement import SPLIT_DIMS, PlanningError
from tvm_chiplet.passes.split_operators import (
    AnchorInfo,
    AnchorSplit,
    SplitOperators,
    find_anchors,
)
from tvm_chiplet.tools.frontends import load_model
from tvm_chiplet.tools.models import example_inputs, get_model


@I.ir_module
class Linear:
    @R.function
    def main(x: R.Tensor((4, 8), "float32"), w: R.Tensor((8, 6), "float32")
             ) -> R.Tensor((4, 6), "float32"):
        with R.dataflow():
            y = R.matmul(x, w)
            z = R.nn.relu(y)
            R.output(z)
        return z


@I.ir_module
class StridedConv:
    @R.function
    def main(x: R.Tensor((1, 4, 9, 9), "float32"), w: R.Tensor((6, 4, 3, 3), "float32")
             ) -> R.Tensor((1, 6, 5, 5), "float32"):
        with R.dataflow():
            y = R.nn.conv2d(x, w, strides=[2, 2], padding=[1, 1, 1, 1])
            R.output(y)
        return y


def _run(mod: tvm.IRModule, *inputs: np.ndarray) -> np.ndarray:
    vm = relax.VirtualMachine(tvm.compile(mod, "llvm"), tvm.cpu())
    return vm["main"](*[tvm.runtime.tensor(x) for x in inputs]).numpy()


def _calls(mod: tvm.IRModule, op: str) -> list[relax.Call]:
    return [b.value for block in mod["main"].body.blocks for b in block.bindings
            if isinstance(b.value, relax.Call) and b.value.op.name == op]


def _single_op_module(make_call, shapes: list[tuple[int, ...]], const: dict[int, np.ndarray]
                      ) -> tvm.IRModule:
    """``main`` computing one call; operand ``i`` is ``relax.const(const[i])`` or a parameter."""
    params = [relax.Var(f"p{i}", relax.TensorType(s, "float32"))
              for i, s in enumerate(shapes) if i not in const]
    builder = relax.BlockBuilder()
    with builder.function("main", params):
        with builder.dataflow():
            free = iter(params)
            args = [relax.const(const[i]) if i in const else next(free)
                    for i in range(len(shapes))]
            out = builder.emit_output(make_call(*args))
        builder.emit_func_output(out)
    return builder.get()


def _check_split_matches(mod: tvm.IRModule, split: AnchorSplit, seed: int = 0) -> tvm.IRModule:
    after = SplitOperators([split])(mod)
    kind = find_anchors(mod)[0].op
    op = "relax.matmul" if kind == "matmul" else f"relax.nn.{kind}"
    assert len(_calls(after, op)) == split.parts
    for call in _calls(after, "relax.strided_slice"):
        assert not isinstance(call.args[0], tvm.ir.expr.Constant)
    rng = np.random.default_rng(seed)
    inputs = [rng.standard_normal([int(d) for d in p.ty.shape.values], dtype=np.float32)
              for p in mod["main"].params]
    np.testing.assert_allclose(_run(after, *inputs), _run(mod, *inputs), rtol=1e-5, atol=1e-5)
    return after


# ---------------------------------------------------------------------------------------------
# Structure


def test_find_anchors_lists_convs_and_matmuls_with_their_legal_dims():
    @I.ir_module
    class Mixed:
        @R.function
        def main(x: R.Tensor((2, 3, 8, 8), "float32"), w: R.Tensor((4, 3, 3, 3), "float32"),
                 v: R.Tensor((256, 5), "float32")) -> R.Tensor((2, 5), "float32"):
            with R.dataflow():
                y = R.nn.conv2d(x, w, padding=[1, 1, 1, 1])
                f = R.reshape(y, R.shape([2, 256]))
                z = R.matmul(f, v)
                R.output(z)
            return z

    assert list(SPLIT_DIMS) == ["conv2d", "conv2d_transpose", "conv3d", "matmul"]
    assert find_anchors(Mixed) == [
        # A row band of the 3x3 conv reads 2 of the 8 input rows beyond its share.
        AnchorInfo(0, "conv2d", {"batch": 2, "out_channels": 4, "in_channels": 3, "rows": 8},
                   (2, 4, 8, 8), halo=(2, 8)),
        # Its weights are a parameter, not a constant: it may follow its input instead.
        AnchorInfo(1, "matmul", {"rows": 2, "cols": 5, "reduction": 256}, (2, 5), True),
    ]


def test_matmul_cols_slices_the_weight_and_concatenates_the_columns():
    @I.ir_module
    class Expected:
        @R.function
        def main(x: R.Tensor((4, 8), "float32"), w: R.Tensor((8, 6), "float32")
                 ) -> R.Tensor((4, 6), "float32"):
            with R.dataflow():
                w0 = R.strided_slice(w, axes=[1], begin=[0], end=[3])
                y0 = R.matmul(x, w0)
                w1 = R.strided_slice(w, axes=[1], begin=[3], end=[6])
                y1 = R.matmul(x, w1)
                y = R.concat((y0, y1), axis=1)
                z = R.nn.relu(y)
                R.output(z)
            return z

    After = SplitOperators([AnchorSplit(0, "cols", 2)])(Linear)
    tvm.ir.assert_structural_equal(After, Expected)


def test_matmul_reduction_slices_both_operands_and_sums_the_partial_products():
    @I.ir_module
    class Expected:
        @R.function
        def main(x: R.Tensor((4, 8), "float32"), w: R.Tensor((8, 6), "float32")
                 ) -> R.Tensor((4, 6), "float32"):
            with R.dataflow():
                x0 = R.strided_slice(x, axes=[1], begin=[0], end=[3])
                w0 = R.strided_slice(w, axes=[0], begin=[0], end=[3])
                y0 = R.matmul(x0, w0)
                x1 = R.strided_slice(x, axes=[1], begin=[3], end=[6])
                w1 = R.strided_slice(w, axes=[0], begin=[3], end=[6])
                y1 = R.matmul(x1, w1)
                x2 = R.strided_slice(x, axes=[1], begin=[6], end=[8])
                w2 = R.strided_slice(w, axes=[0], begin=[6], end=[8])
                y2 = R.matmul(x2, w2)
                s = R.add(y0, y1)
                y = R.add(s, y2)
                z = R.nn.relu(y)
                R.output(z)
            return z

    After = SplitOperators([AnchorSplit(0, "reduction", 3)])(Linear)
    tvm.ir.assert_structural_equal(After, Expected)


def test_conv2d_out_channels_slices_the_kernel_and_concatenates_channels():
    @I.ir_module
    class Expected:
        @R.function
        def main(x: R.Tensor((1, 4, 9, 9), "float32"), w: R.Tensor((6, 4, 3, 3), "float32")
                 ) -> R.Tensor((1, 6, 5, 5), "float32"):
            with R.dataflow():
                w0 = R.strided_slice(w, axes=[0], begin=[0], end=[3])
                y0 = R.nn.conv2d(x, w0, strides=[2, 2], padding=[1, 1, 1, 1])
                w1 = R.strided_slice(w, axes=[0], begin=[3], end=[6])
                y1 = R.nn.conv2d(x, w1, strides=[2, 2], padding=[1, 1, 1, 1])
                y = R.concat((y0, y1), axis=1)
                R.output(y)
            return y

    After = SplitOperators([AnchorSplit(0, "out_channels", 2)])(StridedConv)
    tvm.ir.assert_structural_equal(After, Expected)


def test_conv2d_rows_pads_height_once_and_gives_each_part_its_halo():
    @I.ir_module
    class Expected:
        @R.function
        def main(x: R.Tensor((1, 4, 9, 9), "float32"), w: R.Tensor((6, 4, 3, 3), "float32")
                 ) -> R.Tensor((1, 6, 5, 5), "float32"):
            with R.dataflow():
                padded = R.nn.pad(x, pad_width=[0, 0, 0, 0, 1, 1, 0, 0], pad_value=0.0)
                # Output rows [0, 3) with stride 2 read padded rows [0, 7); rows [3, 5): [6, 11).
                x0 = R.strided_slice(padded, axes=[2], begin=[0], end=[7])
                y0 = R.nn.conv2d(x0, w, strides=[2, 2], padding=[0, 1, 0, 1])
                x1 = R.strided_slice(padded, axes=[2], begin=[6], end=[11])
                y1 = R.nn.conv2d(x1, w, strides=[2, 2], padding=[0, 1, 0, 1])
                y = R.concat((y0, y1), axis=2)
                R.output(y)
            return y

    After = SplitOperators([AnchorSplit(0, "rows", 2)])(StridedConv)
    tvm.ir.assert_structural_equal(After, Expected)


def test_depthwise_out_channels_slices_data_channels_and_shrinks_groups():
    @I.ir_module
    class Depthwise:
        @R.function
        def main(x: R.Tensor((1, 4, 6, 6), "float32"), w: R.Tensor((4, 1, 3, 3), "float32")
                 ) -> R.Tensor((1, 4, 6, 6), "float32"):
            with R.dataflow():
                y = R.nn.conv2d(x, w, padding=[1, 1, 1, 1], groups=4)
                R.output(y)
            return y

    @I.ir_module
    class Expected:
        @R.function
        def main(x: R.Tensor((1, 4, 6, 6), "float32"), w: R.Tensor((4, 1, 3, 3), "float32")
                 ) -> R.Tensor((1, 4, 6, 6), "float32"):
            with R.dataflow():
                x0 = R.strided_slice(x, axes=[1], begin=[0], end=[2])
                w0 = R.strided_slice(w, axes=[0], begin=[0], end=[2])
                y0 = R.nn.conv2d(x0, w0, padding=[1, 1, 1, 1], groups=2)
                x1 = R.strided_slice(x, axes=[1], begin=[2], end=[4])
                w1 = R.strided_slice(w, axes=[0], begin=[2], end=[4])
                y1 = R.nn.conv2d(x1, w1, padding=[1, 1, 1, 1], groups=2)
                y = R.concat((y0, y1), axis=1)
                R.output(y)
            return y

    After = SplitOperators([AnchorSplit(0, "out_channels", 2)])(Depthwise)
    tvm.ir.assert_structural_equal(After, Expected)


def test_empty_plan_is_a_no_op():
    tvm.ir.assert_structural_equal(SplitOperators([])(Linear), Linear)


def test_one_part_leaves_the_anchor_unchanged():
    tvm.ir.assert_structural_equal(SplitOperators([AnchorSplit(0, "rows", 1)])(Linear), Linear)


def test_input_module_is_not_mutated():
    snapshot = StridedConv.script()
    SplitOperators([AnchorSplit(0, "rows", 2)])(StridedConv)
    assert StridedConv.script() == snapshot


def test_symbolic_and_unsupported_layout_dims_are_not_legal():
    @I.ir_module
    class Symbolic:
        @R.function
        def main(x: R.Tensor(("n", 8), "float32"), w: R.Tensor((8, 6), "float32")
                 ) -> R.Tensor(("n", 6), "float32"):
            n = T.int64()
            with R.dataflow():
                y: R.Tensor((n, 6), "float32") = R.matmul(x, w)
                R.output(y)
            return y

    @I.ir_module
    class Nhwc:
        @R.function
        def main(x: R.Tensor((1, 8, 8, 3), "float32"), w: R.Tensor((3, 3, 3, 4), "float32")
                 ) -> R.Tensor((1, 6, 6, 4), "float32"):
            with R.dataflow():
                y = R.nn.conv2d(x, w, data_layout="NHWC", kernel_layout="HWIO")
                R.output(y)
            return y

    assert find_anchors(Symbolic) == [AnchorInfo(0, "matmul", {"cols": 6, "reduction": 8},
                                                 (-1, 6), True)]
    assert find_anchors(Nhwc)[0].dims == {}
    with pytest.raises(PlanningError, match="legal dims here: none"):
        SplitOperators([AnchorSplit(0, "rows", 2)])(Nhwc)


# ---------------------------------------------------------------------------------------------
# Bad plans


def test_anchor_out_of_range_says_how_many_anchors_there_are():
    with pytest.raises(PlanningError, match=r"anchor 3 is out of range: the module has 1 anch"):
        SplitOperators([AnchorSplit(3, "rows", 2)])(Linear)


def test_illegal_dim_lists_the_legal_ones():
    with pytest.raises(PlanningError, match=r"along 'batch': no partition strategy of matmul "
                                            r"reads or writes that layout here; legal dims here: "
                                            r"rows, cols, redu"):
        SplitOperators([AnchorSplit(0, "batch", 2)])(Linear)


def test_a_grouped_conv_splits_its_output_channels_at_whole_groups():
    # 2 groups of 3 output channels, each reading 2 input channels (ResNeXt's, ShuffleNet's
    # kind): each part is a grouped conv over its own groups and their input channels.
    grouped = _single_op_module(lambda x, w: relax.op.nn.conv2d(x, w, groups=2),
                                [(1, 4, 6, 6), (6, 2, 3, 3)], {})
    assert find_anchors(grouped)[0].dims == {"batch": 1, "out_channels": 2, "rows": 4}
    after = _check_split_matches(grouped, AnchorSplit(0, "out_channels", 2))
    assert [int(c.attrs.groups) for c in _calls(after, "relax.nn.conv2d")] == [1, 1]
    with pytest.raises(PlanningError, match=r"out_channels of size 2, .* 3 parts"):
        SplitOperators([AnchorSplit(0, "out_channels", 3)])(grouped)


@pytest.mark.parametrize("dim", ["out_channels", "batch"])
def test_a_conv3d_splits_its_output_channels_or_its_batch(dim):
    volume = _single_op_module(
        lambda x, w: relax.op.nn.conv3d(x, w, padding=[1, 1, 1, 1, 1, 1]),
        [(2, 3, 4, 5, 5), (6, 3, 3, 3, 3)], {1: np.ones((6, 3, 3, 3, 3), "float32")})
    assert find_anchors(volume)[0].dims == {"out_channels": 6, "batch": 2}
    _check_split_matches(volume, AnchorSplit(0, dim, 2))


def test_more_parts_than_the_dim_has_says_the_maximum():
    with pytest.raises(PlanningError, match=r"rows of size 4, .* 5 parts; use at most 4 parts"):
        SplitOperators([AnchorSplit(0, "rows", 5)])(Linear)


def test_fewer_than_one_part_is_refused_at_construction():
    with pytest.raises(PlanningError, match=r"asks for 0 parts; parts must be >= 1"):
        SplitOperators([AnchorSplit(0, "rows", 0)])


def test_duplicate_anchor_is_refused_at_construction():
    with pytest.raises(PlanningError, match=r"anchor\(s\) \[0\] appear more than once"):
        SplitOperators([AnchorSplit(0, "rows", 2), AnchorSplit(0, "cols", 2)])


def test_split_of_the_wrong_type_is_refused():
    with pytest.raises(TypeError, match=r"AnchorSplit.parts must be int, got 2.0"):
        SplitOperators([AnchorSplit(0, "rows", 2.0)])
    with pytest.raises(TypeError, match="must hold AnchorSplit objects"):
        SplitOperators([(0, "rows", 2)])


# ---------------------------------------------------------------------------------------------
# Numerics: the split module computes what the original does


CONV_CASES = {
    # name: (data shape, weight shape, conv2d options, dim, parts)
    "batch": ((3, 4, 8, 8), (6, 4, 3, 3), {"padding": [1, 1, 1, 1]}, "batch", 2),
    "out_channels_7_over_3": ((1, 4, 8, 8), (7, 4, 3, 3), {"padding": [1, 1, 1, 1]},
                              "out_channels", 3),
    "in_channels_7_over_3": ((1, 7, 8, 8), (5, 7, 3, 3), {"padding": [1, 1, 1, 1]},
                             "in_channels", 3),
    "rows_strided_padded": ((1, 3, 9, 9), (4, 3, 3, 3), {"strides": [2, 2],
                            "padding": [1, 1, 1, 1]}, "rows", 3),
    "rows_dilated_asymmetric": ((1, 2, 11, 10), (3, 2, 3, 3),
                                {"padding": [2, 1, 0, 1], "dilation": [2, 2]}, "rows", 4),
    "rows_unpadded_7_over_3": ((1, 2, 9, 9), (3, 2, 3, 3), {}, "rows", 3),
    "depthwise_out_channels": ((1, 6, 8, 8), (6, 1, 3, 3), {"padding": [1, 1, 1, 1],
                               "groups": 6}, "out_channels", 4),
    "depthwise_rows": ((1, 6, 8, 8), (6, 1, 3, 3), {"padding": [1, 1, 1, 1], "groups": 6},
                       "rows", 2),
}


@pytest.mark.parametrize("case", CONV_CASES)
def test_conv2d_split_matches_unsplit_with_constant_weights(case):
    data_shape, weight_shape, options, dim, parts = CONV_CASES[case]
    weight = np.random.default_rng(1).standard_normal(weight_shape, dtype=np.float32)
    mod = _single_op_module(lambda x, w: relax.op.nn.conv2d(x, w, **options),
                            [data_shape, weight_shape], {1: weight})
    after = _check_split_matches(mod, AnchorSplit(0, dim, parts))
    sliced = _calls(after, "relax.strided_slice")
    assert len(sliced) == (0 if dim == "out_channels" and "groups" not in options else parts)


@pytest.mark.parametrize("dim", SPLIT_DIMS["conv2d"])
def test_conv2d_split_matches_unsplit_with_weight_parameters(dim):
    mod = _single_op_module(
        lambda x, w: relax.op.nn.conv2d(x, w, strides=[2, 1], padding=[1, 0, 2, 1]),
        [(2, 3, 8, 7), (5, 3, 3, 2)], {},
    )
    _check_split_matches(mod, AnchorSplit(0, dim, 2))


@pytest.mark.parametrize("dim", SPLIT_DIMS["conv2d_transpose"])
@pytest.mark.parametrize("options", [
    {"strides": [2, 2]}, {"strides": [2, 2], "padding": [1, 1, 1, 1], "output_padding": [1, 1]}])
def test_conv2d_transpose_split_matches_unsplit(dim, options):
    """A U-Net's upsampling: split by its output channels (weights IOHW, along axis 1) or its
    batch; a 2x2 kernel at stride 2, and a 3x3 one that overlaps its windows."""
    kernel = 2 if "padding" not in options else 3
    weight = np.random.default_rng(3).standard_normal((4, 5, kernel, kernel), dtype=np.float32)
    mod = _single_op_module(lambda x, w: relax.op.nn.conv2d_transpose(x, w, **options),
                            [(2, 4, 6, 6), (4, 5, kernel, kernel)], {1: weight})
    assert find_anchors(mod)[0].dims == {"batch": 2, "out_channels": 5}
    _check_split_matches(mod, AnchorSplit(0, dim, 2))


@pytest.mark.parametrize("groups, parts", [(2, 2), (4, 3), (8, 4)])
def test_a_grouped_conv2d_transpose_splits_at_whole_groups(groups, parts):
    """A grouped transposed conv (8 input channels, 3 output channels per group; 8 groups is
    a learned depthwise upsampling) splits by its groups: each part reads its groups' input
    channels and weight rows and writes their output channels."""
    weight = np.random.default_rng(3).standard_normal((8, 3, 4, 4), dtype=np.float32)
    mod = _single_op_module(
        lambda x, w: relax.op.nn.conv2d_transpose(x, w, strides=2, padding=[1, 1, 1, 1],
                                                  groups=groups),
        [(1, 8, 6, 6), (8, 3, 4, 4)], {1: weight})
    info = find_anchors(mod)[0]
    assert (info.op, info.dims) == ("conv2d_transpose", {"batch": 1, "out_channels": groups})
    _check_split_matches(mod, AnchorSplit(0, "out_channels", parts))


def test_a_grouped_conv3d_is_an_anchor_that_cannot_be_split():
    mod = _single_op_module(lambda x, w: relax.op.nn.conv3d(x, w, groups=2),
                            [(1, 4, 4, 6, 6), (4, 2, 3, 3, 3)], {})
    info = find_anchors(mod)[0]
    assert (info.op, info.dims) == ("conv3d", {})
    with pytest.raises(PlanningError, match="cannot be split along 'out_channels'"):
        SplitOperators([AnchorSplit(0, "out_channels", 2)])(mod)


MATMUL_CASES = {
    # name: (a shape, b shape, b constant, dim, parts)
    "rows": ((5, 8), (8, 7), True, "rows", 3),
    "cols": ((5, 8), (8, 7), True, "cols", 3),
    "reduction": ((5, 8), (8, 7), True, "reduction", 3),
    "reduction_parameters": ((2, 5, 8), (8, 7), False, "reduction", 4),
    "rows_3d": ((2, 5, 8), (8, 7), True, "rows", 2),
    "batch_of_a_only": ((3, 5, 8), (8, 7), True, "batch", 3),
    "batch_of_both": ((3, 4, 5), (3, 5, 6), False, "batch", 2),
    "batch_of_b_broadcast_in_rank": ((2, 3, 4, 5), (3, 5, 6), False, "batch", 2),
    "batch_of_a_broadcast_size_one": ((1, 4, 5), (3, 5, 6), False, "batch", 3),
    "rows_of_matrix_vector": ((4, 8), (8,), False, "rows", 2),
    "cols_of_vector_matrix": ((8,), (8, 6), False, "cols", 2),
    "reduction_of_vector_vector": ((8,), (8,), False, "reduction", 2),
}


@pytest.mark.parametrize("case", MATMUL_CASES)
def test_matmul_split_matches_unsplit(case):
    a_shape, b_shape, b_constant, dim, parts = MATMUL_CASES[case]
    weight = {1: np.random.default_rng(2).standard_normal(b_shape, dtype=np.float32)}
    mod = _single_op_module(relax.op.matmul, [a_shape, b_shape], weight if b_constant else {})
    after = _check_split_matches(mod, AnchorSplit(0, dim, parts))
    if b_constant:
        assert all(c.args[0].same_as(mod["main"].params[0])
                   for c in _calls(after, "relax.strided_slice"))


# ---------------------------------------------------------------------------------------------
# End to end: every anchor of a model split, reduced, compiled, against onnxruntime


@pytest.mark.parametrize("name", ["small-cnn", "transformer-block"])
def test_every_anchor_split_still_matches_onnxruntime_after_reduce_graph(name):
    model = get_model(name, batch=2)
    inputs = example_inputs(model)
    expected = onnxruntime.InferenceSession(model.SerializeToString()).run(None, inputs)[0]
    mod = load_model(model)
    splits = []
    for anchor in find_anchors(mod):
        dims = [d for d, size in anchor.dims.items() if size >= 2]
        dim = dims[anchor.index % len(dims)]
        splits.append(AnchorSplit(anchor.index, dim, min(2 + anchor.index % 3, anchor.dims[dim])))
    split = SplitOperators(splits)(mod)
    assert len(_calls(split, "relax.matmul") + _calls(split, "relax.nn.conv2d")) == sum(
        s.parts for s in splits)
    reduced = ReduceGraph()(split)
    ops = {b.value.op.name for block in reduced["main"].body.blocks for b in block.bindings
           if isinstance(b.value, relax.Call)}
    assert ops == {"relax.call_tir"}
    out = _run(reduced, *inputs.values())
    assert np.abs(out - expected).max() <= 1e-4 * np.abs(expected).max()
