import numpy as np
import pytest
import tvm
from tvm import relax
from tvm.script import tirx as T

from tests.passes.ir_helpers import nonzero_model_reduced
from tvm_chiplet.passes import ReduceGraph
from tvm_chiplet.passes.analysis.extract_op_graph import (
    AnalysisError,
    extract_op_graph,
    main_bindings,
    planned_bindings,
    tensor_dims,
)


def test_a_gather_from_a_constant_table_counts_only_the_rows_it_reads():
    graph = extract_op_graph(_embedding_module(table_rows=1000))
    gather = next(op for op in graph.ops if "take" in op.name)
    assert gather.weight_bytes == 4 * 16 * 4  # the rows read, not the 64 kB table
    product = next(op for op in graph.ops if "multiply" in op.name and op is not gather)
    assert product.weight_bytes == 4 * 16 * 4


# TVM's FLOP estimator has no rule for a Let expression ("Do not have a default for prim.Let").
@T.prim_func(private=True, s_tir=True)
def _square_plus_one(a: T.Buffer((4, 16), "float32"), b: T.Buffer((4, 16), "float32")):
    for i, j in T.grid(4, 16):
        with T.sblock("b"):
            vi, vj = T.axis.remap("SS", [i, j])
            x = T.float32()
            b[vi, vj] = T.Let(x * x, where={x: a[vi, vj] + T.float32(1)})


@T.prim_func(private=True, s_tir=True)
def _sum_of_squares(a: T.Buffer((4, 16), "float32"), b: T.Buffer((4,), "float32")):
    for i, j in T.grid(4, 16):
        with T.sblock("b"):
            vi, vj = T.axis.remap("SR", [i, j])
            with T.init():
                b[vi] = T.float32(0)
            x = T.float32()
            b[vi] = b[vi] + T.Let(x * x, where={x: a[vi, vj]})


def _calling(prim_func: tvm.tirx.PrimFunc, out_shape: tuple[int, ...]) -> tvm.IRModule:
    """``main`` calling ``prim_func`` once on a ``[4, 16]`` input."""
    builder = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType((4, 16), "float32"))
    with builder.function("main", [x]):
        with builder.dataflow():
            gvar = builder.add_func(prim_func, "kernel")
            out_ty = relax.TensorType(out_shape, "float32")
            out = builder.emit_output(relax.call_tir(gvar, (x,), out_ty))
        builder.emit_func_output(out)
    return builder.get()


def test_the_flop_estimator_rejects_a_let_expression():
    with pytest.raises(tvm.error.InternalError, match=r"prim\.Let"):
        tvm.s_tir.analysis.estimate_tir_flops(tvm.IRModule({"main": _square_plus_one}))


def test_an_elementwise_op_the_estimator_rejects_counts_one_flop_per_output_element():
    mod = relax.transform.AnnotateTIROpPattern()(_calling(_square_plus_one, (4, 16)))
    (op,) = extract_op_graph(mod).ops
    assert op.flops == 4 * 16


def test_a_reduction_the_estimator_rejects_counts_one_flop_per_input_element():
    mod = relax.transform.AnnotateTIROpPattern()(_calling(_sum_of_squares, (4,)))
    (op,) = extract_op_graph(mod).ops
    assert op.flops == 4 * 16


def test_an_op_the_estimator_rejects_without_an_op_pattern_is_named_in_the_error():
    with pytest.raises(AnalysisError, match=r"PrimFunc 'kernel'.*estimated_flops"):
        extract_op_graph(_calling(_square_plus_one, (4, 16)))


def test_an_estimated_flops_attribute_gives_the_count_of_an_op_the_estimator_rejects():
    mod = _calling(_square_plus_one, (4, 16))
    gvar = mod.get_global_var("kernel")
    mod[gvar] = mod[gvar].with_attr("estimated_flops", 128)
    (op,) = extract_op_graph(mod).ops
    assert op.flops == 128


