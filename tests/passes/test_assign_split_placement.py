"""AssignSplitPlacement: plan, realise the splits with SplitOperators, annotate the result."""

import json

import numpy as np
import pytest
import tvm
from tvm import relax

from tvm_chiplet.passes import ReduceGraph
from tvm_chiplet.passes.analysis.op_graph import extract_op_graph
from tvm_chiplet.passes.annotate_placement import call_placement
from tvm_chiplet.passes.assign_split_placement import (
    AssignSplitPlacement,
    anchor_op_ids,
    split_problem,
)
from tvm_chiplet.passes.planners import PlanningError
from tvm_chiplet.passes.planners.placement import OpSplit, Placement
from tvm_chiplet.targets.system import load_system
from tvm_chiplet.tools import models
from tvm_chiplet.tools.frontends import load_model

SYSTEM = load_system("cluster-4")


def small_cnn():
    return load_model(models.get_model("small-cnn"))


class SplitFirstAnchor:
    """A planner that splits the first conv over clusters 1 and 2 and leaves the rest on 0."""

    name = "split-first"

    def plan(self, problem):
        first = min(problem.split_dims)
        n = len(problem.graph.ops)
        return Placement(self.name, (0,) * n, (0,) * n, (0,),
                         splits=(OpSplit(first, "out_channels", (1, 2)),),
                         dram_policy="balanced", dram_shares=((1, 0, 1.0),))


def placed_clusters(mod):
    return [call_placement(b.value) for block in mod["main"].body.blocks for b in block.bindings]


def test_split_dims_come_from_the_high_level_anchors():
    mod = small_cnn()
    problem, anchors = split_problem(mod, ReduceGraph()(mod), SYSTEM)
    assert anchors == anchor_op_ids(problem.graph) and anchors
    assert set(problem.split_dims) == set(anchors)
    assert all("out_channels" in dims or "cols" in dims for dims in problem.split_dims.values())


def test_the_split_anchor_runs_in_two_parts_on_the_planned_clusters():
    mod = small_cnn()
    after = AssignSplitPlacement(SYSTEM, SplitFirstAnchor())(mod)
    before_ops = len(extract_op_graph(ReduceGraph()(mod)).ops)
    graph = extract_op_graph(after)
    assert len(graph.ops) > before_ops  # two parts and a combine replace one op
    clusters = [p[0] for p in placed_clusters(after) if p is not None]
    assert clusters.count(1) == 1 and clusters.count(2) == 1
    assert set(clusters) == {0, 1, 2}
    summary = json.loads(str(after.attrs["chiplet.placement"]))
    assert summary["notes"]["splits"] == 1
    assert (summary["dram_policy"], summary["dram_shares"]) == ("balanced", [[1, 0, 1.0]])


def test_split_module_computes_what_the_original_does():
    mod = small_cnn()
    after = AssignSplitPlacement(SYSTEM, SplitFirstAnchor())(mod)
    x = models.example_inputs(models.get_model("small-cnn"), seed=1)
    outs = []
    for m in (ReduceGraph()(mod), after):
        vm = relax.VirtualMachine(tvm.compile(m, "llvm"), tvm.cpu())
        outs.append(vm["main"](*[tvm.runtime.tensor(v) for v in x.values()]).numpy())
    np.testing.assert_allclose(outs[1], outs[0], rtol=1e-5, atol=1e-5)


def test_plans_without_splits_are_annotated_on_the_first_reduction():
    mod = small_cnn()
    after = AssignSplitPlacement(SYSTEM, "pipeline")(mod)
    assert len(extract_op_graph(after).ops) == len(extract_op_graph(ReduceGraph()(mod)).ops)


def test_a_legalized_module_cannot_be_split_and_says_so():
    legalized = ReduceGraph()(small_cnn())
    with pytest.raises(PlanningError, match=r"which ops can be split"):
        AssignSplitPlacement(SYSTEM, "tensor-parallel")(legalized)


def test_input_module_is_not_mutated():
    mod = small_cnn()
    text = mod.script()
    AssignSplitPlacement(SYSTEM, SplitFirstAnchor())(mod)
    assert mod.script() == text


def test_ops_other_than_anchors_and_combines_keep_their_planned_clusters():
    class OthersOnThree:
        name = "others-on-three"

        def plan(self, problem):
            anchors = set(problem.split_dims)
            n = len(problem.graph.ops)
            clusters = tuple(0 if op in anchors else 3 for op in range(n))
            return Placement(self.name, clusters, (0,) * n, (0, 3),
                             splits=(OpSplit(min(anchors), "out_channels", (1, 2)),))

    mod = small_cnn()
    after = AssignSplitPlacement(SYSTEM, OthersOnThree())(mod)
    graph = extract_op_graph(after)
    anchors = set(anchor_op_ids(graph))
    placed = placed_clusters(after)
    combines = [op.op_id for op in graph.ops
                if sum(p in anchors for p in graph.graph.predecessors(op.op_id)) > 1]
    assert len(combines) == 1 and placed[combines[0]][0] == 0  # the split op's own cluster
    others = [op.op_id for op in graph.ops if op.is_compute and op.op_id not in anchors
              and op.op_id not in combines]
    assert others and all(placed[op][0] == 3 for op in others)


def test_copies_of_a_placement_survive_the_realised_splits():
    class SplitFirstTwice(SplitFirstAnchor):
        def plan(self, problem):
            placement = super().plan(problem)
            return Placement(placement.strategy, placement.op_cluster, placement.op_stage,
                             placement.stage_clusters, splits=placement.splits,
                             replicas=(((0, 8), (1, 9), (2, 10)),))

    after = AssignSplitPlacement(load_system("quad-2x2"), SplitFirstTwice())(small_cnn())
    summary = json.loads(str(after.attrs["chiplet.placement"]))
    assert summary["replicas"] == [[[0, 8], [1, 9], [2, 10]]]
