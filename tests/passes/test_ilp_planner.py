import itertools

import networkx as nx
import numpy as np
import pytest

import tvm_chiplet.tools.models
from tvm_chiplet.passes import ReduceGraph
from tvm_chiplet.passes.analysis.extract_op_graph import extract_op_graph
from tvm_chiplet.passes.analysis.op_graph import OpGraph, OpNode
from tvm_chiplet.passes.planners import ilp, ilp_intervals, ilp_solvers
from tvm_chiplet.passes.planners.base import PlanningProblem
from tvm_chiplet.passes.planners.evaluate import simulate_placement
from tvm_chiplet.passes.planners.ilp import IlpPlanner, memory_use, stage_costs
from tvm_chiplet.passes.planners.pipeline_planner import PipelinePlanner
from tvm_chiplet.passes.planners.placement import PlanningError
from tvm_chiplet.runtime.device import simulate_workload
from tvm_chiplet.targets.system_generators import mesh_system
from tvm_chiplet.targets.system_toml import load_system
from tvm_chiplet.targets.topology import Topology
from tvm_chiplet.tools.frontends import load_model


def make_graph(ops, edges):
    """``ops``: (flops, output_bytes, weight_bytes) per op; ``edges``: (u, v) pairs."""
    nodes = [
        OpNode(i, f"op{i}", "call_tir", float(f), 64, out, w) for i, (f, out, w) in enumerate(ops)
    ]
    graph = nx.DiGraph()
    graph.add_nodes_from(range(len(ops)))
    for u, v in edges:
        graph.add_edge(u, v, nbytes=ops[u][1])
    return OpGraph(nodes, graph, output_ops=[len(ops) - 1])


def make_problem(graph, clusters=3, sram_bytes=2 * 2**20, bandwidth=32.0):
    system = mesh_system(1, clusters, bandwidth=bandwidth, sram_bytes=sram_bytes)
    return PlanningProblem(graph, system, Topology(system), simulator=simulate_workload)


# A residual block: op 0's value is parked across ops 1 and 2; weights do not all fit.
RESIDUAL = make_graph(
    [(4e6, 4000, 0), (8e6, 3000, 5000), (6e6, 3000, 4000), (2e6, 1000, 3000)],
    [(0, 1), (1, 2), (2, 3), (0, 3)],
)


def brute_force(problem, objective, spill=True, contiguous=False):
    ops = problem.graph.ops
    order = problem.topology.cluster_order()
    n, k = len(ops), len(order)
    heavy = [i for i in range(n) if ops[i].weight_bytes]
    parked = sorted({u for values in ilp.parked_values(problem) for u in values})
    capacity = np.array([problem.system.clusters[c].sram_bytes for c in order])
    best = np.inf
    for op_stage in itertools.product(range(k), repeat=n):
        if any(op_stage[v] < op_stage[u] for u, v, _ in problem.graph.edges()):
            continue
        if sorted(set(op_stage)) != list(range(max(op_stage) + 1)):
            continue
        if contiguous and list(op_stage) != sorted(op_stage):
            continue
        streams = itertools.product([False, True], repeat=len(heavy)) if spill else [()]
        for stream in streams:
            streamed = {i for i, s in zip(heavy, stream, strict=False) if s}
            spills = itertools.product([False, True], repeat=len(parked)) if spill else [()]
            for spill_flags in spills:
                spilled = {u for u, s in zip(parked, spill_flags, strict=False) if s}
                args = (op_stage, order, streamed, spilled)
                if np.any(memory_use(problem, *args) > capacity):
                    continue
                costs = stage_costs(problem, *args)
                best = min(best, costs.max() if objective == "throughput" else costs.sum())
    return best


# The same block with a parked value too large to keep next to op 0's cluster's weights.
WIDE_RESIDUAL = make_graph(
    [(4e6, 6000, 1000), (8e6, 3000, 5000), (6e6, 3000, 4000), (2e6, 1000, 3000)],
    [(0, 1), (1, 2), (2, 3), (0, 3)],
)


# Two independent branches, ops 1 and 2: a contiguous split after op 1 sends op 1's large
# output to the next stage; the forward split {0, 2} | {1, 3} keeps it local.
BRANCHES = make_graph(
    [(4e6, 800, 0), (4e6, 20000, 0), (4e6, 100, 0), (4e6, 100, 0)],
    [(0, 1), (0, 2), (1, 3), (2, 3)],
)


