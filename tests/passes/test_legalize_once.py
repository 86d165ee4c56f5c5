import numpy as np
import pytest
import tvm
from tvm import relax

from tvm_chiplet.passes.attrs import CALL_TIR
from tvm_chiplet.passes.legalize_once import LegalizeOnce
from tvm_chiplet.tools import models
from tvm_chiplet.tools.frontends import load_model


def legalize(mod, *passes):
    with tvm.target.Target("llvm"):
        return tvm.transform.Sequential([*passes, relax.transform.LegalizeOps()])(mod)


def repeated_adds(parts: int = 6):
    """``parts`` slices of the input, each plus a constant row and plus 1, then concatenated."""
    bb = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType((parts * 2, 8), "float32"))
    rng = np.random.default_rng(0)
    with bb.function("main", [x]):
        with bb.dataflow():
            pieces = []
            for p in range(parts):
                cut = bb.emit(relax.op.strided_slice(x, axes=[0], begin=[2 * p], end=[2 * p + 2]))
                row = relax.const(rng.normal(size=(1, 8)).astype("float32"))
                shifted = bb.emit(relax.op.add(cut, row))
                pieces.append(bb.emit(relax.op.add(shifted, relax.const(1.0, "float32"))))
            out = bb.emit_output(relax.op.concat(pieces, axis=0))
        bb.emit_func_output(out)
    return bb.get()


def calls(mod):
    return [b.value for block in mod["main"].body.blocks for b in block.bindings]


@pytest.mark.parametrize("model", ["small-cnn", "resnet18", "transformer-block"])
def test_result_equals_legalize_ops(model):
    mod = relax.transform.DecomposeOpsForInference()(load_model(models.get_model(model)))
    tvm.ir.assert_structural_equal(legalize(mod, LegalizeOnce()), legalize(mod))


def test_calls_of_one_signature_share_one_legalized_prim_func():
    mod = repeated_adds()
    with tvm.target.Target("llvm"):
        once = LegalizeOnce()(mod)
    values = calls(once)
    assert all(v.op.same_as(CALL_TIR) for v in values)
    # 6 slices (each its own offsets), one tensor add, one add of the scalar 1, one concat.
    assert len({v.args[0].name_hint for v in values}) == 6 + 3
    tvm.ir.assert_structural_equal(once, legalize(mod))
    x = np.arange(96, dtype="float32").reshape(12, 8)
    results = [relax.VirtualMachine(tvm.compile(m, "llvm"), tvm.cpu())["main"](
        tvm.runtime.tensor(x)).numpy() for m in (once, mod)]
    np.testing.assert_array_equal(results[0], results[1])


def test_select_limits_the_calls_legalized_and_the_input_is_not_mutated():
    mod = repeated_adds(2)
    snapshot = mod.script()
    with tvm.target.Target("llvm"):
        once = LegalizeOnce(select=lambda call: call.op.name == "relax.concat")(mod)
    assert mod.script() == snapshot
    kinds = [v.op.name if isinstance(v.op, tvm.ir.Op) else "" for v in calls(once)]
    assert kinds.count("relax.call_tir") == 1
    assert kinds.count("relax.add") == 4


def test_symbolic_shapes_are_left_to_legalize_ops():
    n = tvm.tirx.Var("n", "int64")
    bb = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType((n, 4), "float32"))
    with bb.function("main", [x]):
        with bb.dataflow():
            out = bb.emit_output(relax.op.nn.relu(x))
        bb.emit_func_output(out)
    mod = bb.get()
    with tvm.target.Target("llvm"):
        once = LegalizeOnce()(mod)
    assert calls(once)[0].op.name == "relax.nn.relu"
    tvm.ir.assert_structural_equal(legalize(mod, LegalizeOnce()), legalize(mod))
