"""How a group of clusters shares values on the system's network: directly, or around a ring.

When several clusters read one cluster's value (each part of an all-gather, a broadcast
activation), it can go directly from its holder to every reader on the system's routes (as one
multicast tree where every link on the way multicasts), or around a ring of the group: each
member forwards what it received to its ring neighbour, both ways round, so the value crosses
each ring hop once and only neighbours talk (what ring all-gathers do, pipelined in chunks).
:func:`gather_ring` models the busiest link of an all-gather both ways on the topology's routes
and returns the ring when it carries less; :func:`ring_route` is a reader's path around it.
A reduce-scatter (partial sums, each member keeping the sum of one slice) goes around a ring
too (:func:`reduce_ring`): the sums are accumulated hop by hop instead of sent whole.
"""

from __future__ import annotations

import weakref
from collections import Counter
from collections.abc import Sequence

from tvm_chiplet.targets.topology import Topology

RING_GAIN = 0.9
"""The ring is chosen when its busiest link carries at most this fraction of the direct
gather's: relaying costs a hop of latency and a copy per member, so a tie goes direct."""

_SEARCH_LIMIT = 20_000
"""Nodes a ring search may visit before it settles for the best open path found."""


def ring_order(topology: Topology, clusters: Sequence[int]) -> list[int]:
    """``clusters`` in a ring order whose consecutive members are one link apart wherever the
    topology allows: a Hamiltonian cycle of the group's links (a path from a member to one of
    its neighbours, found by depth-first search taking the neighbour with the fewest onward
    choices first), else a Hamiltonian path (closed by a route), else the longest path found
    with the rest appended (reached by routes)."""
    members = list(dict.fromkeys(clusters))
    position = {c: i for i, c in enumerate(members)}
    near = {c: [d for d in sorted(position.keys() & set(topology.graph.successors(c)),
                                  key=position.get)
                if d != c and len(topology.route(c, d)) == 1 and len(topology.route(d, c)) == 1]
            for c in members}
    start = members[0]
    best: list[int] = [start]
    for goal in [*near[start][:2], None]:  # a cycle through a neighbour, else an open path
        found = _path_to(near, members, start, goal, best)
        if found:
            return found
    return best + [c for c in members if c not in set(best)]


def _path_to(near: dict[int, list[int]], members: list[int], start: int, goal: int | None,
             best: list[int]) -> list[int] | None:
    """A path from ``start`` through every member that ends at ``goal`` (a neighbour of
    ``start``, closing a ring), visiting ``goal`` last; ``best`` keeps the longest path seen."""
    path, seen, visited = [start], {start}, 0

    def extend() -> bool:
        nonlocal visited
        visited += 1
        if len(path) > len(best):
            best[:] = path
        if len(path) == len(members):
            return goal is None or path[-1] == goal
        if visited > _SEARCH_LIMIT:
            return False
        last_step = len(path) == len(members) - 1
        options = [d for d in near[path[-1]] if d not in seen and (d != goal or last_step)]
        options.sort(key=lambda d: (sum(e not in seen for e in near[d]), d))
        for d in options:
            path.append(d)
            seen.add(d)
            if not stranded(d) and extend():
                return True
            path.pop()
            seen.discard(d)
        return False

    def short(u: int, end: int) -> bool:
        """Whether unvisited member ``u`` can no longer lie on the path: inside a ring it needs
        two neighbours among the unvisited and the path's end (the goal, which ends it, one);
        on an open path (no goal) one."""
        free = sum(1 for v in near[u] if v not in seen or v == end)
        return free < (2 if goal is not None and u != goal else 1)

    def stranded(end: int) -> bool:
        """Whether some unvisited member is :func:`short` now that ``end`` ends the path: only
        the neighbours of the member before it can be (that member no longer ends the path,
        and ``end`` still counts for its own neighbours); every other member was checked when
        the path reached that member, or at the start."""
        return any(short(u, end) for u in near[path[-2]] if u not in seen)

    if any(short(u, start) for u in members if u not in seen):
        return None
    return list(path) if extend() else None


def _busiest(loads: Counter) -> int:
    return max(loads.values(), default=0)


def direct_load(topology: Topology, clusters: Sequence[int], multicast: bool = True) -> Counter:
    """Parts each link carries when every member sends its part to every other directly (as
    one multicast tree where every link on the way multicasts, in the orders
    :func:`y_first_sources` picks, unless ``multicast`` is False: each member a distinct part
    to every other, as a reduce-scatter sends them)."""
    members = tuple(sorted(set(clusters)))
    trees = multicast and _multicasts(topology)
    return _direct_loads(topology, members, y_first_sources(topology, members) if trees else None)


def _multicasts(topology: Topology) -> bool:
    """Whether any link of the system multicasts: without one, no tree can be taken."""
    return any(link.multicast for link in topology.system.links)


