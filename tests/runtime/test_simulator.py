"""Tests of the C++ device timing simulator against closed forms and the Python reference."""

import dataclasses

import numpy as np
import pytest
import tvm_ffi

from tests.runtime.simulator_reference import simulate_reference
from tvm_chiplet.runtime import simulator
from tvm_chiplet.runtime.noc import FlitParams
from tvm_chiplet.runtime.simulator import (
    NETWORK_MODELS,
    SimMessage,
    SimResult,
    SimTask,
    SimulationStalledError,
    simulate,
)

BOTH_SIMULATORS = pytest.mark.parametrize("run", [simulate, simulate_reference])
BOTH_NETWORKS = pytest.mark.parametrize("network", NETWORK_MODELS)


def _assert_same_result(actual: SimResult, expected: SimResult) -> None:
    tolerance = {"rtol": 1e-9, "atol": 1e-6}
    np.testing.assert_allclose(actual.total_cycles, expected.total_cycles, **tolerance)
    for field in (
        "task_start",
        "task_end",
        "message_arrival",
        "cluster_busy_cycles",
        "cluster_wait_cycles",
        "cluster_idle_cycles",
        "cluster_utilisation",
        "link_bytes",
        "link_busy_cycles",
        "link_utilisation",
        "latency_per_batch",
    ):
        np.testing.assert_allclose(
            getattr(actual, field), getattr(expected, field), err_msg=field, **tolerance
        )
    np.testing.assert_allclose(actual.throughput_per_cycle, expected.throughput_per_cycle)


def _random_case(seed: int) -> dict:
    """A small random DAG; for every third seed the task order on a cluster need not be
    topological, which may deadlock."""
    rng = np.random.default_rng(seed)
    num_tasks = int(rng.integers(2, 9))
    num_clusters = int(rng.integers(1, 4))
    num_links = int(rng.integers(1, 5))
    topological = rng.permutation(num_tasks) if seed % 3 == 0 else np.arange(num_tasks)
    tasks = [
        SimTask(f"t{t}", int(rng.integers(num_clusters)), float(rng.integers(0, 50)))
        for t in range(num_tasks)
    ]
    messages = []
    for _ in range(int(rng.integers(0, 2 * num_tasks))):
        a, b = sorted(rng.choice(num_tasks, size=2, replace=False))
        route = rng.permutation(num_links)[: int(rng.integers(0, min(3, num_links) + 1))]
        messages.append(
            SimMessage(
                src_task=int(topological[a]),
                dst_task=int(topological[b]),
                nbytes=int(rng.choice([0, rng.integers(1, 400)], p=[0.1, 0.9])),
                route=[int(link) for link in route],
            )
        )
    if seed % 4 == 1:
        messages = _with_multicasts(messages, np.random.default_rng(1000 + seed))
    return {
        "tasks": tasks,
        "messages": messages,
        "link_bandwidth": rng.choice([1.0, 2.0, 4.0, 3.5], size=num_links),
        "link_latency": rng.integers(0, 6, size=num_links).astype(float),
        "num_clusters": num_clusters,
        "batches": int(rng.integers(1, 5)),
    }


def _with_multicasts(messages: list[SimMessage], rng) -> list[SimMessage]:
    """Messages leaving one task become multicasts (one id, the first one's bytes), some."""
    grouped = []
    for message in messages:
        first = next((m for m in grouped if m.src_task == message.src_task), None)
        if first is not None and rng.random() < 0.7:
            group = first.multicast if first.multicast is not None else len(grouped)
            grouped = [dataclasses.replace(m, multicast=group) if m is first else m
                       for m in grouped]
            message = dataclasses.replace(message, nbytes=first.nbytes, multicast=group)
        grouped.append(message)
    return grouped


@BOTH_NETWORKS
@pytest.mark.parametrize("seed", range(40))
def test_native_core_matches_reference_on_random_dags(seed, network):
    case = _random_case(seed)
    try:
        expected = simulate_reference(**case, network=network)
    except SimulationStalledError as error:
        with pytest.raises(SimulationStalledError) as raised:
            simulate(**case, network=network)
        assert str(raised.value) == str(error)
        return
    actual = simulate(**case, network=network)
    _assert_same_result(actual, expected)
    total = actual.total_cycles
    cluster_sum = (
        actual.cluster_busy_cycles + actual.cluster_wait_cycles + actual.cluster_idle_cycles
    )
    np.testing.assert_allclose(cluster_sum, total, atol=1e-6)
    assert np.all(actual.link_busy_cycles <= total + 1e-6)


