"""Every strategy on the op patterns that broke one (tools/bench/patterns.py), against
onnxruntime: matmuls with a 1-D operand, an LSTM / GRU, a ConvTranspose, several outputs."""

import numpy as np
import onnxruntime as ort
import pytest
import tvm
from tvm import relax

import tvm_chiplet
from tvm_chiplet.passes import ReduceGraph
from tvm_chiplet.passes.distribute_tensors import (
    DistributedSplit,
    distribute_and_reduce,
    prepare_for_splits,
)
from tvm_chiplet.passes.plan_split_placement import split_problem
from tvm_chiplet.passes.planners import PlanningError
from tvm_chiplet.passes.split_operators import find_anchors
from tvm_chiplet.targets.system_toml import load_system
from tvm_chiplet.tools.bench.patterns import get_pattern
from tvm_chiplet.tools.bench.trained import Case, random_inputs, relative_error
from tvm_chiplet.tools.frontends import graph_inputs, load_model

SPLITTING = ("tensor-parallel", "layer-sequential")


def inputs_and_reference(name: str):
    pattern = get_pattern(name)
    model = pattern.build()
    inputs = random_inputs(Case(name, model, pattern.shapes, {}, pattern.int_high), model)
    names = [value.name for value in graph_inputs(model)]
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return pattern, model, dict(zip(names, inputs, strict=True)), session.run(None, dict(
        zip(names, inputs, strict=True)))


def build_and_compare(name: str, strategy: str, target: str = "chiplet/mesh-4x4") -> dict:
    """Build the pattern with ``strategy``, run it, assert it matches onnxruntime; the plan."""
    pattern, model, feed, expected = inputs_and_reference(name)
    lib = tvm_chiplet.build(model, target=target, strategy=strategy, input_shapes=pattern.shapes)
    outputs = list(lib.run(feed).outputs)
    assert len(outputs) == len(expected)
    for output, reference in zip(outputs, expected, strict=True):
        assert relative_error(output, reference) <= 1e-4
    return lib.plan


def run_vm(mod, inputs):
    result = relax.VirtualMachine(tvm.compile(mod, "llvm"), tvm.cpu())["main"](
        *[tvm.runtime.tensor(v) for v in inputs])
    return [result.numpy()] if isinstance(result, tvm.runtime.Tensor) else [
        r.numpy() for r in result]


@pytest.mark.parametrize("anchor, dim", [(1, "cols"), (1, "reduction"), (2, "batch"),
                                         (2, "rows"), (4, "batch")])
def test_splits_next_to_a_1d_matmul_operand_keep_the_numerics(anchor, dim):
    """Anchor 1 is ``w[4] @ a[4, 6]``; anchors 2 and 4 produce ``h`` that the activation
    matmuls ``h @ v[8]`` and ``u[6] @ h`` read sharded (their output drops an axis)."""
    pattern, model, feed, _ = inputs_and_reference("vector-matmuls")
    mod = prepare_for_splits(load_model(model, pattern.shapes))
    size = find_anchors(mod)[anchor].dims[dim]
    split = DistributedSplit(anchor, dim, tuple(range(1, 1 + min(size, 3))))
    reduced, _ = distribute_and_reduce(mod, [split], home=0)
    for got, want in zip(run_vm(reduced, list(feed.values())), run_vm(mod, list(feed.values())),
                         strict=True):
        assert relative_error(got, want) <= 1e-5


def test_anchors_are_numbered_after_weight_only_matmuls_fold():
    """The imported LSTM computes matmuls of weights only; they fold away before the split
    ops are numbered, so every planned anchor is the op the plan measured."""
    pattern, model, _, _ = inputs_and_reference("recurrent")
    mod = load_model(model, pattern.shapes)
    problem, op_ids = split_problem(mod, ReduceGraph()(mod), load_system("cluster-4"))
    assert len(op_ids) == len(find_anchors(prepare_for_splits(mod))) < len(find_anchors(mod))
    assert set(problem.split_dims) <= set(op_ids) and problem.split_dims


