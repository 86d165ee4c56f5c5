import numpy as np
import pytest
import tvm
from tvm import relax
from tvm.script import ir as I
from tvm.script import relax as R

from tests.passes.test_distribute_tensors import module
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
            z = R.nn.softmax(y, axis=1)
            R.output(z)
        return z


def test_a_model_that_mixes_samples_is_refused_naming_the_op():
    """Copies of a softmax over axis 0 would each normalise their own slice: a wrong answer of
    the right shape. The pass names the op instead (axis 1, tried next as a sequence-first
    model's batch, is mixed by the second softmax)."""
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


def test_per_sample_unsqueezes_and_broadcasts_are_kept_a_new_leading_axis_moves_the_batch():
    # A squeeze-and-excite block: axis 2 of the pooled (4, 3) is a position in the (4, 3, 1)
    # output, not axis 0 of the input (it was read as 2 % 2 == 0 and refused).
    replicated = ReplicateDataParallel(replicas=2)(SqueezeExcite)
    x = np.random.default_rng(0).normal(size=(4, 3, 2, 2)).astype("float32")

    np.testing.assert_allclose(run(replicated, x), run(SqueezeExcite, x), rtol=1e-6)
    # A new leading axis puts the batch on axis 1 of the output: the replicas' outputs are
    # joined along it.
    replicated = ReplicateDataParallel(replicas=2)(NewLeadingAxis)
    x = np.random.default_rng(0).normal(size=(4, 3)).astype("float32")
    np.testing.assert_allclose(run(replicated, x), run(NewLeadingAxis, x), rtol=1e-6)


def attention_sequence_first(bb: relax.BlockBuilder, tokens: relax.Expr) -> relax.Expr:
    """Attention of ``tokens`` ([6 tokens, 4 samples, 8]) as ``nn.MultiheadAttention`` runs it
    sequence first: heads folded into the batch (``[T, B * heads, d]``), permuted to
    ``[B * heads, T, d]`` for the scores, and back to ``[T, B, 8]``."""
    weight = np.random.default_rng(1).normal(size=(8, 8)).astype("float32")
    y = bb.emit(relax.op.matmul(tokens, relax.const(weight)))
    heads = bb.emit(relax.op.permute_dims(relax.op.reshape(y, (6, 8, 4)), [1, 0, 2]))
    keys = bb.emit(relax.op.permute_dims(heads, [0, 2, 1]))
    scores = bb.emit(relax.op.nn.softmax(relax.op.matmul(heads, keys), axis=-1))
    context = bb.emit(relax.op.permute_dims(relax.op.matmul(scores, heads), [1, 0, 2]))
    return bb.emit(relax.op.reshape(context, (6, 4, 8)))


def sequence_first_attention() -> tvm.IRModule:
    """A batch-first model (4 samples of 6 tokens of 8) whose attention runs sequence first
    inside (:func:`attention_sequence_first`): tokens permuted to the front, and back."""
    bb = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType((4, 6, 8), "float32"))
    with bb.function("main", [x]):
        with bb.dataflow():
            joined = attention_sequence_first(bb, bb.emit(relax.op.permute_dims(x, [1, 0, 2])))
            out = bb.emit_output(relax.op.permute_dims(joined, [1, 0, 2]))
        bb.emit_func_output(out)
    return bb.get()


def windows() -> tvm.IRModule:
    """A Swin block's window partition: [2, 4, 4, 3] images cut into 2x2 windows folded into
    the batch ([8, 4, 3]: each sample's 4 windows together), attention-like softmax inside
    each window, and the windows put back."""
    bb = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType((2, 4, 4, 3), "float32"))
    with bb.function("main", [x]):
        with bb.dataflow():
            cut = bb.emit(relax.op.reshape(x, (2, 2, 2, 2, 2, 3)))
            folded = bb.emit(relax.op.reshape(relax.op.permute_dims(cut, [0, 1, 3, 2, 4, 5]),
                                              (8, 4, 3)))
            mixed = bb.emit(relax.op.matmul(relax.op.nn.softmax(relax.op.matmul(
                folded, relax.op.permute_dims(folded, [0, 2, 1])), axis=-1), folded))
            back = bb.emit(relax.op.permute_dims(relax.op.reshape(mixed, (2, 2, 2, 2, 2, 3)),
                                                 [0, 1, 3, 2, 4, 5]))
            out = bb.emit_output(relax.op.reshape(back, (2, 4, 4, 3)))
        bb.emit_func_output(out)
    return bb.get()