def test_random_cases_include_contention_and_stalls():
    """Guards the random test above: its cases must exercise link sharing and deadlocks."""
    stalled, flow_slower = 0, 0
    for seed in range(40):
        case = _random_case(seed)
        try:
            flow = simulate(**case, network="flow")
        except SimulationStalledError:
            stalled += 1
            continue
        analytical = simulate(**case, network="analytical")
        flow_slower += flow.total_cycles > analytical.total_cycles + 1e-6
    assert stalled >= 2
    assert flow_slower >= 5
    multicasts = sum(
        len({m.multicast for m in _random_case(seed)["messages"] if m.multicast is not None})
        for seed in range(40)
    )
    assert multicasts >= 5


def test_native_network_models_match_python_list():
    assert simulator._native_network_models() == NETWORK_MODELS


@BOTH_SIMULATORS
@BOTH_NETWORKS
def test_chain_on_one_cluster_sums_cycles(run, network):
    cycles = [5.0, 7.5, 11.0, 3.0]
    tasks = [SimTask(f"t{i}", 0, c) for i, c in enumerate(cycles)]
    messages = [SimMessage(i, i + 1, 128) for i in range(3)]
    result = run(tasks, messages, [1.0], [1.0], num_clusters=1, network=network)
    assert result.total_cycles == sum(cycles)
    np.testing.assert_array_equal(result.task_start[0], np.cumsum([0.0, *cycles[:-1]]))
    assert result.cluster_wait_cycles[0] == 0.0
    assert result.cluster_utilisation[0] == 1.0
    np.testing.assert_array_equal(result.message_arrival[0], np.cumsum(cycles)[:-1])


@BOTH_SIMULATORS
@BOTH_NETWORKS
def test_message_over_three_hops_costs_latencies_plus_slowest_serialisation(run, network):
    tasks = [SimTask("producer", 0, 10.0), SimTask("consumer", 1, 20.0)]
    messages = [SimMessage(0, 1, nbytes=100, route=[2, 0, 1])]
    bandwidth, latency = [10.0, 4.0, 8.0, 1.0], [1.0, 2.0, 3.0, 100.0]
    result = run(tasks, messages, bandwidth, latency, num_clusters=2, network=network)
    arrival = 10.0 + (1.0 + 2.0 + 3.0) + 100 / 4.0
    assert result.message_arrival[0, 0] == pytest.approx(arrival)
    assert result.total_cycles == pytest.approx(arrival + 20.0)
    np.testing.assert_allclose(result.link_bytes, [100, 100, 100, 0])
    np.testing.assert_allclose(result.link_busy_cycles, [25.0, 25.0, 25.0, 0.0])
    np.testing.assert_allclose(result.cluster_wait_cycles, [0.0, arrival])
    np.testing.assert_allclose(result.cluster_idle_cycles, [arrival + 20.0 - 10.0, 0.0])


def _two_transfers_sharing_link_zero(first_bytes: int, second_bytes: int) -> dict:
    tasks = [
        SimTask("send_a", 0, 10.0),
        SimTask("send_b", 1, 10.0),
        SimTask("recv_a", 2, 1.0),
        SimTask("recv_b", 3, 1.0),
    ]
    messages = [
        SimMessage(0, 2, first_bytes, route=[0, 1]),
        SimMessage(1, 3, second_bytes, route=[0, 2]),
    ]
    return {
        "tasks": tasks,
        "messages": messages,
        "link_bandwidth": [10.0, 100.0, 100.0],
        "link_latency": [2.0, 3.0, 3.0],
        "num_clusters": 4,
    }


@BOTH_SIMULATORS
def test_flow_model_shares_a_link_between_concurrent_messages(run):
    result = run(**_two_transfers_sharing_link_zero(100, 100), network="flow")
    np.testing.assert_allclose(result.message_arrival[0], [10 + 5 + 2 * 10.0] * 2)
    assert result.link_busy_cycles[0] == pytest.approx(20.0)


@BOTH_SIMULATORS
def test_analytical_model_ignores_contention(run):
    result = run(**_two_transfers_sharing_link_zero(100, 100), network="analytical")
    np.testing.assert_allclose(result.message_arrival[0], [10 + 5 + 10.0] * 2)
    assert result.link_busy_cycles[0] == pytest.approx(10.0)


@BOTH_SIMULATORS
def test_flow_model_speeds_up_the_survivor_when_a_transfer_ends(run):
    result = run(**_two_transfers_sharing_link_zero(40, 120), network="flow")
    # Both at 5 B/cycle until the first is done at 8 cycles; the second's last 80 B at 10 B/cycle.
    np.testing.assert_allclose(result.message_arrival[0], [10 + 5 + 8.0, 10 + 5 + 16.0])


