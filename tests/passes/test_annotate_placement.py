import pytest
import tvm
from tvm.script import ir as I
from tvm.script import relax as R
from tvm.script import tirx as T

from tests.passes.ir_helpers import nonzero_model_reduced, strip_call_attrs
from tvm_chiplet.passes import AnnotatePlacement
from tvm_chiplet.passes.analysis.extract_op_graph import main_bindings, planned_bindings
from tvm_chiplet.passes.attrs import call_placement
from tvm_chiplet.passes.planners import Placement, PlanningError


@I.ir_module
class Before:
    @T.prim_func(private=True, s_tir=True)
    def double(x: T.Buffer((4,), "float32"), y: T.Buffer((4,), "float32")):
        for i in range(4):
            with T.sblock("double"):
                vi = T.axis.remap("S", [i])
                y[vi] = x[vi] * T.float32(2)

    @R.function
    def main(x: R.Tensor((4,), "float32")) -> R.Tuple(R.Tensor((4,), "float32"),
                                                      R.Tensor((4,), "float32")):
        cls = Before
        with R.dataflow():
            a = R.call_tir(cls.double, (x,), out_ty=R.Tensor((4,), "float32"))
            b = R.call_tir(cls.double, (a,), out_ty=R.Tensor((4,), "float32"))
            t = (a, b)
            R.output(t)
        return t


def test_every_call_tir_gets_cluster_stage_and_op_id():
    placement = Placement("manual", (3, 7, 7), (0, 1, 1), (3, 7))
    After = AnnotatePlacement(placement)(Before)
    bindings = After["main"].body.blocks[0].bindings
    assert [call_placement(b.value) for b in bindings] == [(3, 0, 0), (7, 1, 1), None]


def test_strategy_and_notes_are_kept_as_a_module_attribute():
    import json

    placement = Placement("manual", (0, 0, 0), (0, 0, 0), (0,), 12.5, {"gap": 0.01})
    After = AnnotatePlacement(placement)(Before)
    summary = json.loads(str(After.attrs["chiplet.placement"]))
    assert summary == {"strategy": "manual", "objective_cycles": 12.5, "notes": {"gap": 0.01},
                       "dram_policy": "interleave", "dram_shares": [], "replicas": [],
                       "sram_loans": [], "weight_pool": False, "microbatch": 1}


def test_copies_of_the_placement_are_kept_in_the_module_attribute():
    import json

    placement = Placement("pipeline", (0, 1, 1), (0, 1, 1), (0, 1),
                          replicas=(((0, 2), (1, 3)),))
    After = AnnotatePlacement(placement)(Before)
    assert json.loads(str(After.attrs["chiplet.placement"]))["replicas"] == [[[0, 2], [1, 3]]]


def test_structure_is_unchanged_apart_from_attributes():
    placement = Placement("manual", (0, 1, 1), (0, 1, 1), (0, 1))
    After = AnnotatePlacement(placement)(Before)
    tvm.ir.assert_structural_equal(strip_call_attrs(After), Before)


def test_annotated_module_still_compiles_and_runs():
    import numpy as np

    After = AnnotatePlacement(Placement("manual", (0, 1, 1), (0, 1, 1), (0, 1)))(Before)
    vm = tvm.relax.VirtualMachine(tvm.compile(After, "llvm"), tvm.cpu())
    out = vm["main"](tvm.runtime.tensor(np.ones(4, "float32")))
    np.testing.assert_array_equal(out[1].numpy(), np.full(4, 4, "float32"))


def test_input_module_is_not_mutated():
    snapshot = Before.script()
    AnnotatePlacement(Placement("manual", (1, 1, 1), (0, 0, 0), (1,)))(Before)
    assert Before.script() == snapshot
    assert all(call_placement(b.value) is None for b in Before["main"].body.blocks[0].bindings)


def test_placement_of_the_wrong_length_is_refused():
    with pytest.raises(PlanningError, match="covers 2 ops but 'main' has 3 bindings"):
        AnnotatePlacement(Placement("manual", (0, 1), (0, 1), (0, 1)))(Before)


def test_non_placement_argument_is_refused():
    with pytest.raises(TypeError, match="needs a Placement"):
        AnnotatePlacement({"op_cluster": [0]})


def test_data_dependent_tail_is_left_unplaced():
    reduced = nonzero_model_reduced()
    count = len(planned_bindings(reduced))
    placement = Placement("manual", (2,) * count, (0,) * count, (2,))
    annotated = main_bindings(AnnotatePlacement(placement)(reduced))
    assert call_placement(annotated[0].value) == (2, 0, 0)
    assert all(call_placement(b.value) is None for b in annotated[count:])
    with pytest.raises(PlanningError, match=r"before its data-dependent tail"):
        AnnotatePlacement(Placement("manual", (0,) * (count + 1), (0,) * (count + 1), (0,)))(
            reduced)
