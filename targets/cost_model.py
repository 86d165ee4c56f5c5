"""The one cost model shared by the planners and the simulator (no TVM).

Units: every result is in **cycles of the system clock** ``system.frequency_hz``; FLOPs count a
multiply-accumulate as two; bytes are bytes; bandwidths are bytes per cycle; latencies cycles.

Compute (roofline per cluster)::

    op_cycles = max(flops / (2 * macs_per_cycle), bytes_moved / local_bandwidth)
              + [weights not resident] max_d (share_d * weight_bytes / bw_d + latency_d)

Weights are interleaved over the DRAM controllers ``d`` in proportion to their bandwidth
(``share_d``); ``bw_d`` is controller ``d``'s bandwidth bounded by the narrowest link of its
route to the cluster (a link on several controllers' routes carries all their shares) and
``latency_d`` the sum of the latencies on that route. This is the no-contention time; the
simulator shares controllers and links among concurrent fetches.

Communication (analytical, no contention)::

    transfer_cycles = sum(latency of each link) + nbytes / min(bandwidth of each link)

and ``0`` for an empty route (producer and consumer on the same cluster).

Energy (picojoules, at the system's device dtype)::

    op_energy      = flops / 2 * pJ per MAC of the cluster + bytes_moved * pJ per SRAM byte
    link_energy    = bytes * 8 * pJ per bit of the link (its kind: on-chip NoC or die-to-die NoP)
    dram_energy    = bytes * 8 * pJ per bit of the controller
    static_energy  = sum of the chiplets' static power * time

All zero for a system that declares no energy coefficients (``system.has_energy``).
"""

from __future__ import annotations

import operator
from collections.abc import Sequence

from tvm_chiplet.targets.system import ChipletSystem, Cluster


def _check_non_negative(**values: float) -> None:
    for name, value in values.items():
        if not value >= 0:
            raise ValueError(f"{name} must be a number >= 0, found {value!r}")


def compute_cycles(flops: float, bytes_moved: float, cluster: Cluster) -> float:
    """Roofline cycles of an op on ``cluster`` with its operands in local SRAM."""
    _check_non_negative(flops=flops, bytes_moved=bytes_moved)
    return max(flops / (2.0 * cluster.macs_per_cycle), bytes_moved / cluster.local_bandwidth)


def dram_fetch_cycles(
    nbytes: float, cluster: Cluster, system: ChipletSystem, policy: str = "interleave"
) -> float:
    """Cycles to stream ``nbytes`` into ``cluster`` from DRAM, with no other traffic.

    ``interleave``: every controller ``d`` sends ``share_d * nbytes`` (its share of the total DRAM
    bandwidth) along its route; the time is the most loaded resource (a controller, or a link
    carrying the parts of several controllers) plus the longest route latency. ``nearest``: the
    nearest controller sends everything. Zero bytes cost nothing.
    """
    _check_non_negative(nbytes=nbytes)
    if nbytes == 0:
        return 0.0
    topology = system.topology
    if policy == "nearest":
        parts = [(topology.nearest_dram(cluster.id), float(nbytes))]
    elif policy == "interleave":
        total = sum(d.bandwidth for d in system.drams)
        parts = [(d, nbytes * d.bandwidth / total) for d in system.drams]
    else:
        raise ValueError(f"unknown DRAM policy {policy!r}; expected 'interleave' or 'nearest'")
    load: dict[int, float] = {}
    busiest, latency = 0.0, 0.0
    for dram, share in parts:
        route = topology.route(dram.node, cluster.id)
        busiest = max(busiest, share / dram.bandwidth)
        latency = max(latency, sum(system.links[i].latency for i in route))
        for link in route:
            load[link] = load.get(link, 0.0) + share
    for link, nbytes_on in load.items():
        busiest = max(busiest, nbytes_on / system.links[link].bandwidth)
    return busiest + latency


def op_cycles(
    flops: float,
    bytes_moved: float,
    weight_bytes: float,
    cluster: Cluster,
    system: ChipletSystem,
    weights_resident: bool = True,
) -> float:
    """Cycles one op takes on ``cluster``.

    Parameters
    ----------
    flops : float
        Floating-point (or integer) operations; a MAC is 2.
    bytes_moved : float
        Bytes the op reads and writes in local SRAM (inputs, weights, outputs).
    weight_bytes : float
        Bytes of constant weights among them.
    cluster : Cluster
        Where the op runs.
    system : ChipletSystem
        The system (for DRAM placement and routes).
    weights_resident : bool
        ``True`` when the weights already sit in the cluster's SRAM; otherwise they are
        streamed from DRAM first (see the module docstring).

    Returns
    -------
    float
        Cycles at ``system.frequency_hz``.
    """
    cycles = compute_cycles(flops, bytes_moved, cluster)
    if not weights_resident:
        cycles += dram_fetch_cycles(weight_bytes, cluster, system)
    return cycles


def transfer_cycles(nbytes: float, route: Sequence[int], system: ChipletSystem) -> float:
    """Cycles to move ``nbytes`` along ``route`` (link ids): latencies plus serialisation.

    Raises
    ------
    ValueError
        For a negative size or a link id the system does not have.
    """
    _check_non_negative(nbytes=nbytes)
    if not route:
        return 0.0
    latency, bandwidth = route_rate(route, system)
    return latency + nbytes / bandwidth


def route_rate(route: Sequence[int], system: ChipletSystem) -> tuple[float, float]:
    """``(latency, bandwidth)`` of a non-empty ``route`` (link ids): its links' summed latency
    and its slowest link's bandwidth, which :func:`transfer_cycles` charges.

    Raises
    ------
    ValueError
        For a link id the system does not have.
    """
    links = system.links
    for link_id in route:
        try:
            known = 0 <= operator.index(link_id) < len(links)
        except TypeError:
            known = False
        if not known:
            raise ValueError(
                f"route {list(route)} names link {link_id!r}, which system {system.name!r} does "
                f"not have; expected link ids 0..{len(links) - 1} (use Topology.route)"
            )
    return sum(links[i].latency for i in route), min(links[i].bandwidth for i in route)


def op_energy_pj(flops: float, bytes_moved: float, cluster: Cluster,
                 system: ChipletSystem) -> tuple[float, float]:
    """``(MAC energy, SRAM energy)`` in pJ of one op on ``cluster`` at the device dtype."""
    _check_non_negative(flops=flops, bytes_moved=bytes_moved)
    if not system.has_energy:
        return 0.0, 0.0
    return (flops / 2.0 * cluster.mac_energy(system.device_dtype),
            bytes_moved * cluster.sram_energy_pj_per_byte)


def static_energy_pj(cycles: float, system: ChipletSystem) -> float:
    """Static energy in pJ of every chiplet over ``cycles`` of the system clock."""
    watts = sum(chiplet.static_power_w for chiplet in system.chiplets)
    return watts * cycles_to_seconds(cycles, system) * 1e12


def cycles_to_seconds(cycles: float, system: ChipletSystem) -> float:
    """Convert cycles of ``system``'s clock to seconds."""
    return cycles / system.frequency_hz


__all__ = [
    "compute_cycles",
    "cycles_to_seconds",
    "dram_fetch_cycles",
    "op_cycles",
    "op_energy_pj",
    "route_rate",
    "static_energy_pj",
    "transfer_cycles",
]
