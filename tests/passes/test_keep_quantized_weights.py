import numpy as np
import pytest
import tvm
from tvm import relax
from tvm.script import ir as I
from tvm.script import relax as R

from tests.passes.test_reduce_graph import Before as FloatBefore
from tvm_chiplet.passes import KeepQuantizedWeights
from tvm_chiplet.passes.attrs import CALL_TIR

RNG = np.random.default_rng(0)
CONV_WEIGHT = RNG.integers(-127, 128, (4, 3, 3, 3), dtype=np.int8)
CONV_SCALE = RNG.uniform(0.01, 0.02, 4).astype("float32")
CONV_BIAS = RNG.integers(-500, 500, 4, dtype=np.int32)
DENSE_WEIGHT = RNG.integers(-127, 128, (10, 256), dtype=np.int8)


def lowering(fuse: bool = True) -> tvm.transform.Pass:
    """ReduceGraph's steps before dead code elimination, with TVM's own constant folding."""
    passes = [
        relax.transform.DecomposeOpsForInference(),
        relax.transform.LegalizeOps(),
        relax.transform.AnnotateTIROpPattern(),
        relax.transform.FoldConstant(),
    ]
    if fuse:
        passes += [relax.transform.FuseOps(), relax.transform.FuseTIR()]
    return tvm.transform.Sequential(passes)


def run(pass_: tvm.transform.Pass, mod: tvm.IRModule) -> tvm.IRModule:
    with tvm.target.Target("llvm"):
        return pass_(mod)


def dequantized(bb: relax.BlockBuilder, weight: np.ndarray, scale, axis: int = 0) -> relax.Var:
    zero = relax.const(0, str(weight.dtype) if weight.dtype == np.int8 else "int32")
    return bb.emit(relax.op.dequantize(relax.const(weight), relax.const(scale), zero, axis=axis))


def conv_module(convs: int = 1) -> tvm.IRModule:
    """``relu(conv2d(x, dequantize(w)))``, ``convs`` times on the same int8 weight, summed."""
    bb = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType((1, 3, 8, 8), "float32"))
    with bb.function("main", [x]):
        with bb.dataflow():
            weight = dequantized(bb, CONV_WEIGHT, CONV_SCALE)
            outs = [bb.emit(relax.op.nn.relu(relax.op.nn.conv2d(x, weight, padding=1)))
                    for _ in range(convs)]
            out = outs[0] if convs == 1 else bb.emit(relax.op.add(*outs))
            out = bb.emit_output(out)
        bb.emit_func_output(out)
    return bb.get()


def classifier_module() -> tvm.IRModule:
    """A QDQ-style classifier: conv with an int32 bias, relu, then a Gemm on a transposed weight."""
    bb = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType((2, 3, 8, 8), "float32"))
    with bb.function("main", [x]):
        with bb.dataflow():
            weight = dequantized(bb, CONV_WEIGHT, CONV_SCALE)
            bias = dequantized(bb, CONV_BIAS, CONV_SCALE * np.float32(0.05))
            conv = bb.emit(relax.op.nn.conv2d(x, weight, padding=1))
            shifted = relax.op.add(conv, relax.op.reshape(bias, (1, 4, 1, 1)))
            act = bb.emit(relax.op.nn.relu(shifted))
            flat = bb.emit(relax.op.reshape(act, (2, 256)))
            dense = dequantized(bb, DENSE_WEIGHT, np.float32(0.01), axis=1)
            out = bb.emit_output(relax.op.matmul(flat, relax.op.permute_dims(dense)))
        bb.emit_func_output(out)
    return bb.get()


def call_tirs(mod: tvm.IRModule) -> list[relax.Call]:
    return [b.value for block in mod["main"].body.blocks for b in block.bindings
            if isinstance(b.value, relax.Call) and b.value.op.same_as(CALL_TIR)]


def tensor_constants(call: relax.Call) -> list[np.ndarray]:
    return [arg.value.numpy() for arg in call.args[1].fields
            if isinstance(arg, tvm.ir.GenericConst) and arg.ty.ndim > 0]


def outputs(mod: tvm.IRModule, x: np.ndarray) -> np.ndarray:
    vm = relax.VirtualMachine(tvm.compile(mod, "llvm"), tvm.cpu())
    return vm["main"](tvm.runtime.tensor(x)).numpy()


