"""The fault benchmark's helpers: the fault-oblivious move and the dead-part route check."""

from tvm_chiplet.targets.faults import with_faults
from tvm_chiplet.targets.system_generators import mesh_system
from tvm_chiplet.targets.workload import WorkItem, build_workload
from tvm_chiplet.tools.bench.faults import oblivious_items, routes_ok


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
