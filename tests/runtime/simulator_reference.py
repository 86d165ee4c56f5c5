"""A pure-Python reference of the device simulator's event-level model, slow and simple.

The tests check the C++ core (:func:`tvm_chiplet.runtime.simulator.simulate`) against it on
small cases; see the model in :mod:`tvm_chiplet.runtime.simulator`.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from tvm_chiplet.runtime.simulator import (
    NETWORK_MODELS,
    SimMessage,
    SimResult,
    SimTask,
    _cluster_sequence,
    _prepare,
    _Problem,
    _summarise,
    _Timeline,
)

# A transfer counts as finished when this fraction of its bytes is left (absorbs rounding of the
# remaining bytes over many rate changes); the C++ flow model uses the same value.
_DONE_FRACTION = 1e-9


def simulate_reference(
    tasks: Sequence[SimTask],
    messages: Sequence[SimMessage],
    link_bandwidth: Sequence[float] | np.ndarray,
    link_latency: Sequence[float] | np.ndarray,
    num_clusters: int,
    batches: int = 1,
    network: str = "flow",
) -> SimResult:
    """Pure-Python version of :func:`simulate`, slow and simple; for checking it on small cases.

    Same parameters, result and errors as :func:`simulate`, without the ``"flit"`` network.
    """
    if network not in NETWORK_MODELS:
        valid = ", ".join(repr(name) for name in NETWORK_MODELS)
        raise ValueError(
            f"unknown network model {network!r}; expected one of {valid} (simulate_reference "
            f"has no flit model: use simulate for it)"
        )
    problem = _prepare(
        tasks, messages, link_bandwidth, link_latency, num_clusters, batches, network
    )
    return _summarise(problem, _reference_timeline(problem))


def _reference_timeline(problem: _Problem) -> _Timeline:
    """Advance time from event to event, settling everything that happens at each instant."""
    batches, num_tasks = problem.batches, len(problem.task_names)
    num_messages, num_links = len(problem.message_src), len(problem.link_bandwidth)
    bandwidth = problem.link_bandwidth.tolist()
    cycles = problem.task_cycles.tolist()
    nbytes = problem.message_bytes.tolist()
    offsets = problem.route_offsets.tolist()
    links = problem.route_links.tolist()
    routes = [links[offsets[m] : offsets[m + 1]] for m in range(num_messages)]
    route_latency = [sum(problem.link_latency[route].tolist()) for route in routes]
    # Flows: a unicast's route, or a multicast's union of routes under its leader's index
    # (the analytical model times every message alone).
    leaders = (problem.message_leader.tolist() if problem.network == "flow"
               else list(range(num_messages)))
    members: dict[int, list[int]] = {}
    flow_links: dict[int, list[int]] = {}
    for m in range(num_messages):
        if routes[m]:
            members.setdefault(leaders[m], []).append(m)
            union = flow_links.setdefault(leaders[m], [])
            union += [link for link in routes[m] if link not in union]
    incoming = [np.flatnonzero(problem.message_dst == t).tolist() for t in range(num_tasks)]
    outgoing = [np.flatnonzero(problem.message_src == t).tolist() for t in range(num_tasks)]
    sequences = [_cluster_sequence(problem, c) for c in range(problem.num_clusters)]
    rate_model = _max_min_rates if problem.network == "flow" else _unshared_rates

    start = np.full((batches, num_tasks), np.nan)
    end = np.full((batches, num_tasks), np.nan)
    arrival = np.full((batches, num_messages), np.nan)
    position = [0] * problem.num_clusters
    running: dict[int, tuple[int, int]] = {}  # cluster -> (batch, task)
    remaining: dict[tuple[int, int], float] = {}  # (batch, message) -> bytes left to send
    sent_at: dict[tuple[int, int], float] = {}
    arrivals_due: dict[tuple[int, int], float] = {}
    occupancy: list[list[tuple[float, float]]] = [[] for _ in range(num_links)]
    now = 0.0
    while True:
        changed = True
        while changed:
            changed = False
            for cluster, (batch, task) in list(running.items()):
                if end[batch, task] <= now:
                    del running[cluster]
                    changed = True
                    for m in outgoing[task]:
                        # A multicast is one flow, keyed by its leader, started by its first
                        # message (they all leave this task now).
                        if not routes[m]:
                            arrivals_due[batch, m] = now
                        elif (batch, leaders[m]) not in sent_at:
                            remaining[batch, leaders[m]] = nbytes[m]
                            sent_at[batch, leaders[m]] = now
            for (batch, lead), left in list(remaining.items()):
                if left <= _DONE_FRACTION * nbytes[lead]:
                    del remaining[batch, lead]
                    changed = True
                    for link in flow_links[lead]:
                        occupancy[link].append((sent_at[batch, lead], now))
                    for m in members[lead]:
                        arrivals_due[batch, m] = now + route_latency[m]
            for (batch, m), due in list(arrivals_due.items()):
                if due <= now:
                    del arrivals_due[batch, m]
                    changed = True
                    arrival[batch, m] = due
            for cluster, sequence in enumerate(sequences):
                if cluster in running or position[cluster] == len(sequence):
                    continue
                batch, task = sequence[position[cluster]]
                if all(not np.isnan(arrival[batch, m]) for m in incoming[task]):
                    start[batch, task] = now
                    end[batch, task] = now + cycles[task]
                    running[cluster] = (batch, task)
                    position[cluster] += 1
                    changed = True

        rates = rate_model([flow_links[lead] for _, lead in remaining], bandwidth)
        finish = [now + left / rate for left, rate in zip(remaining.values(), rates, strict=True)]
        candidates = [end[b, t] for b, t in running.values()] + list(arrivals_due.values()) + finish
        if not candidates:
            break
        next_time = min(candidates)
        for key, rate, done in zip(list(remaining), rates, finish, strict=True):
            remaining[key] = 0.0 if done <= next_time else remaining[key] - rate * (next_time - now)
        now = next_time

    link_busy = np.array([_union_length(intervals) for intervals in occupancy], dtype=np.float64)
    return _Timeline(start, end, arrival, link_busy)


def _unshared_rates(routes: list[list[int]], bandwidth: list[float]) -> list[float]:
    """Analytical model: every message gets its route's slowest link to itself."""
    return [min(bandwidth[link] for link in route) for route in routes]


def _max_min_rates(routes: list[list[int]], bandwidth: list[float]) -> list[float]:
    """Max-min fair rates by progressive filling: the link with the smallest fair share fixes the
    rate of its unfixed flows, which then leave their bandwidth off every link they cross."""
    rates: list[float | None] = [None] * len(routes)
    capacity = {link: bandwidth[link] for route in routes for link in route}
    while any(rate is None for rate in rates):
        users = {link: 0 for link in capacity}
        for route, rate in zip(routes, rates, strict=True):
            if rate is None:
                for link in route:
                    users[link] += 1
        share, bottleneck = min((capacity[link] / n, link) for link, n in users.items() if n > 0)
        for flow, route in enumerate(routes):
            if rates[flow] is None and bottleneck in route:
                rates[flow] = share
                for link in route:
                    capacity[link] -= share
    return rates


def _union_length(intervals: list[tuple[float, float]]) -> float:
    total, covered_until = 0.0, -math.inf
    for begin, finish in sorted(intervals):
        if finish > covered_until:
            total += finish - max(begin, covered_until)
            covered_until = finish
    return total
