"""Tests of the cycle-level flit network (runtime/noc.py, runtime/cpp/flit_network.cc)."""

import math

import numpy as np
import pytest

from tvm_chiplet.runtime.noc import FlitParams, NocResult, simulate_noc
from tvm_chiplet.runtime.simulator import SimMessage, SimTask, simulate
from tvm_chiplet.targets.system_generators import mesh_system
from tvm_chiplet.targets.topology import Topology

SLOW_PIPELINE = FlitParams(
    routing_delay=2, vc_alloc_delay=0, switch_alloc_delay=1, switch_traversal_delay=2
)
PIPELINES = pytest.mark.parametrize(
    "params", [FlitParams(), SLOW_PIPELINE, FlitParams(allocator="greedy")]
)
LINK_BYTES = 16  # bandwidth of the links of _one_message, hence the default flit width


def _one_message(nbytes: int, route: list[int], num_links: int, **kwargs) -> float:
    """Cycles from the producer's end (cycle 10) to the message's arrival, on 1-cycle links."""
    tasks = [SimTask("producer", 0, 10.0), SimTask("consumer", 1, 5.0)]
    messages = [SimMessage(0, 1, nbytes, route=route)]
    bandwidth, latency = [float(LINK_BYTES)] * num_links, [1.0] * num_links
    result = simulate(tasks, messages, bandwidth, latency, num_clusters=2, **kwargs)
    return float(result.message_arrival[0, 0]) - 10.0


@PIPELINES
@pytest.mark.parametrize("hops", range(1, 7))
def test_zero_load_latency_per_hop_count_is_the_router_pipeline_closed_form(params, hops):
    """T0 = (H + 1) * (routing + vc_alloc + switch_alloc + switch_traversal) + sum(link latency)
    + P - 1, for one packet of P flits alone on an XY route of H hops of a 4x4 mesh."""
    system = mesh_system(4, 4, bandwidth=16.0, latency=1.0)
    topology = Topology(system)
    dst = next(d for d in range(16) if topology.hops(0, d) == hops)
    route = topology.route(0, dst)
    latency = _one_message(64, route, len(system.links), network="flit", flit_params=params)
    router = (
        params.routing_delay
        + params.vc_alloc_delay
        + params.switch_alloc_delay
        + params.switch_traversal_delay
    )
    assert latency == (hops + 1) * router + hops + params.packet_flits - 1
    assert latency == params.zero_load_latency(hops, float(hops))