@pytest.mark.parametrize("stages", ["contiguous", "forward"])
@pytest.mark.parametrize("objective", ["throughput", "latency"])
@pytest.mark.parametrize("sram_bytes", [4500, 8000, 2**20])
@pytest.mark.parametrize("clusters", [2, 3])
@pytest.mark.parametrize("graph", [RESIDUAL, WIDE_RESIDUAL, BRANCHES],
                         ids=["residual", "wide", "branches"])
def test_ilp_equals_brute_force_on_small_graph(graph, clusters, objective, sram_bytes, stages):
    problem = make_problem(graph, clusters=clusters, sram_bytes=sram_bytes)
    placement = IlpPlanner(objective=objective, time_limit=None, stages=stages,
                           judge_by_simulation=False).plan(problem)
    best = brute_force(problem, objective, contiguous=stages == "contiguous")
    notes = placement.notes
    assert placement.objective_cycles == pytest.approx(best)
    assert notes["status"] == "Optimal" and notes["result"] == "optimal"
    assert notes["lower_bound"] == pytest.approx(best) and notes["gap"] == pytest.approx(0)


def test_forward_stages_beat_contiguous_ones_where_branches_allow():
    problem = make_problem(BRANCHES, clusters=2, sram_bytes=2**20)
    contiguous = brute_force(problem, "throughput", contiguous=True)
    forward = brute_force(problem, "throughput")
    assert forward < contiguous
    placement = IlpPlanner(stages="forward", time_limit=None,
                           judge_by_simulation=False).plan(problem)
    assert placement.objective_cycles == pytest.approx(forward)


@pytest.mark.parametrize("stages", ["contiguous", "forward"])
def test_ilp_equals_brute_force_on_branches_with_hard_memory(stages):
    graph = make_graph(
        [(2e6, 800, 0), (9e6, 500, 3000), (3e6, 500, 3000), (7e6, 900, 2000), (1e6, 100, 0)],
        [(0, 1), (0, 2), (1, 3), (2, 4), (3, 4)],
    )
    problem = make_problem(graph, sram_bytes=6000, bandwidth=8.0)
    placement = IlpPlanner(spill=False, time_limit=None, stages=stages,
                           judge_by_simulation=False).plan(problem)
    best = brute_force(problem, "throughput", False, contiguous=stages == "contiguous")
    assert placement.objective_cycles == pytest.approx(best)
    assert placement.notes["streamed_weight_ops"] == []


def assert_objective_is_the_exact_stage_cost(problem, placement):
    notes = placement.notes
    costs = stage_costs(problem, placement.op_stage, placement.stage_clusters,
                        notes["streamed_weight_ops"], notes["spilled_values"])
    assert placement.objective_cycles == pytest.approx(costs.max())


def test_reported_objective_is_the_exact_stage_cost():
    problem = make_problem(RESIDUAL, sram_bytes=8000)
    placement = IlpPlanner(time_limit=None).plan(problem)
    assert_objective_is_the_exact_stage_cost(problem, placement)
    assert placement.op_cluster == tuple(placement.stage_clusters[s] for s in placement.op_stage)
    assert set(placement.op_stage) == set(range(len(placement.stage_clusters)))


def test_stage_costs_match_the_pipeline_dp_when_everything_fits():
    problem = make_problem(RESIDUAL)
    dp = PipelinePlanner().plan(problem)
    costs = stage_costs(problem, dp.op_stage, dp.stage_clusters)
    assert costs.max() == pytest.approx(dp.objective_cycles)


def test_highs_and_cbc_agree_on_small_case():
    problem = make_problem(RESIDUAL, sram_bytes=12000)
    cbc = IlpPlanner(solver="cbc", stages="forward", time_limit=None).plan(problem)
    highs = IlpPlanner(solver="highs", stages="forward", time_limit=None).plan(problem)
    assert highs.objective_cycles == pytest.approx(cbc.objective_cycles)
    assert highs.notes["gap"] == pytest.approx(0.0, abs=1e-6)
    assert cbc.notes["gap"] == pytest.approx(0.0, abs=1e-6)


def test_max_stages_limits_the_clusters_used():
    problem = make_problem(RESIDUAL, clusters=4)
    placement = IlpPlanner(max_stages=2, time_limit=None).plan(problem)
    assert len(placement.stage_clusters) <= 2
    assert max(placement.op_stage) < 2


