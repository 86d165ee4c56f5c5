"""Cycle-level network-on-chip simulation: the ``"flit"`` router model and synthetic traffic.

The router model (C++, ``runtime/cpp/flit_network.cc``) is a wormhole network: every directed
link ends in an input unit of its downstream router with :attr:`FlitParams.num_vcs` virtual
channels of :attr:`FlitParams.vc_buffer_flits` flits; every router also has an injection unit,
fed one flit per cycle from an unbounded source queue, and an ejection port. A head flit at the
front of its VC spends ``routing_delay`` cycles in route computation (routes are precomputed link
lists, e.g. XY on a mesh), waits for a free VC of its output link and spends ``vc_alloc_delay``
cycles in VC allocation, then competes for the switch (``switch_alloc_delay``), crosses it
(``switch_traversal_delay``) and the link (the link's latency, rounded up to whole cycles). Body
flits follow the head's VC and need only a switch grant. Sending a flit needs a credit (a free
slot in the downstream VC); the credit comes back ``max(1, link latency)`` cycles after the flit
leaves the downstream buffer, so buffers shorter than the credit round trip throttle a VC. Each
input unit sends, and each output port takes, at most one flit per cycle; a link of ``B``
bytes/cycle carries one flit every ``max(1, ceil(flit_bytes / B))`` cycles. An output VC is free
again once the tail flit has left for it.

Zero-load latency
-----------------
A packet of ``P`` flits crossing ``H`` links, with ``R = routing_delay + vc_alloc_delay +
switch_alloc_delay + switch_traversal_delay``, one flit per cycle on every link and no
contention, takes (cycles from its creation to the ejection of its tail, both counted)::

    T0 = (H + 1) * R + sum(link latencies) + P - 1

(the head passes ``H + 1`` routers, the source's and the destination's included; the tail
follows ``P - 1`` cycles later). :meth:`FlitParams.zero_load_latency` evaluates it.

Synthetic traffic
-----------------
:func:`simulate_noc` drives a ``"mesh-RxC"`` mesh (XY routes from
:class:`~tvm_chiplet.targets.topology.Topology`, 1-cycle links, one flit per cycle) with
``"uniform"`` (any other node, equally likely), ``"transpose"`` ((x, y) -> (y, x), square meshes),
``"bitcomp"`` ((x, y) -> (cols-1-x, rows-1-y)) or ``"hotspot"`` (the centre node
``(cols // 2, rows // 2)`` with probability ``hotspot_fraction``, else uniform) traffic. Nodes
that a permutation maps to themselves send through their own router (H = 0).

Example
-------
>>> result = simulate_noc("mesh-4x4", "uniform", rate=0.05, cycles=2000, warmup=200)
>>> result.saturated
False
"""

from __future__ import annotations

import functools
import math
import re
from dataclasses import dataclass, replace

import numpy as np

TRAFFIC_PATTERNS: tuple[str, ...] = ("uniform", "transpose", "bitcomp", "hotspot")
"""Names accepted by the ``traffic`` argument of :func:`simulate_noc`."""

_TOPOLOGY_PATTERN = re.compile(r"mesh-(\d+)x(\d+)")
_TRAFFIC_KIND = {"uniform": 0, "transpose": 1, "bitcomp": 1, "hotspot": 2}
# Accepted throughput below this fraction of the offered load marks the network saturated.
_SATURATION_FRACTION = 0.9


