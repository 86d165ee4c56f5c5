"""Planner-level strategies: judging a placement by simulation, the single baseline, auto."""

import dataclasses

import pytest

import tvm_chiplet
from tests.tools.test_tvmc_microbatch import gemv_chain
from tvm_chiplet.passes import ReduceGraph
from tvm_chiplet.passes.analysis.extract_op_graph import extract_op_graph
from tvm_chiplet.passes.pipeline import prepare_splits
from tvm_chiplet.passes.plan_split_placement import split_problem
from tvm_chiplet.passes.planners import (
    AutoPlanner,
    LayerSequentialPlanner,
    PipelinePlanner,
    PlanningError,
    PlanningProblem,
    SinglePlanner,
    TensorParallelPlanner,
    auto,
)
from tvm_chiplet.passes.planners.dram import fastest_dram
from tvm_chiplet.passes.planners.evaluate import simulate_placement
from tvm_chiplet.passes.planners.microbatch import fastest_microbatch, microbatches
from tvm_chiplet.passes.planners.placement import Placement
from tvm_chiplet.runtime.device import simulate_plan, simulate_workload
from tvm_chiplet.targets.system_generators import mesh_system
from tvm_chiplet.targets.system_toml import load_system
from tvm_chiplet.targets.topology import Topology
from tvm_chiplet.tools import models
from tvm_chiplet.tools.frontends import load_model


@pytest.fixture(scope="module")
def resnet18_problem():
    model = models.get_model("resnet18", image=64)
    system = load_system("mesh-4x4")
    mod = prepare_splits()(load_model(model))  # as chiplet-default prepares it for the build
    problem, _ = split_problem(mod, ReduceGraph()(mod), system, simulate_workload)
    return model, problem


def test_placement_is_judged_exactly_as_the_compiled_plan(resnet18_problem):
    model, problem = resnet18_problem
    planner = PipelinePlanner(max_region=1)  # no op splits: the compiled ops are the planned
    placement = planner.plan(problem)
    lib = tvm_chiplet.build(model, target="chiplet/mesh-4x4", strategy=planner)
    for batches in (1, 8):
        judged = simulate_placement(problem, placement, batches)
        compiled = simulate_plan(lib.plan, lib.system, batches)
        assert judged.total_cycles == pytest.approx(compiled.total_cycles, rel=1e-12)


def test_split_placement_is_judged_as_realised_exactly_as_the_compiled_plan(resnet18_problem):
    model, problem = resnet18_problem
    placement = TensorParallelPlanner().plan(problem)
    lib = tvm_chiplet.build(model, target="chiplet/mesh-4x4", strategy="tensor-parallel")
    judged = simulate_placement(problem, placement, 8, as_built=True).total_cycles
    compiled = simulate_plan(lib.plan, lib.system, 8).total_cycles
    assert judged == pytest.approx(compiled, rel=1e-12)
    # Not as built, split ops are judged from part_bytes, their parts combined on one cluster:
    # a cruder estimate.
    crude = simulate_placement(problem, placement, 8).total_cycles
    assert crude != pytest.approx(compiled, rel=1e-3)


def test_tensor_parallel_keeps_the_dram_placement_that_simulates_fastest_as_built(
        resnet18_problem):
    _, problem = resnet18_problem
    placement = TensorParallelPlanner().plan(problem)
    tried = placement.notes["dram_placement_simulated_cycles"]
    assert "interleave" in tried and placement.notes["simulated_as_built"]
    assert placement.notes["dram_placement"] == min(tried, key=tried.get)
    kept = simulate_placement(problem, placement, 1, as_built=True).total_cycles
    assert kept == pytest.approx(min(tried.values()), rel=1e-12)


class CopiesOnEveryCluster:
    """One copy of the whole model on each cluster, weights where they simulate fastest."""

    name = "copies"

    def plan(self, problem):
        single = SinglePlanner().plan(problem)
        tiles = sorted(problem.topology.tilings(16)[0], key=lambda t: t != [single.op_cluster[0]])
        copies = single.copied_onto(tiles)
        return fastest_dram(problem, copies, 64, nearest=True)[0]


