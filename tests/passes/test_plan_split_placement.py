"""PlanSplitPlacement: plan, realise the splits with DistributeTensors, annotate the result."""

import dataclasses
import gc
import json
import os

import numpy as np
import onnx
import pytest
import tvm
from tvm import relax

import tvm_chiplet
from tvm_chiplet.passes import ReduceGraph, plan_split_placement
from tvm_chiplet.passes.analysis.extract_op_graph import extract_op_graph
from tvm_chiplet.passes.attrs import call_placement
from tvm_chiplet.passes.forked import Forked
from tvm_chiplet.passes.plan_split_placement import (
    PlanSplitPlacement,
    anchor_op_ids,
    split_problem,
)
from tvm_chiplet.passes.planners import (
    PlanningError,
    TensorParallelPlanner,
    evaluate,
    tensor_parallel,
)
from tvm_chiplet.passes.planners.base import planning_progress
from tvm_chiplet.passes.planners.evaluate import placement_key, simulate_placement
from tvm_chiplet.passes.planners.placement import OpSplit, Placement
from tvm_chiplet.runtime.device import simulate_plan, simulate_workload
from tvm_chiplet.targets.system_generators import mesh_system
from tvm_chiplet.targets.system_toml import PRESET_DIR, load_system
from tvm_chiplet.tools import models
from tvm_chiplet.tools.frontends import load_model

SYSTEM = load_system("cluster-4")


def small_cnn():
    return load_model(models.get_model("small-cnn"))


class SplitSecondAnchorsInputChannels:
    """A planner that splits the second conv along its input channels over clusters 1 and 2."""

    name = "split-second"

    def plan(self, problem):
        second = sorted(problem.split_dims)[1]
        n = len(problem.graph.ops)
        return Placement(self.name, (0,) * n, (0,) * n, (0,),
                         splits=(OpSplit(second, "in_channels", (1, 2)),))


class SplitFirstAnchor:
    """A planner that splits the first anchor along ``dim`` (None: its first split dim) over
    clusters 1 and 2 and leaves the rest on 0."""

    name = "split-first"

    def __init__(self, dim: str | None = "out_channels") -> None:
        self.dim = dim

    def plan(self, problem):
        first = min(problem.split_dims)
        dim = self.dim or next(iter(problem.split_dims[first]))
        n = len(problem.graph.ops)
        return Placement(self.name, (0,) * n, (0,) * n, (0,),
                         splits=(OpSplit(first, dim, (1, 2)),),
                         dram_policy="balanced", dram_shares=((1, 0, 1.0),))


def placed_clusters(mod):
    return [call_placement(b.value) for block in mod["main"].body.blocks for b in block.bindings]


def test_split_dims_come_from_the_high_level_anchors():
    mod = small_cnn()
    problem, anchors = split_problem(mod, ReduceGraph()(mod), SYSTEM, simulate_workload)
    assert anchors == anchor_op_ids(problem.graph) and anchors
    assert set(problem.split_dims) == set(anchors)
    assert all("out_channels" in dims or "cols" in dims for dims in problem.split_dims.values())


def test_attention_matmuls_are_follow_ops_with_their_heads():
    mod = load_model(models.get_model("transformer-block"))
    problem, anchors = split_problem(mod, ReduceGraph()(mod), SYSTEM)
    ops = problem.graph.ops
    # The scores and context matmuls multiply two activations: each holds one product a head.
    assert len(problem.follow_ops) == 2
    assert set(problem.follow_ops) < set(anchors)
    heads = set(problem.follow_ops.values())
    assert len(heads) == 1 and heads.pop() > 1
    # Projections with constant weights are not follow ops, whatever the fused op's constants.
    assert all(ops[op_id].weight_bytes > 1024 for op_id in set(anchors) - set(problem.follow_ops))


def test_the_split_anchors_parts_stay_on_their_clusters_until_an_op_needs_the_whole():
    mod = small_cnn()
    after = PlanSplitPlacement(SYSTEM, SplitFirstAnchor())(mod)
    graph = extract_op_graph(after)
    clusters = [p[0] for p in placed_clusters(after)]
    # The conv (with its batch norm and relu) and the max pool after it run as two parts.
    parts = [op for op, c in enumerate(clusters) if c in (1, 2)]
    assert clusters.count(1) == clusters.count(2) >= 2
    assert {graph.ops[op].name for op in parts} >= {"max_pool2d"}
    # The next conv runs whole on its planned cluster 0, so the parts are gathered there once.
    gathers = [op.op_id for op in graph.ops if clusters[op.op_id] == 0
               and {clusters[p] for p in graph.graph.predecessors(op.op_id)} == {1, 2}]
    assert len(gathers) == 1 and graph.ops[gathers[0]].name.startswith("concatenate")
    summary = json.loads(str(after.attrs["chiplet.placement"]))
    assert summary["notes"]["splits"] == 1
    assert (summary["dram_policy"], summary["dram_shares"]) == ("balanced", [[1, 0, 1.0]])