@PIPELINES
def test_low_rate_uniform_latency_is_the_closed_form_over_the_hop_distribution(params):
    """At a very low rate, the mean latency is T0 averaged over uniform destinations."""
    rows = cols = 4
    xy = [(n % cols, n // cols) for n in range(rows * cols)]
    hops = [abs(ax - bx) + abs(ay - by) for a, (ax, ay) in enumerate(xy) for bx, by in xy[:a]]
    mean_hops = float(np.mean(hops))
    expected = params.zero_load_latency(0, 0.0) + mean_hops * (params.router_delay + 1)
    result = simulate_noc(
        "mesh-4x4", "uniform", rate=0.004, cycles=100_000, warmup=0, params=params
    )
    assert result.measured_packets > 1000
    assert result.avg_packet_latency == pytest.approx(expected, rel=0.02)
    assert result.avg_network_latency <= result.avg_packet_latency


@PIPELINES
def test_batch_exchange_drains_in_zero_load_latency_plus_serialised_packets(params):
    """Two routers swap 5 packets each over opposite links: the last tail is ejected
    T0(1 hop) + 4 * P cycles after the start (packets leave the source one flit per cycle)."""
    result = simulate_noc("mesh-1x2", "bitcomp", batch_packets=5, params=params)
    assert result.drain_cycles == params.zero_load_latency(1, 1.0) + 4 * params.packet_flits
    assert (result.delivered, result.in_flight, result.injected) == (10, 0, 10)


@pytest.mark.parametrize("packets", [1, 2, 10, 100])
def test_long_message_serialisation_adds_packet_flits_per_extra_packet(packets):
    params = FlitParams()
    nbytes = packets * params.packet_flits * LINK_BYTES
    latency = _one_message(nbytes, [0, 1, 2], 3, network="flit")
    assert latency == params.zero_load_latency(3, 3.0) + (packets - 1) * params.packet_flits


@pytest.mark.parametrize("packet_flits", [1, 2, 8])
def test_each_extra_flit_of_a_packet_adds_one_cycle(packet_flits):
    params = FlitParams(packet_flits=packet_flits)
    nbytes = packet_flits * LINK_BYTES
    latency = _one_message(nbytes, [0, 1], 2, network="flit", flit_params=params)
    one_flit = FlitParams(packet_flits=1)
    single = _one_message(LINK_BYTES, [0, 1], 2, network="flit", flit_params=one_flit)
    assert latency - single == packet_flits - 1


@pytest.mark.parametrize("nbytes", [64, 640])
def test_flit_exceeds_analytical_by_the_router_pipeline_on_one_uncontended_message(nbytes):
    """Analytical: sum(L) + P; flit: (H + 1) * R + sum(L) + P - 1 (P flits of 16 bytes = link
    width)."""
    route = [2, 0, 1]
    analytical = _one_message(nbytes, route, 3, network="analytical")
    flit = _one_message(nbytes, route, 3, network="flit")
    assert flit - analytical == (len(route) + 1) * FlitParams().router_delay - 1


def test_flit_link_busy_cycles_are_the_bytes_over_the_link_bandwidth():
    tasks = [SimTask("producer", 0, 0.0), SimTask("consumer", 1, 0.0)]
    messages = [SimMessage(0, 1, 640, route=[0, 1])]  # 40 flits of 16 bytes
    result = simulate(tasks, messages, [16.0, 8.0, 16.0], [1.0] * 3, 2, network="flit")
    np.testing.assert_array_equal(result.link_busy_cycles, [40.0, 80.0, 0.0])
    # The 8-byte link takes two cycles per flit: the message is paced by it.
    assert result.message_arrival[0, 0] >= 80.0


def test_latency_rises_with_load():
    latencies = [
        simulate_noc("mesh-4x4", "uniform", rate=rate, cycles=3000, warmup=500).avg_packet_latency
        for rate in (0.05, 0.3, 0.5)
    ]
    assert latencies[0] < latencies[1] < latencies[2]


@pytest.mark.parametrize("traffic", ["uniform", "transpose", "bitcomp", "hotspot"])
@pytest.mark.parametrize("rate", [0.2, 1.0])
def test_every_packet_is_delivered_or_in_flight_even_past_saturation(traffic, rate):
    result = simulate_noc("mesh-4x4", traffic, rate=rate, cycles=2000, warmup=200)
    assert result.injected == result.delivered + result.in_flight
    assert result.delivered > 0
    # Bernoulli arrivals: the offered load is the rate within 5 standard deviations.
    trials = 16 * 2000 / 4
    sigma = 4 * math.sqrt(trials * (rate / 4) * (1 - rate / 4)) / (16 * 2000)
    assert abs(result.offered - rate) < 5 * sigma


def test_saturation_flag_follows_the_load():
    assert not simulate_noc("mesh-4x4", rate=0.05, cycles=2000, warmup=200).saturated
    assert simulate_noc("mesh-4x4", rate=1.0, cycles=2000, warmup=200).saturated


def test_same_seed_gives_the_same_result_and_another_seed_does_not():
    first = simulate_noc("mesh-4x4", rate=0.3, cycles=1000, warmup=100, seed=7)
    again = simulate_noc("mesh-4x4", rate=0.3, cycles=1000, warmup=100, seed=7)
    other = simulate_noc("mesh-4x4", rate=0.3, cycles=1000, warmup=100, seed=8)
    assert first == again
    assert first != other


def _uniform_xy_capacity(rows: int, cols: int) -> float:
    """Ideal throughput (flits/node/cycle) of uniform traffic under XY routing: 1 / the largest
    per-link load for an injection rate of 1 spread evenly over the other nodes."""
    system = mesh_system(rows, cols, bandwidth=16.0, latency=1.0)
    topology = Topology(system)
    nodes = rows * cols
    load = np.zeros(len(system.links))
    for src in range(nodes):
        for dst in range(nodes):
            if src != dst:
                load[topology.route(src, dst)] += 1.0 / (nodes - 1)
    return 1.0 / float(load.max())


def test_uniform_saturation_throughput_of_a_4x4_mesh_is_in_the_plausible_band():
    """Measured with the defaults: about 0.70 flits/node/cycle, i.e. ~75 % of the ideal
    15/16 = 0.9375 that XY routing allows (wormhole with 4 VCs of 8 flits, separable
    allocator; the greedy allocator: 0.77)."""
    capacity = _uniform_xy_capacity(4, 4)
    assert capacity == pytest.approx(15 / 16)
    result = simulate_noc("mesh-4x4", "uniform", rate=1.0, cycles=4000, warmup=1000)
    assert 0.45 < result.accepted_throughput < capacity
    assert 0.5 * capacity < result.accepted_throughput


def test_deadlocking_routes_stop_with_an_error_naming_the_blocked_links():
    """Four long packets each take three links of a four-link ring: with one VC every packet
    holds a link the next one needs."""
    tasks = [SimTask(f"send{i}", i, 0.0) for i in range(4)]
    tasks += [SimTask(f"receive{i}", i, 0.0) for i in range(4)]
    messages = [
        SimMessage(i, 4 + (i + 3) % 4, 1024, route=[i, (i + 1) % 4, (i + 2) % 4]) for i in range(4)
    ]
    params = FlitParams(num_vcs=1, vc_buffer_flits=2, packet_flits=16, deadlock_cycles=50)
    with pytest.raises(RuntimeError, match=r"deadlock.*link 0 \(0->1\).*link 3 \(3->0\)"):
        simulate(tasks, messages, [16.0] * 4, [1.0] * 4, 4, network="flit", flit_params=params)


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({"topology": "torus-4x4"}, ValueError, r"unknown topology 'torus-4x4'.*'mesh-RxC'"),
        ({"topology": "mesh-0x4"}, ValueError, r"unknown topology 'mesh-0x4'"),
        ({"traffic": "tornado"}, ValueError, r"'tornado'.*'uniform', 'transpose', 'bitcomp'"),
        ({"rate": 0.0}, ValueError, r"rate must be in \(0, 1\].*got 0.0"),
        ({"rate": 1.5}, ValueError, r"rate must be in \(0, 1\].*got 1.5"),
        ({"cycles": 0}, ValueError, r"cycles must be an integer >= 1, got 0"),
        ({"batch_packets": 0}, ValueError, r"batch_packets must be None or an integer >= 1"),
        ({"topology": "mesh-2x4", "traffic": "transpose"}, ValueError, r"square mesh"),
    ],
)
def test_invalid_noc_arguments_are_rejected(kwargs, error, match):
    with pytest.raises(error, match=match):
        simulate_noc(**{"cycles": 10, **kwargs})