def test_copies_that_stream_keep_one_set_of_weights_in_a_pool_when_it_simulates_faster(
        resnet18_problem):
    # ResNet-18's 11 MB of int8 weights in 16 copies on mesh-4x4's 2 MB clusters: every copy
    # streams, and the pool's 16 stripes hold the whole model where DRAM feeds 16 copies.
    model, problem = resnet18_problem
    placement = CopiesOnEveryCluster().plan(problem)
    tried = placement.notes["dram_placement_simulated_cycles"]
    assert placement.weight_pool and placement.notes["dram_placement"].startswith("pooled")
    assert min(tried["pooled"], tried["pooled+nearest"]) < 0.8 * min(
        tried["interleave"], tried["nearest"], tried["balanced"])
    lib = tvm_chiplet.build(model, target="chiplet/mesh-4x4", strategy=CopiesOnEveryCluster())
    assert lib.plan["weight_pool"] and lib.plan["placement"]["weight_pool"]
    lenders = {f["lender"] for f in lib.plan["dram_fetches"] if f["lender"] is not None}
    assert lenders == set(range(16))  # every copy holds a stripe
    compiled = simulate_plan(lib.plan, lib.system, 64).total_cycles
    assert compiled == pytest.approx(min(tried.values()), rel=1e-12)


def test_a_weight_pool_needs_copies():
    with pytest.raises(PlanningError, match="a weight pool is one set of weights shared by "
                                            "the copies"):
        Placement("single", (0,), (0,), (0,), weight_pool=True)


def test_auto_runs_inputs_in_microbatches_when_weights_stream_and_builds_what_it_judged():
    # 16 MB of weights on one 2 MB cluster, DRAM-bound: each fetch serving a microbatch of
    # inputs saves nearly all the streaming; the compiled plan simulates as judged.
    planner = AutoPlanner(candidates=["single"], batches=64)
    lib = tvm_chiplet.build(gemv_chain(), target="chiplet/mesh-4x4", strategy=planner,
                            device_dtype="fp32")
    tried = {int(k): v for k, v in lib.plan["placement"]["notes"][
        "microbatch_simulated_cycles"].items()}
    assert lib.plan["microbatch"] == lib.plan["placement"]["microbatch"] == min(tried,
                                                                                 key=tried.get)
    assert lib.plan["microbatch"] >= 8 and tried[lib.plan["microbatch"]] < 0.2 * tried[1]
    compiled = simulate_plan(lib.plan, lib.system, 64)
    assert compiled.inputs == 64
    assert compiled.total_cycles == pytest.approx(tried[lib.plan["microbatch"]], rel=1e-12)
    assert all(row["ratio_to_bound"] >= 1.0 for row in lib.plan["estimate"])


def test_a_placement_that_streams_nothing_keeps_one_input_per_fetch():
    mod = load_model(gemv_chain(width=64))  # 16 KB of weights per layer: they fit
    problem, _ = split_problem(mod, ReduceGraph()(mod), load_system("mesh-4x4"),
                               simulate_workload)
    placement = SinglePlanner().plan(problem)
    kept, sim = fastest_microbatch(problem, placement, 64, cost=lambda s: s.total_cycles)
    assert kept.microbatch == 1 and "microbatch_simulated_cycles" not in kept.notes
    assert sim.total_cycles == simulate_placement(problem, placement, 64).total_cycles


def test_microbatches_run_no_more_inputs_than_one_at_a_time():
    single = Placement("single", (0,), (0,), (0,))
    assert microbatches(single, 64) == [2, 4, 8, 16, 32, 64]
    assert microbatches(single, 12) == [2, 4]
    copies = single.copied_onto([[0], [1], [2]])  # 64 inputs: 22 rounds of 3 copies
    assert microbatches(copies, 64) == [2]
    assert microbatches(single, 1) == []


def test_a_microbatch_is_a_positive_number_of_inputs():
    with pytest.raises(PlanningError, match="microbatch must be an integer >= 1"):
        Placement("single", (0,), (0,), (0,), microbatch=0)
    placement = Placement("single", (0,), (0,), (0,), microbatch=4)
    assert Placement.from_dict(placement.to_dict()) == placement


