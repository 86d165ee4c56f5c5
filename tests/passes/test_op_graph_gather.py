import numpy as np
from tvm import relax

from tvm_chiplet.passes import ReduceGraph
from tvm_chiplet.passes.analysis.op_graph import extract_op_graph


def test_a_gather_from_a_constant_table_counts_only_the_rows_it_reads():
    table = np.arange(1000 * 16, dtype="float32").reshape(1000, 16)
    builder = relax.BlockBuilder()
    ids = relax.Var("ids", relax.TensorType((4,), "int64"))
    with builder.function("main", [ids]):
        with builder.dataflow():
            rows = builder.emit(relax.op.take(relax.const(table), ids, axis=0))
            out = builder.emit_output(relax.op.multiply(rows, relax.const(table[:4])))
        builder.emit_func_output(out)
    graph = extract_op_graph(ReduceGraph()(builder.get()))
    gather = next(op for op in graph.ops if "take" in op.name)
    assert gather.weight_bytes == 4 * 16 * 4  # the rows read, not the 64 kB table
    product = next(op for op in graph.ops if "multiply" in op.name and op is not gather)
    assert product.weight_bytes == 4 * 16 * 4
