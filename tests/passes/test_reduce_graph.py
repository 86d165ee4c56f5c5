import numpy as np
import pytest
import tvm
from tvm import relax
from tvm.script import ir as I
from tvm.script import relax as R

from tvm_chiplet.passes import ReduceGraph
from tvm_chiplet.passes.attrs import CALL_TIR


@I.ir_module
class Before:
    @R.function
    def main(x: R.Tensor((1, 8), "float32"), w: R.Tensor((8, 4), "float32")):
        with R.dataflow():
            y = R.matmul(x, w)
            z = R.nn.relu(y)
            s = R.add(z, R.const(1.0, "float32"))
            R.output(s)
        return s


@I.ir_module
class QuantizedBefore:
    @R.function
    def main(x: R.Tensor((1, 8), "float32")):
        with R.dataflow():
            w = R.dequantize(R.const(np.arange(-16, 16, dtype="int8").reshape(8, 4)),
                             R.const(0.1, "float32"), R.const(0, "int8"))
            y = R.matmul(x, w)
            z = R.nn.relu(y)
            R.output(z)
        return z


def tvm_fused(mod):
    with tvm.target.Target("llvm"):
        return tvm.transform.Sequential([
            relax.transform.DecomposeOpsForInference(),
            relax.transform.LegalizeOps(),
            relax.transform.AnnotateTIROpPattern(),
            relax.transform.FoldConstant(),
            relax.transform.FuseOps(),
            relax.transform.FuseTIR(),
            relax.transform.DeadCodeElimination(["main"]),
        ])(mod)


def test_result_equals_tvms_own_legalize_and_fuse():
    tvm.ir.assert_structural_equal(ReduceGraph()(Before), tvm_fused(Before))


def test_main_becomes_one_fused_call_tir():
    bindings = ReduceGraph()(Before)["main"].body.blocks[0].bindings
    assert len(bindings) == 1
    assert bindings[0].value.op.same_as(CALL_TIR)
    assert "matmul" in bindings[0].value.args[0].name_hint


def test_quantized_weight_reaches_the_fused_kernel_as_int8():
    (binding,) = ReduceGraph()(QuantizedBefore)["main"].body.blocks[0].bindings
    assert binding.value.args[0].name_hint == "fused_dequantize_matmul_relu"
    weight = binding.value.args[1].fields[1]
    assert isinstance(weight, tvm.ir.GenericConst) and str(weight.ty.dtype) == "int8"


def test_without_fusion_the_dequantize_kernel_reads_the_int8_weight():
    bindings = ReduceGraph(fuse=False)(QuantizedBefore)["main"].body.blocks[0].bindings
    names = [b.value.args[0].name_hint for b in bindings]
    assert names == ["dequantize", "matmul", "relu"]
    assert str(bindings[0].value.args[1].fields[0].ty.dtype) == "int8"


def test_without_fusion_each_op_keeps_its_call_tir():
    bindings = ReduceGraph(fuse=False)(Before)["main"].body.blocks[0].bindings
    assert len(bindings) == 3


def test_reducing_twice_leaves_main_as_it_was():
    once = ReduceGraph()(Before)
    tvm.ir.assert_structural_equal(ReduceGraph()(once)["main"], once["main"])


def test_numerics_are_unchanged():
    x = np.random.default_rng(0).standard_normal((1, 8)).astype("float32")
    w = np.random.default_rng(1).standard_normal((8, 4)).astype("float32")
    outs = []
    for mod in (Before, ReduceGraph()(Before)):
        vm = relax.VirtualMachine(tvm.compile(mod, "llvm"), tvm.cpu())
        outs.append(vm["main"](tvm.runtime.tensor(x), tvm.runtime.tensor(w)).numpy())
    np.testing.assert_allclose(outs[0], outs[1], rtol=1e-6)
    np.testing.assert_allclose(outs[0], np.maximum(x @ w, 0) + 1, rtol=1e-5)


def test_input_module_is_not_mutated():
    snapshot = Before.script()
    ReduceGraph()(Before)
    assert Before.script() == snapshot


def test_unknown_target_is_refused():
    with pytest.raises(ValueError):
        ReduceGraph(target="no-such-target")


@I.ir_module
class SqueezeExcite:
    """A squeeze-and-excitation gate after a conv: the gate's multiply grows a 1x1 conv's result
    to the whole activation; the conv before it keeps its bias and activation fused."""

    @R.function
    def main(x: R.Tensor((1, 8, 6, 6), "float32")):
        with R.dataflow():
            a = R.nn.relu(R.add(R.nn.conv2d(x, R.const(np.full((8, 8, 1, 1), 0.1, "float32"))),
                                R.const(np.full((1, 8, 1, 1), 0.2, "float32"))))
            pooled = R.mean(a, axis=[2, 3], keepdims=True)
            gate = R.sigmoid(R.nn.conv2d(pooled, R.const(np.full((8, 8, 1, 1), 0.3, "float32"))))
            y = R.multiply(a, gate)
            R.output(y)
        return y


def fused_calls(mod):
    return [b.value.args[0].name_hint for b in mod["main"].body.blocks[0].bindings
            if isinstance(b.value, relax.Call) and b.value.op.same_as(CALL_TIR)]


def test_a_gate_multiply_is_not_fused_into_the_conv_it_grows_and_other_epilogues_are():
    calls = fused_calls(ReduceGraph()(SqueezeExcite))
    # TVM alone fuses the multiply into the gate's conv (a kernel reading and writing the
    # whole activation); here it is its own kernel. The first conv keeps its add and relu.
    assert any("conv2d1" in c and "multiply" in c for c in fused_calls(tvm_fused(SqueezeExcite)))
    assert calls[-1] == "multiply"
    assert not any("conv2d" in c and "multiply" in c for c in calls)
    assert any("conv2d" in c and "add" in c and "relu" in c for c in calls)
    x = np.random.default_rng(0).normal(size=(1, 8, 6, 6)).astype("float32")

    def run(mod):
        vm = relax.VirtualMachine(tvm.compile(mod, "llvm"), tvm.cpu())
        return vm["main"](tvm.runtime.tensor(x)).numpy()

    np.testing.assert_allclose(run(ReduceGraph()(SqueezeExcite)), run(SqueezeExcite),
                               rtol=1e-5, atol=1e-6)