def test_never_worse_than_dp_warm_start_on_resnet18():
    model = tvm_chiplet.tools.models.get_model("resnet18")
    graph = extract_op_graph(ReduceGraph()(load_model(model)))
    system = load_system("mesh-4x4")
    problem = PlanningProblem(graph, system, Topology(system), simulator=simulate_workload)
    placement = IlpPlanner(time_limit=5).plan(problem)
    notes = placement.notes
    assert notes["result"] in ("optimal", "heuristic")
    assert notes["lower_bound"] <= notes["objective"] * (1 + 1e-9) or notes["heuristic_kept"]
    assert placement.objective_cycles <= notes["warm_start_objective"]
    if not notes["heuristic_kept"]:  # else the placement is the heuristic's, not the ILP's
        assert_objective_is_the_exact_stage_cost(problem, placement)
    assert notes["solver"] == "highs" and notes["solve_seconds"] < 30
    assert notes["objective"] == placement.objective_cycles
    assert notes["gap"] is None or 0 <= notes["gap"] <= 1
    simulated = simulate_placement(problem, placement, 64).total_cycles
    pipeline = simulate_placement(problem, PipelinePlanner().plan(problem), 64).total_cycles
    assert simulated <= pipeline * (1 + 1e-9)
    assert notes["heuristic_kept"] == (notes["heuristic_simulated_cycles"]
                                       < notes["ilp_simulated_cycles"])
    assert {"status", "best_bound", "warm_start_kept", "objective_kind"} <= set(notes)


def test_weights_larger_than_all_sram_name_the_shortfall():
    problem = make_problem(RESIDUAL, sram_bytes=3000)
    with pytest.raises(PlanningError, match=r"need 0\.0 MB.*short by .*increase SRAM"):
        IlpPlanner(spill=False).plan(problem)


def test_infeasible_split_names_the_tightest_cluster():
    graph = make_graph([(1e6, 1000, 6_000_000)] * 3, [(0, 1), (1, 2)])
    problem = make_problem(graph, clusters=2, sram_bytes=10_000_000)
    with pytest.raises(
        PlanningError, match=r"needs 12\.0 MB on cluster \d, has 10\.0 MB \(short by 2\.0 MB\)"
    ):
        IlpPlanner(spill=False, time_limit=None).plan(problem)


def test_spilling_makes_the_same_case_feasible():
    graph = make_graph([(1e6, 1000, 6_000_000)] * 3, [(0, 1), (1, 2)])
    problem = make_problem(graph, clusters=2, sram_bytes=10_000_000)
    placement = IlpPlanner(time_limit=None).plan(problem)
    assert len(placement.notes["streamed_weight_ops"]) == 1


def test_interrupted_solve_returns_the_warm_start(monkeypatch):
    def interrupt(self, lp):
        raise KeyboardInterrupt

    monkeypatch.setattr(ilp_solvers._Cbc, "solve", interrupt)
    problem = make_problem(RESIDUAL)
    placement = IlpPlanner(solver="cbc", stages="forward").plan(problem)
    assert placement.notes["status"] == "interrupted"
    assert placement.notes["result"] == "heuristic"
    assert placement.notes["warm_start_kept"] is True
    assert placement.objective_cycles == placement.notes["warm_start_objective"]


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"objective": "energy"}, "valid objectives: throughput, latency"),
        ({"solver": "gurobi"}, "valid solvers: cbc, highs"),
        ({"time_limit": 0}, "time_limit must be"),
        ({"time_limit": -5.0}, "time_limit must be"),
        ({"time_limit": float("nan")}, "time_limit must be"),
        ({"max_stages": 0}, "max_stages must be >= 1"),
        ({"stages": "any"}, "valid stage models: contiguous, forward"),
        ({"mip_gap": 1.5}, "mip_gap must be a relative gap in"),
    ],
)
def test_invalid_options_are_refused(options, message):
    with pytest.raises(PlanningError, match=message):
        IlpPlanner(**options)


def test_missing_highs_says_how_to_install_it(monkeypatch):
    monkeypatch.setattr(ilp_solvers.pulp.HiGHS, "available", lambda self: False)
    with pytest.raises(PlanningError, match=r"pip install highspy"):
        IlpPlanner(solver="highs")


