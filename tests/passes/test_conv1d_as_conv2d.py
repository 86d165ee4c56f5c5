"""Conv1dAsConv2d: a 1-D convolution as the 2-D one over rows of positions, same numerics;
through tensor-parallel, a temporal convolution network's layers split and match
onnxruntime."""

import numpy as np
import onnx
import pytest
import tvm
from onnx import TensorProto, helper
from tvm import relax

from tests.passes.test_distribute_tensors import check_numerics, crossings
from tests.tools.e2e import compile_run_and_compare
from tvm_chiplet.passes import Conv1dAsConv2d
from tvm_chiplet.passes.distribute_tensors import DistributedSplit, distribute_and_reduce

RNG = np.random.default_rng(0)


def conv1d_chain():
    """conv1d 4->8 (k3, stride 2, dilation 2, pads 1/2) -> conv1d grouped (4 groups, k5)
    -> relu."""
    bb = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType((1, 4, 33), "float32"))
    with bb.function("main", [x]):
        with bb.dataflow():
            a = bb.emit(relax.op.nn.conv1d(
                x, relax.const(RNG.normal(size=(8, 4, 3)).astype("float32")), strides=2,
                padding=[1, 2], dilation=2))
            b = bb.emit(relax.op.nn.conv1d(
                a, relax.const(RNG.normal(size=(8, 2, 5)).astype("float32")), groups=4,
                padding=[2, 2]))
            out = bb.emit_output(relax.op.nn.relu(b))
        bb.emit_func_output(out)
    return bb.get()


def test_each_conv1d_becomes_a_conv2d_over_rows_with_the_same_result():
    mod = conv1d_chain()
    rewritten = Conv1dAsConv2d()(mod)
    ops = [b.value.op.name for b in rewritten["main"].body.blocks[0].bindings]
    assert "relax.nn.conv1d" not in ops and ops.count("relax.nn.conv2d") == 2
    x = RNG.normal(size=(1, 4, 33)).astype("float32")

    def run(m):
        vm = relax.VirtualMachine(tvm.compile(m, "llvm"), tvm.cpu())
        return vm["main"](tvm.runtime.tensor(x)).numpy()

    np.testing.assert_allclose(run(rewritten), run(mod), rtol=1e-5, atol=1e-5)


def test_row_splits_of_rewritten_conv1d_layers_stay_distributed_through_the_squeeze():
    # Between two rewritten layers the value is squeezed to 1-D and expanded again: each part
    # squeezes and expands its own rows (before: gathered whole on one cluster, 8 x 16 x 4
    # bytes, then scattered again).
    mod = Conv1dAsConv2d()(conv1d_chain())
    splits = [DistributedSplit(0, "rows", (0, 1, 2, 3)), DistributedSplit(1, "rows", (0, 1, 2, 3))]
    reduced, clusters = distribute_and_reduce(mod, splits, home=0)
    check_numerics(mod, reduced, (1, 4, 33))
    assert all(size < 8 * 16 * 4 / 2 for size, _, _ in crossings(reduced, clusters))


def tcn():
    """A temporal convolution network's front: three Conv (1-D) + Relu layers over 256 steps."""
    nodes, inits, channels = [], [], [8, 64, 64, 64]
    for i in range(3):
        inits.append(helper.make_tensor(
            f"w{i}", TensorProto.FLOAT, [channels[i + 1], channels[i], 3],
            (RNG.normal(size=(channels[i + 1], channels[i], 3)) * 0.2).flatten().tolist()))
        nodes += [helper.make_node("Conv", [f"h{i}" if i else "x", f"w{i}"], [f"c{i}"],
                                   pads=[1, 1]),
                  helper.make_node("Relu", [f"c{i}"], [f"h{i + 1}" if i < 2 else "y"])]
    graph = helper.make_graph(
        nodes, "tcn", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8, 256])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 64, 256])], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


@pytest.mark.parametrize("strategy", ["tensor-parallel", "layer-sequential"])
def test_a_temporal_convolution_network_splits_its_conv1d_layers(tmp_path, strategy):
    # Before: conv1d was no split anchor, and every layer ran whole on one cluster.
    onnx.checker.check_model(tcn())
    plan = compile_run_and_compare(tmp_path, tcn(), "chiplet/mesh-4x4", strategy)
    assert plan["placement"]["notes"]["splits"] >= 2
    assert len(plan["clusters_used"]) >= 4
