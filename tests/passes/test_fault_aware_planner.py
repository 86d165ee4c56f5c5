"""Tests of the fault-aware planner: partition, map onto the surviving topology, iterate."""

import itertools

import networkx as nx
import pytest

from tvm_chiplet.passes.analysis.op_graph import OpGraph, OpNode
from tvm_chiplet.passes.planners import FaultAwarePlanner, PipelinePlanner, get_planner
from tvm_chiplet.passes.planners.base import PlanningProblem
from tvm_chiplet.passes.planners.evaluate import simulate_placement
from tvm_chiplet.passes.planners.fault_aware import ROUND_GAIN
from tvm_chiplet.passes.planners.placement import PlanningError
from tvm_chiplet.runtime.device import simulate_workload
from tvm_chiplet.targets.faults import with_faults
from tvm_chiplet.targets.system import ChipletSystem
from tvm_chiplet.targets.system_toml import load_system
from tvm_chiplet.targets.topology import Topology


def branchy_problem(system, ops=20):
    """A chain with skip connections every third op, heavy activations, weights that fit."""
    nodes = [OpNode(i, f"op{i}", "call_tir", 2e7, 64, 300_000, 200_000) for i in range(ops)]
    graph = nx.DiGraph()
    graph.add_nodes_from(range(ops))
    graph.add_edges_from(((i, i + 1) for i in range(ops - 1)), nbytes=300_000)
    graph.add_edges_from(((i, i + 3) for i in range(0, ops - 3, 3)), nbytes=300_000)
    return PlanningProblem(OpGraph(nodes, graph, output_ops=[ops - 1]), system, Topology(system),
                           simulator=simulate_workload)


def test_fault_aware_plan_is_never_slower_than_the_pipeline_and_says_its_rounds():
    system, _ = with_faults(load_system("mesh-4x4"), "x1y1,x2y2,x0y0:x1y0,x2y0:x2y1")
    problem = branchy_problem(system)
    placement = FaultAwarePlanner(batches=16, rounds=3).plan(problem)
    assert placement.strategy == "fault-aware"
    notes = placement.notes["fault_aware"]
    assert 1 <= len(notes["rounds"]) <= 3
    # A round runs only after one that improved the estimate by ROUND_GAIN.
    estimates = [round_["estimate_cycles"] for round_ in notes["rounds"]]
    assert all(later <= (1 - ROUND_GAIN) * earlier
               for earlier, later in itertools.pairwise(estimates[:-1]))
    first = notes["rounds"][0]
    assert (first["busiest_link_after"], first["hop_bytes_after"]) <= \
           (first["busiest_link_before"], first["hop_bytes_before"])
    pipeline = PipelinePlanner(batches=16).plan(problem)
    ours = simulate_placement(problem, placement, 16).total_cycles
    assert ours <= simulate_placement(problem, pipeline, 16).total_cycles
    assert notes["simulated_cycles"] == pytest.approx(ours)


def test_fault_aware_is_a_registered_strategy_with_checked_options():
    assert isinstance(get_planner("fault-aware"), FaultAwarePlanner)
    with pytest.raises(PlanningError, match=r"rounds and max_passes must be >= 1, got 64, 0, 20"):
        FaultAwarePlanner(rounds=0)


def with_dram_capacity(system, capacity_bytes):
    data = system.to_dict()
    for dram in data["dram"]:
        dram["capacity_bytes"] = capacity_bytes
    return ChipletSystem.from_dict(data)


def test_a_model_that_outgrows_the_surviving_memory_is_refused_by_how_much():
    # 16 clusters x 2 MiB SRAM + 4 controllers x 10 MB hold 73.6 MB: 20 ops x 3 MB of weights
    # fit; killing x0y1 (a controller's chiplet) and x1y1 leaves 59.4 MB.
    healthy = with_dram_capacity(load_system("mesh-4x4"), 10_000_000)
    nodes = [OpNode(i, f"op{i}", "call_tir", 2e7, 64, 300_000, 3_000_000) for i in range(20)]
    graph = nx.DiGraph()
    graph.add_nodes_from(range(20))
    graph.add_edges_from(((i, i + 1) for i in range(19)), nbytes=300_000)
    model = OpGraph(nodes, graph, output_ops=[19])
    PlanningProblem(model, healthy, Topology(healthy))
    faulty, _ = with_faults(healthy, "x0y1,x1y1")
    with pytest.raises(PlanningError, match=(
            r"^the model does not fit mesh-4x4: it needs 60\.3 MB \(60\.0 MB of int8 weights \+ "
            r"300\.1 kB for the largest op's inputs and output\), the 14 cluster\(s\) and 3 DRAM "
            r"controller\(s\) alive hold 59\.4 MB \(29\.4 MB SRAM \+ 30\.0 MB DRAM\): short by "
            r"939\.9 kB \(939,936 bytes\); compile with fewer faults")):
        PlanningProblem(model, faulty, Topology(faulty))


