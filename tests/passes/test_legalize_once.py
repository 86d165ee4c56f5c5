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


@pytest.mark.parametrize(("first", "second"), [
    # Types that tvm_ffi.structural_hash maps to one value in TVM 0.27.
    ((1, 3, 2, 56), (1, 3, 1, 1)),
    ((1, 3, 4, 46), (1, 3, 1, 25)),
])
def test_calls_whose_types_hash_alike_keep_their_own_prim_funcs(first, second):
    bb = relax.BlockBuilder()
    a = relax.Var("a", relax.TensorType(first, "float32"))
    b = relax.Var("b", relax.TensorType(second, "float32"))
    with bb.function("main", [a, b]):
        with bb.dataflow():
            out = bb.emit_output(relax.Tuple([bb.emit(relax.op.add(v, v)) for v in (a, b)]))
        bb.emit_func_output(out)
    mod = bb.get()
    with tvm.target.Target("llvm"):
        once = LegalizeOnce()(mod)
    tvm.ir.assert_structural_equal(once, legalize(mod))
    inputs = [np.random.default_rng(0).normal(size=shape).astype("float32")
              for shape in (first, second)]
    results = [relax.VirtualMachine(tvm.compile(m, "llvm"), tvm.cpu())["main"](
        *(tvm.runtime.tensor(x) for x in inputs)) for m in (once, mod)]
    for got, want in zip(results[0], results[1], strict=True):
        np.testing.assert_array_equal(got.numpy(), want.numpy())


def test_every_relax_function_is_legalized_and_the_modules_infos_kept():
    bb = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType((2, 8), "float32"))
    with bb.function("helper", [x]):
        with bb.dataflow():
            out = bb.emit_output(relax.op.add(x, x))
        bb.emit_func_output(out)
    helper = bb.get().get_global_var("helper")
    y = relax.Var("y", relax.TensorType((2, 8), "float32"))
    with bb.function("main", [y]):
        with bb.dataflow():
            out = bb.emit_output(relax.op.multiply(relax.Call(helper, [y]), y))
        bb.emit_func_output(out)
    mesh = relax.distributed.DeviceMesh((2,), [0, 1])
    mod = bb.get().with_attr("note", "kept")
    mod.update_global_info("mesh", [mesh])
    with tvm.target.Target("llvm"):
        once = LegalizeOnce()(mod)
    tvm.ir.assert_structural_equal(once, legalize(mod))
    ops = [b.value.op for name in ("helper", "main") for block in once[name].body.blocks
           for b in block.bindings]
    assert len(ops) == 3 and sum(op.same_as(CALL_TIR) for op in ops) == 2  # and helper's call
    assert str(once.attrs["note"]) == "kept"
    assert len(once.global_infos["mesh"]) == 1


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
