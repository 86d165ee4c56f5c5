"""Closed-form NoC figures the flit model is checked against: channel loads and their
throughput bound, and the mean zero-load latency of synthetic traffic.

They describe the traffic of :func:`tvm_chiplet.runtime.noc.simulate_noc` on a ``"mesh-RxC"``
(XY routes, 1-cycle links); the NoC benchmark and the tests compare the simulator with them.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from tvm_chiplet.runtime.noc import (
    TRAFFIC_PATTERNS,
    FlitParams,
    _mesh_network,
    _parse_topology,
)


def channel_loads(
    topology: str, traffic: str, *, hotspot_fraction: float = 0.2
) -> tuple[np.ndarray, np.ndarray]:
    """Expected flits per cycle on every link and ejection port per unit injection rate.

    The loads follow the XY routes and the destination distributions that :func:`simulate_noc`
    uses (``"uniform"`` picks any *other* node; see the module docstring), with every node
    injecting 1 flit/cycle.

    Returns
    -------
    (numpy.ndarray, numpy.ndarray)
        Per-link loads (indexed by link id of the mesh) and per-node ejection loads.
    """
    rows, cols = _parse_topology(topology)
    demand = _demand_matrix(rows, cols, traffic, hotspot_fraction)
    network = _mesh_network(rows, cols)
    offsets, pair_links = network["pair_offsets"], network["pair_links"]
    pair_of_link = np.repeat(np.arange(len(offsets) - 1), np.diff(offsets))
    link_load = np.bincount(
        pair_links, weights=demand.ravel()[pair_of_link], minlength=len(network["link_src"])
    )
    return link_load, demand.sum(axis=0)


def ideal_throughput(topology: str, traffic: str, *, hotspot_fraction: float = 0.2) -> float:
    """Channel-load bound on the throughput of XY (dimension-order) routing, flits/node/cycle.

    With every node injecting ``r`` flits/cycle, a channel carries ``r * load``; links, the
    injection and the ejection ports each move at most 1 flit/cycle, so the network cannot
    accept more than ``1 / max(load)`` (Dally & Towles, ch. 3). Loads are summed over the
    actual XY routes (:func:`channel_loads`).

    Closed forms on a ``k x k`` mesh with ``N = k * k`` nodes: uniform traffic, with destinations
    drawn among the ``N - 1`` other nodes as :func:`simulate_noc` does, ``4 / k * (N - 1) / N``
    for even ``k`` (the textbook ``4 / k`` counts a node as its own destination too: 0.9375 on
    4x4 instead of 1, 0.4922 on 8x8 instead of 0.5); transpose ``1 / (k - 1)`` (the last row's
    link next to the diagonal carries the X legs of ``k - 1`` sources); bitcomp ``2 / k``.

    Parameters
    ----------
    topology, traffic : str
        As for :func:`simulate_noc`.
    hotspot_fraction : float
        As for :func:`simulate_noc` (``"hotspot"`` traffic only).

    Returns
    -------
    float
        The bound in flits/node/cycle, at most 1.
    """
    link_load, ejection_load = channel_loads(topology, traffic, hotspot_fraction=hotspot_fraction)
    worst = max(1.0, float(link_load.max(initial=0.0)), float(ejection_load.max()))
    return 1.0 / worst


def mean_zero_load_latency(
    topology: str,
    traffic: str,
    packet_flits: int = 4,
    params: FlitParams | None = None,
    *,
    hotspot_fraction: float = 0.2,
) -> float:
    """Closed-form mean zero-load packet latency of :func:`simulate_noc` traffic, in cycles.

    :meth:`FlitParams.zero_load_latency` averaged over the packets' XY hop counts (1-cycle
    links), weighted by the destination distribution of ``traffic``; every node injects at the
    same rate, so each source weighs the same.

    Parameters
    ----------
    topology, traffic, packet_flits, params, hotspot_fraction
        As for :func:`simulate_noc`.

    Returns
    -------
    float
    """
    rows, cols = _parse_topology(topology)
    params = replace(params or FlitParams(), packet_flits=packet_flits)
    demand = _demand_matrix(rows, cols, traffic, hotspot_fraction)
    hops = np.diff(_mesh_network(rows, cols)["pair_offsets"]).reshape(demand.shape)
    mean_hops = float((demand * hops).sum()) / demand.shape[0]
    return params.zero_load_latency(0, 0.0) + mean_hops * (params.router_delay + 1)


def _demand_matrix(rows: int, cols: int, traffic: str, hotspot_fraction: float) -> np.ndarray:
    """``[src, dst]`` probability that a packet of ``src`` goes to ``dst`` (rows sum to 1)."""
    if traffic not in TRAFFIC_PATTERNS:
        valid = ", ".join(repr(name) for name in TRAFFIC_PATTERNS)
        raise ValueError(f"unknown traffic pattern {traffic!r}; expected one of {valid}")
    if not 0 <= hotspot_fraction <= 1:
        raise ValueError(f"hotspot_fraction must be in [0, 1], got {hotspot_fraction!r}")
    nodes = rows * cols
    xy = _mesh_network(rows, cols)["coordinates"].tolist()
    at = {tuple(coordinate): node for node, coordinate in enumerate(xy)}
    demand = np.zeros((nodes, nodes))
    if traffic in ("transpose", "bitcomp"):
        if traffic == "transpose" and rows != cols:
            raise ValueError(
                f"transpose traffic needs a square mesh, got 'mesh-{rows}x{cols}'; use e.g. "
                f"'mesh-{rows}x{rows}' or another pattern"
            )
        for src, (x, y) in enumerate(xy):
            dst = at[(y, x)] if traffic == "transpose" else at[(cols - 1 - x, rows - 1 - y)]
            demand[src, dst] = 1.0
        return demand
    if nodes == 1:
        demand[0, 0] = 1.0
        return demand
    demand[:] = 1.0 / (nodes - 1)
    np.fill_diagonal(demand, 0.0)
    if traffic == "hotspot":
        hotspot = at[(cols // 2, rows // 2)]
        others = np.arange(nodes) != hotspot
        demand[others] *= 1.0 - hotspot_fraction
        demand[others, hotspot] += hotspot_fraction
    return demand