def test_split_module_computes_what_the_original_does():
    mod = small_cnn()
    after = PlanSplitPlacement(SYSTEM, SplitFirstAnchor())(mod)
    x = models.example_inputs(models.get_model("small-cnn"), seed=1)
    outs = []
    for m in (ReduceGraph()(mod), after):
        vm = relax.VirtualMachine(tvm.compile(m, "llvm"), tvm.cpu())
        outs.append(vm["main"](*[tvm.runtime.tensor(v) for v in x.values()]).numpy())
    np.testing.assert_allclose(outs[1], outs[0], rtol=1e-5, atol=1e-5)


def test_plans_without_splits_are_annotated_on_the_first_reduction():
    mod = small_cnn()
    after = PlanSplitPlacement(SYSTEM, "pipeline", simulator=simulate_workload)(mod)
    assert len(extract_op_graph(after).ops) == len(extract_op_graph(ReduceGraph()(mod)).ops)


def test_a_legalized_module_cannot_be_split_and_says_so():
    legalized = ReduceGraph()(small_cnn())
    with pytest.raises(PlanningError, match=r"which ops can be split"):
        PlanSplitPlacement(SYSTEM, "tensor-parallel")(legalized)


class SplitOpZero:
    """A planner that splits op 0 whatever the problem says can be split."""

    name = "split-op-zero"

    def plan(self, problem):
        n = len(problem.graph.ops)
        return Placement(self.name, (0,) * n, (0,) * n, (0,),
                         splits=(OpSplit(0, "out_channels", (1, 2)),))


def test_a_planner_splitting_a_legalized_module_gets_a_clear_error():
    legalized = ReduceGraph()(small_cnn())
    with pytest.raises(PlanningError, match=r"split-op-zero.*high-level module"):
        PlanSplitPlacement(SYSTEM, SplitOpZero())(legalized)


class SplitOutsideTheSystem:
    """A planner that splits the first conv over a group with a cluster cluster-4 lacks."""

    name = "split-outside"

    def plan(self, problem):
        first = min(problem.split_dims)
        n = len(problem.graph.ops)
        return Placement(self.name, (0,) * n, (0,) * n, (0,),
                         splits=(OpSplit(first, "out_channels", (1, 7)),))


def test_a_group_that_does_not_fit_the_system_is_refused_by_name():
    with pytest.raises(PlanningError, match=r"op \d+ is split along out_channels over the "
                                            r"group \[1, 7\].*clusters 0\.\.3.*\[7\]"):
        PlanSplitPlacement(SYSTEM, SplitOutsideTheSystem())(small_cnn())


def test_input_module_is_not_mutated():
    mod = small_cnn()
    text = mod.script()
    PlanSplitPlacement(SYSTEM, SplitFirstAnchor())(mod)
    assert mod.script() == text


def two_output_cnn():
    """small-cnn that also returns its pooled features: ``main`` returns a tuple, as every
    PyTorch program's does."""
    model = models.get_model("small-cnn")
    pooled = onnx.helper.make_tensor_value_info("flatten", onnx.TensorProto.FLOAT, None)
    model.graph.output.append(pooled)
    return load_model(model)


@pytest.mark.parametrize("model", [small_cnn, two_output_cnn])
def test_ops_that_do_not_follow_a_split_keep_their_planned_clusters(model):
    class OthersOnThree:
        name = "others-on-three"

        def plan(self, problem):
            anchors = set(problem.split_dims)
            n = len(problem.graph.ops)
            clusters = tuple(0 if op in anchors else 3 for op in range(n))
            return Placement(self.name, clusters, (0,) * n, (0, 3),
                             splits=(OpSplit(min(anchors), "out_channels", (1, 2)),))

    mod = model()
    after = PlanSplitPlacement(SYSTEM, OthersOnThree())(mod)
    graph = extract_op_graph(after)
    anchors = set(anchor_op_ids(graph))
    placed = [p and p[0] for p in placed_clusters(after)]  # None: the returned tuple
    assert {placed[op] for op in anchors} == {0, 1, 2}
    # Every op fed only by whole values (none of the parts on 1 and 2) runs where it was planned.
    whole_fed = [op.op_id for op in graph.ops if op.op_id not in anchors and op.is_compute
                 and not {placed[p] for p in graph.graph.predecessors(op.op_id)} & {1, 2}]
    assert whole_fed and all(placed[op] == 3 for op in whole_fed)