def test_a_crashing_solver_leaves_the_warm_start(monkeypatch):
    import pulp

    def crash(self, *args, **kwargs):
        raise pulp.PulpSolverError("Pulp: Error while trying to execute cbc")

    monkeypatch.setattr(pulp.LpProblem, "solve", crash)
    problem = make_problem(RESIDUAL, sram_bytes=8000)
    placement = IlpPlanner(solver="cbc", stages="forward", time_limit=5,
                           judge_by_simulation=False).plan(problem)
    assert placement.notes["status"] == "CBC failed"
    assert placement.notes["warm_start_kept"] is True
    assert placement.objective_cycles == placement.notes["warm_start_objective"]


def test_time_limited_solve_is_labelled_with_its_gap(monkeypatch):
    def stop_early(self, lp):
        return ilp_solvers.SolveResult("Time limit", 1000.0, None)

    monkeypatch.setattr(ilp_solvers._Highs, "solve", stop_early)
    problem = make_problem(RESIDUAL, sram_bytes=8000)
    placement = IlpPlanner(stages="forward", judge_by_simulation=False).plan(problem)
    notes = placement.notes
    assert notes["result"] == "time-limited"
    assert notes["lower_bound"] == 1000.0
    assert notes["gap"] == pytest.approx((placement.objective_cycles - 1000.0)
                                         / placement.objective_cycles)


def test_physical_bound_is_reported_next_to_the_ilp_bound():
    problem = make_problem(RESIDUAL, sram_bytes=8000)
    notes = IlpPlanner(time_limit=None, judge_by_simulation=False).plan(problem).notes
    assert 0 < notes["physical_bound"] <= notes["lower_bound"]
    assert notes["decomposition"]["bound"] == pytest.approx(notes["lower_bound"])


def random_graph(rng, n):
    ops = [(float(rng.integers(1, 10)) * 1e6, int(rng.integers(1, 6)) * 500,
            int(rng.integers(0, 4)) * 1500) for _ in range(n)]
    edges = [(i, i + 1) for i in range(n - 1)]
    edges += [(u, v) for u in range(n) for v in range(u + 2, n) if rng.random() < 0.3]
    return make_graph(ops, edges)


@pytest.mark.parametrize("seed", range(6))
def test_interval_floors_never_exceed_exact_costs(seed):
    rng = np.random.default_rng(seed)
    graph = random_graph(rng, 6)
    problem = make_problem(graph, clusters=2, sram_bytes=4000)
    stages = ilp_intervals._Stages(problem, [0, 1], spill=True)
    for k in range(2):
        floor = stages.compute_floor(k)
        for p in range(6):
            for q in range(p + 1, 7):
                exact = ilp_intervals.stage_residency(stages, k, p, q)
                assert floor[p, q] <= exact[0] * (1 + 1e-9)


@pytest.mark.parametrize("seed", range(6))
def test_stage_residency_is_the_cheapest_fitting_choice(seed):
    rng = np.random.default_rng(seed)
    graph = random_graph(rng, 6)
    problem = make_problem(graph, clusters=1, sram_bytes=4000)
    stages = ilp_intervals._Stages(problem, [0], spill=True)
    cost, streamed, spilled, proven = ilp_intervals.stage_residency(stages, 0, 0, 6)
    best = brute_force(problem, "throughput")  # one cluster: one stage of all six ops
    assert proven
    assert cost == pytest.approx(best)
    op_stage = [0] * 6
    assert stage_costs(problem, op_stage, [0], streamed, spilled)[0] == pytest.approx(cost)
    assert memory_use(problem, op_stage, [0], streamed, spilled)[0] <= 4000


@pytest.mark.parametrize("seed", range(20))
def test_knapsack_matches_enumeration(seed):
    rng = np.random.default_rng(seed)
    weights = list(rng.integers(1, 20, 8).astype(float))
    values = list(rng.integers(1, 30, 8).astype(float))
    order = sorted(range(8), key=lambda j: -values[j] / weights[j])
    weights, values = [weights[j] for j in order], [values[j] for j in order]
    best = max(sum(v for v, t in zip(values, take, strict=True) if t)
               for take in itertools.product([0, 1], repeat=8)
               if sum(w for w, t in zip(weights, take, strict=True) if t) <= 30)
    value, items = ilp_intervals._knapsack(weights, values, 30.0)
    assert value == pytest.approx(best)
    assert sum(weights[j] for j in items) <= 30