@BOTH_SIMULATORS
def test_flow_model_gives_bandwidth_left_by_a_bottlenecked_flow_to_others(run):
    tasks = [SimTask("a", 0, 0.0), SimTask("b", 1, 0.0), SimTask("c", 2, 0.0)]
    # Message 1 is held to 2 B/cycle by link 1, so message 0 gets 8 of link 0's 10 B/cycle.
    messages = [SimMessage(0, 2, 80, route=[0]), SimMessage(1, 2, 20, route=[0, 1])]
    result = run(tasks, messages, [10.0, 2.0], [0.0, 0.0], num_clusters=3, network="flow")
    np.testing.assert_allclose(result.message_arrival[0], [10.0, 10.0])


@BOTH_SIMULATORS
def test_flow_model_leaves_shared_links_alone_when_a_transfer_runs_on_free_ones(run):
    tasks = [SimTask("a", 0, 0.0), SimTask("b", 1, 0.0), SimTask("c", 2, 4.0),
             SimTask("d", 3, 0.0)]
    # Messages 0 and 1 share link 0 as in the survivor test; message 2 starts at 4 cycles on
    # links 1 and 2, which nothing else uses: 3 B/cycle (its slower link) from 4 to 14, and
    # neither its start nor its end changes the others' rates.
    messages = [SimMessage(0, 3, 40, route=[0]), SimMessage(1, 3, 120, route=[0]),
                SimMessage(2, 3, 30, route=[1, 2])]
    result = run(tasks, messages, [10.0, 6.0, 3.0], [0.0, 0.0, 0.0], num_clusters=4,
                 network="flow")
    np.testing.assert_allclose(result.message_arrival[0], [8.0, 16.0, 14.0])


def _broadcast_down_a_line(multicast):
    """Task 0 on cluster 0 sends 100 B to clusters 1, 2 and 3 down the line 0 -> 1 -> 2 -> 3."""
    tasks = [SimTask("send", 0, 10.0)] + [SimTask(f"get{c}", c, 1.0) for c in (1, 2, 3)]
    messages = [SimMessage(0, c, 100, route=list(range(c)), multicast=multicast)
                for c in (1, 2, 3)]
    return {"tasks": tasks, "messages": messages, "link_bandwidth": [10.0] * 3,
            "link_latency": [1.0] * 3, "num_clusters": 4}


@BOTH_SIMULATORS
def test_flow_model_sends_a_multicast_once_over_the_tree_of_its_routes(run):
    unicast = run(**_broadcast_down_a_line(None), network="flow")
    multicast = run(**_broadcast_down_a_line(7), network="flow")
    # Unicast: three transfers share link 0 (30 cycles for the three), then two share link 1.
    np.testing.assert_allclose(unicast.message_arrival[0], [10 + 30 + 1, 10 + 30 + 2,
                                                            10 + 30 + 3])
    np.testing.assert_array_equal(unicast.link_bytes, [300, 200, 100])
    # Multicast: 100 B once over every link, each copy arriving its own route's latency later.
    np.testing.assert_allclose(multicast.message_arrival[0], [10 + 10 + 1, 10 + 10 + 2,
                                                              10 + 10 + 3])
    np.testing.assert_array_equal(multicast.link_bytes, [100, 100, 100])
    np.testing.assert_allclose(multicast.link_busy_cycles, [10.0] * 3)


def test_flit_model_sends_every_copy_of_a_multicast():
    unicast = simulate(**_broadcast_down_a_line(None), network="flit")
    multicast = simulate(**_broadcast_down_a_line(7), network="flit")
    np.testing.assert_array_equal(multicast.message_arrival, unicast.message_arrival)
    np.testing.assert_array_equal(multicast.link_bytes, [300, 200, 100])


@BOTH_SIMULATORS
@BOTH_NETWORKS
def test_two_stage_pipeline_takes_batches_plus_one_stage_times(run, network):
    cycles, batches = 100.0, 8
    tasks = [SimTask("stage0", 0, cycles), SimTask("stage1", 1, cycles)]
    messages = [SimMessage(0, 1, 0, route=[0])]
    result = run(tasks, messages, [1.0], [0.0], num_clusters=2, batches=batches, network=network)
    assert result.total_cycles == (batches + 1) * cycles
    assert result.throughput_per_cycle == pytest.approx(1 / cycles)
    np.testing.assert_allclose(result.latency_per_batch, 2 * cycles)
    np.testing.assert_allclose(result.cluster_wait_cycles, [0.0, cycles])
    np.testing.assert_allclose(result.cluster_idle_cycles, [cycles, 0.0])
    np.testing.assert_allclose(result.task_start[:, 1], cycles * np.arange(1, batches + 1))


