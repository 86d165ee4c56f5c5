import pytest
import tvm
from tvm.script import ir as I
from tvm.script import relax as R
from tvm.script import tirx as T

from tests.passes.ir_helpers import strip_call_attrs
from tvm_chiplet.passes import PlanPlacement
from tvm_chiplet.passes.attrs import call_placement
from tvm_chiplet.passes.planners import Placement, PlanningError
from tvm_chiplet.runtime.device import simulate_workload
from tvm_chiplet.targets.system_toml import load_system


@I.ir_module
class Before:
    @T.prim_func(private=True, s_tir=True)
    def scale(x: T.Buffer((256, 256), "float32"), y: T.Buffer((256, 256), "float32")):
        for i, j in T.grid(256, 256):
            with T.sblock("scale"):
                vi, vj = T.axis.remap("SS", [i, j])
                y[vi, vj] = x[vi, vj] * T.float32(2)

    @R.function
    def main(x: R.Tensor((256, 256), "float32")) -> R.Tensor((256, 256), "float32"):
        cls = Before
        with R.dataflow():
            a = R.call_tir(cls.scale, (x,), out_ty=R.Tensor((256, 256), "float32"))
            b = R.call_tir(cls.scale, (a,), out_ty=R.Tensor((256, 256), "float32"))
            R.output(b)
        return b


class FixedPlanner:
    name = "fixed"

    def plan(self, problem):
        n = len(problem.graph.ops)
        return Placement(self.name, (1,) * n, (0,) * n, (1,))


def test_planner_decision_is_written_on_every_call():
    After = PlanPlacement(load_system("cluster-4"), FixedPlanner())(Before)
    placed = [call_placement(b.value) for b in After["main"].body.blocks[0].bindings]
    assert placed == [(1, 0, 0), (1, 0, 1)]
    tvm.ir.assert_structural_equal(strip_call_attrs(After), Before)


def test_pipeline_strategy_places_every_op_on_a_cluster_of_the_system():
    system = load_system("mesh-4x4")
    After = PlanPlacement(system, "pipeline", simulate_workload)(Before)
    placed = [call_placement(b.value) for b in After["main"].body.blocks[0].bindings]
    assert all(0 <= cluster < system.num_clusters for cluster, _, _ in placed)
    assert [op_id for _, _, op_id in placed] == [0, 1]


class OutsidePlanner:
    name = "outside"

    def plan(self, problem):
        n = len(problem.graph.ops)
        return Placement("outside", (0,) * (n - 1) + (9,), (0,) * n, (0,))


def test_an_op_placed_outside_the_system_is_refused_by_name():
    with pytest.raises(PlanningError, match=r"op 1 is placed on cluster 9.*clusters 0\.\.3"):
        PlanPlacement(load_system("cluster-4"), OutsidePlanner())(Before)


def test_input_module_is_not_mutated():
    snapshot = Before.script()
    PlanPlacement(load_system("cluster-4"), "pipeline", simulate_workload)(Before)
    assert Before.script() == snapshot


def test_a_strategy_that_simulates_without_a_simulator_says_how_to_give_one():
    with pytest.raises(PlanningError, match=r"has none; pass simulator=tvm_chiplet\.runtime"):
        PlanPlacement(load_system("cluster-4"), "pipeline")(Before)


def test_unknown_strategy_lists_valid_ones():
    with pytest.raises(PlanningError, match="unknown strategy 'magic'; valid strategies: pipeline"):
        PlanPlacement(load_system("cluster-4"), "magic")