def test_single_puts_everything_on_one_cluster(resnet18_problem):
    _, problem = resnet18_problem
    placement = SinglePlanner().plan(problem)
    assert len(set(placement.op_cluster)) == 1


def test_pipeline_beats_single_on_throughput(resnet18_problem):
    _, problem = resnet18_problem
    single = simulate_placement(problem, SinglePlanner().plan(problem), 64)
    pipeline = simulate_placement(problem, PipelinePlanner().plan(problem), 64)
    assert pipeline.throughput_per_cycle > single.throughput_per_cycle


class Refusing:
    name = "refusing"

    def plan(self, problem):
        raise PlanningError("cannot apply here")


def test_auto_keeps_the_best_candidate_and_records_the_comparison(resnet18_problem):
    _, problem = resnet18_problem
    lines = []
    placement = AutoPlanner(["single", "pipeline", Refusing()], batches=16,
                            progress=lines.append).plan(problem)
    table = placement.notes["auto"]["candidates"]
    assert [row["strategy"] for row in table] == ["single", "pipeline", "refusing"]
    assert table[2]["skipped"] == "cannot apply here"
    best = min(table[:2], key=lambda row: row["cycles"])  # time of the 16 inputs
    assert placement.strategy == f"auto:{best['strategy']}"
    assert placement.notes["auto"]["objective"] == "time"
    assert len(lines) == 2


def test_auto_throughput_objective_compares_steady_state_rates(resnet18_problem):
    _, problem = resnet18_problem
    placement = AutoPlanner(["single", "pipeline"], objective="throughput",
                            batches=16).plan(problem)
    table = placement.notes["auto"]["candidates"]
    best = max(table, key=lambda row: row["throughput_per_cycle"])
    assert placement.strategy == f"auto:{best['strategy']}"
    assert placement.notes["auto"]["batches"] == 16


def test_auto_latency_objective_simulates_one_batch(resnet18_problem):
    _, problem = resnet18_problem
    placement = AutoPlanner(["single", "pipeline"], objective="latency").plan(problem)
    table = placement.notes["auto"]["candidates"]
    best = min(table, key=lambda row: row["cycles"])
    assert placement.strategy == f"auto:{best['strategy']}"
    assert placement.notes["auto"]["batches"] == 1


def counting_realisations(problem):
    """``problem`` whose realisations are listed (by strategy) in the list returned with it."""
    realised = []

    def realise(placement):
        realised.append(placement.strategy)
        return problem.realise(placement)

    return dataclasses.replace(problem, realise=realise), realised


def test_auto_prunes_a_splitting_candidate_its_estimate_puts_far_behind(resnet18_problem,
                                                                        monkeypatch):
    _, problem = resnet18_problem
    counting, realised = counting_realisations(problem)
    # layer-sequential splits ops and leaves them to be realised (tensor-parallel realises its
    # plan itself to place its weights in DRAM, so there is nothing left to prune).
    candidates = [PipelinePlanner(batches=64), LayerSequentialPlanner()]
    pipeline = simulate_placement(problem, candidates[0].plan(problem), 64,
                                  as_built=True).total_cycles
    estimate = simulate_placement(problem, candidates[1].plan(problem), 64).total_cycles
    # A factor just under the ratio of layer-sequential's estimate to the pipeline's prunes it.
    monkeypatch.setattr(auto, "PRUNE_FACTOR", 0.9 * estimate / pipeline)
    placement = AutoPlanner(candidates, batches=64).plan(counting)
    rows = {row["strategy"]: row for row in placement.notes["auto"]["candidates"]}
    assert "before realising its op splits" in rows["layer-sequential"]["pruned"]
    # Never realised (the pipeline's own plan may split ops over its regions, and is).
    assert "layer-sequential" not in realised and placement.strategy == "auto:pipeline"
    # Without pruning, the candidate is realised and simulated as built, and the faster wins.
    monkeypatch.setattr(auto, "PRUNE_FACTOR", float("inf"))
    realised.clear()
    placement = AutoPlanner(candidates, batches=64).plan(counting)
    built = simulate_placement(problem, candidates[1].plan(problem), 64,
                               as_built=True).total_cycles
    assert realised.count("layer-sequential") == 1
    assert placement.strategy == ("auto:layer-sequential" if built < pipeline else "auto:pipeline")