def y_first_sources(topology: Topology, members: Sequence[int]) -> frozenset[int]:
    """The members whose multicast trees to the rest of ``members`` take their chiplet-grid legs
    Y then X (:meth:`~tvm_chiplet.targets.topology.Topology.tree_route`).

    In an all-gather every member's tree fans out at once, and X-first trees alone funnel into
    the links of the second dimension: on a 6x6 mesh they put 30 of the 35 parts a corner
    receives on its one vertical link. Trees alternating by chiplet colour (Y first from
    chiplets with odd ``x + y``) put 18 on the busiest link, what a corner's two links must
    carry anyway, but on a 2-wide group they load it more than X-first trees along the long
    side. So of three choices (none, the odd colour, all) the one whose trees load the busiest
    link least is taken, the earlier on a tie; a system whose routers build trees in one order
    only (``[system] multicast_orders``) has that choice alone."""
    members = tuple(sorted(set(members)))
    known = _ORDERS.setdefault(topology, {})
    if members not in known:
        system = topology.system
        odd = frozenset(c for c in members
                        if (system.chiplet_of(c).x + system.chiplet_of(c).y) % 2 == 1)
        orders = system.multicast_orders
        choices = ([frozenset()] if "xy" in orders else []) + (
            [odd] if len(orders) > 1 else []) + ([frozenset(members)] if "yx" in orders else [])
        if not _multicasts(topology):
            choices = choices[:1]  # no trees to choose
        known[members] = choices[0] if len(choices) == 1 else min(
            choices, key=lambda choice: _busiest(_direct_loads(topology, members, choice))
        )  # the first of the least loaded
    return known[members]


def _direct_loads(topology: Topology, members: tuple[int, ...], y_first: frozenset[int] | None
                  ) -> Counter:
    """Parts each link carries when every member sends its part to every other directly: as
    one tree (Y first from ``y_first``) where every link on it multicasts, else (and always
    when ``y_first`` is None) as a message to each on the system's routes. Computed once per
    topology, members and order (:func:`y_first_sources` weighs the orders that
    :func:`direct_load` then reads); each caller gets its own copy."""
    known = _LOADS.setdefault(topology, {})
    key = (members, y_first)
    if key not in known:
        known[key] = _loads(topology, members, y_first)
    return Counter(known[key])


def _loads(topology: Topology, members: tuple[int, ...], y_first: frozenset[int] | None
           ) -> Counter:
    """:func:`_direct_loads`, computed."""
    loads: Counter = Counter()
    for source in members:
        if y_first is not None:
            tree = {link for d in members if d != source
                    for link in topology.tree_route(source, d, source in y_first)}
            if all(topology.system.links[link].multicast for link in tree):
                loads.update(tree)
                continue
        loads.update(link for d in members if d != source for link in topology.route(source, d))
    return loads


def ring_load(topology: Topology, order: Sequence[int]) -> Counter:
    """Parts each link carries when every part is relayed around ``order`` both ways, each
    member receiving it once (from the nearer side)."""
    k = len(order)
    loads: Counter = Counter()
    # Each hop forwards the parts of the k // 2 members behind it one way round, and of the
    # (k - 1) // 2 ahead of it the other way.
    for a, b in zip(order, [*order[1:], order[0]], strict=True):
        for link in topology.route(a, b):
            loads[link] += k // 2
        for link in topology.route(b, a):
            loads[link] += (k - 1) // 2
    return +loads


def gather_ring(topology: Topology, clusters: Sequence[int]) -> tuple[int, ...] | None:
    """The ring order to all-gather ``clusters`` around, or None when sending directly loads
    the busiest link as little (module docstring)."""
    return _lighter_ring(topology, clusters, multicast=True)


def reduce_ring(topology: Topology, clusters: Sequence[int]) -> tuple[int, ...] | None:
    """The ring order to reduce-scatter ``clusters`` around, or None when sending every member
    its slice of every other member's partial directly loads the busiest link as little.

    Around the ring, the slice of every member's partial that member ``j`` keeps is summed on
    its way to ``j`` from both sides, each member adding its own slice to what its neighbour
    sent and passing the sum on: every ring hop carries each slice once, as a ring all-gather
    carries each part, where sending directly carries ``k - 1`` slices out of every member."""
    return _lighter_ring(topology, clusters, multicast=False)


def _lighter_ring(topology: Topology, clusters: Sequence[int], multicast: bool
                  ) -> tuple[int, ...] | None:
    """A ring order of ``clusters`` if its busiest link carries at most :data:`RING_GAIN` of
    what sending directly puts on it (multicast trees where ``multicast`` and links allow)."""
    if len(set(clusters)) < 3:
        return None
    known = _RINGS.setdefault(topology, {})
    key = (tuple(clusters), multicast)
    if key not in known:
        order = ring_order(topology, clusters)
        ring = _busiest(ring_load(topology, order))
        lighter = ring <= RING_GAIN * _busiest(direct_load(topology, clusters, multicast))
        known[key] = tuple(order) if lighter else None
    return known[key]


_ORDERS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
"""Each topology's tree orders, by members (:func:`y_first_sources`)."""

_LOADS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
"""Each topology's direct loads, by (members, Y-first sources) (:func:`_direct_loads`)."""

_RINGS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
"""Each topology's rings, by (members, multicast): every workload of a planner's candidates
looks up the same groups' rings."""


def ring_route(topology: Topology, ring: Sequence[int], src: int, dst: int) -> list[int] | None:
    """The links from ``src`` to ``dst`` around ``ring`` the shorter way (hop by hop on the
    system's routes), or None when that path would cross a link twice."""
    k = len(ring)
    at, goal = ring.index(src), ring.index(dst)
    step = 1 if (goal - at) % k <= (at - goal) % k else -1
    links: list[int] = []
    while at != goal:
        nxt = (at + step) % k
        links += topology.route(ring[at], ring[nxt])
        at = nxt
    return links if len(set(links)) == len(links) else None
