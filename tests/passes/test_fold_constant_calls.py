import numpy as np
import tvm
from tvm import relax
from tvm.script import ir as I
from tvm.script import relax as R
from tvm.script import tirx as T

from tests.passes.test_reduce_graph import tvm_fused
from tvm_chiplet.passes import FoldConstantCalls, ReduceGraph
from tvm_chiplet.tools import models
from tvm_chiplet.tools.frontends import load_model

VALUES = np.array([1.0, 4.0, 9.0], "float32")


def legalized(mod):
    with tvm.target.Target("llvm"):
        return relax.transform.LegalizeOps()(relax.transform.DecomposeOpsForInference()(mod))


def chain_module():
    """``sqrt(c + 1)`` on a constant, then added to the input."""
    bb = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType((3,), "float32"))
    with bb.function("main", [x]):
        with bb.dataflow():
            shifted = bb.emit(relax.op.add(relax.const(VALUES), relax.const(1.0, "float32")))
            root = bb.emit(relax.op.sqrt(shifted))
            out = bb.emit_output(relax.op.add(x, root))
        bb.emit_func_output(out)
    return legalized(bb.get())


def main_values(mod):
    return [b.value for b in mod["main"].body.blocks[0].bindings]


def test_a_chain_of_constant_calls_folds_to_its_value():
    after = FoldConstantCalls()(chain_module())
    values = main_values(after)
    assert isinstance(values[1], tvm.ir.GenericConst)
    np.testing.assert_allclose(values[1].value.numpy(), np.sqrt(VALUES + 1), rtol=1e-6)
    # The call on the input stays, now reading the folded constant.
    assert values[2].args[1].fields[1].same_as(values[1])


def test_result_equals_tvms_fold_constant_after_dead_code_elimination():
    before = chain_module()
    dce = relax.transform.DeadCodeElimination(["main"])
    with tvm.target.Target("llvm"):
        ours = dce(relax.transform.FoldConstant()(FoldConstantCalls()(before)))
        tvms = dce(relax.transform.FoldConstant()(before))
    tvm.ir.assert_structural_equal(ours, tvms)


def test_calls_on_inputs_are_left_alone():
    @I.ir_module
    class Before:
        @T.prim_func(private=True)
        def double(a: T.Buffer((3,), "float32"), b: T.Buffer((3,), "float32")):
            for i in range(3):
                b[i] = a[i] * T.float32(2)

        @R.function
        def main(x: R.Tensor((3,), "float32")):
            cls = Before
            with R.dataflow():
                y = R.call_tir(cls.double, (x,), out_ty=R.Tensor((3,), "float32"))
                R.output(y)
            return y

    tvm.ir.assert_structural_equal(FoldConstantCalls()(Before), Before)


def test_input_module_is_not_mutated():
    before = chain_module()
    snapshot = before.script()
    FoldConstantCalls()(before)
    assert before.script() == snapshot


def test_reduce_graph_of_a_cnn_with_batch_norm_equals_tvms_pipeline():
    mod = load_model(models.get_model("small-cnn"))
    tvm.ir.assert_structural_equal(ReduceGraph()(mod), tvm_fused(mod))


def test_a_constant_call_inside_a_branch_is_folded():
    @I.ir_module
    class Branching:
        @R.function
        def main(x: R.Tensor((3,), "float32"), c: R.Tensor((), "bool")):
            if c:
                d = R.add(R.const(VALUES), R.const(1.0, "float32"))
                y = R.add(x, d)
            else:
                y = x
            return y

    after = FoldConstantCalls()(legalized(Branching))
    branch = after["main"].body.blocks[0].bindings[0].value.true_branch
    folded = branch.blocks[0].bindings[0].value
    assert isinstance(folded, tvm.ir.GenericConst)
    np.testing.assert_array_equal(folded.value.numpy(), VALUES + 1)