@pytest.mark.parametrize("model, shape, replicas", [
    (sequence_first_attention, (4, 6, 8), 2), (sequence_first_attention, (4, 6, 8), 3),
    (windows, (2, 4, 4, 3), 2),
])
def test_a_batch_moved_to_another_axis_or_folded_with_windows_is_followed(model, shape,
                                                                         replicas):
    """The batch is followed wherever the ops put it: permuted off axis 0, folded with the
    heads or windows after it (the leading factor of an axis), and back; each replica's
    reshapes take its own share of samples."""
    mod = model()
    x = np.random.default_rng(0).normal(size=shape).astype("float32")
    np.testing.assert_allclose(run(ReplicateDataParallel(replicas=replicas)(mod), x),
                               run(mod, x), rtol=1e-5, atol=1e-6)


@I.ir_module
class InterleavedBatch:
    @R.function
    def main(x: R.Tensor((4, 3, 2), "float32")) -> R.Tensor((4, 3, 2), "float32"):
        with R.dataflow():
            t = R.permute_dims(x, [1, 0, 2])
            f = R.reshape(t, R.shape([12, 2]))
            s = R.nn.softmax(f, axis=0)
            y = R.permute_dims(R.reshape(s, R.shape([3, 4, 2])), [1, 0, 2])
            R.output(y)
        return y


def test_samples_interleaved_along_an_axis_are_followed_a_softmax_across_them_refused():
    """[3, 4, 2] (the batch on axis 1) flattened to [12, 2]: the samples interleave along the
    rows (``nn.MultiheadAttention``'s output projection reads [tokens * batch, E]). A row-wise
    matmul keeps them apart, and each replica reshapes its own [3 * k, 2]; a softmax across the
    rows mixes them and is refused by name."""
    rng = np.random.default_rng(0)
    bb = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType((4, 3, 2), "float32"))
    with bb.function("main", [x]):
        with bb.dataflow():
            rows = bb.emit(relax.op.reshape(relax.op.permute_dims(x, [1, 0, 2]), (12, 2)))
            y = bb.emit(relax.op.nn.relu(relax.op.matmul(rows, relax.const(
                rng.normal(size=(2, 2)).astype("float32")))))
            out = bb.emit_output(relax.op.permute_dims(relax.op.reshape(y, (3, 4, 2)),
                                                       [1, 0, 2]))
        bb.emit_func_output(out)
    mod = bb.get()
    data = rng.normal(size=(4, 3, 2)).astype("float32")
    for replicas in (2, 3):
        np.testing.assert_allclose(run(ReplicateDataParallel(replicas=replicas)(mod), data),
                                   run(mod, data), rtol=1e-6)
    with pytest.raises(PlanningError, match=r"relax.nn.softmax \(s\) works along axis 0"):
        ReplicateDataParallel(replicas=2)(InterleavedBatch)


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


@I.ir_module
class ShapeOfBatch:
    @R.function
    def main(x: R.Tensor((4, 3), "float32")) -> R.Tensor((4, 3), "float32"):
        with R.dataflow():
            s = R.shape_of(x)
            t = R.shape_to_tensor(s)
            y = R.add(x, R.astype(R.take(t, R.const(0, "int64"), axis=0), "float32"))
            R.output(y)
        return y


def test_reading_the_shape_of_a_batched_value_is_refused_naming_the_op():
    """The batch size read as a value (here added to every element) is not each copy's: the
    pass names the op rather than compute with the whole batch's size in every copy."""
    with pytest.raises(PlanningError, match=r"relax.shape_of \(s\) reads the shape of a batched"):
        ReplicateDataParallel(replicas=2)(ShapeOfBatch)


def sequence_first_encoder() -> tvm.IRModule:
    """:func:`attention_sequence_first` of an input given sequence first, as ``nn.Transformer``
    takes it by default: [6 tokens, 4 samples, 8]; axis 0 is no batch (attention mixes the
    tokens), axis 1 is."""
    return module(attention_sequence_first, (6, 4, 8))


def test_a_sequence_first_model_is_split_along_its_batch_on_axis_1():
    mod = sequence_first_encoder()
    replicated = ReplicateDataParallel(replicas=3)(mod)  # 2, 1 and 1 samples
    x = np.random.default_rng(0).normal(size=(6, 4, 8)).astype("float32")
    np.testing.assert_allclose(run(replicated, x), run(mod, x), rtol=1e-5, atol=1e-6)
    splits = [b.value for block in replicated["main"].body.blocks for b in block.bindings
              if isinstance(b.value, relax.Call) and b.value.op.name == "relax.split"]
    assert [int(s.attrs.axis) for s in splits] == [1]
