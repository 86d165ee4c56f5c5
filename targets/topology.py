"""Routing view of a :class:`~tvm_chiplet.targets.system.ChipletSystem` (networkx, no TVM).

Routing schemes
---------------
:class:`Topology` picks one scheme per system, so every route of a system obeys the same rule
and the routes are consistent (deterministic, one path per ordered pair):

``"xy"`` - hierarchical dimension order, used when the system is an *intact mesh*: chiplets fill
    the whole rectangle of their bounding box, the gateways (first clusters) of neighbouring
    chiplets are linked both ways, and in every chiplet the clusters fill a local rectangle with
    the gateway at its ``(0, 0)`` corner and every local neighbour pair linked both ways. A route
    goes source cluster -> own gateway (local X then Y), gateway -> gateway over the chiplet grid
    (X then Y), then gateway -> destination cluster (local X then Y). Deadlock freedom: XY order
    is acyclic inside each mesh; legs towards a gateway at the local origin only use -X/-Y local
    channels and legs away from it only +X/+Y channels, so no chain of channel dependencies
    leads from a package channel back into one, and the whole channel-dependency graph is
    acyclic without virtual channels. Extra links (e.g. a ring's closing link) stay unused.
``"torus-xy"`` - the same on a chiplet grid whose rows and/or columns (of length >= 3) also have
    wrap-around links: each dimension goes the shorter way round (ties go +). As on any torus,
    deadlock freedom needs two virtual channels with a dateline, which the device provides.
``"up-down"`` - everything else (irregular grids, faults, rings, explicit link lists): up*/down*
    routing (Autonet). A spanning BFS tree is rooted at the most central cluster (smallest
    eccentricity, then smallest id); a link is *up* when it leads to a node of smaller
    ``(depth, id)``. A legal route takes zero or more up links then zero or more down links, which
    rules out cyclic channel dependencies. Among the legal routes the one with fewest hops is
    taken, ties broken by the lexicographically smallest sequence of link ids.

Multicast trees
---------------
A value sent to several clusters at once, where routers replicate packets, goes as one tree: the
union of its branches (:meth:`Topology.tree_route`). On the dimension-order schemes a tree may
take its chiplet-grid legs X then Y, as the system's routes do, or Y then X; which one each
member of a group takes is :mod:`~tvm_chiplet.targets.collectives`' choice. Each order keeps to
its own virtual-channel class, as O1TURN routes unicast packets (Seo et al., ISCA 2005), so the
trees stay free of cyclic channel dependencies. Up*/down* trees take the system's routes.

All routes are cached per :class:`Topology`. Builders for synthetic studies live in
:mod:`tvm_chiplet.targets.system_generators`.
"""

from __future__ import annotations

import copy
import itertools
import math
import operator
from collections import deque
from collections.abc import Iterable

import networkx as nx

from tvm_chiplet.targets.system import ChipletSystem, Cluster, Dram, SystemConfigError

ROUTING_SCHEMES = ("xy", "torus-xy", "up-down")