@BOTH_SIMULATORS
def test_zero_byte_message_pays_route_latency_only(run):
    tasks = [SimTask("a", 0, 4.0), SimTask("b", 1, 1.0)]
    messages = [SimMessage(0, 1, 0, route=[0, 1])]
    result = run(tasks, messages, [1.0, 1.0], [3.0, 5.0], num_clusters=2)
    assert result.message_arrival[0, 0] == 12.0
    np.testing.assert_array_equal(result.link_busy_cycles, [0.0, 0.0])


@BOTH_SIMULATORS
def test_cluster_without_tasks_is_idle(run):
    result = run([SimTask("only", 1, 9.0)], [], [], [], num_clusters=3)
    np.testing.assert_array_equal(result.cluster_idle_cycles, [9.0, 0.0, 9.0])
    np.testing.assert_array_equal(result.cluster_utilisation, [0.0, 1.0, 0.0])
    assert result.throughput_per_cycle == pytest.approx(1 / 9.0)


@pytest.mark.parametrize("network", [*NETWORK_MODELS, "flit"])
def test_no_tasks_take_zero_cycles(network):
    result = simulate([], [], [1.0], [1.0], num_clusters=2, batches=3, network=network)
    assert result.total_cycles == 0.0
    assert result.task_start.shape == result.task_end.shape == (3, 0)
    np.testing.assert_array_equal(result.latency_per_batch, [0.0, 0.0, 0.0])
    np.testing.assert_array_equal(result.cluster_utilisation, [0.0, 0.0])
    assert result.throughput_per_cycle == np.inf


def test_simulation_is_deterministic():
    case = _random_case(3)
    first, second = simulate(**case), simulate(**case)
    for field in ("task_start", "task_end", "message_arrival", "link_busy_cycles"):
        np.testing.assert_array_equal(getattr(first, field), getattr(second, field))


@BOTH_SIMULATORS
def test_stall_names_blocked_tasks(run):
    # Cluster 0 runs 'first' before 'last', but 'first' needs 'middle', which needs 'last'.
    tasks = [SimTask("first", 0, 1.0), SimTask("middle", 1, 1.0), SimTask("last", 0, 1.0)]
    messages = [SimMessage(2, 1, 8), SimMessage(1, 0, 8)]
    with pytest.raises(SimulationStalledError, match=r"'first' \(task 0.*waits for 'middle'"):
        run(tasks, messages, [], [], num_clusters=2)


def test_seconds_converts_cycles_at_frequency():
    assert SimResult.seconds(2e9, 1e9) == 2.0
    with pytest.raises(ValueError, match="frequency_hz"):
        SimResult.seconds(1.0, 0.0)


_VALID = {
    "tasks": [SimTask("a", 0, 1.0), SimTask("b", 1, 1.0)],
    "messages": [SimMessage(0, 1, 16, route=[0])],
    "link_bandwidth": [8.0],
    "link_latency": [1.0],
    "num_clusters": 2,
}


@BOTH_SIMULATORS
@pytest.mark.parametrize(
    ("change", "match"),
    [
        ({"network": "mesh"}, r"unknown network model 'mesh'; expected one of 'analytical', 'fl"),
        ({"batches": 0}, r"batches must be an integer >= 1.*got 0"),
        ({"num_clusters": 0}, r"num_clusters must be an integer >= 1"),
        ({"tasks": [SimTask("a", 0, 1), SimTask("b", 2, 1)]}, r"task 1 \('b'\) is on cluster 2"),
        ({"tasks": [SimTask("a", 0, -1), SimTask("b", 1, 1)]}, r"task 0 \('a'\) takes -1.0"),
        ({"messages": [SimMessage(0, 5, 16)]}, r"names task 5; tasks are numbered 0..1"),
        ({"messages": [SimMessage(0, 1, -1)]}, r"carries -1 bytes"),
        ({"messages": [SimMessage(0, 1, 16, route=[3])]}, r"routes over unknown link 3"),
        (
            {"messages": [SimMessage(0, 1, 1, route=[0]), SimMessage(0, 1, 1, route=[0, 5])]},
            r"message 1 \(0 -> 1\) routes over unknown link 5",
        ),
        ({"tasks": [SimTask("a", 0.5, 1), SimTask("b", 1, 1)]}, r"is on cluster 0.5"),
        (
            {"messages": [SimMessage(0, 1, 1, route=[0]), SimMessage(0, 1, 1, route=[0, 0])]},
            r"message 1 \(0 -> 1\) crosses a link twice on route \[0, 0\]",
        ),
        ({"link_bandwidth": [0.0]}, r"link_bandwidth\[0\] = 0.0"),
        ({"link_bandwidth": [-4.0]}, r"link_bandwidth\[0\] = -4.0"),
        ({"link_latency": [-1.0]}, r"link_latency\[0\] = -1.0"),
        ({"link_latency": [1.0, 1.0]}, r"link_bandwidth has 1 entries but link_latency has 2"),
        (
            {"messages": [SimMessage(0, 1, 16), SimMessage(1, 0, 16)]},
            r"dependency cycle: '(a|b)' -> '(a|b)' -> '\1'",
        ),
        ({"messages": [SimMessage(1, 1, 16)]}, r"dependency cycle: 'b' -> 'b'"),
        (
            {"messages": [SimMessage(0, 1, 16, route=[0], multicast=3),
                          SimMessage(0, 1, 8, route=[0], multicast=3)]},
            r"message 1 \(0 -> 1\) is in multicast 3 with message 0 \(0 -> 1\), but carries 8 B",
        ),
    ],
)
def test_invalid_input_is_rejected_with_the_value(run, change, match):
    with pytest.raises(ValueError, match=match):
        run(**{**_VALID, **change})