def test_auto_never_prunes_a_candidate_its_planner_realised_and_simulated(resnet18_problem,
                                                                          monkeypatch):
    _, problem = resnet18_problem
    monkeypatch.setattr(auto, "PRUNE_FACTOR", 1e-9)  # would prune anything estimated
    monkeypatch.setattr(auto, "ESTIMATE_CUTOFF", float("inf"))
    placement = AutoPlanner([PipelinePlanner(batches=64), TensorParallelPlanner(batches=64)],
                            batches=64).plan(problem)
    rows = {row["strategy"]: row for row in placement.notes["auto"]["candidates"]}
    assert "pruned" not in rows["tensor-parallel"] and rows["tensor-parallel"]["cycles"] > 0


def test_auto_runs_a_planner_with_a_cutoff_last_and_does_not_realise_what_it_puts_behind(
        resnet18_problem, monkeypatch):
    _, problem = resnet18_problem
    counting, realised = counting_realisations(problem)
    monkeypatch.setattr(auto, "ESTIMATE_CUTOFF", 1e-9)  # any estimate is far behind
    placement = AutoPlanner([TensorParallelPlanner(batches=64), PipelinePlanner(batches=64)],
                            batches=64).plan(counting)
    rows = placement.notes["auto"]["candidates"]
    assert [row["strategy"] for row in rows] == ["pipeline", "tensor-parallel"]
    assert "its planner estimates" in rows[1]["pruned"]
    assert "tensor-parallel" not in realised and placement.strategy == "auto:pipeline"


@pytest.mark.parametrize(("objective", "score"), [
    ("energy", lambda row: row["energy_pj"]),
    ("edp", lambda row: row["energy_pj"] * row["cycles"]),
])
def test_auto_energy_objectives_keep_the_least_energy_or_energy_delay(resnet18_problem,
                                                                      objective, score):
    _, problem = resnet18_problem
    placement = AutoPlanner(["single", "pipeline", "layer-sequential"], objective=objective,
                            batches=8).plan(problem)
    table = [row for row in placement.notes["auto"]["candidates"] if "pruned" not in row]
    assert all(row["energy_pj"] > 0 for row in table)
    assert placement.strategy == f"auto:{min(table, key=score)['strategy']}"


def test_auto_energy_objective_needs_energy_coefficients(resnet18_problem):
    _, problem = resnet18_problem
    plain = mesh_system(1, 2, macs_per_cycle=100, local_bandwidth=50.0, sram_bytes=1000,
                        dram_bandwidth=10.0)
    assert not plain.has_energy
    unpriced = PlanningProblem(problem.graph, plain, Topology(plain),
                               simulator=simulate_workload)
    with pytest.raises(PlanningError, match="objective 'energy' needs energy coefficients"):
        AutoPlanner(["single"], objective="energy").plan(unpriced)


def test_auto_with_no_applicable_candidate_says_why(resnet18_problem):
    _, problem = resnet18_problem
    with pytest.raises(PlanningError, match="no candidate strategy applies: refusing: cannot"):
        AutoPlanner([Refusing()]).plan(problem)


def test_auto_refuses_unknown_objective():
    with pytest.raises(PlanningError, match="unknown objective 'speed'"):
        AutoPlanner(objective="speed")


def test_auto_keeps_every_field_of_the_chosen_placement():
    class Fixed:
        name = "fixed"

        def plan(self, problem):
            n = len(problem.graph.ops)
            return Placement("fixed", (0,) * n, (0,) * n, (0,), dram_policy="balanced",
                             dram_shares=((0, 0, 1.0),), notes={"x": 1})

    system = load_system("cluster-4")
    graph = extract_op_graph(ReduceGraph()(load_model(models.get_model("small-cnn"))))
    problem = PlanningProblem(graph, system, Topology(system), simulator=simulate_workload)
    chosen = AutoPlanner([Fixed()], batches=2).plan(problem)
    assert chosen.strategy == "auto:fixed"
    assert (chosen.dram_policy, chosen.dram_shares) == ("balanced", ((0, 0, 1.0),))
    assert chosen.notes["x"] == 1 and chosen.notes["auto"]["chosen"] == "fixed"
