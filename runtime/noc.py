"""Cycle-level network-on-chip simulation: the ``"flit"`` router model and synthetic traffic.

The router model (C++, ``runtime/cpp/flit_network.cc``) is a wormhole network: every directed
link ends in an input unit of its downstream router with :attr:`FlitParams.num_vcs` virtual
channels of :attr:`FlitParams.vc_buffer_flits` flits; every router also has an injection unit,
fed one flit per cycle from an unbounded source queue, and an ejection port. A new packet waits
for an empty injection VC. A head flit at the front of its VC spends ``routing_delay`` cycles in
route computation (routes are precomputed link lists, e.g. XY on a mesh), requests a free VC of
its output link and spends ``vc_alloc_delay`` cycles in VC allocation once granted, then
requests the switch (``switch_alloc_delay``), crosses it (``switch_traversal_delay``) and the
link (the link's latency, rounded up to whole cycles). Body flits follow the head's VC and need
only a switch grant. Sending a flit needs a credit (a free slot in the downstream VC); the
credit comes back ``max(1, link latency)`` cycles after the flit leaves the downstream buffer.
An output VC is free again once the tail flit has left for it.

Allocation (:attr:`FlitParams.allocator`): ``"separable"`` (default) is BookSim's separable
input-first allocator with round-robin arbiters: in VC allocation every waiting head picks one
free VC of its output, then every output VC grants one of the heads that picked it; in switch
allocation every input unit picks one of its ready VCs, then every output port grants one of the
units that picked it; an arbiter's pointer moves past the winner only on a grant (an input VC's
arbiter starts at its own VC number, so packets arriving on different VCs leave on different
VCs). ``"greedy"``
visits the input units in a rotating order and lets each take its first VC whose output is still
free (a maximal matching); a head takes the free output VC with the most credits. Each input
unit sends, and each output port takes, at most one flit per cycle.

Links move flits at their own rate: a flit of ``b`` bytes occupies a link of ``B`` bytes/cycle
for ``b / B`` cycles; the link keeps the fractional time it is free again and may start a flit in
any cycle that ends after it, so over a busy period it moves exactly ``B`` bytes/cycle; a flit
is in the downstream buffer from the cycle its last byte crossed. A flit is
:attr:`FlitParams.flit_bytes` wide, at least the widest link (default: exactly the widest link),
so a link of the flit's width moves one flit per cycle. A message of ``n`` bytes becomes
``ceil(n / flit_bytes)`` flits (at least one) whose last carries only the remaining bytes, sent
as packets of ``packet_flits`` flits (the last packet shorter if need be). The VCs at the end of a
link of latency ``L > 1`` hold ``ceil(2 (L - 1) min(1, B / flit_bytes))`` flits more than
``vc_buffer_flits``: the flits its longer credit round trip keeps in flight, so a long link is not
throttled by its length.

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
:class:`~tvm_chiplet.targets.topology.Topology`, 1-cycle links as wide as a flit) with
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

import concurrent.futures
import functools
import inspect
import math
import multiprocessing
import os
import re
import signal
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

TRAFFIC_PATTERNS: tuple[str, ...] = ("uniform", "transpose", "bitcomp", "hotspot")
"""Names accepted by the ``traffic`` argument of :func:`simulate_noc`."""

_TOPOLOGY_PATTERN = re.compile(r"mesh-(\d+)x(\d+)")
_TRAFFIC_KIND = {"uniform": 0, "transpose": 1, "bitcomp": 1, "hotspot": 2}
# Accepted throughput below this fraction of the offered load marks the network saturated.
_SATURATION_FRACTION = 0.9

ALLOCATORS: tuple[str, ...] = ("separable", "greedy")
"""Names accepted by :attr:`FlitParams.allocator`, in the order of their C++ codes."""


@dataclass(frozen=True)
class FlitParams:
    """Parameters of the cycle-level flit network.

    Parameters
    ----------
    num_vcs : int
        Virtual channels per input port (>= 1). Default 4.
    vc_buffer_flits : int
        Buffer depth of each virtual channel, in flits (>= 1). Default 8: with 4 VCs this is the
        buffering of common BookSim configurations, deep enough to cover the credit round trip
        of the 4-cycle router, so an 8x8 mesh under uniform traffic saturates near 0.40
        flits/node/cycle (0.81 of the 0.49 dimension-order bound), as such simulators report.
    routing_delay, vc_alloc_delay, switch_alloc_delay : int
        Cycles of route computation, VC allocation and switch allocation per router (>= 0).
    switch_traversal_delay : int
        Cycles to cross the crossbar (>= 1).
    packet_flits : int
        Flits per packet (>= 1); a message of ``nbytes`` becomes ``max(1, ceil(nbytes /
        flit_bytes))`` flits, sent as packets of this many flits (the last one shorter).
    flit_bytes : float, optional
        Bytes per flit (> 0), at least the bandwidth of the widest link (bytes/cycle) of the
        simulated network, else :func:`~tvm_chiplet.runtime.simulator.simulate` raises a
        ``ValueError``. Default None: the widest link's bandwidth, so that link moves one flit
        per cycle and every link its own bandwidth. Any width is exact: a flit that does not fill
        a message's last bytes carries only those. :func:`simulate_noc` runs links of the flit's
        width and reports in flits, so the width does not change its results.
    allocator : str
        VC and switch allocator, one of :data:`ALLOCATORS`: ``"separable"`` (default,
        separable input-first with round-robin arbiters) or ``"greedy"`` (see the module
        docstring).
    deadlock_cycles : int
        The simulation stops with a ``RuntimeError`` naming the blocked links when no flit has
        moved for this many cycles (plus two link latencies and a router pipeline) while flits
        are buffered (>= 1).
    """

    num_vcs: int = 4
    vc_buffer_flits: int = 8
    routing_delay: int = 1
    vc_alloc_delay: int = 1
    switch_alloc_delay: int = 1
    switch_traversal_delay: int = 1
    packet_flits: int = 4
    flit_bytes: float | None = None
    deadlock_cycles: int = 10_000
    allocator: str = "separable"

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
        width = self.flit_bytes
        if width is not None and not (
            isinstance(width, (int, float, np.integer, np.floating))
            and not isinstance(width, bool)
            and 0 < width < math.inf
        ):
            raise ValueError(
                f"FlitParams.flit_bytes must be None (the widest link) or a positive finite "
                f"number, got {width!r}"
            )
        if self.allocator not in ALLOCATORS:
            valid = ", ".join(repr(name) for name in ALLOCATORS)
            raise ValueError(
                f"FlitParams.allocator must be one of {valid}, got {self.allocator!r}"
            )

    def resolved_flit_bytes(self, link_bandwidth: Sequence[float] | np.ndarray) -> float:
        """The flit width for links of ``link_bandwidth`` bytes/cycle: :attr:`flit_bytes`, or
        the widest link when it is None.

        Raises
        ------
        ValueError
            When :attr:`flit_bytes` is narrower than the widest link (a flit must hold what the
            widest link moves in a cycle).
        """
        bandwidth = np.asarray(link_bandwidth, dtype=np.float64)
        widest = float(bandwidth.max()) if bandwidth.size else 1.0
        if self.flit_bytes is None:
            return widest
        if self.flit_bytes < widest * (1 - 1e-9):
            link = int(np.argmax(bandwidth))
            raise ValueError(
                f"FlitParams.flit_bytes = {self.flit_bytes!r} is narrower than the widest link "
                f"(link {link}, {widest:g} bytes/cycle): a flit must be at least as wide as "
                f"every link; use flit_bytes >= {widest:g} or None (the widest link)"
            )
        return float(self.flit_bytes)

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
                ALLOCATORS.index(self.allocator),
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
    flit_bytes = float(params.flit_bytes or 16.0)
    tvm_ffi.get_global_func("chiplet.noc.simulate")(
        network["link_src"],
        network["link_dst"],
        network["link_latency"],
        np.full(len(network["link_src"]), flit_bytes),
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
        flit_bytes,
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
    from tvm_chiplet.targets.system_generators import mesh_system
    from tvm_chiplet.targets.topology import Topology

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


# ---------------------------------------------------------------------------------------------
# Parallel sweeps, saturation throughput and the channel-load bound
# ---------------------------------------------------------------------------------------------

_DEFAULT_SWEEP_RATES: tuple[float, ...] = tuple(round(0.02 * i, 2) for i in range(1, 51))
# Mean packet latency above this multiple of the zero-load latency marks a point as past
# saturation (the usual BookSim-practice cut-off; see saturation_throughput).
_LATENCY_FACTOR = 3.0


def sweep_noc(
    points: list[dict],
    jobs: int | None = None,
    progress: Callable[[int, int], None] | None = None,
) -> list[NocResult]:
    """Run independent :func:`simulate_noc` calls in parallel processes.

    Parameters
    ----------
    points : list of dict
        Keyword arguments of one :func:`simulate_noc` call each (e.g.
        ``{"topology": "mesh-8x8", "traffic": "uniform", "rate": 0.2}``); every key is checked
        against the signature of :func:`simulate_noc` before anything runs.
    jobs : int, optional
        Worker processes (default ``os.cpu_count()``, at most ``len(points)``). ``jobs=1`` runs
        the points one after the other in this process.
    progress : callable, optional
        Called as ``progress(done, total)`` after each finished point (``done`` counts 1 to
        ``total``, in completion order).

    Returns
    -------
    list of NocResult
        One result per point, in the order of ``points``. Each point carries its own seed, so
        the results do not depend on ``jobs`` or on scheduling.

    Raises
    ------
    ValueError, TypeError
        A point that is not a dict, an unknown key (named, with the valid ones), or ``jobs < 1``.
        Errors of :func:`simulate_noc` itself are raised as they would be sequentially.
    KeyboardInterrupt
        Re-raised after pending points are cancelled and the workers stopped and joined.

    Notes
    -----
    Workers are started with the ``"forkserver"`` method (safe when the caller runs threads:
    they fork from a single-threaded server process that has imported this module) and ignore
    SIGINT, so Ctrl-C reaches only this process, which then shuts the pool down.

    Example
    -------
    >>> points = [{"topology": "mesh-4x4", "rate": r, "cycles": 2000} for r in (0.1, 0.2)]
    >>> [r.saturated for r in sweep_noc(points, jobs=2)]
    [False, False]
    """
    points = [_checked_point(index, point) for index, point in enumerate(points)]
    if jobs is None:
        jobs = os.cpu_count() or 1
    if not isinstance(jobs, int) or isinstance(jobs, bool) or jobs < 1:
        raise ValueError(f"jobs must be None or an integer >= 1, got {jobs!r}")
    total = len(points)
    jobs = min(jobs, total)
    if jobs <= 1:
        results = []
        for done, point in enumerate(points, start=1):
            results.append(simulate_noc(**point))
            if progress is not None:
                progress(done, total)
        return results

    ordered: list[NocResult | None] = [None] * total
    context = multiprocessing.get_context("forkserver")
    # Workers fork from a server that has imported this module once (tvm_chiplet imports TVM,
    # seconds per spawned process); the preload only matters before the server first starts.
    context.set_forkserver_preload([__name__])
    executor = concurrent.futures.ProcessPoolExecutor(
        max_workers=jobs, mp_context=context, initializer=_ignore_sigint
    )
    try:
        index_of = {executor.submit(_simulate_point, point): i for i, point in enumerate(points)}
        for done, future in enumerate(concurrent.futures.as_completed(index_of), start=1):
            ordered[index_of[future]] = future.result()
            if progress is not None:
                progress(done, total)
    except BaseException:
        _stop_pool(executor)
        raise
    executor.shutdown(wait=True)
    return [result for result in ordered if result is not None]


def saturation_throughput(
    topology: str,
    traffic: str,
    rates: Sequence[float] = _DEFAULT_SWEEP_RATES,
    jobs: int | None = None,
    *,
    latency_factor: float = _LATENCY_FACTOR,
    progress: Callable[[int, int], None] | None = None,
    **kw: Any,
) -> tuple[float, list[NocResult]]:
    """Saturation throughput of a mesh under synthetic traffic, from a sweep of offered loads.

    Definition (Dally & Towles, *Principles and Practices of Interconnection Networks*, ch. 23
    and 25; BookSim practice): the network saturates at the offered load where the mean packet
    latency grows without bound. A finite run cannot see an infinite latency, so, as BookSim's
    sweeps do with a latency threshold, a point counts as *stable* when its mean packet latency
    is at most ``latency_factor`` times the zero-load latency (the latency of the lowest rate of
    the sweep), when it delivered packets, and when it accepted at least 90 % of what it offered
    (``not NocResult.saturated``). The saturation throughput is the largest accepted throughput
    (flits/node/cycle) over the stable points below the first unstable one; if every point is
    stable, the sweep did not reach saturation and the largest accepted throughput is returned.

    Parameters
    ----------
    topology, traffic : str
        As for :func:`simulate_noc`.
    rates : sequence of float
        Offered loads in flits/node/cycle (sorted ascending here; default 0.02, 0.04, .., 1.0).
        The lowest should be well below saturation: it defines the zero-load latency.
    jobs : int, optional
        Worker processes for :func:`sweep_noc`.
    latency_factor : float
        Latency threshold as a multiple of the zero-load latency (> 1, default 3).
    progress : callable, optional
        ``progress(done, total)``, as for :func:`sweep_noc`.
    **kw
        Further :func:`simulate_noc` arguments (``packet_flits``, ``cycles``, ``warmup``,
        ``seed``, ``params``, ``hotspot_fraction``); ``rate`` and ``batch_packets`` are not
        allowed.

    Returns
    -------
    (float, list of NocResult)
        The saturation throughput and the results per rate, in ascending rate order.

    Example
    -------
    >>> sat, curve = saturation_throughput("mesh-4x4", "uniform", rates=[0.1, 0.4, 0.8])
    """
    for name in ("rate", "batch_packets", "topology", "traffic"):
        if name in kw:
            raise ValueError(
                f"saturation_throughput sweeps open-loop rates; remove {name!r} from the keyword "
                f"arguments (pass offered loads as `rates`)"
            )
    rates = sorted(float(rate) for rate in rates)
    if not rates:
        raise ValueError("rates must hold at least one offered load in (0, 1]")
    if not latency_factor > 1:
        raise ValueError(f"latency_factor must be > 1, got {latency_factor!r}")
    points = [dict(topology=topology, traffic=traffic, rate=rate, **kw) for rate in rates]
    results = sweep_noc(points, jobs=jobs, progress=progress)
    zero_load = results[0].avg_packet_latency
    best = 0.0
    for result in results:
        stable = (
            not result.saturated
            and math.isfinite(result.avg_packet_latency)
            and result.avg_packet_latency <= latency_factor * zero_load
        )
        if not stable:
            break
        best = max(best, result.accepted_throughput)
    else:
        best = max(result.accepted_throughput for result in results)
    return best, results


def _checked_point(index: int, point: Any) -> dict:
    if not isinstance(point, Mapping):
        raise TypeError(
            f"sweep point {index} must be a dict of simulate_noc keyword arguments, got "
            f"{type(point).__name__}"
        )
    valid = _simulate_noc_parameters()
    unknown = [key for key in point if key not in valid]
    if unknown:
        raise ValueError(
            f"sweep point {index} has unknown key(s) {', '.join(map(repr, unknown))}; "
            f"simulate_noc accepts {', '.join(valid)}"
        )
    return dict(point)


@functools.lru_cache(maxsize=1)
def _simulate_noc_parameters() -> tuple[str, ...]:
    return tuple(inspect.signature(simulate_noc).parameters)


def _simulate_point(point: dict) -> NocResult:
    return simulate_noc(**point)


def _ignore_sigint() -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)


def _stop_pool(executor: concurrent.futures.ProcessPoolExecutor) -> None:
    """Cancel pending work, stop running workers and join them all."""
    # ProcessPoolExecutor (Python < 3.14) has no public way to stop busy workers.
    workers = list((getattr(executor, "_processes", None) or {}).values())
    executor.shutdown(wait=False, cancel_futures=True)
    for worker in workers:
        if worker.is_alive():
            worker.terminate()
    for worker in workers:
        worker.join()
    executor.shutdown(wait=True)
