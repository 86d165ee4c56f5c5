import pytest
import tvm
from tvm.script import ir as I
from tvm.script import relax as R
from tvm.script import tirx as T

from tests.passes.ir_helpers import strip_call_attrs
from tvm_chiplet.passes import AnnotatePlacement, PartitionByCluster
from tvm_chiplet.passes.analysis.extract_op_graph import AnalysisError
from tvm_chiplet.passes.planners import Placement


@I.ir_module
class Before:
    @T.prim_func(private=True, s_tir=True)
    def add_one(x: T.Buffer((4,), "float32"), y: T.Buffer((4,), "float32")):
        for i in range(4):
            with T.sblock("add"):
                vi = T.axis.remap("S", [i])
                y[vi] = x[vi] + T.float32(1)

    @R.function
    def main(x: R.Tensor((4,), "float32")) -> R.Tensor((4,), "float32"):
        cls = Before
        with R.dataflow():
            a = R.call_tir(cls.add_one, (x,), out_ty=R.Tensor((4,), "float32"))
            b = R.call_tir(cls.add_one, (a,), out_ty=R.Tensor((4,), "float32"))
            c = R.call_tir(cls.add_one, (b,), out_ty=R.Tensor((4,), "float32"))
            R.output(c)
        return c


def place(clusters):
    return Placement("manual", tuple(clusters), tuple(range(len(clusters))), tuple(clusters))


def test_consecutive_same_cluster_ops_become_one_segment():
    @I.ir_module
    class Expected:
        @T.prim_func(private=True, s_tir=True)
        def add_one(x: T.Buffer((4,), "float32"), y: T.Buffer((4,), "float32")):
            for i in range(4):
                with T.sblock("add"):
                    vi = T.axis.remap("S", [i])
                    y[vi] = x[vi] + T.float32(1)

        @R.function
        def seg0(x: R.Tensor((4,), "float32")) -> R.Tuple(R.Tensor((4,), "float32")):
            R.func_attr({"chiplet.cluster": 2, "chiplet.segment": 0})
            cls = Expected
            with R.dataflow():
                a = R.call_tir(cls.add_one, (x,), out_ty=R.Tensor((4,), "float32"))
                b = R.call_tir(cls.add_one, (a,), out_ty=R.Tensor((4,), "float32"))
                R.output(b)
            return (b,)

        @R.function
        def seg1(b: R.Tensor((4,), "float32")) -> R.Tuple(R.Tensor((4,), "float32")):
            R.func_attr({"chiplet.cluster": 5, "chiplet.segment": 1})
            cls = Expected
            with R.dataflow():
                c = R.call_tir(cls.add_one, (b,), out_ty=R.Tensor((4,), "float32"))
                R.output(c)
            return (c,)

        @R.function
        def main(x: R.Tensor((4,), "float32")) -> R.Tensor((4,), "float32"):
            cls = Expected
            with R.dataflow():
                seg0_out = cls.seg0(x)
                b = seg0_out[0]
                seg1_out = cls.seg1(b)
                c = seg1_out[0]
                R.output(c)
            return c

    After = PartitionByCluster()(AnnotatePlacement(place([2, 2, 5]))(Before))
    tvm.ir.assert_structural_equal(strip_call_attrs(After), Expected)


def test_value_read_by_a_later_segment_is_returned_and_passed_on():
    @I.ir_module
    class Skip:
        @T.prim_func(private=True, s_tir=True)
        def add(x: T.Buffer((4,), "float32"), y: T.Buffer((4,), "float32"),
                z: T.Buffer((4,), "float32")):
            for i in range(4):
                with T.sblock("add"):
                    vi = T.axis.remap("S", [i])
                    z[vi] = x[vi] + y[vi]

        @R.function
        def main(x: R.Tensor((4,), "float32")) -> R.Tensor((4,), "float32"):
            cls = Skip
            with R.dataflow():
                a = R.call_tir(cls.add, (x, x), out_ty=R.Tensor((4,), "float32"))
                b = R.call_tir(cls.add, (a, a), out_ty=R.Tensor((4,), "float32"))
                c = R.call_tir(cls.add, (b, a), out_ty=R.Tensor((4,), "float32"))
                R.output(c)
            return c

    After = PartitionByCluster()(AnnotatePlacement(place([0, 1, 2]))(Skip))
    assert [p.name for p in After["seg1"].params] == ["a"]
    assert [p.name for p in After["seg2"].params] == ["a", "b"]
    assert len(After["seg0"].ret_ty.fields) == 1


def test_partitioned_module_computes_what_main_computed():
    import numpy as np

    After = PartitionByCluster()(AnnotatePlacement(place([0, 1, 0]))(Before))
    vm = tvm.relax.VirtualMachine(tvm.compile(After, "llvm"), tvm.cpu())
    x = np.arange(4, dtype="float32")
    np.testing.assert_array_equal(vm["main"](tvm.runtime.tensor(x)).numpy(), x + 3)
    first = vm["seg0"](tvm.runtime.tensor(x))
    np.testing.assert_array_equal(first[0].numpy(), x + 1)


def test_module_without_placement_is_unchanged():
    After = PartitionByCluster()(Before)
    tvm.ir.assert_structural_equal(After, Before)


def test_input_module_is_not_mutated():
    annotated = AnnotatePlacement(place([0, 1, 1]))(Before)
    snapshot = annotated.script()
    PartitionByCluster()(annotated)
    assert annotated.script() == snapshot
    assert len(annotated.get_global_vars()) == 2


