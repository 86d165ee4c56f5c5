"""The fault benchmark's helpers (the fault-oblivious move, the dead-part route check) and its
loop on a small system: no route of any plan crosses a dead part."""

import networkx as nx

from tvm_chiplet.passes.analysis.op_graph import OpGraph, OpNode
from tvm_chiplet.targets.faults import with_faults
from tvm_chiplet.targets.system_generators import mesh_system
from tvm_chiplet.targets.workload import WorkItem, build_workload
from tvm_chiplet.tools.bench.faults import (
    healthy_case,
    oblivious_items,
    read_rows,
    routes_ok,
    run_cases,
    write_report,
)
from tvm_chiplet.tools.bench.tables import write_csv


def test_dead_clusters_work_moves_to_the_nearest_survivor_and_routes_avoid_dead_parts():
    healthy = mesh_system(3, 3)
    faulty, _ = with_faults(healthy, "x1y0,x0y1:x1y1")
    items = [WorkItem(f"op{i}", healthy.find_cluster(name).id, 1e6, 1e3, 0.0,
                      [(i - 1, 1000)] if i else [], 1000)
             for i, name in enumerate(["x0y0.k0", "x1y0.k0", "x2y1.k0", "x0y1.k0"])]
    moved = oblivious_items(healthy, faulty, items)
    # x1y0 is one hop from x0y0, x2y0 and x1y1: the smallest id survives it.
    assert [faulty.clusters[i.cluster].name for i in moved] == \
           ["x0y0.k0", "x0y0.k0", "x2y1.k0", "x0y1.k0"]
    workload = build_workload(moved, faulty)
    assert routes_ok(healthy, faulty, workload)
    tasks, messages, resident, fetches = workload
    broken = [{**messages[1], "route": [len(faulty.links)]}, *messages[2:]]
    assert not routes_ok(healthy, faulty, (tasks, broken, resident, fetches))


def test_no_route_of_any_benchmarked_plan_crosses_a_dead_part(tmp_path):
    healthy = mesh_system(3, 3)
    ops = 12
    nodes = [OpNode(i, f"op{i}", "call_tir", 2e7, 64, 100_000, 20_000) for i in range(ops)]
    graph = nx.DiGraph()
    graph.add_nodes_from(range(ops))
    graph.add_edges_from(((i, i + 1) for i in range(ops - 1)), nbytes=100_000)
    graph.add_edges_from(((i, i + 3) for i in range(0, ops - 3, 3)), nbytes=100_000)
    case = healthy_case("chain", "mesh-3x3", OpGraph(nodes, graph, output_ops=[ops - 1]),
                        healthy, batches=4)
    rows = []
    faults = [("chiplets", 1), ("chiplets", 2), ("links", 2), ("links", 4)]
    assert run_cases([case], faults, sets=2, batches=4, done=rows.append) == 2
    assert [(r["kind"], r["count"], r["seed"]) for r in rows] == \
           [(kind, count, seed) for seed in range(2) for kind, count in faults]
    assert all(r["routes_ok"] for r in rows)
    assert all(0 < r["surviving_compute"] <= 1 and r["fault_aware_retained"] > 0 for r in rows)
    write_csv(tmp_path / "faults.csv", rows)
    assert read_rows(tmp_path / "faults.csv") == rows
    write_report(str(tmp_path), rows, [], "run", batches=4)
    assert "- every route of every plan avoids the dead parts: True" in \
           (tmp_path / "faults.md").read_text()