def test_planning_again_on_the_same_problem_reuses_its_runs_and_simulations():
    system, _ = with_faults(load_system("mesh-4x4"), "x1y1,x0y0:x1y0")
    calls = []

    def counting(*args, **kwargs):
        calls.append(1)
        return simulate_workload(*args, **kwargs)

    nodes = [OpNode(i, f"op{i}", "call_tir", 2e7, 64, 300_000, 3_000_000) for i in range(12)]
    graph = nx.DiGraph()
    graph.add_nodes_from(range(12))
    graph.add_edges_from(((i, i + 1) for i in range(11)), nbytes=300_000)
    problem = PlanningProblem(OpGraph(nodes, graph, output_ops=[11]), system, Topology(system),
                              simulator=counting)
    first = PipelinePlanner(batches=8).plan(problem)
    assert first.notes["candidates"] > 1  # weights stream: the search ran
    simulated = len(calls)
    assert PipelinePlanner(batches=8).plan(problem) == first
    assert len(calls) == simulated
    fresh = PlanningProblem(problem.graph, system, Topology(system), simulator=simulate_workload)
    assert FaultAwarePlanner(batches=8, rounds=2).plan(problem) == \
           FaultAwarePlanner(batches=8, rounds=2).plan(fresh)


def test_a_trial_mapping_is_judged_as_summing_every_flow_afresh_would():
    import random

    from tvm_chiplet.passes.planners.fault_aware import _better, _Loads

    system, _ = with_faults(load_system("mesh-4x4"), "x1y1,x0y0:x1y0,x2y0:x2y1")
    problem = branchy_problem(system)
    alive = [c.id for c in system.clusters]
    rng = random.Random(7)
    used = alive[:8]
    pairs = {(a, b): rng.choice([1000, 5000, 20000]) for a, b in itertools.pairwise(used)}
    pairs.update({(used[i], used[i + 3]): 3000 for i in range(0, 5, 2)})
    fixed = {(alive[-1], c): 7000 for c in used[::3]}
    image = {c: c for c in used}
    loads = _Loads(problem, pairs, fixed, image)
    decisions = []
    for _ in range(300):
        a = rng.choice(used)
        other = rng.choice([c for c in alive if c != a])
        changes = ({a: image[other], other: image[a]} if other in image else {a: other})
        afresh = _Loads(problem, pairs, fixed, {**image, **changes}).value
        decisions.append(loads.improves(changes, (a, other)))
        assert decisions[-1] == _better(afresh, loads.value)
    assert any(decisions) and not all(decisions)


def test_the_screen_of_trial_mappings_keeps_every_one_that_improves():
    """Trial hop-bytes, all options at once, are those summed afresh; promising() may pass
    trials that do not improve, but never drops one that does."""
    import random

    from tvm_chiplet.passes.planners.fault_aware import _Loads

    system, _ = with_faults(load_system("mesh-4x4"), "x1y1,x0y0:x1y0,x2y0:x2y1")
    problem = branchy_problem(system)
    alive = list(problem.topology.cluster_order())
    rng = random.Random(11)
    used = alive[:9]
    pairs = {(a, b): rng.choice([1000, 5000, 20000]) for a, b in itertools.pairwise(used)}
    pairs.update({(used[i + 3], used[i]): 3000 for i in range(0, 6, 2)})
    fixed = {(alive[-1], c): 7000 for c in used[::3]}
    image = dict(zip(used, rng.sample(used, len(used)), strict=True))
    loads = _Loads(problem, pairs, fixed, image)
    kept = dropped = 0
    for a in used:
        idle = [c for c in alive if c not in image.values()]
        options = [("swap", b) for b in used if b != a] + [("move", c) for c in idle]
        passed = set(loads.promising(a, options).tolist())
        after = loads.hop_bytes_after(a, options)
        for k, (move, other) in enumerate(options):
            changes = {a: image[other], other: image[a]} if move == "swap" else {a: other}
            afresh = _Loads(problem, pairs, fixed, {**image, **changes}).value[1]
            assert after[k] == pytest.approx(afresh, rel=1e-12)
            if loads.improves(changes, (a, other)):
                assert k in passed, (a, move, other)
                kept += 1
        dropped += len(options) - len(passed)
    assert kept and dropped