def _embedding_module(table_rows: int = 100):
    """An fp32 table of ``table_rows`` x 16 gathered by 4 int64 ids, then scaled by an fp32
    constant."""
    table = np.ones((table_rows, 16), dtype="float32")
    builder = relax.BlockBuilder()
    ids = relax.Var("ids", relax.TensorType((4,), "int64"))
    with builder.function("main", [ids]):
        with builder.dataflow():
            rows = builder.emit(relax.op.take(relax.const(table), ids, axis=0))
            out = builder.emit_output(relax.op.multiply(rows, relax.const(table[:4])))
        builder.emit_func_output(out)
    return ReduceGraph()(builder.get())


@pytest.mark.parametrize(("device_dtype", "width"), [("int8", 1), ("fp16", 2), ("bf16", 2),
                                                     ("fp32", 4)])
def test_float_tensors_count_at_the_device_precision(device_dtype, width):
    graph = extract_op_graph(_embedding_module(), device_dtype)
    gather = next(op for op in graph.ops if "take" in op.name)
    assert gather.weight_bytes == 4 * 16 * width
    assert gather.output_bytes == 4 * 16 * width
    assert gather.input_bytes == 4 * 8  # the int64 ids keep their width


def test_values_whose_types_hash_alike_count_their_own_bytes():
    # tvm_ffi.structural_hash maps these two types to one value in TVM 0.27.
    shapes = [(1, 3, 2, 56), (1, 3, 1, 1)]
    builder = relax.BlockBuilder()
    params = [relax.Var(f"x{i}", relax.TensorType(shape, "float32"))
              for i, shape in enumerate(shapes)]
    with builder.function("main", params):
        with builder.dataflow():
            outs = [builder.emit(relax.op.negative(x)) for x in params]
            out = builder.emit_output(relax.Tuple(outs))
        builder.emit_func_output(out)
    graph = extract_op_graph(ReduceGraph(fuse=False)(builder.get()))
    assert [op.output_bytes for op in graph.ops[:2]] == [4 * 3 * 2 * 56, 4 * 3]
    assert [tensor_dims(x.ty) for x in params] == shapes
    dynamic = relax.TensorType((1, tvm.tirx.Var("n", "int64")), "float32")
    assert tensor_dims(dynamic) == (1, None)


def test_without_a_device_dtype_tensors_count_at_their_ir_dtype():
    graph = extract_op_graph(_embedding_module())
    assert graph.total_weight_bytes == extract_op_graph(_embedding_module(), "fp32") \
        .total_weight_bytes == 2 * 4 * 16 * 4


def test_the_op_graph_ends_before_the_data_dependent_tail():
    reduced = nonzero_model_reduced()
    bindings = main_bindings(reduced)
    planned = planned_bindings(reduced)
    assert 0 < len(planned) < len(bindings)
    assert any(isinstance(b, relax.MatchCast) for b in bindings[len(planned):])
    graph = extract_op_graph(reduced)
    assert len(graph.ops) == len(planned)
    assert [op.name for op in graph.ops if op.is_compute] == ["relu"]



def _slice_and_add(scaled_first: bool):
    """x (1x64x8x8) cut to channels 8..16 and added to y (1x8x8x8); with ``scaled_first``, x is
    doubled before the cut, in the same kernel (which then reads all of x)."""
    bb = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType((1, 64, 8, 8), "float32"))
    y = relax.Var("y", relax.TensorType((1, 8, 8, 8), "float32"))
    with bb.function("main", [x, y]):
        with bb.dataflow():
            source = relax.op.multiply(x, relax.const(2.0)) if scaled_first else x
            total = bb.emit(relax.op.add(relax.op.strided_slice(source, [1], [8], [16]), y))
            out = bb.emit_output(total)
        bb.emit_func_output(out)
    return ReduceGraph()(bb.get())


def test_a_fused_kernel_reads_only_the_slice_it_cuts_of_an_operand():
    (op,) = extract_op_graph(_slice_and_add(False)).ops
    assert op.name == "fused_strided_slice_add"
    assert op.input_bytes == 4 * (8 * 8 * 8 + 8 * 8 * 8)  # 1/8 of x, all of y
    # An operand that another block of the kernel reads (the doubling) counts whole.
    (op,) = extract_op_graph(_slice_and_add(True)).ops
    assert op.input_bytes == 4 * (64 * 8 * 8 + 8 * 8 * 8)
