import numpy as np
import pytest
import tvm
from tvm import relax
from tvm.script import ir as I
from tvm.script import relax as R

from tvm_chiplet.passes import ReduceGraph, ReplicateDataParallel
from tvm_chiplet.passes.analysis.extract_op_graph import extract_op_graph
from tvm_chiplet.passes.planners import DataParallelPlanner, PlanningError, PlanningProblem
from tvm_chiplet.passes.replicate_data_parallel import replica_batches
from tvm_chiplet.runtime.device import simulate_workload
from tvm_chiplet.targets.system_toml import load_system
from tvm_chiplet.targets.topology import Topology


@I.ir_module
class Before:
    @R.function
    def main(x: R.Tensor((4, 2), "float32")) -> R.Tensor((4, 2), "float32"):
        with R.dataflow():
            y = R.add(x, x)
            R.output(y)
        return y


@I.ir_module
class Flatten:
    @R.function
    def main(x: R.Tensor((5, 2, 3), "float32")) -> R.Tensor((5, 6), "float32"):
        with R.dataflow():
            y = R.nn.relu(x)
            z = R.reshape(y, R.shape([5, 6]))
            R.output(z)
        return z


def test_batch_is_split_graph_replicated_and_results_concatenated():
    @I.ir_module
    class Expected:
        @R.function
        def main(x: R.Tensor((4, 2), "float32")) -> R.Tensor((4, 2), "float32"):
            parts = R.split(x, indices_or_sections=[2], axis=0)
            x0 = parts[0]
            x1 = parts[1]
            with R.dataflow():
                y0 = R.add(x0, x0)
                y1 = R.add(x1, x1)
                R.output(y0, y1)
            y = R.concat((y0, y1), axis=0)
            return y

    After = ReplicateDataParallel(replicas=2)(Before)
    tvm.ir.assert_structural_equal(After, Expected)


def test_uneven_batch_gives_the_first_replicas_one_more_sample():
    assert replica_batches(5, 3) == [2, 2, 1]
    After = ReplicateDataParallel(replicas=3)(Flatten)
    reshapes = [b.value for b in After["main"].body.blocks[1].bindings
                if isinstance(b.value, relax.Call) and b.value.op.name == "relax.reshape"]
    assert [int(r.args[1].values[0]) for r in reshapes] == [2, 2, 1]
    x = np.random.default_rng(0).standard_normal((5, 2, 3)).astype("float32")
    outs = []
    for mod in (Flatten, After):
        vm = relax.VirtualMachine(tvm.compile(mod, "llvm"), tvm.cpu())
        outs.append(vm["main"](tvm.runtime.tensor(x)).numpy())
    np.testing.assert_array_equal(outs[0], outs[1])


def test_default_replicas_is_batch_capped_by_max_replicas():
    After = ReplicateDataParallel(max_replicas=3)(Before)
    split = After["main"].body.blocks[0].bindings[0].value
    assert [int(i) for i in split.attrs.indices_or_sections] == [2, 3]


def test_one_replica_is_a_no_op():
    tvm.ir.assert_structural_equal(ReplicateDataParallel(replicas=1)(Before), Before)


def test_input_module_is_not_mutated():
    snapshot = Flatten.script()
    ReplicateDataParallel(replicas=2)(Flatten)
    assert Flatten.script() == snapshot


def test_batch_too_small_says_what_would_work():
    with pytest.raises(PlanningError, match=r"batch of at least 8 .* has batch 4.*pipeline"):
        ReplicateDataParallel(replicas=8)(Before)


def test_planner_puts_each_replica_on_its_own_cluster():
    reduced = ReduceGraph()(ReplicateDataParallel(replicas=2)(Flatten))
    system = load_system("cluster-4")
    problem = PlanningProblem(extract_op_graph(reduced), system, Topology(system),
                              simulator=simulate_workload)
    placement = DataParallelPlanner().plan(problem)
    names = [op.name for op in problem.graph.ops]
    relu_clusters = {placement.op_cluster[i] for i, n in enumerate(names) if "relu" in n}
    assert len(relu_clusters) == 2
    assert placement.notes == {"replicas": 2}


def test_planner_refuses_a_module_that_was_not_replicated():
    system = load_system("cluster-4")
    problem = PlanningProblem(extract_op_graph(ReduceGraph()(Flatten)), system, Topology(system),
                              simulator=simulate_workload)
    with pytest.raises(PlanningError, match="rebuilt by ReplicateDataParallel"):
        DataParallelPlanner().plan(problem)


@I.ir_module
class SoftmaxOverBatch:
    @R.function
    def main(x: R.Tensor((4, 3), "float32")) -> R.Tensor((4, 3), "float32"):
        with R.dataflow():
            y = R.nn.softmax(x, axis=0)
            R.output(y)
        return y


def test_a_model_that_mixes_samples_is_refused_naming_the_op():
    """Copies of a softmax over axis 0 would each normalise their own slice: a wrong answer of
    the right shape. The pass names the op instead."""
    with pytest.raises(PlanningError, match=r"relax.nn.softmax \(y\) works along axis 0.*"
                                            r"pipeline strategy"):
        ReplicateDataParallel(replicas=2)(SoftmaxOverBatch)
    assert ReplicateDataParallel(replicas=2)(Flatten)["main"] is not None