def test_dependency_cycle_message_lists_the_cycle_in_order():
    tasks = [SimTask(name, 0, 1.0) for name in ("x", "y", "z", "free")]
    messages = [SimMessage(3, 0, 1), SimMessage(0, 1, 1), SimMessage(1, 2, 1), SimMessage(2, 0, 1)]
    with pytest.raises(ValueError, match=r"'x' -> 'y' -> 'z' -> 'x'|'y' -> 'z' -> 'x' -> 'y'"):
        simulate(tasks, messages, [], [], num_clusters=1)


def _native_arguments(**overrides) -> list:
    ints, floats = (lambda *v: np.array(v, dtype=np.int64)), (lambda *v: np.array(v, float))
    arguments = {
        "task_cluster": ints(0, 1),
        "task_cycles": floats(1.0, 2.0),
        "num_clusters": 2,
        "message_src": ints(0),
        "message_dst": ints(1),
        "message_bytes": floats(16.0),
        "route_offsets": ints(0, 1),
        "route_links": ints(0),
        "message_leader": ints(0),
        "link_bandwidth": floats(8.0),
        "link_latency": floats(1.0),
        "batches": 1,
        "network": "flow",
        "flit_params": FlitParams().int_array(),
        "flit_bytes": 16.0,
        "skip_dead_cycles": False,
        "task_start": np.zeros((1, 2)),
        "task_end": np.zeros((1, 2)),
        "message_arrival": np.zeros((1, 1)),
        "link_busy": np.zeros(1),
    }
    arguments.update(overrides)
    return list(arguments.values())


def test_native_core_fills_outputs_and_reports_finished_instances():
    arguments = _native_arguments()
    done, finished, _ = simulator._core()(*arguments)(10.0)
    assert (done, finished) == (1.0, 2.0)
    task_start, task_end, message_arrival, link_busy = arguments[-4:]
    np.testing.assert_array_equal(task_start, [[0.0, 4.0]])
    np.testing.assert_array_equal(task_end, [[1.0, 6.0]])
    np.testing.assert_array_equal(message_arrival, [[4.0]])
    np.testing.assert_array_equal(link_busy, [2.0])


@pytest.mark.parametrize(
    ("override", "error", "match"),
    [
        ({"task_cycles": np.array([1, 2], dtype=np.int64)}, TypeError, "task_cycles"),
        ({"task_cluster": np.zeros((2, 1), dtype=np.int64)}, TypeError, "task_cluster"),
        ({"task_end": np.zeros((1, 3))}, ValueError, "task_end"),
        ({"network": "bogus"}, ValueError, "expected one of 'analytical' 'flow'"),
        ({"message_leader": np.zeros(2, dtype=np.int64)}, ValueError, "message_leader"),
    ],
)
def test_native_core_checks_its_arguments(override, error, match):
    with pytest.raises(error, match=match):
        simulator._core()(*_native_arguments(**override))


def test_missing_library_error_says_how_to_build_it(tmp_path):
    with pytest.raises(RuntimeError, match=r"pip install \."):
        simulator._find_library([tmp_path])


def test_library_registers_functions_with_tvm_ffi():
    simulator._core()
    assert tvm_ffi.get_global_func("chiplet.sim.start", allow_missing=True) is not None
