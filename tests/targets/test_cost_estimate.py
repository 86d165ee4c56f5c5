"""Tests of the cost estimate in parts from routing tables, against hand counts and the
device simulator's ranking."""

import itertools
import random

import pytest

from tvm_chiplet.runtime.device import simulate_workload
from tvm_chiplet.targets.cost_estimate import estimate_cost, rank_correlation
from tvm_chiplet.targets.faults import with_faults
from tvm_chiplet.targets.routing import routing_tables
from tvm_chiplet.targets.system_generators import mesh_system
from tvm_chiplet.targets.system_toml import load_system
from tvm_chiplet.targets.workload import WorkItem, build_workload


def test_parts_are_the_busiest_resources_on_the_faulty_routes():
    # A 2x2 without x0y0-x1y0: x0y0 -> x1y0 detours over x0y1 and x1y1 (3 links of 8 B/cycle,
    # latency 2 each).
    system = mesh_system(2, 2, bandwidth=8.0, latency=2.0,
                         faults={"links": [["x0y0", "x1y0"]]})
    routing = routing_tables(system)
    a, b = system.find_cluster("x0y0.k0").id, system.find_cluster("x1y0.k0").id
    assert len(routing.route(a, b)) == 3
    tasks = [{"cluster": a, "cycles": 100.0, "stage": 0}, {"cluster": b, "cycles": 50.0,
                                                           "stage": 1}]
    messages = [{"src": 0, "dst": 1, "bytes": 800, "multicast": None}]
    cost = estimate_cost(tasks, messages, [], system, routing)
    assert (cost.compute, cost.intra_op, cost.inter_op, cost.contention, cost.dram) == \
           (100.0, 0.0, 100.0, 0.0, 0.0)
    assert cost.per_inference == 100.0
    assert cost.latency == 100.0 + 3 * 2.0 + 100.0 + 50.0
    assert cost.cycles(3) == cost.latency + 2 * 100.0


def _random_chain_workload(system, rng, ops=24):
    k = rng.randint(2, system.num_clusters)
    clusters = rng.sample(range(system.num_clusters), k)
    bounds = [0, *sorted(rng.sample(range(1, ops), k - 1)), ops]
    items, stages = [], []
    for stage, (lo, hi) in enumerate(itertools.pairwise(bounds)):
        for i in range(lo, hi):
            deps = [(i - 1, 200_000)] if i else []
            if i >= 3 and i % 3 == 0:
                deps.append((i - 3, 100_000))
            items.append(WorkItem(f"op{i}", clusters[stage], 2e6, 1e5, 4e4, deps, 200_000))
            stages.append(stage)
    tasks, messages, _, fetches = build_workload(items, system)
    for task, stage in zip(tasks, stages, strict=True):
        task["stage"] = stage
    return tasks, messages, fetches


def test_estimate_ranks_placements_as_the_simulator_does_on_a_faulty_mesh():
    system, _ = with_faults(load_system("mesh-4x4"), "x1y1,x2y2,x0y0:x1y0,x2y0:x2y1")
    routing = routing_tables(system)
    rng = random.Random(0)
    estimated, simulated = [], []
    for _ in range(20):
        tasks, messages, fetches = _random_chain_workload(system, rng)
        estimated.append(estimate_cost(tasks, messages, fetches, system, routing).cycles(64))
        simulated.append(float(simulate_workload(tasks, messages, system, 64, "flow",
                                                 fetches=fetches).total_cycles))
    assert rank_correlation(estimated, simulated) >= 0.8
    assert estimated == pytest.approx(simulated, rel=0.6)


def test_rank_correlation_shares_ranks_between_ties():
    assert rank_correlation([1, 2, 3], [10, 20, 30]) == pytest.approx(1.0)
    assert rank_correlation([1, 2, 3], [3, 2, 1]) == pytest.approx(-1.0)
    assert rank_correlation([1, 1, 2, 3], [1, 2, 3, 4]) == pytest.approx(0.9486833)