def test_int8_weight_feeds_the_fused_conv_kernel():
    calls = call_tirs(run(KeepQuantizedWeights(lowering()), conv_module()))
    assert len(calls) == 1
    assert calls[0].args[0].name_hint == "fused_dequantize_conv2d_relu"
    (weight,) = [c for c in tensor_constants(calls[0]) if c.shape == CONV_WEIGHT.shape]
    assert weight.dtype == np.int8
    np.testing.assert_array_equal(weight, CONV_WEIGHT)


def test_without_the_pass_the_kernel_reads_the_weight_as_float32():
    calls = call_tirs(run(lowering(), conv_module()))
    assert [c.dtype for c in tensor_constants(calls[0])] == [np.float32]


def test_every_weight_of_a_classifier_stays_integer():
    calls = call_tirs(run(KeepQuantizedWeights(lowering()), classifier_module()))
    constants = [c for call in calls for c in tensor_constants(call)]
    integers = sorted((str(c.dtype), c.shape) for c in constants if c.dtype != np.float32)
    assert integers == [("int32", (4,)), ("int8", (4, 3, 3, 3)), ("int8", (10, 256))]
    assert all(c.shape == (4,) for c in constants if c.dtype == np.float32)  # the scales


def test_numerics_equal_the_module_lowered_without_the_pass():
    mod = classifier_module()
    x = np.random.default_rng(1).standard_normal((2, 3, 8, 8)).astype("float32")
    kept = outputs(run(KeepQuantizedWeights(lowering()), mod), x)
    np.testing.assert_allclose(kept, outputs(run(lowering(), mod), x), rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(kept, outputs(mod, x), rtol=1e-5, atol=1e-5)


def test_weight_read_by_two_kernels_keeps_its_own_decoding_kernel():
    mod = conv_module(convs=2)
    after = run(KeepQuantizedWeights(lowering()), mod)
    decoders = [c for c in call_tirs(after) if c.args[0].name_hint.startswith("dequantize")]
    assert len(decoders) == 1
    assert [c.dtype for c in tensor_constants(decoders[0])] == [np.int8, np.float32]
    x = np.random.default_rng(2).standard_normal((1, 3, 8, 8)).astype("float32")
    np.testing.assert_allclose(outputs(after, x), outputs(mod, x), rtol=1e-5, atol=1e-5)


def test_without_fuse_decode_the_dequantize_kernel_reads_the_int8_weight():
    calls = call_tirs(run(KeepQuantizedWeights(lowering(fuse=False), fuse_decode=False),
                          conv_module()))
    assert [c.args[0].name_hint for c in calls] == ["dequantize", "conv2d", "relu"]
    assert tensor_constants(calls[0])[0].dtype == np.int8
    assert tensor_constants(calls[1]) == []


def test_module_without_dequantize_is_lowered_as_the_lowering_alone_lowers_it():
    tvm.ir.assert_structural_equal(run(KeepQuantizedWeights(lowering()), FloatBefore),
                                   run(lowering(), FloatBefore))


def test_with_a_lowering_that_changes_nothing_the_module_comes_back_as_it_was():
    @I.ir_module
    class Before:
        @R.function
        def main(x: R.Tensor((2, 4), "float32")):
            with R.dataflow():
                w = R.dequantize(R.const(np.arange(12, dtype="int8").reshape(4, 3)),
                                 R.const(0.5, "float32"), R.const(1, "int8"))
                y = R.matmul(x, w)
                R.output(y)
            return y

    after = run(KeepQuantizedWeights(tvm.transform.Sequential([])), Before)
    tvm.ir.assert_structural_equal(after, Before)


def test_input_module_is_not_mutated():
    mod = classifier_module()
    snapshot = mod.script()
    run(KeepQuantizedWeights(lowering()), mod)
    assert mod.script() == snapshot
    tvm.ir.assert_structural_equal(mod, classifier_module())


@tvm.transform.module_pass(opt_level=0, name="RenewParameters")
def _renew_parameters(mod, _ctx):
    out = tvm.IRModule(dict(mod.functions_items()), attrs=mod.attrs)
    out["main"] = relax.utils.copy_with_new_vars(mod["main"])
    return out


def test_lowering_that_replaces_mains_parameters_is_refused():
    with pytest.raises(ValueError, match=r"removed or replaced the parameters weight0 .*keeps"):
        run(KeepQuantizedWeights(_renew_parameters), conv_module())


def test_lowering_that_is_not_a_pass_is_refused():
    with pytest.raises(TypeError, match=r"needs a tvm\.transform\.Pass .*got list.*Sequential"):
        KeepQuantizedWeights([relax.transform.LegalizeOps()])