@dataclass(frozen=True)
class FlitParams:
    """Parameters of the cycle-level flit network.

    Parameters
    ----------
    num_vcs : int
        Virtual channels per input port (>= 1).
    vc_buffer_flits : int
        Buffer depth of each virtual channel, in flits (>= 1).
    routing_delay, vc_alloc_delay, switch_alloc_delay : int
        Cycles of route computation, VC allocation and switch allocation per router (>= 0).
    switch_traversal_delay : int
        Cycles to cross the crossbar (>= 1).
    packet_flits : int
        Flits per packet (>= 1); a message of ``nbytes`` becomes
        ``max(1, ceil(nbytes / (packet_flits * flit_bytes)))`` packets.
    flit_bytes : float
        Bytes per flit (> 0).
    deadlock_cycles : int
        The simulation stops with a ``RuntimeError`` naming the blocked links when no flit has
        moved for this many cycles (plus two link latencies and a router pipeline) while flits
        are buffered (>= 1).
    """

    num_vcs: int = 2
    vc_buffer_flits: int = 4
    routing_delay: int = 1
    vc_alloc_delay: int = 1
    switch_alloc_delay: int = 1
    switch_traversal_delay: int = 1
    packet_flits: int = 4
    flit_bytes: float = 16.0
    deadlock_cycles: int = 10_000

    def __post_init__(self) -> None:
        minimum = {
            "num_vcs": 1,
            "vc_buffer_flits": 1,
            "routing_delay": 0,
            "vc_alloc_delay": 0,
            "switch_alloc_delay": 0,
            "switch_traversal_delay": 1,
            "packet_flits": 1,
            "deadlock_cycles": 1,
        }
        for name, low in minimum.items():
            value = getattr(self, name)
            if not isinstance(value, (int, np.integer)) or isinstance(value, bool) or value < low:
                raise ValueError(f"FlitParams.{name} must be an integer >= {low}, got {value!r}")
        if not (isinstance(self.flit_bytes, (int, float)) and 0 < self.flit_bytes < math.inf):
            raise ValueError(
                f"FlitParams.flit_bytes must be a positive finite number, got {self.flit_bytes!r}"
            )

    @property
    def router_delay(self) -> int:
        """Pipeline cycles of a head flit in one router (R of the zero-load formula)."""
        return (
            self.routing_delay
            + self.vc_alloc_delay
            + self.switch_alloc_delay
            + self.switch_traversal_delay
        )

    def zero_load_latency(self, hops: int, link_latency: float, flits: int | None = None) -> int:
        """``(hops + 1) * router_delay + link_latency + flits - 1``: the cycles a packet of
        ``flits`` (default :attr:`packet_flits`) flits takes over ``hops`` links whose latencies
        sum to ``link_latency`` cycles, alone in the network (one flit per cycle per link)."""
        flits = self.packet_flits if flits is None else flits
        return (hops + 1) * self.router_delay + math.ceil(link_latency) + flits - 1

    def int_array(self) -> np.ndarray:
        """The integer fields in the order the C++ core reads them (int64)."""
        return np.array(
            [
                self.num_vcs,
                self.vc_buffer_flits,
                self.routing_delay,
                self.vc_alloc_delay,
                self.switch_alloc_delay,
                self.switch_traversal_delay,
                self.packet_flits,
                self.deadlock_cycles,
            ],
            dtype=np.int64,
        )


@dataclass(frozen=True)
class NocResult:
    """Outcome of :func:`simulate_noc`.

    Attributes
    ----------
    avg_packet_latency : float
        Mean cycles from creation to tail ejection (source queueing included) of the packets
        created in the measurement window and delivered by the end; NaN if none.
    avg_network_latency : float
        The same from the head entering the injection buffer.
    accepted_throughput : float
        Flits ejected per node per cycle during the measurement window (batch mode: over the
        drain time).
    offered : float
        Flits created per node per cycle during the measurement window (NaN in batch mode).
    injected : int
        Packets created over the whole run (warm-up included).
    delivered : int
        Packets whose tail was ejected.
    in_flight : int
        Packets created but not delivered at the end, counted from where their tail flits are
        (source queues, buffers, ejection); ``injected == delivered + in_flight``.
    saturated : bool
        Accepted throughput below 90 % of the offered load (always False in batch mode).
    drain_cycles : int | None
        Batch mode: cycles until the last packet was delivered; None otherwise.
    measured_packets : int
        Packets created in the measurement window (batch mode: all packets).
    """

    avg_packet_latency: float
    avg_network_latency: float
    accepted_throughput: float
    offered: float
    injected: int
    delivered: int
    in_flight: int
    saturated: bool
    drain_cycles: int | None
    measured_packets: int


