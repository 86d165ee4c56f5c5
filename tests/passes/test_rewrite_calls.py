import tvm
from tvm.script import ir as I
from tvm.script import relax as R

from tvm_chiplet.passes.rewrite_calls import calls_any

EXP, SQRT = tvm.ir.Op.get("relax.exp"), tvm.ir.Op.get("relax.sqrt")


def calls(op):
    return lambda call: call.op.same_as(op)


@I.ir_module
class Branches:
    @R.function
    def main(x: R.Tensor((3,), "float32"), c: R.Tensor((), "bool")) -> R.Tensor((3,), "float32"):
        if c:  # noqa: SIM108 (TVMScript: a branch, not an expression)
            y = R.exp(x)
        else:
            y = R.add(x, x)
        return y


def test_calls_any_finds_a_call_inside_a_branch():
    assert calls_any(Branches["main"], calls(EXP))


def test_calls_any_is_false_when_no_call_is_accepted():
    assert not calls_any(Branches["main"], calls(SQRT))