def test_segment_name_clash_is_refused():
    annotated = AnnotatePlacement(place([0, 1, 1]))(Before)
    annotated["seg1"] = annotated["add_one"]
    with pytest.raises(AnalysisError, match=r"already has function\(s\) \['seg1'\].*prefix"):
        PartitionByCluster()(annotated)


def test_returned_constants_are_produced_by_the_last_segment():
    @I.ir_module
    class WithConstant:
        @T.prim_func(private=True, s_tir=True)
        def add_one(x: T.Buffer((4,), "float32"), y: T.Buffer((4,), "float32")):
            for i in range(4):
                with T.sblock("add"):
                    vi = T.axis.remap("S", [i])
                    y[vi] = x[vi] + T.float32(1)

        @R.function
        def main(x: R.Tensor((4,), "float32")) -> R.Tuple(R.Tensor((4,), "float32"),
                                                          R.Tensor((), "int64")):
            cls = WithConstant
            with R.dataflow():
                a = R.call_tir(cls.add_one, (x,), out_ty=R.Tensor((4,), "float32"))
                R.output(a)
            return (a, R.const(4, "int64"))

    @I.ir_module
    class Expected:
        @T.prim_func(private=True, s_tir=True)
        def add_one(x: T.Buffer((4,), "float32"), y: T.Buffer((4,), "float32")):
            for i in range(4):
                with T.sblock("add"):
                    vi = T.axis.remap("S", [i])
                    y[vi] = x[vi] + T.float32(1)

        @R.function
        def seg0(x: R.Tensor((4,), "float32")) -> R.Tuple(R.Tensor((4,), "float32"),
                                                          R.Tensor((), "int64")):
            R.func_attr({"chiplet.cluster": 3, "chiplet.segment": 0})
            cls = Expected
            with R.dataflow():
                a = R.call_tir(cls.add_one, (x,), out_ty=R.Tensor((4,), "float32"))
                out0 = R.const(4, "int64")
                R.output(a, out0)
            return (a, out0)

        @R.function
        def main(x: R.Tensor((4,), "float32")) -> R.Tuple(R.Tensor((4,), "float32"),
                                                          R.Tensor((), "int64")):
            cls = Expected
            with R.dataflow():
                seg0_out = cls.seg0(x)
                a = seg0_out[0]
                out0 = seg0_out[1]
                R.output(a, out0)
            return (a, out0)

    After = PartitionByCluster()(AnnotatePlacement(place([3]))(WithConstant))
    tvm.ir.assert_structural_equal(strip_call_attrs(After), Expected)


@I.ir_module
class NoCompute:
    @R.function
    def main(x: R.Tensor((4,), "float32")) -> R.Tuple(R.Tensor((4,), "float32"), R.Shape([4])):
        return (x, R.shape([4]))


def test_planned_module_without_compute_becomes_one_segment_on_cluster_0():
    @I.ir_module
    class Expected:
        @R.function
        def seg0() -> R.Tuple(R.Shape([4])):
            R.func_attr({"chiplet.cluster": 0, "chiplet.segment": 0})
            with R.dataflow():
                out0 = R.shape([4])
                R.output(out0)
            return (out0,)

        @R.function
        def main(x: R.Tensor((4,), "float32")) -> R.Tuple(R.Tensor((4,), "float32"),
                                                          R.Shape([4])):
            cls = Expected
            with R.dataflow():
                seg0_out = cls.seg0()
                out0 = seg0_out[0]
                R.output(out0)
            return (x, out0)

    After = PartitionByCluster()(AnnotatePlacement(place([]))(NoCompute))
    tvm.ir.assert_structural_equal(strip_call_attrs(After), Expected)


def test_unplanned_module_without_compute_is_unchanged():
    tvm.ir.assert_structural_equal(PartitionByCluster()(NoCompute), NoCompute)


@I.ir_module
class WithIf:
    @T.prim_func(private=True, s_tir=True)
    def add_one(x: T.Buffer((4,), "float32"), y: T.Buffer((4,), "float32")):
        for i in range(4):
            with T.sblock("add"):
                vi = T.axis.remap("S", [i])
                y[vi] = x[vi] + T.float32(1)

    @R.function
    def main(x: R.Tensor((4,), "float32"), c: R.Tensor((), "bool")) -> R.Tensor((4,), "float32"):
        cls = WithIf
        with R.dataflow():
            a = R.call_tir(cls.add_one, (x,), out_ty=R.Tensor((4,), "float32"))
            R.output(a)
        if c:  # noqa: SIM108 (TVMScript control flow, not Python)
            b = R.call_tir(cls.add_one, (a,), out_ty=R.Tensor((4,), "float32"))
        else:
            b = a
        return b


def test_control_flow_stays_with_the_last_planned_op_outside_a_dataflow_block():
    import numpy as np

    After = PartitionByCluster()(AnnotatePlacement(place([3]))(WithIf))
    segments = [gv.name_hint for gv in After.get_global_vars() if gv.name_hint.startswith("seg")]
    assert segments == ["seg0"]
    assert int(After["seg0"].attrs["chiplet.cluster"]) == 3
    assert not any(isinstance(block, tvm.relax.DataflowBlock)
                   for block in After["seg0"].body.blocks)
    vm = tvm.relax.VirtualMachine(tvm.compile(After, "llvm"), tvm.cpu())
    x = np.arange(4, dtype="float32")
    for flag, expected in ((True, x + 2), (False, x + 1)):
        out = vm["main"](tvm.runtime.tensor(x), tvm.runtime.tensor(np.array(flag)))
        np.testing.assert_array_equal(out.numpy(), expected)