def simulate_noc(
    topology: str = "mesh-8x8",
    traffic: str = "uniform",
    packet_flits: int = 4,
    rate: float = 0.1,
    cycles: int = 10_000,
    warmup: int = 1_000,
    seed: int = 0,
    batch_packets: int | None = None,
    params: FlitParams | None = None,
    *,
    hotspot_fraction: float = 0.2,
) -> NocResult:
    """Run synthetic traffic on the cycle-level flit network.

    Parameters
    ----------
    topology : str
        ``"mesh-RxC"``: R rows by C columns of routers, XY routing, 1-cycle links.
    traffic : str
        One of :data:`TRAFFIC_PATTERNS` (see the module docstring).
    packet_flits : int
        Flits per packet; replaces ``params.packet_flits``.
    rate : float
        Offered load in flits/node/cycle, in (0, 1]: each node creates a packet each cycle with
        probability ``rate / packet_flits``.
    cycles, warmup : int
        Measurement window (>= 1) after ``warmup`` (>= 0) cycles; packets created in the window
        give the figures. Packets still in flight at the end are not waited for.
    seed : int
        Seed of the traffic generator (same seed, same result).
    batch_packets : int, optional
        Batch mode: every node queues this many packets at cycle 0 (``rate``, ``cycles`` and
        ``warmup`` are ignored) and the network runs until all are delivered.
    params : FlitParams, optional
        Router parameters (default ``FlitParams()``).
    hotspot_fraction : float
        Probability that a ``"hotspot"`` packet goes to the hotspot node, in [0, 1].

    Returns
    -------
    NocResult

    Raises
    ------
    ValueError
        Unknown topology or traffic name (the valid ones are listed), ``rate`` outside (0, 1],
        bad counts, or transpose traffic on a non-square mesh.
    RuntimeError
        When the network deadlocks (the message names the blocked links).
    """
    rows, cols = _parse_topology(topology)
    if traffic not in TRAFFIC_PATTERNS:
        valid = ", ".join(repr(name) for name in TRAFFIC_PATTERNS)
        raise ValueError(f"unknown traffic pattern {traffic!r}; expected one of {valid}")
    if not isinstance(rate, (int, float)) or not 0 < rate <= 1:
        raise ValueError(
            f"rate must be in (0, 1] flits/node/cycle (a node injects at most one flit per "
            f"cycle), got {rate!r}"
        )
    for name, value, low in (("cycles", cycles, 1), ("warmup", warmup, 0), ("seed", seed, 0)):
        if not isinstance(value, (int, np.integer)) or isinstance(value, bool) or value < low:
            raise ValueError(f"{name} must be an integer >= {low}, got {value!r}")
    if batch_packets is not None and (
        not isinstance(batch_packets, (int, np.integer)) or batch_packets < 1
    ):
        raise ValueError(f"batch_packets must be None or an integer >= 1, got {batch_packets!r}")
    if not 0 <= hotspot_fraction <= 1:
        raise ValueError(f"hotspot_fraction must be in [0, 1], got {hotspot_fraction!r}")
    params = replace(params or FlitParams(), packet_flits=packet_flits)

    network = _mesh_network(rows, cols)
    nodes = rows * cols
    xy = network["coordinates"]
    at = {tuple(coordinate): node for node, coordinate in enumerate(xy.tolist())}
    if traffic == "transpose":
        if rows != cols:
            raise ValueError(
                f"transpose traffic needs a square mesh, got {topology!r}; use e.g. "
                f"'mesh-{rows}x{rows}' or another pattern"
            )
        table = [at[(y, x)] for x, y in xy.tolist()]
    elif traffic == "bitcomp":
        table = [at[(cols - 1 - x, rows - 1 - y)] for x, y in xy.tolist()]
    else:
        table = list(range(nodes))
    hotspot = at[(cols // 2, rows // 2)]

    import tvm_ffi

    from tvm_chiplet.runtime.simulator import _core

    _core()  # loads the library
    out = np.zeros(10, dtype=np.float64)
    tvm_ffi.get_global_func("chiplet.noc.simulate")(
        network["link_src"],
        network["link_dst"],
        network["link_latency"],
        np.ones(len(network["link_src"]), dtype=np.int64),
        nodes,
        network["pair_offsets"],
        network["pair_links"],
        _TRAFFIC_KIND[traffic],
        np.array(table, dtype=np.int64),
        hotspot,
        float(hotspot_fraction),
        float(rate),
        int(cycles),
        int(warmup),
        int(seed),
        int(batch_packets or 0),
        params.int_array(),
        float(params.flit_bytes),
        out,
    )
    accepted, offered = float(out[2]), float(out[3])
    return NocResult(
        avg_packet_latency=float(out[0]),
        avg_network_latency=float(out[1]),
        accepted_throughput=accepted,
        offered=offered,
        injected=int(out[4]),
        delivered=int(out[5]),
        in_flight=int(out[6]),
        saturated=batch_packets is None and accepted < _SATURATION_FRACTION * offered,
        drain_cycles=None if batch_packets is None else int(out[7]),
        measured_packets=int(out[9]),
    )


def _parse_topology(topology: str) -> tuple[int, int]:
    match = _TOPOLOGY_PATTERN.fullmatch(topology) if isinstance(topology, str) else None
    if match is None or int(match.group(1)) < 1 or int(match.group(2)) < 1:
        raise ValueError(
            f"unknown topology {topology!r}; expected 'mesh-RxC' with R rows and C columns >= 1, "
            f"e.g. 'mesh-4x4' or 'mesh-8x8'"
        )
    return int(match.group(1)), int(match.group(2))


@functools.lru_cache(maxsize=8)
def _mesh_network(rows: int, cols: int) -> dict[str, np.ndarray]:
    """Links and all-pairs XY routes of a ``rows x cols`` mesh, as flat arrays (cached: callers
    must not modify them; DLPack cannot pass read-only arrays)."""
    from tvm_chiplet.targets.topology import Topology, mesh_system

    system = mesh_system(rows, cols, bandwidth=1.0, latency=1.0)
    topology = Topology(system)
    nodes = system.num_clusters
    routes = [topology.route(src, dst) for src in range(nodes) for dst in range(nodes)]
    lengths = np.array([len(route) for route in routes], dtype=np.int64)
    coordinates = [
        (system.chiplets[c.chiplet].x, system.chiplets[c.chiplet].y) for c in system.clusters
    ]
    arrays = {
        "link_src": np.array([link.src for link in system.links], dtype=np.int64),
        "link_dst": np.array([link.dst for link in system.links], dtype=np.int64),
        "link_latency": np.array(
            [math.ceil(link.latency) for link in system.links], dtype=np.int64
        ),
        "pair_offsets": np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64),
        "pair_links": np.array([link for route in routes for link in route], dtype=np.int64),
        "coordinates": np.array(coordinates, dtype=np.int64),
    }
    return arrays