@pytest.mark.parametrize("strategy", SPLITTING)
def test_splitting_strategies_run_a_recurrent_model(strategy):
    build_and_compare("recurrent", strategy, "chiplet/cluster-4")


@pytest.mark.parametrize("strategy", SPLITTING)
def test_splitting_strategies_split_convs_next_to_a_conv_transpose(strategy):
    """TVM names a ConvTranspose ``conv2d_transpose``: it is an anchor of its own, and
    layer-sequential splits it and the three convs around it. Tensor-parallel splits where its
    estimate pays: not in this model of a few hundred MACs a layer, whose transposed conv it
    would run whole before it had a split (the estimate had it following its input's split)."""
    plan = build_and_compare("conv-transpose", strategy)
    notes = plan["placement"]["notes"]
    if strategy == "layer-sequential":
        assert notes["splits"] == 4
    else:
        assert notes["split_ops"] == 0 and notes["dims"] == []


@pytest.mark.parametrize("strategy", SPLITTING)
def test_splitting_strategies_split_grouped_conv_transposes(strategy):
    """A depthwise ConvTranspose and one of 2 groups split at whole groups (before: run whole
    on one cluster, as no split strategy cut a grouped transposed conv)."""
    plan = build_and_compare("grouped-upsampling", strategy)
    if strategy == "layer-sequential":
        assert plan["placement"]["notes"]["splits"] == 4


@pytest.mark.parametrize("strategy", SPLITTING)
def test_splitting_strategies_run_matmuls_with_1d_operands(strategy):
    build_and_compare("vector-matmuls", strategy)


def test_data_parallel_replicates_a_model_with_several_outputs_of_int_and_float():
    plan = build_and_compare("multi-output-ints", "data-parallel", "chiplet/cluster-4")
    assert plan["copies"] > 1 or len(plan["clusters_used"]) > 1


@pytest.mark.parametrize("name, op", [("recurrent", "relax.strided_slice"),
                                      ("vector-matmuls", "relax.matmul")])
def test_data_parallel_refuses_a_model_whose_axis_0_is_no_batch_and_names_the_op(name, op):
    pattern = get_pattern(name)
    with pytest.raises(PlanningError, match=rf"{op} .*pipeline strategy"):
        tvm_chiplet.build(pattern.build(), target="chiplet/cluster-4", strategy="data-parallel",
                          input_shapes=pattern.shapes)


def pad_model(mode):
    from onnx import TensorProto, helper

    pads = helper.make_tensor("pads", TensorProto.INT64, [8], [0, 0, 1, 1, 0, 0, 1, 1])
    graph = helper.make_graph(
        [helper.make_node("Pad", ["x", "pads"], ["y"], mode=mode)], mode,
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3, 8, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3, 10, 10])], [pads])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def test_data_parallel_refusing_a_kernel_names_the_kernel():
    """TVM imports an edge Pad as a call_tir of its own ``replicate_pad`` kernel, which
    data-parallel cannot look into: the error names that kernel, not only ``call_tir``. A
    reflecting Pad comes in as ``R.nn.pad`` and is split."""
    with pytest.raises(PlanningError, match=r"relax.call_tir of replicate_pad .*pipeline"):
        tvm_chiplet.build(pad_model("edge"), target="chiplet/cluster-4", strategy="data-parallel")
    tvm_chiplet.build(pad_model("reflect"), target="chiplet/cluster-4", strategy="data-parallel")


@pytest.mark.parametrize("strategy", ["pipeline", "ilp", "modular", "fault-aware", "auto",
                                      "single", *SPLITTING])
def test_every_strategy_runs_an_attention_block(strategy):
    build_and_compare("attention-block", strategy, "chiplet/cluster-4")


def test_batch_axis_analysis_accepts_a_batched_cnn():
    from tvm_chiplet.passes.analysis.batch_axis import batch_axis_break

    pattern = get_pattern("grouped-convs")
    mod = load_model(pattern.build(), {"x": [2, *pattern.shapes["x"][1:]]})
    assert batch_axis_break(mod["main"]) is None
    assert np.prod(pattern.shapes["x"]) > 0