def test_copies_of_a_placement_survive_the_realised_splits():
    class SplitFirstTwice(SplitFirstAnchor):
        def plan(self, problem):
            placement = super().plan(problem)
            return Placement(placement.strategy, placement.op_cluster, placement.op_stage,
                             placement.stage_clusters, splits=placement.splits,
                             replicas=(((0, 8), (1, 9), (2, 10)),))

    after = PlanSplitPlacement(load_system("quad-2x2"), SplitFirstTwice())(small_cnn())
    summary = json.loads(str(after.attrs["chiplet.placement"]))
    assert summary["replicas"] == [[[0, 8], [1, 9], [2, 10]]]


def test_a_split_over_a_disconnected_group_is_refused_before_anything_is_realised():
    faulty = mesh_system(4, 4, faults={"links": [["x0y0", "x1y0"]]})
    pair = tuple(c.id for c in faulty.clusters if c.name in ("x0y0.k0", "x1y0.k0"))

    class AcrossTheDeadLink:
        name = "across"

        def plan(self, problem):
            n = len(problem.graph.ops)
            return Placement(self.name, (0,) * n, (0,) * n, (0,),
                             splits=(OpSplit(min(problem.split_dims), "out_channels", pair),))

    with pytest.raises(PlanningError, match=r"disconnected group: no live links of its "
                                            r"sub-mesh join its 2 islands"):
        PlanSplitPlacement(faulty, AcrossTheDeadLink())(small_cnn())


def test_partial_sums_cross_clusters_at_the_width_the_system_gives_its_accumulators(tmp_path):
    # cluster-4 computes in int8. Its partial sums are 4 bytes an element by default; with
    # [system] accumulator_bytes = {int8 = 2}, 2. The two halves of the second conv's partial
    # sums that clusters 1 and 2 exchange (one output's elements in all) shrink by that much,
    # in the compiled plan as in the realised module the planner judges.
    model = models.get_model("small-cnn")
    preset = (PRESET_DIR / "cluster-4.toml").read_text()
    config = tmp_path / "narrow.toml"
    config.write_text(preset.replace("[system]\n", "[system]\naccumulator_bytes = {int8 = 2}\n"))
    crossing = {}
    for name, target in (("default", "chiplet/cluster-4"), ("narrow", f"chiplet -config={config}")):
        lib = tvm_chiplet.build(model, target=target, strategy=SplitSecondAnchorsInputChannels())
        tasks = lib.plan["tasks"]
        crossing[name] = sum(nbytes for task in tasks for producer, nbytes in task["deps"]
                             if tasks[producer]["cluster"] != task["cluster"])
        mod = load_model(model)
        problem, _ = split_problem(mod, ReduceGraph()(mod), lib.system, simulate_workload)
        placement = SplitSecondAnchorsInputChannels().plan(problem)
        judged = simulate_placement(problem, placement, 1, as_built=True).total_cycles
        assert judged == pytest.approx(simulate_plan(lib.plan, lib.system, 1).total_cycles,
                                       rel=1e-12)
    second = problem.graph.ops[sorted(problem.split_dims)[1]]
    assert crossing["default"] - crossing["narrow"] == (4 - 2) * second.output_bytes


def test_the_garbage_collector_is_paused_while_a_plan_is_realised(monkeypatch):
    seen = []
    realise = plan_split_placement.distribute_and_reduce

    def spy(*args, **kwargs):
        seen.append(gc.isenabled())
        return realise(*args, **kwargs)

    monkeypatch.setattr(plan_split_placement, "distribute_and_reduce", spy)
    assert gc.isenabled()
    PlanSplitPlacement(SYSTEM, SplitFirstAnchor())(small_cnn())
    assert seen == [False]
    assert gc.isenabled()


def test_a_collector_disabled_by_the_caller_stays_disabled():
    gc.disable()
    try:
        PlanSplitPlacement(SYSTEM, SplitFirstAnchor())(small_cnn())
        assert not gc.isenabled()
    finally:
        gc.enable()