@I.ir_module
class SqueezeExcite:
    @R.function
    def main(x: R.Tensor((4, 3, 2, 2), "float32")) -> R.Tensor((4, 3, 2, 2), "float32"):
        with R.dataflow():
            s = R.mean(x, axis=[2, 3])
            g = R.expand_dims(R.expand_dims(R.sigmoid(s), axis=[2]), axis=[3])
            y = R.multiply(x, R.broadcast_to(g, R.shape([4, 3, 2, 2])))
            R.output(y)
        return y


@I.ir_module
class NewLeadingAxis:
    @R.function
    def main(x: R.Tensor((4, 3), "float32")) -> R.Tensor((1, 4, 3), "float32"):
        with R.dataflow():
            y = R.expand_dims(x, axis=[0])
            R.output(y)
        return y


def run(mod: tvm.IRModule, x: np.ndarray) -> np.ndarray:
    vm = relax.VirtualMachine(tvm.compile(mod, "llvm"), tvm.cpu())
    return vm["main"](tvm.runtime.tensor(x)).numpy()


def test_per_sample_unsqueezes_and_broadcasts_are_kept_a_new_leading_axis_is_refused():
    # A squeeze-and-excite block: axis 2 of the pooled (4, 3) is a position in the (4, 3, 1)
    # output, not axis 0 of the input (it was read as 2 % 2 == 0 and refused).
    replicated = ReplicateDataParallel(replicas=2)(SqueezeExcite)
    x = np.random.default_rng(0).normal(size=(4, 3, 2, 2)).astype("float32")

    np.testing.assert_allclose(run(replicated, x), run(SqueezeExcite, x), rtol=1e-6)
    with pytest.raises(PlanningError, match=r"relax.expand_dims \(y\) gives axis 0 of size 1"):
        ReplicateDataParallel(replicas=2)(NewLeadingAxis)


def class_token(token: np.ndarray) -> tvm.IRModule:
    """A ViT's first step: a class token (``token``, one row per sample, folded to a constant
    of the batch's size) before each sample's 3 patches."""
    bb = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType((4, 3, 8), "float32"))
    with bb.function("main", [x]):
        with bb.dataflow():
            tokens = bb.emit(relax.op.concat([relax.const(token), x], axis=1))
            y = bb.emit_output(relax.op.nn.softmax(tokens, axis=1))
        bb.emit_func_output(y)
    return bb.get()


def test_a_class_token_expanded_to_the_batch_is_cut_per_replica_unlike_samples_are_refused():
    rng = np.random.default_rng(0)
    row = rng.normal(size=(1, 1, 8)).astype("float32")
    mod = class_token(np.repeat(row, 4, axis=0))
    replicated = ReplicateDataParallel(replicas=3)(mod)  # slices of 2, 1 and 1 samples
    x = rng.normal(size=(4, 3, 8)).astype("float32")

    np.testing.assert_allclose(run(replicated, x), run(mod, x), rtol=1e-6)
    unlike = class_token(rng.normal(size=(4, 1, 8)).astype("float32"))
    with pytest.raises(PlanningError, match=r"relax.concat \(.*\) joins batched and unbatched"):
        ReplicateDataParallel(replicas=2)(unlike)


def broadcast_class_token(token: np.ndarray, batch: int = 4) -> tvm.IRModule:
    """:func:`class_token` as a PyTorch program keeps it: ``token`` broadcast to the batch in
    the graph (``cls.expand(x.shape[0], -1, -1)``), not folded."""
    bb = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType((4, 3, 8), "float32"))
    with bb.function("main", [x]):
        with bb.dataflow():
            expanded = bb.emit(relax.op.broadcast_to(relax.const(token), (batch, 1, 8)))
            tokens = bb.emit(relax.op.concat([expanded, x], axis=1))
            y = bb.emit_output(relax.op.nn.softmax(tokens, axis=1))
        bb.emit_func_output(y)
    return bb.get()


def test_a_class_token_broadcast_to_the_batch_is_broadcast_per_replica():
    rng = np.random.default_rng(1)
    mod = broadcast_class_token(rng.normal(size=(1, 1, 8)).astype("float32"))
    replicated = ReplicateDataParallel(replicas=3)(mod)  # slices of 2, 1 and 1 samples
    x = rng.normal(size=(4, 3, 8)).astype("float32")

    np.testing.assert_allclose(run(replicated, x), run(mod, x), rtol=1e-6)
    # A token with a row per sample broadcast along another axis is not alike per sample.
    unlike = rng.normal(size=(4, 1, 1)).astype("float32")
    bb = relax.BlockBuilder()
    x_var = relax.Var("x", relax.TensorType((4, 3, 8), "float32"))
    with bb.function("main", [x_var]):
        with bb.dataflow():
            expanded = bb.emit(relax.op.broadcast_to(relax.const(unlike), (4, 1, 8)))
            y = bb.emit_output(relax.op.concat([expanded, x_var], axis=1))
        bb.emit_func_output(y)
    with pytest.raises(PlanningError, match=r"relax.concat \(.*\) joins batched and unbatched"):
        ReplicateDataParallel(replicas=2)(bb.get())