@pytest.mark.parametrize(
    ("field", "value"),
    [("num_vcs", 0), ("vc_buffer_flits", 0), ("switch_traversal_delay", 0), ("flit_bytes", 0.0)],
)
def test_invalid_flit_params_are_rejected(field, value):
    with pytest.raises(ValueError, match=rf"FlitParams.{field} must be"):
        FlitParams(**{field: value})


def test_flit_params_with_another_network_are_refused():
    with pytest.raises(ValueError, match=r"flit_params only applies to network='flit'"):
        _one_message(64, [0], 1, network="flow", flit_params=FlitParams())


def test_result_type_is_a_noc_result_with_no_drain_in_open_loop():
    result = simulate_noc("mesh-2x2", rate=0.1, cycles=100, warmup=0)
    assert isinstance(result, NocResult)
    assert result.drain_cycles is None


def test_hotspot_accepted_throughput_is_bounded_by_one_ejection_port():
    """With every packet of the other 15 nodes sent to the hotspot, the network delivers at most
    the hotspot's ejection (1 flit/cycle) plus the hotspot's own uniform traffic (rate)."""
    rate = 0.2
    result = simulate_noc(
        "mesh-4x4", "hotspot", rate=rate, cycles=3000, warmup=500, hotspot_fraction=1.0
    )
    assert result.saturated
    assert result.accepted_throughput * 16 <= 1.0 + rate * 1.1
    assert result.accepted_throughput * 16 > 0.9