@pytest.mark.parametrize("solver", ["cbc", "highs"])
@pytest.mark.parametrize("seed", range(3))
def test_stage_residency_milp_matches_enumeration(monkeypatch, seed, solver):
    rng = np.random.default_rng(seed)
    problem = make_problem(random_graph(rng, 6), clusters=1, sram_bytes=4000)
    stages = ilp_intervals._Stages(problem, [0], spill=True)
    enumerated = ilp_intervals.stage_residency(stages, 0, 0, 6)
    monkeypatch.setattr(ilp_intervals, "MAX_ENUMERATED", 0)
    backend = ilp_solvers.make_solver(solver, None, False, False, 0.0)
    as_milp = ilp_intervals.stage_residency(stages, 0, 0, 6, backend.solve)
    assert as_milp[0] == pytest.approx(enumerated[0]) and as_milp[3]
    op_stage = [0] * 6
    assert stage_costs(problem, op_stage, [0], as_milp[1], as_milp[2])[0] == pytest.approx(
        as_milp[0])


def test_plan_is_realised_with_its_fastest_dram_placement():
    problem = make_problem(RESIDUAL, clusters=3, sram_bytes=4500)
    placement = IlpPlanner(time_limit=None).plan(problem)
    notes = placement.notes
    tried = notes["dram_placement_simulated_cycles"]
    assert notes["dram_placement"] == min(tried, key=tried.get)
    if not notes["heuristic_kept"]:
        assert notes["ilp_simulated_cycles"] == min(tried.values())
        assert placement.dram_policy == ("interleave" if notes["dram_placement"] == "interleave"
                                         else "balanced")


def test_too_large_interval_table_leaves_the_contiguous_model_to_the_milp(monkeypatch):
    monkeypatch.setattr(ilp_intervals, "MAX_INTERVAL_CELLS", 10)
    problem = make_problem(RESIDUAL, sram_bytes=8000)
    placement = IlpPlanner(time_limit=None, judge_by_simulation=False).plan(problem)
    assert placement.notes["decomposition"].startswith("no result")
    assert placement.objective_cycles == pytest.approx(
        brute_force(problem, "throughput", contiguous=True))
    assert placement.notes["result"] == "optimal"


def test_interrupted_decomposition_returns_the_warm_start(monkeypatch):
    def interrupt(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(ilp, "solve_intervals", interrupt)
    problem = make_problem(RESIDUAL)
    placement = IlpPlanner(judge_by_simulation=False).plan(problem)
    assert placement.notes["status"] == "interrupted"
    assert placement.notes["result"] == "heuristic"
    assert placement.objective_cycles == placement.notes["warm_start_objective"]


def test_ops_split_by_the_program_over_strategies_and_groups_win_where_they_simulate_faster():
    from tvm_chiplet.passes.plan_split_placement import split_problem

    mod = load_model(tvm_chiplet.tools.models.get_model("small-cnn"))
    problem, _ = split_problem(mod, ReduceGraph()(mod), load_system("mesh-4x4"),
                               simulate_workload)
    staged = IlpPlanner(objective="latency", splits=False).plan(problem)
    assert not staged.splits and "split_plan_kept" not in staged.notes
    placement = IlpPlanner(objective="latency").plan(problem)
    notes = placement.notes
    stage_plan = notes["heuristic_simulated_cycles" if notes["heuristic_kept"]
                       else "ilp_simulated_cycles"]
    # One image of a small CNN on 16 clusters: splitting its convs beats any pipeline.
    assert notes["split_plan_kept"] and notes["result"] == "split-ilp"
    assert notes["split_plan_simulated_cycles"] < stage_plan
    assert notes["split_plan"]["ilp"]["status"] == "Optimal"
    assert placement.splits and placement.strategy == "ilp"
    assert simulate_placement(problem, placement, 1, as_built=True).total_cycles == (
        pytest.approx(notes["split_plan_simulated_cycles"]))


def test_highs_prints_nothing_unless_asked():
    import subprocess
    import sys

    # HiGHS prints a banner when a process builds its first solver; a fresh process shows it.
    script = (
        "import pulp\n"
        "from tvm_chiplet.passes.planners.ilp_solvers import make_solver\n"
        "lp = pulp.LpProblem('tiny', pulp.LpMinimize)\n"
        "x = pulp.LpVariable('x', 0, 1, cat='Binary')\n"
        "lp += x\n"
        "lp += x >= 0\n"
        "print(make_solver('highs', 10.0, False, False).solve(lp).status)\n"
    )
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                         check=True).stdout
    assert out.strip() == "Optimal", out
