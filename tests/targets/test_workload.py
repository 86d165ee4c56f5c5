import pytest

from tvm_chiplet.runtime.profile import simulate_workload
from tvm_chiplet.targets.topology import mesh_system
from tvm_chiplet.targets.workload import WorkItem, build_workload

WEIGHTS = 64_000


def streaming_system():
    # Two one-cluster chiplets, SRAM far too small for the weights, one DRAM controller.
    return mesh_system(1, 2, bandwidth=1000.0, latency=1.0, sram_bytes=1024,
                       dram_bandwidth=64.0, dram_at=((0, 0),))


def test_clusters_whose_weights_overflow_sram_fetch_them_from_dram():
    system = streaming_system()
    items = [WorkItem("a", 0, 2.0, 8.0, WEIGHTS), WorkItem("b", 0, 2.0, 8.0, WEIGHTS, [(0, 8)])]
    tasks, _, resident, fetches = build_workload(items, system)
    assert resident == [False, True]
    assert [f["task"] for f in fetches] == [0, 1]
    assert [f["after"] for f in fetches] == [None, 0]
    assert all(f["bytes"] == WEIGHTS and f["route"] == [] for f in fetches)
    sim = simulate_workload(tasks, [], system, network="analytical", fetches=fetches)
    fetch = WEIGHTS / 64.0
    assert sim.task_start[0, 0] == pytest.approx(fetch)
    assert sim.task_start[0, 1] == pytest.approx(sim.task_end[0, 0] + fetch)


def test_two_clusters_streaming_from_one_controller_share_its_bandwidth():
    system = streaming_system()
    items = [WorkItem("a", 0, 2.0, 8.0, WEIGHTS), WorkItem("b", 1, 2.0, 8.0, WEIGHTS)]
    tasks, messages, _, fetches = build_workload(items, system)
    alone = simulate_workload(tasks[:1], [], system, fetches=fetches[:1])
    shared = simulate_workload(tasks, messages, system, fetches=fetches)
    analytical = simulate_workload(tasks, messages, system, network="analytical",
                                   fetches=fetches)
    assert alone.task_start[0, 0] == pytest.approx(WEIGHTS / 64.0)
    assert shared.task_start[0, 0] == pytest.approx(2 * WEIGHTS / 64.0, rel=0.01)
    assert analytical.task_start[0, 0] == pytest.approx(WEIGHTS / 64.0, rel=0.01)
    assert len(shared.link_bytes) == len(system.links)
    assert len(shared.cluster_busy_cycles) == system.num_clusters


def test_resident_weights_need_no_fetch():
    system = mesh_system(1, 2, sram_bytes=10 * WEIGHTS)
    _, _, resident, fetches = build_workload([WorkItem("a", 1, 2.0, 8.0, WEIGHTS)], system)
    assert resident == [True, True] and fetches == []


def test_dram_controller_load_is_reported():
    from tvm_chiplet.runtime.profile import profile_report

    system = streaming_system()
    items = [WorkItem("a", 0, 2.0, 8.0, WEIGHTS), WorkItem("b", 1, 2.0, 8.0, WEIGHTS)]
    tasks, messages, _, fetches = build_workload(items, system)
    sim = simulate_workload(tasks, messages, system, fetches=fetches)
    assert sim.dram_bytes.tolist() == [2 * WEIGHTS]
    assert sim.dram_busy_cycles[0] == pytest.approx(2 * WEIGHTS / 64.0, rel=0.01)
    plan = {"tasks": [{**t, "op_id": i} for i, t in enumerate(tasks)], "messages": messages,
            "segments": [], "clusters_used": [0, 1]}
    report = profile_report(plan, system, sim)
    assert report["drams"][0]["bytes"] == 2 * WEIGHTS
    assert 0 < report["drams"][0]["utilisation"] <= 1
