"""The flit network moves every link's own bandwidth (issue 17): flits at the link's rate."""

from __future__ import annotations

import math

import numpy as np
import pytest

from tvm_chiplet.runtime.noc import FlitParams
from tvm_chiplet.runtime.simulator import SimMessage, SimTask, simulate
from tvm_chiplet.targets import list_presets, load_system

MESSAGE_BYTES = 256 * 1024
# Cycles above ceil(bytes / B) + latency: the two routers' pipelines (2 R = 8 with the default
# router) and the cycle after the tail's ejection.
MAX_OVERHEAD = 9


def _network(preset: str) -> tuple[list[float], list[float], list[tuple[str, int]]]:
    """Links as the device simulation builds them (system links, then one link per DRAM
    controller) and one (kind, link id) per distinct kind, bandwidth and latency."""
    system = load_system(preset)
    links = sorted(system.links, key=lambda link: link.id)
    bandwidth = [link.bandwidth for link in links] + [d.bandwidth for d in system.drams]
    latency = [link.latency for link in links] + [0.0] * len(system.drams)
    kinds = [link.kind for link in links] + ["dram"] * len(system.drams)
    first: dict[tuple[str, float, float], int] = {}
    for index, key in enumerate(zip(kinds, bandwidth, latency, strict=True)):
        first.setdefault(key, index)
    return bandwidth, latency, [(key[0], index) for key, index in first.items()]


def _cases() -> list[tuple[str, str, int]]:
    return [
        (preset, kind, link)
        for preset, _ in list_presets()
        for kind, link in _network(preset)[2]
    ]


def _one_message_cycles(bandwidth, latency, link: int, network: str, **kwargs) -> float:
    tasks = [SimTask("send", 0, 0.0), SimTask("receive", 1, 0.0)]
    messages = [SimMessage(0, 1, MESSAGE_BYTES, route=[link])]
    result = simulate(tasks, messages, bandwidth, latency, 2, network=network, **kwargs)
    return float(result.message_arrival[0, 0])


@pytest.mark.parametrize(("preset", "kind", "link"), _cases())
def test_one_long_message_crosses_any_preset_link_at_its_bandwidth(preset, kind, link):
    bandwidth, latency, _ = _network(preset)
    serialised = math.ceil(MESSAGE_BYTES / bandwidth[link]) + math.ceil(latency[link])
    flit = _one_message_cycles(bandwidth, latency, link, "flit")
    flow = _one_message_cycles(bandwidth, latency, link, "flow")
    assert serialised <= flit <= serialised + MAX_OVERHEAD
    assert flit == pytest.approx(flow, rel=0.01)


@pytest.mark.parametrize("allocator", ["separable", "greedy"])
@pytest.mark.parametrize("flit_bytes", [None, 16.0, 40.0, 100.0])
def test_a_flit_wider_than_the_link_still_moves_the_link_bandwidth(allocator, flit_bytes):
    bandwidth, latency = [13.889, 16.0], [36.0, 1.0]
    params = FlitParams(flit_bytes=flit_bytes, allocator=allocator)
    flit = _one_message_cycles(bandwidth, latency, 0, "flit", flit_params=params)
    serialised = math.ceil(MESSAGE_BYTES / 13.889) + 36
    assert serialised <= flit <= serialised + MAX_OVERHEAD


def test_the_last_flit_carries_only_the_remaining_bytes():
    """1000 bytes over a 16 B/cycle link: 62 full flits and one of 8 bytes, busy 62.5 cycles."""
    tasks = [SimTask("send", 0, 0.0), SimTask("receive", 1, 0.0)]
    result = simulate(tasks, [SimMessage(0, 1, 1000, [0])], [16.0], [1.0], 2, network="flit")
    np.testing.assert_array_equal(result.link_busy_cycles, [1000 / 16])
    np.testing.assert_array_equal(result.link_bytes, [1000.0])


def test_a_flit_narrower_than_the_widest_link_is_refused_with_the_remedy():
    tasks = [SimTask("send", 0, 0.0), SimTask("receive", 1, 0.0)]
    with pytest.raises(
        ValueError,
        match=r"FlitParams.flit_bytes = 16.0 is narrower than the widest link \(link 1, 32 "
        r"bytes/cycle\).*use flit_bytes >= 32 or None",
    ):
        simulate(
            tasks, [SimMessage(0, 1, 64, [0])], [16.0, 32.0], [1.0, 1.0], 2, network="flit",
            flit_params=FlitParams(flit_bytes=16.0),
        )


@pytest.mark.parametrize("allocator", ["round-robin", 1])
def test_an_unknown_allocator_is_refused_with_the_valid_names(allocator):
    with pytest.raises(ValueError, match=r"FlitParams.allocator must be one of 'separable', "):
        FlitParams(allocator=allocator)