def test_a_realised_plans_work_items_are_built_once_for_all_its_judgements(monkeypatch):
    # The DRAM placements tried of one plan and its simulations as built all read the work
    # items of the same realised module: they are built once, and give what fresh ones give.
    mod = small_cnn()
    system = load_system("quad-2x2")
    problem, _ = split_problem(mod, ReduceGraph()(mod), system, simulate_workload)
    placement = SplitFirstAnchor().plan(problem)
    built = []
    items_of = evaluate.graph_items

    def spy(graph, *args, **kwargs):
        if graph is not problem.graph:
            built.append(graph)
        return items_of(graph, *args, **kwargs)

    monkeypatch.setattr(evaluate, "graph_items", spy)
    first = evaluate.built_items(problem, placement)
    first.clear()  # a caller's copy: changing it changes nothing kept
    again = evaluate.built_items(problem, placement)
    nearest = dataclasses.replace(placement, dram_policy="nearest", dram_shares=())
    cycles = [simulate_placement(problem, p, 1, as_built=True).total_cycles
              for p in (placement, nearest)]
    assert len(built) == 1
    graph, realised = problem.realise(placement)
    assert again == items_of(graph, realised)
    for p, judged in zip((placement, nearest), cycles, strict=True):
        tasks, messages, _, fetches = evaluate.placement_workload(
            problem, dataclasses.replace(realised, dram_policy=p.dram_policy,
                                         dram_shares=p.dram_shares), graph)
        fresh = simulate_workload(tasks, messages, system, 1, fetches=fetches)
        assert judged == fresh.total_cycles


def test_a_long_realisation_is_reported_to_the_planning_progress(monkeypatch):
    # Realising a plan on a large grid takes a minute: the driver's progress hears of each one
    # that lasts (here every one: the threshold is lowered), and nothing is heard outside it.
    monkeypatch.setattr(plan_split_placement, "REPORTED_REALISATION", 0.0)
    mod = small_cnn()
    problem, _ = split_problem(mod, ReduceGraph()(mod), SYSTEM, simulate_workload)
    placement = SplitFirstAnchor().plan(problem)
    heard = []
    with planning_progress(heard.append):
        graph, realised = problem.realise(placement)
    assert len(heard) == 1
    assert heard[0].startswith(f"realised 1 split ops over {len(set(realised.op_cluster))} "
                               f"clusters: {len(graph.ops):,} ops in ")
    problem.realise(dataclasses.replace(placement, even_rows=not placement.even_rows))
    assert len(heard) == 1


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork (POSIX)")
def test_a_plan_realised_in_a_forked_process_is_the_one_realised_here(monkeypatch):
    # Its op graph comes back from the child; its module, asked for, is realised here.
    monkeypatch.setattr(plan_split_placement, "spare_cores", lambda: 1)
    monkeypatch.setattr(plan_split_placement, "REPORTED_REALISATION", 0.0)
    mod = small_cnn()
    problem, _ = split_problem(mod, ReduceGraph()(mod), SYSTEM, simulate_workload)
    placement = SplitFirstAnchor().plan(problem)
    here, _ = split_problem(mod, ReduceGraph()(mod), SYSTEM, simulate_workload)
    heard = []
    assert not problem.realise.known(placement)
    problem.realise.prefetch(placement)
    assert problem.realise.known(placement)
    with planning_progress(heard.append):
        graph, realised = problem.realise(placement)
    expected, expected_placement = here.realise(placement)
    assert realised == expected_placement
    assert [dataclasses.astuple(op) for op in graph.ops] == \
        [dataclasses.astuple(op) for op in expected.ops]
    assert list(graph.graph.edges(data=True)) == list(expected.graph.edges(data=True))
    assert heard and heard[0].endswith("(in a second process)")
    module, _ = problem.realise.module(placement)
    tvm.ir.assert_structural_equal(module, here.realise.module(placement)[0])


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork (POSIX)")
def test_tensor_parallel_plans_alike_when_it_realises_plans_in_a_forked_process(monkeypatch):
    system = load_system("mesh-4x4")
    mod = small_cnn()

    def plan():
        problem, _ = split_problem(mod, ReduceGraph()(mod), system, simulate_workload)
        return TensorParallelPlanner(batches=1).plan(problem)

    alone = plan()
    forked = []
    start = Forked.start

    def spy(self, key, compute):
        forked.append(key)
        start(self, key, compute)

    monkeypatch.setattr(plan_split_placement, "spare_cores", lambda: 1)
    monkeypatch.setattr(tensor_parallel, "FORKED_MESSAGES", 0)  # every plan, however small
    monkeypatch.setattr(Forked, "start", spy)
    beside = plan()
    assert forked  # a plan was realised in a child
    assert placement_key(beside) == placement_key(alone)
    assert beside.notes["simulated_cycles"] == alone.notes["simulated_cycles"]
