"""Long runs of the flit network: dead-cycle skipping, progress reports and interrupts."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from tvm_chiplet.runtime import simulator
from tvm_chiplet.runtime.noc import FlitParams
from tvm_chiplet.runtime.simulator import SimMessage, SimTask, simulate

_FIELDS = ("task_start", "task_end", "message_arrival", "link_busy_cycles")


def _random_graph(seed: int) -> dict:
    """A topologically ordered task graph over a line of links, with slow and fast, short and
    long links, empty messages and messages of many packets."""
    rng = np.random.default_rng(seed)
    num_tasks, num_clusters, num_links = int(rng.integers(3, 10)), int(rng.integers(1, 4)), 6
    tasks = [
        SimTask(
            f"t{i}", int(rng.integers(num_clusters)), float(rng.choice([0, 0.5, 3, 40, 200.25]))
        )
        for i in range(num_tasks)
    ]
    messages = []
    for dst in range(1, num_tasks):
        for src in rng.choice(dst, size=min(dst, int(rng.integers(1, 3))), replace=False):
            first = int(rng.integers(num_links))
            route = list(range(first, int(rng.integers(first, num_links + 1))))
            nbytes = int(rng.choice([0, 8, 100, 1000, 5000]))
            messages.append(SimMessage(int(src), dst, nbytes, route))
    params = FlitParams(
        num_vcs=int(rng.integers(1, 4)),
        vc_buffer_flits=int(rng.integers(1, 5)),
        packet_flits=int(rng.integers(1, 6)),
        allocator="greedy" if seed % 2 else "separable",
    )
    return {
        "tasks": tasks,
        "messages": messages,
        "link_bandwidth": rng.choice([4.0, 16.0, 32.0], size=num_links),
        "link_latency": rng.choice([0.0, 1.0, 5.0, 36.0], size=num_links),
        "num_clusters": num_clusters,
        "batches": 1 + seed % 4,
        "network": "flit",
        "flit_params": params,
    }


def _pipeline(batches: int = 40) -> dict:
    """Three clusters passing large messages over long links: many cycles, many slices."""
    tasks = [SimTask("a", 0, 100.0), SimTask("b", 1, 50.0), SimTask("c", 2, 10.0)]
    messages = [SimMessage(0, 1, 4096, [0]), SimMessage(1, 2, 2048, [1, 2])]
    return {
        "tasks": tasks,
        "messages": messages,
        "link_bandwidth": [16.0, 8.0, 16.0],
        "link_latency": [20.0, 3.0, 36.0],
        "num_clusters": 3,
        "batches": batches,
        "network": "flit",
    }


def _assert_same(a: simulator.SimResult, b: simulator.SimResult) -> None:
    for field in _FIELDS:
        np.testing.assert_array_equal(getattr(a, field), getattr(b, field), err_msg=field)
    assert a.total_cycles == b.total_cycles


@pytest.mark.parametrize("seed", range(40))
def test_skipping_dead_cycles_matches_stepping_every_cycle(seed):
    case = _random_graph(seed)
    _assert_same(simulate(**case), simulate(**case, skip_dead_cycles=False))


def test_skipping_keeps_the_results_of_the_cycle_by_cycle_model():
    # Values of the model stepping every cycle (skip_dead_cycles=False), pinned: flits at the
    # links' rates, 2 VCs of 4 flits plus the long link's credit round trip. The 1000-byte
    # message takes 10 + 36 + 2 + 1000 / 8 = 173 cycles on the flow model, 9 more here.
    tasks = [SimTask("a", 0, 10.0), SimTask("b", 1, 5.5), SimTask("c", 0, 1.0)]
    messages = [SimMessage(0, 1, 1000, [0, 1]), SimMessage(1, 2, 64, [2])]
    result = simulate(
        tasks, messages, [16.0, 8.0, 16.0], [36.0, 2.0, 5.0], 2, batches=3, network="flit",
        flit_params=FlitParams(num_vcs=2, vc_buffer_flits=4),
    )
    expected = [[182.0, 204.0], [387.0, 409.0], [592.0, 614.0]]
    np.testing.assert_array_equal(result.message_arrival, expected)
    assert result.total_cycles == 615.0
    np.testing.assert_array_equal(result.link_busy_cycles, [187.5, 375.0, 12.0])


def test_deadlock_error_is_the_same_with_and_without_skipping():
    # Four messages around a ring of four links, each over three links: a cyclic dependency.
    tasks = [SimTask(f"s{k}", k, 0.0) for k in range(4)] + [
        SimTask(f"d{k}", k, 0.0) for k in range(4)
    ]
    messages = [
        SimMessage(k, 4 + (k + 3) % 4, 4096, [k, (k + 1) % 4, (k + 2) % 4]) for k in range(4)
    ]
    params = FlitParams(num_vcs=1, vc_buffer_flits=2, packet_flits=16, deadlock_cycles=50)
    errors = []
    for skip in (True, False):
        with pytest.raises(RuntimeError, match="deadlock") as caught:
            simulate(
                tasks,
                messages,
                [16.0] * 4,
                [3.0] * 4,
                4,
                network="flit",
                flit_params=params,
                skip_dead_cycles=skip,
            )
        errors.append(str(caught.value))
    assert errors[0] == errors[1]


def test_long_run_reports_progress_monotonically(monkeypatch):
    monkeypatch.setattr(simulator, "_SLICE_SECONDS", 1e-4)
    case = _pipeline()
    reports: list[float] = []
    result = simulate(**case, progress=reports.append, skip_dead_cycles=False)
    assert len(reports) >= 3
    assert all(0.0 <= a <= b for a, b in itertools.pairwise(reports))
    assert reports[-1] == 1.0
    assert 0.0 < reports[len(reports) // 2] < 1.0
    _assert_same(result, simulate(**case))


def test_progress_is_called_for_every_network():
    for network in ("analytical", "flow", "flit"):
        reports: list[float] = []
        simulate(**{**_pipeline(2), "network": network}, progress=reports.append)
        assert reports[-1] == 1.0


def test_progress_must_be_callable():
    with pytest.raises(TypeError, match="progress must be a callable"):
        simulate(**_pipeline(1), progress=3)


def test_interrupt_stops_the_run_and_the_library_stays_usable(monkeypatch):
    monkeypatch.setattr(simulator, "_SLICE_SECONDS", 1e-4)
    case = _pipeline()
    calls: list[float] = []

    def interrupt(fraction: float) -> None:
        calls.append(fraction)
        if len(calls) == 2:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        simulate(**case, progress=interrupt, skip_dead_cycles=False)
    assert len(calls) == 2 and calls[-1] < 1.0
    # The next runs start afresh and give the uninterrupted result.
    _assert_same(simulate(**case), simulate(**case, skip_dead_cycles=False))