class Topology:
    """Routing tables, orders and cuts of one chiplet system.

    Parameters
    ----------
    system : ChipletSystem
        The system; clusters are the nodes, links the edges.

    Attributes
    ----------
    graph : networkx.DiGraph
        Nodes are cluster ids (attribute ``chiplet``); edges carry ``link`` (the link id, the
        smallest when parallel links exist), ``kind``, ``bandwidth`` and ``latency``.
    scheme : str
        One of :data:`ROUTING_SCHEMES` (see the module docstring).
    """

    def __init__(self, system: ChipletSystem) -> None:
        self.system = system
        self.graph = nx.DiGraph()
        for cluster in system.clusters:
            self.graph.add_node(cluster.id, chiplet=cluster.chiplet)
        self._link_at: dict[tuple[int, int], int] = {}
        for link in system.links:
            if (link.src, link.dst) in self._link_at:
                continue
            self._link_at[(link.src, link.dst)] = link.id
            self.graph.add_edge(
                link.src,
                link.dst,
                link=link.id,
                kind=link.kind,
                bandwidth=link.bandwidth,
                latency=link.latency,
            )
        self._out_links: dict[int, list[int]] = {c.id: [] for c in system.clusters}
        for link in system.links:
            self._out_links[link.src].append(link.id)
        xs = [c.x for c in system.chiplets]
        ys = [c.y for c in system.chiplets]
        self._x0, self._y0 = min(xs), min(ys)
        self.cols = max(xs) - self._x0 + 1
        self.rows = max(ys) - self._y0 + 1
        self._chiplet_at = {(c.x - self._x0, c.y - self._y0): c.id for c in system.chiplets}
        self._wrap_x = self._wrap_y = False
        self.scheme = self._choose_scheme()
        self._routes: dict[tuple[int, int], tuple[int, ...]] = {}
        self._tree_routes: dict[tuple[int, int], tuple[int, ...]] = {}
        self._updown_rank: dict[int, tuple[int, int]] = {}
        self._updown_dist: dict[int, dict[tuple[int, int], int]] = {}
        if self.scheme == "up-down":
            self._updown_rank = self._rank_nodes()
        self._order: list[int] | None = None

    # ------------------------------------------------------------------ scheme selection
    def _linked_both_ways(self, a: int, b: int) -> bool:
        return (a, b) in self._link_at and (b, a) in self._link_at

    def _choose_scheme(self) -> str:
        system = self.system
        if len(self._chiplet_at) != self.rows * self.cols:
            return "up-down"
        gateway = {cid: system.chiplets[cid].gateway for cid in self._chiplet_at.values()}
        for (x, y), cid in self._chiplet_at.items():
            for nx_, ny_ in ((x + 1, y), (x, y + 1)):
                other = self._chiplet_at.get((nx_, ny_))
                if other is not None and not self._linked_both_ways(gateway[cid], gateway[other]):
                    return "up-down"
        for chiplet in system.chiplets:
            members = [system.clusters[i] for i in chiplet.clusters]
            at = {(c.lx, c.ly): c.id for c in members}
            width = max(c.lx for c in members) + 1
            height = max(c.ly for c in members) + 1
            if len(at) != width * height or at.get((0, 0)) != chiplet.gateway:
                return "up-down"
            for (lx, ly), node in at.items():
                for pos in ((lx + 1, ly), (lx, ly + 1)):
                    if pos in at and not self._linked_both_ways(node, at[pos]):
                        return "up-down"

        def wraps(length: int, ends: Iterable[tuple[tuple[int, int], tuple[int, int]]]) -> bool:
            return length >= 3 and all(
                self._linked_both_ways(gateway[self._chiplet_at[a]], gateway[self._chiplet_at[b]])
                for a, b in ends
            )

        self._wrap_x = wraps(self.cols, (((self.cols - 1, y), (0, y)) for y in range(self.rows)))
        self._wrap_y = wraps(self.rows, (((x, self.rows - 1), (x, 0)) for x in range(self.cols)))
        return "torus-xy" if (self._wrap_x or self._wrap_y) else "xy"

    # ------------------------------------------------------------------ routes
    def route(self, src: int, dst: int) -> list[int]:
        """Link ids from cluster ``src`` to cluster ``dst`` (empty when equal)."""
        return list(self._path(src, dst))

    def hops(self, src: int, dst: int) -> int:
        """Number of links on the route from ``src`` to ``dst``."""
        return len(self._path(src, dst))

    def _path(self, src: int, dst: int) -> tuple[int, ...]:
        """The route from ``src`` to ``dst``, computed once (callers must not keep it
        mutable: :meth:`route` copies it)."""
        try:
            known = self._routes.get((src, dst))  # only checked ids are ever stored
        except TypeError:  # unhashable: _node says what is wrong with it
            known = None
        if known is not None:
            return known
        key = (self._node(src), self._node(dst))
        if key not in self._routes:
            src, dst = key
            if src == dst:
                path: tuple[int, ...] = ()
            elif self.scheme == "up-down":
                path = self._updown_route(src, dst)
            else:
                path = self._dor_route(src, dst)
            self._routes[key] = path
        return self._routes[key]

    def tree_route(self, src: int, dst: int, y_first: bool = False) -> list[int]:
        """Link ids from ``src`` to ``dst`` on a multicast tree rooted at ``src``: the chiplet-grid
        legs Y then X when ``y_first`` on a dimension-order scheme, else :meth:`route` (module
        docstring). The branches from one source in one order form a tree."""
        path = self._path(src, dst)  # checks the ids
        if not y_first or self.scheme == "up-down" or not path:
            return list(path)
        key = (self._node(src), self._node(dst))
        if key not in self._tree_routes:
            self._tree_routes[key] = self._dor_route(*key, y_first=True)
        return list(self._tree_routes[key])

    def route_latency(self, src: int, dst: int) -> float:
        """Sum of link latencies (cycles) on the route from ``src`` to ``dst``."""
        return sum(self.system.links[i].latency for i in self.route(src, dst))

    def route_bandwidth(self, src: int, dst: int) -> float:
        """Narrowest link bandwidth (bytes/cycle) on the route; ``inf`` for ``src == dst``."""
        route = self.route(src, dst)
        return min((self.system.links[i].bandwidth for i in route), default=math.inf)

    def route_nodes(self, src: int, dst: int) -> list[int]:
        """Cluster ids visited by the route, both ends included."""
        return [src, *(self.system.links[i].dst for i in self.route(src, dst))]

    def _node(self, node: int) -> int:
        """``node`` as a plain int, checked against the system's cluster ids."""
        try:
            index = operator.index(node)
        except TypeError:
            index = -1
        if not 0 <= index < self.system.num_clusters:
            raise ValueError(
                f"cluster id {node!r} is not in system {self.system.name!r}; expected an "
                f"integer 0..{self.system.num_clusters - 1}"
            )
        return index

    def _walk(self, nodes: list[int]) -> list[int]:
        return [self._link_at[(a, b)] for a, b in itertools.pairwise(nodes)]

    def _local_path(self, src: Cluster, dst: Cluster) -> list[int]:
        """Local XY node sequence between two clusters of one chiplet."""
        members = self.system.chiplets[src.chiplet].clusters
        at = {(self.system.clusters[i].lx, self.system.clusters[i].ly): i for i in members}
        x, y = src.lx, src.ly
        nodes = [src.id]
        while x != dst.lx:
            x += 1 if dst.lx > x else -1
            nodes.append(at[(x, y)])
        while y != dst.ly:
            y += 1 if dst.ly > y else -1
            nodes.append(at[(x, y)])
        return nodes

    def _steps(self, start: int, end: int, length: int, wrap: bool) -> list[int]:
        """Coordinates visited going from ``start`` to ``end`` along one grid dimension."""
        if start == end:
            return []
        if wrap:
            forward = (end - start) % length
            step = 1 if forward <= length - forward else -1
        else:
            step = 1 if end > start else -1
        coords, pos = [], start
        while pos != end:
            pos = (pos + step) % length
            coords.append(pos)
        return coords

    def _dor_route(self, src: int, dst: int, y_first: bool = False) -> tuple[int, ...]:
        system = self.system
        a, b = system.clusters[src], system.clusters[dst]
        if a.chiplet == b.chiplet:
            return tuple(self._walk(self._local_path(a, b)))
        ca, cb = system.chiplets[a.chiplet], system.chiplets[b.chiplet]
        gate_a, gate_b = system.clusters[ca.gateway], system.clusters[cb.gateway]
        nodes = self._local_path(a, gate_a)
        sx, sy = ca.x - self._x0, ca.y - self._y0
        tx, ty = cb.x - self._x0, cb.y - self._y0
        if y_first:
            for y in self._steps(sy, ty, self.rows, self._wrap_y):
                nodes.append(system.chiplets[self._chiplet_at[(sx, y)]].gateway)
            for x in self._steps(sx, tx, self.cols, self._wrap_x):
                nodes.append(system.chiplets[self._chiplet_at[(x, ty)]].gateway)
        else:
            for x in self._steps(sx, tx, self.cols, self._wrap_x):
                nodes.append(system.chiplets[self._chiplet_at[(x, sy)]].gateway)
            for y in self._steps(sy, ty, self.rows, self._wrap_y):
                nodes.append(system.chiplets[self._chiplet_at[(tx, y)]].gateway)
        nodes.extend(self._local_path(gate_b, b)[1:])
        return tuple(self._walk(nodes))

    # ------------------------------------------------------------------ up*/down*
    def _bfs(self, root: int) -> dict[int, int]:
        depth = {root: 0}
        queue = deque([root])
        while queue:
            node = queue.popleft()
            for nxt in sorted(self.graph.successors(node)):
                if nxt not in depth:
                    depth[nxt] = depth[node] + 1
                    queue.append(nxt)
        return depth

    def _rank_nodes(self) -> dict[int, tuple[int, int]]:
        nodes = sorted(self.graph.nodes)
        root = min(nodes, key=lambda n: (max(self._bfs(n).values()), n))
        depth = self._bfs(root)
        return {n: (depth[n], n) for n in nodes}

    def is_up_link(self, link_id: int) -> bool:
        """Whether link ``link_id`` goes *up* the up*/down* order (``"up-down"`` scheme only)."""
        if self.scheme != "up-down":
            raise ValueError(
                f"system {self.system.name!r} routes with {self.scheme!r}; up/down link "
                f"directions exist only under the 'up-down' scheme"
            )
        return self._is_up(link_id)

    def _is_up(self, link_id: int) -> bool:
        link = self.system.links[link_id]
        return self._updown_rank[link.dst] < self._updown_rank[link.src]

    def _updown_distances(self, dst: int) -> dict[tuple[int, int], int]:
        """Fewest legal hops from every ``(node, phase)`` state to ``dst``.

        Phase 0 may still go up; phase 1 has gone down and may only go down.
        """
        if dst in self._updown_dist:
            return self._updown_dist[dst]
        incoming: dict[int, list[int]] = {n: [] for n in self.graph.nodes}
        for link in self.system.links:
            incoming[link.dst].append(link.id)
        dist = {(dst, 0): 0, (dst, 1): 0}
        queue = deque([(dst, 0), (dst, 1)])
        while queue:
            node, phase = queue.popleft()
            for link_id in incoming[node]:
                src = self.system.links[link_id].src
                # Forward moves: (u, 0) -up-> (v, 0); (u, 0) or (u, 1) -down-> (v, 1).
                if self._is_up(link_id):
                    sources = [(src, 0)] if phase == 0 else []
                else:
                    sources = [(src, 0), (src, 1)] if phase == 1 else []
                for state in sources:
                    if state not in dist:
                        dist[state] = dist[(node, phase)] + 1
                        queue.append(state)
        self._updown_dist[dst] = dist
        return dist

    def _updown_route(self, src: int, dst: int) -> tuple[int, ...]:
        dist = self._updown_distances(dst)
        state = (src, 0)
        if state not in dist:
            raise SystemConfigError(
                f"{self.system.source}: no up*/down* route from "
                f"{self.system.clusters[src].name!r} to {self.system.clusters[dst].name!r}; "
                f"expected a strongly connected system with links in both directions"
            )
        route = []
        while state[0] != dst:
            node, phase = state
            for link_id in self._out_links[node]:
                up = self._is_up(link_id)
                if up and phase == 1:
                    continue
                nxt = (self.system.links[link_id].dst, 0 if up else 1)
                if dist.get(nxt, -1) == dist[state] - 1:
                    route.append(link_id)
                    state = nxt
                    break
        return tuple(route)

    # ------------------------------------------------------------------ orders and cuts
    def snake_order(self) -> list[int]:
        """Chiplet ids in boustrophedon order over the grid rows, skipping missing chiplets.

        Row 0 runs in increasing x, row 1 in decreasing x, and so on, so consecutive chiplets are
        grid neighbours wherever no chiplet is missing.
        """
        order = []
        for y in range(self.rows):
            xs = range(self.cols) if y % 2 == 0 else range(self.cols - 1, -1, -1)
            order.extend(self._chiplet_at[(x, y)] for x in xs if (x, y) in self._chiplet_at)
        return order

    def cluster_order(self) -> list[int]:
        """Cluster ids in an order whose consecutive clusters are close on the routes: the
        order in which pipeline stages take clusters.

        On intact meshes and tori: :meth:`snake_order`, inside a chiplet a local snake. Under
        ``"up-down"`` routing (faults, irregular systems) the snake may jump across a dead
        chiplet or link, so a path over the surviving graph is searched instead (greedy
        nearest neighbour from the snake's start and from the least-linked clusters, then 2-opt
        on squared hop counts) and kept when its longest step between consecutive clusters is
        shorter than the snake's, or as long with fewer hops in all.
        """
        if self._order is None:
            snake = self._snake_cluster_order()
            self._order = snake if self.scheme != "up-down" else self._graph_order(snake)
        return list(self._order)

    def with_cluster_order(self, order: Iterable[int]) -> Topology:
        """A view of this topology (same routes, shared caches) whose :meth:`cluster_order` is
        ``order``, a permutation of the cluster ids: how a planner hands another planner the
        order its stages should follow."""
        order = [self._node(c) for c in order]
        if sorted(order) != list(range(self.system.num_clusters)):
            raise ValueError(f"expected a permutation of the {self.system.num_clusters} cluster "
                             f"ids of {self.system.name!r}, got {order}")
        view = copy.copy(self)
        view._order = order
        return view

    def _snake_cluster_order(self) -> list[int]:
        order = []
        for cid in self.snake_order():
            members = [self.system.clusters[i] for i in self.system.chiplets[cid].clusters]
            members.sort(key=lambda c: (c.ly, c.lx if c.ly % 2 == 0 else -c.lx, c.id))
            order.extend(c.id for c in members)
        return order

    def _graph_order(self, snake: list[int]) -> list[int]:
        """The best of the snake and short paths over every cluster (see :meth:`cluster_order`)."""
        n = len(snake)
        if n < 3:
            return snake
        hops = {(a, b): self.hops(a, b) for a in snake for b in snake if a != b}
        far = {pair: max(h, hops[pair[1], pair[0]]) ** 2 for pair, h in hops.items()}
        rank = {c: i for i, c in enumerate(snake)}

        def score(order: list[int]) -> tuple[int, int]:
            steps = [hops[pair] for pair in itertools.pairwise(order)]
            return max(steps), sum(steps)

        degree = {c: self.graph.out_degree(c) for c in snake}
        starts = [snake[0], *sorted(snake, key=lambda c: (degree[c], rank[c]))[:4]]
        best, best_score = snake, score(snake)
        for start in dict.fromkeys(starts):
            order, left = [start], set(snake) - {start}
            while left:
                here = order[-1]
                nxt = min(left, key=lambda c: (far[here, c], rank[c]))
                order.append(nxt)
                left.remove(nxt)
            order = _two_opt(order, far)
            for candidate in (order, order[::-1]):
                if score(candidate) < best_score:
                    best, best_score = candidate, score(candidate)
        return best

    def tilings(self, count: int) -> list[list[list[int]]]:
        """Ways to cut the chiplet grid into ``count`` congruent rectangular tiles.

        Each tiling is a list of ``count`` tiles; a tile lists its cluster ids so that the
        ``i``-th cluster of every tile sits at the same place in its tile (same chiplet offset,
        same local position) with the same MACs, SRAM and local bandwidth. Tile 0 lists its
        clusters in :meth:`cluster_order`. A system of one chiplet is cut along its local mesh
        of clusters instead. Tilings come squarest tile first; a grid with a missing chiplet
        (or cluster) or with tiles that differ has none, and so does ``count < 2``. Links are
        not compared: around a faulty link a tile's routes differ from the others'.
        """
        if self.rows * self.cols > 1:
            def cell(c: Cluster) -> tuple[tuple[int, int], tuple[int, ...]]:
                chiplet = self.system.chiplets[c.chiplet]
                return (chiplet.x - self._x0, chiplet.y - self._y0), (c.lx, c.ly)
        else:
            def cell(c: Cluster) -> tuple[tuple[int, int], tuple[int, ...]]:
                return (c.lx, c.ly), ()
        cells: dict[tuple[int, int], dict[tuple[int, ...], Cluster]] = {}
        for c in self.system.clusters:
            where, within = cell(c)
            cells.setdefault(where, {})[within] = c
        rows = 1 + max(y for _, y in cells)
        cols = 1 + max(x for x, _ in cells)
        if count < 2 or len(cells) != rows * cols:
            return []

        def kind(c: Cluster) -> tuple:
            return c.macs, c.sram_bytes, c.local_bandwidth

        def translated(c: Cluster, dx: int, dy: int) -> int | None:
            (x, y), within = cell(c)
            other = cells[(x + dx, y + dy)].get(within)
            return other.id if other is not None and kind(other) == kind(c) else None

        shapes = [(rows // across, cols * across // count)
                  for across in range(1, rows + 1)
                  if rows % across == 0 and count % across == 0 and cols % (count // across) == 0]
        shapes.sort(key=lambda shape: (abs(shape[0] - shape[1]), shape))
        tilings = []
        for height, width in shapes:
            origin = [self.system.clusters[c] for c in self.cluster_order()]
            origin = [c for c in origin if cell(c)[0][0] < width and cell(c)[0][1] < height]
            tiling = [[translated(c, x0, y0) for c in origin]
                      for y0 in range(0, rows, height) for x0 in range(0, cols, width)]
            if all(None not in tile for tile in tiling):
                tilings.append(tiling)
        return tilings

    def nearest_dram(self, cluster: int | Cluster) -> Dram:
        """The DRAM controller closest to ``cluster``: fewest hops, then least latency, then id."""
        node = cluster.id if isinstance(cluster, Cluster) else self._node(cluster)
        return min(
            self.system.drams,
            key=lambda d: (self.hops(d.node, node), self.route_latency(d.node, node), d.id),
        )

    def bisection_bandwidth(self) -> float:
        """Bytes/cycle across the narrowest balanced cut of the chiplet grid.

        Candidate cuts split the grid columns (or rows) into two halves as evenly as possible
        (both splits when the count is odd); a cut's bandwidth is the smaller of the two directed
        sums of link bandwidths crossing it. A single-chiplet system is cut through its local
        mesh instead. ``inf`` when there is one cluster only (nothing to cut).
        """
        if self.system.num_clusters == 1:
            return math.inf
        system = self.system
        if len(system.chiplets) > 1:
            coord: dict[int, tuple[int, int]] = {
                c.id: (system.chiplets[c.chiplet].x, system.chiplets[c.chiplet].y)
                for c in system.clusters
            }
        else:
            coord = {c.id: (c.lx, c.ly) for c in system.clusters}
        best = math.inf
        for axis in (0, 1):
            values = sorted({xy[axis] for xy in coord.values()})
            if len(values) < 2:
                continue
            half = len(values) / 2
            for split in sorted({math.floor(half), math.ceil(half)}):
                left = {n for n, xy in coord.items() if xy[axis] < values[split]}
                forward = sum(
                    lk.bandwidth for lk in system.links if lk.src in left and lk.dst not in left
                )
                backward = sum(
                    lk.bandwidth for lk in system.links if lk.dst in left and lk.src not in left
                )
                best = min(best, forward, backward)
        return best


def _two_opt(order: list[int], cost: dict[tuple[int, int], int]) -> list[int]:
    """``order`` (a path) improved by reversing segments while that lowers its total cost
    (``cost`` symmetric), first improvement, until no reversal helps."""
    order = list(order)
    n = len(order)
    improved = True
    while improved:
        improved = False
        for i in range(n - 1):
            for j in range(i + 1, n):
                before = (cost[order[i - 1], order[i]] if i > 0 else 0) + \
                         (cost[order[j], order[j + 1]] if j < n - 1 else 0)
                after = (cost[order[i - 1], order[j]] if i > 0 else 0) + \
                        (cost[order[i], order[j + 1]] if j < n - 1 else 0)
                if after < before:
                    order[i:j + 1] = order[i:j + 1][::-1]
                    improved = True
    return order


__all__ = ["ROUTING_SCHEMES", "Topology"]
