"""Layouts of distributed values and what moving between them costs, for planners (no TVM here).

The planner-side picture of what :class:`~tvm_chiplet.passes.distribute_tensors.DistributeTensors`
builds. Every value of the op graph has a :class:`Layout`:

- ``whole`` on one cluster;
- ``sharded`` along an axis (``"channels"``: a conv2d's output channels or a matmul's columns;
  ``"rows"``: a conv2d's output rows or a matmul's rows; ``"batch"``) over a group of clusters;
- ``partial``: one whole-size partial sum per cluster of a group (an input-channel or reduction
  split's result);
- ``replicated``: whole on every cluster of a group;
- ``tiled``: a 2-D split's output (:data:`~.placement.TILES`), row bands by channel slices,
  ``by`` slices per band over consecutive members of the group (a global pool of it,
  :func:`reduces_tiles`, is sharded along the channels over the first band's members);
- ``banded``: what a 2-D split reads: each band of rows, all channels, on the ``by`` members
  of its band; along the channels, what a blocks split (:data:`~.placement.BLOCKS`) reads:
  each input-channel group on the ``by`` members of its group (its output slices' partial
  sums, ``partial`` with ``by``, are reduce-scattered inside each slice, ``by`` members
  apart, leaving the output sharded along the channels).

A split op needs its activation input in one layout (an output-channel split reads it
replicated over its group, but a depthwise conv's only its own channels, sharded along them; an
input-channel split reads it sharded along channels over the same group, a row split sharded
along rows, each band with its halo: the rows its window reads beyond its share, when the
input is cut into the bands from another layout) and produces another. Ops
that are not split follow their input's layout, part by part, as DistributeTensors makes them;
attention's reshapes turn channels into heads and back (:func:`renamed_axis`), so that its
scores, softmax and context follow the heads of the projections when the parts divide the heads
(see :data:`HEADS`), and the matmuls of two activations
(:attr:`~.base.PlanningProblem.follow_ops`) may follow instead of being split. Where a layout
differs from what its consumer needs, the value is redistributed by a collective whose time is
estimated from the busiest link of its messages on the system's routes: all-gather (ring or
direct, as :mod:`~tvm_chiplet.targets.collectives` picks), broadcast (multicast trees where
links replicate), scatter, gather, reduce-scatter and all-to-all.

Groups are the :func:`allocation_groups` of a system: nested 2-D sub-meshes of its cluster grid.
A pipeline over 2-D regions (:class:`LayoutCosts` with ``tiles``) has the nested groups of each
tile; a value moving between tiles is costed as the point-to-point messages DistributeTensors
sends between the two groups' members, on the busiest link of their routes.
"""

from __future__ import annotations

import functools
import heapq
import math
import re
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from itertools import pairwise

import networkx as nx
import numpy as np

from tvm_chiplet.passes.planners.base import PlanningProblem
from tvm_chiplet.passes.planners.placement import (
    REDUCTION_DIMS,
    PlanningError,
    blocks_by,
    grouped_conv,
    part_bytes,
    tiles_by,
    weight_replicas,
)
from tvm_chiplet.targets import collectives, cost_model
from tvm_chiplet.targets.topology import Topology
from tvm_chiplet.targets.workload import PLANNED_HEADROOM, STREAM_BUFFER_FRACTION

AXIS_OF_DIM = {"out_channels": "channels", "cols": "channels", "in_channels": "channels",
               "reduction": "channels", "rows": "rows", "batch": "batch"}
"""The axis a split dimension shards its output along (output-channel, column splits), or the
axis its input must be sharded along (input-channel, reduction splits: the channels)."""

_BREAKS = (("layer_norm", "channels"), ("softmax", "channels"), ("pool", "rows"),
           ("mean", "rows"), ("reshape", "rows"),
           *((conv, axis) for conv in ("conv2d", "conv3d")
             for axis in ("rows", "channels", "batch")))
"""(name fragment, axis): a fused op whose name holds the fragment cannot follow a value sharded
along the axis (it normalises, reduces or reshapes across it), so its input is gathered. A
sliding-window pool of row bands is costed so too, though DistributeTensors pools each band with
its halo: costed as following them without the halo, the stem of ResNet-50 int8 batch 1 on
simba-6x6 took rows for 2-D tiles and simulated 4.4 % slower (323.8 k cycles, 310.1 k); an
Inception-style net still realises its pools per band (simulated 23.5 k -> 4.2 k cycles). A conv2d
or conv3d that the plan does not split (e.g. a grouped conv3d, which no split strategy cuts)
follows no layout: DistributeTensors runs it whole, on one cluster."""

_REDUCTION = re.compile(r"(mean|sum|max|min)\d*")
_WINDOW_POOL = re.compile(r"(?<!adaptive_)(max|avg)_pool")
"""A sliding-window pool (not a global one), which follows a tiled value tile by tile."""


_VIEW_PARTS = re.compile(r"(fused|reshape|transpose|permute|dims|expand|squeeze)\d*")


def rearranges(op) -> bool:
    """Whether ``op`` only rearranges its operand's elements: a fused op of reshapes,
    transposes, expand_dims and squeezes (by its name), with no arithmetic."""
    parts = [part for part in op.name.split("_") if part]
    return op.is_compute and not op.flops and all(_VIEW_PARTS.fullmatch(p) for p in parts)


def reduces_tiles(op) -> bool:
    """Whether ``op`` reads as a reduction over rows that a tiled value's parts run tile by
    tile (a global pool: DistributeTensors' ``_reduced_rows``): a fused op named after a mean,
    sum, max or min (not a max pool) or an adaptive average pool, with an output under half
    its input. The name does not tell which axes it reduces: one over the channels is
    gathered instead (a misestimate of this op's input's move)."""
    parts = op.name.split("_")
    named = ("adaptive" in parts and "avg" in parts) or (
        any(_REDUCTION.fullmatch(part) for part in parts) and not any(
            part.startswith("pool") for part in parts))
    return named and 2 * op.output_bytes <= op.input_bytes


@dataclass(frozen=True)
class Layout:
    """Where a value lies: ``kind`` is ``"whole"`` (on ``group``'s first cluster),
    ``"sharded"`` (along ``axis``), ``"partial"`` or ``"replicated"``, over ``group`` (an index
    into the :func:`allocation_groups`; 0 is the first cluster alone). ``"free"``: model
    inputs and constants, read where they are needed at no cost."""

    kind: str
    group: int = 0
    axis: str = ""
    by: int = 0  # "tiled" and "banded": channel slices (members) per row band


FREE = Layout("free")
HOME = Layout("whole")

FOLLOW = "follow"
"""A choice for an op without weights (a matmul of two activations): not split by the plan, it
follows its input's layout part by part as other ops do (attention's scores and context
follow the heads their query, key and value are split by, locally)."""


def _morton(x: int, y: int) -> int:
    key = 0
    for bit in range(16):
        key |= ((x >> bit) & 1) << (2 * bit) | ((y >> bit) & 1) << (2 * bit + 1)
    return key


def grid_order(topology: Topology, clusters: Sequence[int] | None = None) -> list[int]:
    """Clusters (default: all; else those of ``clusters``, e.g. a tile) in Z order over their
    2-D position (chiplet position, then the cluster's place in its chiplet): every prefix of
    ``4^j`` clusters of a power-of-two grid is a square sub-mesh and of ``2 * 4^j`` a 2:1
    rectangle; on other grids prefixes stay compact."""
    spots = _spots(topology, clusters)
    return sorted(spots, key=lambda cid: (_morton(*spots[cid]), cid))


def _spots(topology: Topology, clusters: Sequence[int] | None) -> dict[int, tuple[int, int]]:
    """Each cluster of ``clusters`` (default: all) at its 2-D position on the grid of
    clusters (chiplet position, then the cluster's place in its chiplet), counted from the
    corner of their bounding rectangle."""
    system = topology.system
    width = 1 + max(c.lx for c in system.clusters)
    height = 1 + max(c.ly for c in system.clusters)

    def position(cid: int) -> tuple[int, int]:
        c = system.clusters[cid]
        chiplet = system.chiplets[c.chiplet]
        return chiplet.x * width + c.lx, chiplet.y * height + c.ly

    chosen = range(system.num_clusters) if clusters is None else clusters
    spots = {cid: position(cid) for cid in chosen}
    x0 = min(x for x, _ in spots.values())
    y0 = min(y for _, y in spots.values())
    return {cid: (x - x0, y - y0) for cid, (x, y) in spots.items()}


def row_order(topology: Topology, clusters: Sequence[int] | None = None) -> list[int] | None:
    """Clusters (default: all) row by row over their 2-D position, when they fill their
    bounding rectangle and every prefix of that order is joined by live links (else None).

    Over a group in this order a 2-D split's row bands are rows of the grid and the members
    holding one output-channel slice in every band stand in a column, so a band's gathers
    load the rows' links and the replicas' exchange of weight stripes the columns'; in
    :func:`grid_order` both cross the same links."""
    spots = _spots(topology, clusters)
    width = 1 + max(x for x, _ in spots.values())
    height = 1 + max(y for _, y in spots.values())
    if len(set(spots.values())) != len(spots) or len(spots) != width * height:
        return None
    order = sorted(spots, key=lambda cid: (spots[cid][1], spots[cid][0]))
    return order if connected_order(topology, order) == order else None


def row_length(topology: Topology, clusters: Sequence[int] | None = None) -> int:
    """Clusters in one row of the rectangle ``clusters`` (default: all) fill, as
    :func:`row_order` lists them."""
    return len({x for x, _ in _spots(topology, clusters).values()})


def allocation_groups(topology: Topology, clusters: Sequence[int] | None = None
                      ) -> list[tuple[int, ...]]:
    """Nested groups of clusters an op may be split over: the :func:`grid_order` prefixes of
    1, 2, 4, ... clusters and of all of them (rectangles on power-of-two grids), over
    ``clusters`` (default: every cluster)."""
    order = connected_order(topology, grid_order(topology, clusters))
    sizes, k = [], 1
    while k < len(order):
        sizes.append(k)
        k *= 2
    sizes.append(len(order))
    return [tuple(order[:k]) for k in sizes]


def _links(topology: Topology, members: Sequence[int]) -> nx.Graph:
    """``members`` joined where a live link (either way) joins two of them."""
    inside = set(members)
    graph = nx.Graph()
    graph.add_nodes_from(members)
    graph.add_edges_from((link.src, link.dst) for link in topology.system.links
                         if link.src in inside and link.dst in inside and link.src != link.dst)
    return graph


def connected_order(topology: Topology, order: Sequence[int]) -> list[int]:
    """``order`` re-listed so that every prefix is connected by the system's links: each next
    cluster is the earliest of ``order`` linked to those before it. On a full grid in Z order
    that is the order itself; around dead chiplets and links the prefixes stay connected
    groups. Clusters that the links among ``order`` cannot reach come last."""
    rank = {c: i for i, c in enumerate(order)}
    graph = _links(topology, order)
    frontier, seen, out = [(0, order[0])] if order else [], set(order[:1]), []
    while frontier:
        _, cluster = heapq.heappop(frontier)
        out.append(cluster)
        for other in set(graph[cluster]) - seen:
            seen.add(other)
            heapq.heappush(frontier, (rank[other], other))
    return out + [c for c in order if c not in seen]


def _region(topology: Topology, members: Sequence[int]) -> list[int]:
    """The live clusters of the chiplets inside the bounding rectangle of ``members``'
    chiplets: the sub-mesh a group's collectives may use."""
    system = topology.system
    spots = [system.chiplets[system.clusters[c].chiplet] for c in members]
    xs, ys = [ch.x for ch in spots], [ch.y for ch in spots]
    return [c.id for c in system.clusters
            if min(xs) <= system.chiplets[c.chiplet].x <= max(xs)
            and min(ys) <= system.chiplets[c.chiplet].y <= max(ys)]


def group_islands(topology: Topology, members: Sequence[int]) -> list[list[int]]:
    """``members`` in the parts that the links of their sub-mesh join (one when connected),
    in the order of their first member: the sub-mesh is every live cluster in the bounding
    rectangle of the members' chiplets, so only dead chiplets, clusters or links can cut a
    group."""
    first = {c: i for i, c in reversed(list(enumerate(members)))}
    parts = [sorted(part & first.keys()) for part in
             nx.connected_components(_links(topology, _region(topology, members)))]
    return sorted((part for part in parts if part), key=lambda part: min(first[c] for c in part))


def check_groups(topology: Topology, splits) -> None:
    """Refuse a split that lists a cluster twice or whose clusters the links of their sub-mesh
    do not join (:func:`group_islands`; on a faulty system): its collectives would leave the
    sub-mesh. The error names the op, the group and its islands. (:meth:`Placement.check_fits`
    checks the clusters exist.)"""
    system = topology.system
    for split in splits:
        members = list(split.clusters)
        repeated = sorted(c for c, n in Counter(members).items() if n > 1)
        if repeated:
            raise PlanningError(
                f"the split of op {split.op_id} lists clusters {repeated} more than once "
                f"(group {members}); give each part its own cluster"
            )
        islands = group_islands(topology, members)
        if len(islands) > 1:
            named = "; ".join("{" + ", ".join(system.clusters[c].name for c in island) + "}"
                              for island in islands)
            raise PlanningError(
                f"the split of op {split.op_id} ({split.dim}) is over a disconnected group: no "
                f"live links of its sub-mesh join its {len(islands)} islands {named}, so its "
                "collectives would leave it; split it over a connected sub-mesh "
                "(allocation_groups lists them)"
            )


def link_rate(system, link: int) -> float:
    """Bytes per cycle the flow network gives ``link`` (its kind's calibrated efficiency)."""
    calibration = system.calibration
    kind = system.links[link].kind
    return system.links[link].bandwidth * (calibration.factor(kind) if calibration else 1.0)


def pool_stream_rate(problem: PlanningProblem, share: float, copies: int = 1) -> float:
    """Bytes per cycle a plan taking ``share`` of the system's streaming (``1 / R`` for ``R``
    tiles streaming at once) streams its weights at from a weight pool shared by ``copies``
    copies of it: the fraction of the weights the pool's SRAM holds comes over the network,
    whose calibrated links carry every tile's fetches over the mean route between clusters (a
    stripe multicast to the other copies crosses each link of its tree once: one hop per
    copy); the rest from DRAM, fetched once for all the copies and multicast to them (at
    ``copies`` times the tile's share of the DRAM bandwidth); both at once."""
    key = ("pool stream rate",)
    if key not in problem.memo:
        system, topology = problem.system, problem.topology
        clusters = [c.id for c in system.clusters]
        hops = np.mean([topology.hops(a, b) for a in clusters for b in clusters if a != b]) \
            if len(clusters) > 1 else 1.0
        pool = sum((1.0 - STREAM_BUFFER_FRACTION) * c.sram_bytes for c in system.clusters)
        weights = problem.graph.total_weight_bytes
        held = min(1.0, pool / weights) if weights else 1.0
        links = sum(link_rate(system, link) for link in range(len(system.links)))
        efficiency = system.calibration.factor("dram") if system.calibration else 1.0
        dram = sum(d.bandwidth for d in system.drams) * efficiency
        problem.memo[key] = (held, max(links, 1e-9), hops, max(dram, 1e-9))
    held, links, hops, dram = problem.memo[key]
    network = links / (hops if copies == 1 else 1.0)
    return 1.0 / max(held / (network * share), (1.0 - held) / (dram * share * copies))


def _ingress(system, cluster: int) -> float:
    """Bytes per cycle that can enter ``cluster`` over its calibrated links."""
    return max(sum(link_rate(system, link.id) for link in system.links if link.dst == cluster),
               1e-9)


class _Group:
    """Per-byte times of a group's collectives: the busiest link's load over its bandwidth."""

    def __init__(self, topology: Topology, members: tuple[int, ...]) -> None:
        system = topology.system
        self.members, self.size = members, len(members)
        origin = members[0]
        self.index = np.array(members)
        self.slowest = min((system.clusters[c] for c in members),
                           key=lambda c: (c.macs_per_cycle, c.local_bandwidth, c.id))

        def worst(loads: Counter) -> float:
            return max((n / link_rate(system, link) for link, n in loads.items()),
                       default=0.0)

        pairs: Counter = Counter()
        out_of: Counter = Counter()
        into: Counter = Counter()
        for src in members:
            for dst in members:
                if src != dst:
                    route = topology.route(src, dst)
                    pairs.update(route)
                    if src == origin:
                        out_of.update(route)
                    if dst == origin:
                        into.update(route)
        self.direct = worst(pairs)  # every member a distinct part to every other
        self.scatter = worst(out_of)  # the first member a distinct part to every other
        self.gather = worst(into)  # every member a part to the first
        gather = worst(collectives.direct_load(topology, members))
        ring = collectives.gather_ring(topology, members)
        self.all_gather = worst(collectives.ring_load(topology, ring)) if ring else gather
        y_first = origin in collectives.y_first_sources(topology, members)
        trees = {link for m in members[1:] for link in topology.tree_route(origin, m, y_first)}
        if trees and all(system.links[link].multicast for link in trees):
            self.broadcast = worst(Counter(trees))
        elif ring:  # relayed around the ring, pipelined: the slowest hop sets the rate
            hops = {link for a, b in pairwise(ring)
                    for link in topology.route(a, b)}
            self.broadcast = max(1.0 / link_rate(system, link) for link in hops)
        else:
            self.broadcast = self.scatter
        self.latency = max((topology.route_latency(origin, m) for m in members[1:]),
                           default=0.0)
        self._topology = topology
        self._bands: dict[tuple[int, bool], tuple[float, float]] = {}

    def band_gather(self, by: int, across: bool = False) -> tuple[float, float]:
        """(cycles per byte of the value, latency) of every run of ``by`` consecutive members
        (a row band of a 2-D split, an input-channel group of a blocks split) gathering its
        band, all at once: each member receives the ``by - 1`` other slices of its band,
        ``1 / size`` of the value each, around a ring of the band where that loads links less,
        else sent directly. ``across``: the bands are the members ``by`` apart instead
        (``size / by`` of them in each band: a blocks split's output slices, reduce-scattered
        among their parts, each sending as much, directly as DistributeTensors sums them)."""
        if (by, across) not in self._bands:
            topology, system = self._topology, self._topology.system
            loads: Counter = Counter()
            latency = 0.0
            bands = ([self.members[start::by] for start in range(by)] if across else
                     [self.members[start:start + by] for start in range(0, self.size, by)])
            for band in bands:
                ring = None if across else collectives.gather_ring(topology, band)
                loads.update(collectives.ring_load(topology, ring) if ring
                             else collectives.direct_load(topology, band))
                latency = max([latency] + [topology.route_latency(band[0], m) for m in band[1:]])
            worst = max((n / link_rate(system, link) for link, n in loads.items()), default=0.0)
            self._bands[by, across] = (worst / self.size, latency)
        return self._bands[by, across]


class LayoutCosts:
    """Estimated cycles of splitting ops over :func:`allocation_groups` and of moving values
    between layouts on ``problem``'s system (see the module docstring).

    ``tiles`` gives disjoint tiles of the grid (one, ``[None]`` by default: every cluster; or
    the regions of a pipeline's stages), each with its own nested groups: those of tile ``t``
    are :attr:`groups` ``[first[t]:first[t + 1]]``, and :attr:`tile_of` maps a group to its
    tile. ``dram_share`` is the fraction of the DRAM controllers' bandwidth the ops get
    (``1 / R`` when ``R`` copies of the plan, or ``R`` stages, stream at once). ``pooled``:
    ``copies`` copies keep one set of weights between them (a weight pool,
    :attr:`~.placement.Placement.weight_pool`): nothing stays resident beyond a cluster's
    stripe, and every op's weights stream at :func:`pool_stream_rate`. ``pool_replicas``
    (without ``pooled``): the parts of a split that each hold the same weights (a row band
    each, :data:`~.placement.REPLICATED_DIMS` and tiles) keep one stripe of them each and
    fetch the others' over the network, as the device does where their clusters stream
    (:func:`~tvm_chiplet.targets.workload.replica_groups`); without it they hold them whole.
    """

    def __init__(self, problem: PlanningProblem, dram_share: float = 1.0,
                 tiles: Sequence[Sequence[int] | None] = (None,), pooled: bool = False,
                 copies: int = 1, pool_replicas: bool = False) -> None:
        self.problem = problem
        self.groups: list[_Group] = []
        self.tile_of: list[int] = []
        self.first: list[int] = []
        for t, tile in enumerate(tiles):
            self.first.append(len(self.groups))
            for members in allocation_groups(problem.topology, tile):
                key = ("layout group", members)  # layouts of the grid share groups
                if key not in problem.memo:
                    problem.memo[key] = _Group(problem.topology, members)
                self.groups.append(problem.memo[key])
                self.tile_of.append(t)
        self.first.append(len(self.groups))
        self._tile_of_cluster = {c: t for t in range(len(tiles))
                                 for c in self.groups[self.first[t + 1] - 1].members}
        self._per_byte: dict[tuple[Layout, Layout], tuple[float, float]] = {}
        self._compute: dict[tuple, tuple] = {}
        system = problem.system
        self.partial_scale = system.partial_sum_scale  # partial sums: the accumulators' width
        efficiency = system.calibration.factor("dram") if system.calibration else 1.0
        self.pooled = pooled
        self.pool_replicas = pool_replicas and not pooled
        self.dram_rate = max(pool_stream_rate(problem, dram_share, copies) if pooled else
                             sum(d.bandwidth for d in system.drams) * efficiency * dram_share,
                             1e-9)

    def scatter_axis(self, op_id: int, choice: dict) -> str:
        """The axis a partial value read by ``op_id`` is reduce-scattered along: channels,
        unless ``op_id`` or the ops that follow it (up to 8 deep, to the next split op in
        ``choice``) cannot follow a channel split and can follow a row split."""
        graph, ops = self.problem.graph.graph, self.problem.graph.ops
        frontier, seen = [op_id], set()
        for _ in range(8):
            nxt = []
            for node in frontier:
                if node in seen or node in choice:
                    continue
                seen.add(node)
                if breaks(ops[node].name, "channels"):
                    return "rows" if not breaks(ops[node].name, "rows") else "channels"
                nxt.extend(sorted(graph.successors(node)))
            frontier = nxt
        return "channels"

    def home(self, tile: int = 0) -> Layout:
        """A value whole on ``tile``'s first cluster (the first of all its groups)."""
        return Layout("whole", self.first[tile])

    def tile_groups(self, tile: int) -> range:
        """Indices of ``tile``'s groups, smallest first."""
        return range(self.first[tile], self.first[tile + 1])

    def grouped(self, op_id: int) -> bool:
        """Whether ``op_id`` is a grouped conv2d (depthwise or not,
        :func:`~.placement.grouped_conv`): a part of its output channels, or a 2-D split's tile,
        reads only its own groups' input channels."""
        return grouped_conv(self.problem.split_dims.get(op_id, {}))

    def prefix(self, group: int, size: int) -> int:
        """The group of ``group``'s first ``size`` members (``group`` itself when none is)."""
        members = self.groups[group].members[:size]
        for index in self.tile_groups(self.tile_of[group]):
            if self.groups[index].members == members:
                return index
        return group

    def move(self, src: Layout, need: Layout, nbytes: float) -> float:
        """Cycles to turn a value of ``nbytes`` laid out as ``src`` into ``need``."""
        if nbytes <= 0 or src.kind == "free" or src == need:
            return 0.0
        key = (src, need)
        if key not in self._per_byte:
            self._per_byte[key] = self._collective(src, need)
        per_byte, latency = self._per_byte[key]
        if src.kind == "partial":
            nbytes *= self.partial_scale
        return per_byte * nbytes + latency if per_byte else latency

    def _collective(self, src: Layout, need: Layout) -> tuple[float, float]:
        """(cycles per byte of the value, latency) of the collective from ``src`` to ``need``."""
        if self.tile_of[src.group] != self.tile_of[need.group]:
            return self._between_tiles(src, need)
        big = self.groups[max(src.group, need.group)]
        k = big.size
        if need.kind == "replicated" and src.kind == "replicated" and src.group >= need.group:
            return 0.0, 0.0
        if need.kind == "banded":  # row bands (a 2-D split), channel groups (a blocks split)
            bands = big.size // need.by
            if src.kind == "banded" and src == need:
                return 0.0, 0.0
            if (src.kind == "tiled" and need.axis == "rows"
                    and (src.group, src.by) == (need.group, need.by)):
                # Each band's slices gathered among its members (CostWalk.step adds the halo's
                # rows to the bytes).
                return self.groups[need.group].band_gather(need.by)
            if src.kind == "sharded" and src.axis == need.axis and src.group == need.group:
                return self.groups[need.group].band_gather(need.by)
            # Otherwise each member needs its band: a replicated value's share.
            per_byte, latency = self._collective(src, Layout("replicated", need.group))
            return per_byte / bands, latency
        if src.kind == "banded":  # each band whole on its members: as a sharded value
            src = Layout("sharded", src.group, src.axis)
        if src.kind == "partial" and src.by and need == Layout("sharded", src.group, "channels"):
            # A blocks split's slices, each reduce-scattered among its parts (members by
            # apart): each part receives a piece of 1 / size of the value from each of the
            # others.
            return self.groups[src.group].band_gather(src.by, across=True)
        if (src.kind == "tiled" and need.kind == "sharded" and need.axis == "channels"
                and need.group == self.prefix(src.group, src.by)):
            # Each slice gathered from every band on its member of the first band: those
            # members receive all but their own band's share, 1 / by of the value each (a
            # gather's funnel, whose cost is per part of the value, of size / by parts).
            group = self.groups[src.group]
            return group.gather / (group.size * src.by), group.latency
        tiled, other = (src, need) if src.kind == "tiled" else (need, src)
        if tiled.kind == "tiled" and other == Layout("sharded", tiled.group, "rows"):
            # A tiled value re-cut along its rows, or back: an all-to-all inside each band,
            # each member exchanging 1 / by of its share with each of the by - 1 others.
            per_byte, latency = self.groups[tiled.group].band_gather(tiled.by)
            return per_byte / tiled.by, latency
        if src.kind == "tiled":  # as a value sharded along an axis its consumer does not use
            src = Layout("sharded", src.group, "tiles")
        if need.kind == "whole":
            if src.kind in ("whole", "replicated"):
                return 0.0, 0.0  # both on the first cluster
            src_group = self.groups[src.group]
            share = 1.0 if src.kind == "partial" else 1.0 / src_group.size
            return src_group.gather * share, src_group.latency
        if need.kind == "replicated":
            if src.kind in ("whole", "replicated"):
                return big.broadcast, big.latency
            if src.kind == "sharded":
                holders = self.groups[src.group]
                per_byte = big.all_gather / holders.size
                if holders.size < k:
                    # DistributeTensors sends each holder's part to every reader itself: the
                    # holders' own links carry k - 1 copies of 1 / size of the value each.
                    egress = min(_ingress(self.problem.system, m) for m in holders.members)
                    per_byte = max(per_byte, (k - 1) / (holders.size * egress))
                return per_byte, 2 * big.latency
            return big.direct / k + big.all_gather / k, 3 * big.latency  # all-reduce
        # need is sharded over need.group
        if src.kind in ("whole", "replicated"):
            if src.kind == "replicated" and src.group >= need.group:
                return 0.0, 0.0  # every member already holds its part
            return big.scatter / k, big.latency
        if src.kind == "partial":
            if src.group == need.group and need.axis == "channels":
                # Reduce-scatter, costed as sent directly: DistributeTensors sums around a ring
                # where that loads links less (collectives.reduce_ring), but its sums advance
                # hop by hop at the pace of the slowest member, and costing the ring's load
                # made the search choose plans that simulated slower (ResNet-50 simba-6x6,
                # batch 1: 5.0x -> 6.1x the bound).
                return big.direct / k, big.latency
            return big.direct / k + big.direct / (k * k), 2 * big.latency
        if src.group == need.group and src.axis == need.axis:
            return 0.0, 0.0
        return big.direct / (k * k), big.latency  # all-to-all

    def _between_tiles(self, src: Layout, need: Layout) -> tuple[float, float]:
        """(cycles per byte, latency) of moving a value between groups of different tiles as
        DistributeTensors does it: every part of ``need`` fetches its share from the members of
        ``src`` that hold it, point to point (a replicated source serves each reader from one
        of its members in turn)."""
        topology = self.problem.topology
        senders = self.groups[src.group].members
        readers = self.groups[need.group].members
        if src.kind == "whole":
            senders = senders[:1]
        if need.kind == "whole":
            readers = readers[:1]
        a, b = len(senders), len(readers)
        share = {"replicated": 1.0, "whole": 1.0, "sharded": 1.0 / b}[need.kind]
        pairs: list[tuple[int, int, float]] = []
        for j, dst in enumerate(readers):
            if src.kind in ("whole", "replicated"):
                pairs.append((senders[j % a], dst, share))
            elif src.kind == "partial":  # each reader sums every partial of its share
                pairs += [(s, dst, share) for s in senders]
            elif need.kind == "sharded" and need.axis == src.axis:  # overlapping slices
                pairs += [(s, dst, overlap) for i, s in enumerate(senders)
                          if (overlap := min((i + 1) / a, (j + 1) / b) - max(i / a, j / b)) > 0]
            else:
                pairs += [(s, dst, share / a) for s in senders]
        loads: Counter = Counter()
        latency = 0.0
        for s, dst, fraction in pairs:
            if s != dst:
                for link in topology.route(s, dst):
                    loads[link] += fraction
                latency = max(latency, topology.route_latency(s, dst))
        system = self.problem.system
        return max((n / link_rate(system, link) for link, n in loads.items()),
                   default=0.0), latency

    def compute(self, op, group: int, parts: int, dim: str | None, weights_on: np.ndarray
                ) -> float:
        """Cycles of the slowest of ``parts`` parts of ``op`` split along ``dim`` over
        ``group`` (``dim=None``: the op runs whole, or follows its input part by part), its
        weights resident while the group's fullest member has room; records the weights."""
        cycles, streaming, weights, members, budget = self.part(op, group, parts, dim)
        if not weights:
            return cycles
        resident = weights_on[members].max() + weights <= budget
        weights_on[members] += weights
        return cycles if resident else streaming

    def tile_of_cluster(self, cluster: int) -> int:
        """The tile ``cluster`` belongs to (the first, for a cluster outside every tile)."""
        return self._tile_of_cluster.get(cluster, 0)

    def budget(self, cluster: int) -> float:
        """Bytes of weights ``cluster`` is estimated to keep resident: its SRAM less the
        planners' headroom (:data:`~tvm_chiplet.targets.workload.PLANNED_HEADROOM`; none
        beside its stripe of a weight pool)."""
        if self.pooled:
            return 0.0
        sram = self.problem.system.clusters[cluster].sram_bytes
        return (1.0 - PLANNED_HEADROOM) * sram

    def part(self, op, group: int, parts: int, dim: str | None):
        """``(cycles, streaming, weights, members, budget)`` of one of ``parts`` parts of
        ``op`` along ``dim`` over ``group``: its cycles with its weights resident and
        streamed, its weight bytes, the members holding them, and their weight budget."""
        key = (op.op_id, group, parts, dim)
        if key not in self._compute:
            self._compute[key] = self._part_cycles(op, group, parts, dim)
        return self._compute[key]

    def _part_cycles(self, op, group: int, parts: int, dim: str | None):
        g = self.groups[group]
        k = max(parts, 1)
        part_in, part_out, weights = part_bytes(op.input_bytes, op.output_bytes,
                                                op.weight_bytes, dim, k, self.partial_scale)
        by = tiles_by(dim)
        if by is not None and self.grouped(op.op_id):
            part_in /= by  # its own channels of its band
        cycles = cost_model.compute_cycles(op.flops / k, part_in + part_out + weights, g.slowest)
        # Every part streams its weights at once: the controllers' total bandwidth (the pool's
        # rate) bounds them, and each part's own way in.
        system = self.problem.system
        fetch = (weights / _ingress(system, g.slowest.id) if self.pooled
                 else cost_model.dram_fetch_cycles(weights, g.slowest, system))
        streaming = cycles + max(fetch, k * weights / self.dram_rate) if weights else cycles
        bands = weight_replicas(dim, k)
        if bands > 1 and weights and self.pool_replicas:
            # The parts holding one slice of the weights (a row band each) pool it: each keeps
            # its stripe and fetches the others' over the network, added to its compute.
            stripe = weights / bands
            fast = cycles + (weights - stripe) / _ingress(system, g.slowest.id)
            streaming = fast + k * stripe / self.dram_rate
            return fast, streaming, stripe, g.index[:k], self.budget(g.slowest.id)
        return cycles, streaming, weights, g.index[:k], self.budget(g.slowest.id)


HEADS, UNEVEN_HEADS = "heads", "uneven heads"
"""Axes of attention: channels split into heads, which softmax and the matmuls of attention
follow locally; ``UNEVEN_HEADS`` when the parts do not divide the heads, so that DistributeTensors
re-cuts them at whole heads and the merged channels (``"uneven channels"``) no longer line up with
an even channel split (an all-to-all)."""


@functools.cache
def renamed_axis(name: str, axis: str) -> str:
    """The axis a value sharded along ``axis`` is sharded along after an op named ``name``
    follows it: a reshape then transpose of channels splits them into attention heads
    (:data:`HEADS`), a transpose then reshape of heads merges them back into channels (uneven
    ones into ``"uneven channels"``); other ops keep the axis."""
    parts = [part for part in name.split("_") if part]
    moves = [i for i, part in enumerate(parts) if part.startswith(("transpose", "permute"))]
    shapes = [i for i, part in enumerate(parts) if part.startswith("reshape")]
    if not (shapes and moves):
        return axis
    if axis == "channels" and shapes[0] < moves[-1]:
        return HEADS
    if axis in (HEADS, UNEVEN_HEADS) and moves[0] < shapes[-1]:
        return "channels" if axis == HEADS else "uneven channels"
    return axis


def _data_pred(op_id: int, preds: list[tuple[int, int]], problem: PlanningProblem) -> int:
    """The pred ``(op, nbytes)`` of ``preds`` that ``op_id`` reads as its input: the one its
    conv2d / matmul reads (:attr:`~.base.PlanningProblem.data_bytes`), the latest of those of
    that size (a residual added in its epilogue was made before the input, which the op before
    it makes); else, and for a matmul of activations (its operands alike), the largest, the
    earliest of those."""
    size = problem.data_bytes.get(op_id)
    sized = [e for e in preds if e[1] == size]
    if sized and op_id not in problem.follow_ops:
        return max(sized)[0]
    return max(sized or preds, key=lambda e: (e[1], -e[0]))[0]


def broken_axes(name: str) -> set[str]:
    """The axes a value sharded along cannot be followed by an op named ``name``."""
    return {axis for fragment, axis in _BREAKS if fragment in name}


def breaks(name: str, axis: str) -> bool:
    """Whether an op named ``name`` cannot follow a value sharded along ``axis``."""
    return axis in broken_axes(name)


def plan_cost(costs: LayoutCosts, choice: dict[int, tuple[str, int] | str | None]) -> float:
    """Estimated cycles of running ``problem``'s ops one after another with the split ops of
    ``choice`` (op -> (dim, group), None for whole, or :data:`FOLLOW`), every other op
    following its input's layout where it can (:func:`breaks`), values redistributed where
    layouts differ, and the model's outputs gathered on their group's first cluster."""
    return float(tile_costs(costs, choice).sum())


def tile_costs(costs: LayoutCosts, choice: dict[int, tuple[str, int] | str | None],
               stage_of: Sequence[int] | None = None) -> np.ndarray:
    """:func:`plan_cost`'s cycles for each tile of ``costs``: an op's compute counts on the
    tile it runs on, a redistribution on the tile that receives it. ``stage_of`` gives each op
    its stage (= tile; default 0): an op that runs whole (``choice`` None, or one that cannot
    follow its input) runs on its stage's first cluster. Their sum is one input's latency;
    with one stage per tile, their largest is a pipeline's bottleneck."""
    walk = CostWalk(costs, choice, stage_of)
    state = walk.start()
    walk.advance(state, choice)
    return np.array(state.total)


@dataclass
class WalkState:
    """Where a :class:`CostWalk` stands: every walked value's layout, the weight bytes each
    cluster holds, the cycles charged to each tile, and their sum and largest."""

    layout: dict[int, Layout]
    weights_on: np.ndarray
    total: list[float]
    sum: float = 0.0
    largest: float = 0.0

    def copy(self) -> WalkState:
        return WalkState(dict(self.layout), self.weights_on.copy(), list(self.total),
                         self.sum, self.largest)


class CostWalk:
    """:func:`tile_costs` as a walk over the ops that can stop and resume, for searches that
    change one op's choice at a time: the walk up to that op is the same for all its options
    (a :class:`WalkState` to copy), and a walk whose cost already exceeds the best found can
    stop, since every step only adds cycles.

    ``split_ops``: the ops that ``choice`` names (the same for every choice walked; a partial
    value's scatter axis depends on them); ``stage_of`` as in :func:`tile_costs`.
    """

    def __init__(self, costs: LayoutCosts, split_ops, stage_of: Sequence[int] | None = None
                 ) -> None:
        problem = costs.problem
        graph = problem.graph.graph
        self.costs = costs
        self.split_ops = frozenset(split_ops)
        self.ops = problem.graph.ops
        self.preds, self.data, self.homes, self.broken = [], [], [], []
        for op in self.ops:
            preds = [(p, graph.edges[p, op.op_id]["nbytes"])
                     for p in sorted(graph.predecessors(op.op_id))]
            self.preds.append(preds)
            self.data.append(_data_pred(op.op_id, preds, problem) if preds else None)
            self.homes.append(costs.home(stage_of[op.op_id] if stage_of is not None else 0))
            self.broken.append(broken_axes(op.name))
        self.reduces_tiles = [reduces_tiles(op) for op in self.ops]
        # Ops that only rearrange a model input (or such a rearrangement), which
        # DistributeTensors runs where they are read, as the input is: plumbing, as tuples are,
        # their values free to read anywhere.
        views: list[bool] = []
        for op in self.ops:
            views.append(rearranges(op) and all(views[p] for p, _ in self.preds[op.op_id]))
        self.plumbing = [not op.is_compute or view for op, view in zip(self.ops, views,
                                                                      strict=True)]
        # Independent products (heads) of each follow op, and of the ops that follow its data.
        self.products: list[int] = []
        for op in self.ops:
            data = self.data[op.op_id]
            self.products.append(problem.follow_ops.get(
                op.op_id, self.products[data] if data is not None else 0))
        # The heads that the follow ops reading each op's value hold (0: none read it).
        self.heads_after = [max((problem.follow_ops.get(v, 0) for v in graph.successors(op.op_id)),
                                default=0) for op in self.ops]
        self._scatter: dict[int, str] = {}

    def start(self) -> WalkState:
        """The state before the first op."""
        return WalkState({}, np.zeros(self.costs.problem.system.num_clusters),
                         [0.0] * (len(self.costs.first) - 1))

    def step(self, op_id: int, chosen, layout: Mapping[int, Layout]):
        """One compute op of the walk with its choice ``chosen`` (``(dim, group)``, None for
        whole, or :data:`FOLLOW`) and the layouts of its inputs: ``(out, group, parts, dim,
        moves)``, its output's layout, where and how it runs (for :meth:`LayoutCosts.compute`),
        and the redistributions it needs, each ``(value, src, want, nbytes)`` (the value is the
        input's op, or the op itself for a re-cut of its output)."""
        costs, op = self.costs, self.ops[op_id]
        home, preds = self.homes[op_id], self.preds[op_id]
        moves = []
        if chosen != FOLLOW:
            if chosen is None:
                need = out = home
                group, parts, dim, by = home.group, 1, None, None
            else:
                dim, group = chosen
                parts = costs.groups[group].size
                by = tiles_by(dim)
                blocks = blocks_by(dim)
                axis = AXIS_OF_DIM.get(dim, "")
                if blocks is not None:
                    # Each part reads its input-channel group, shared by the group's parts,
                    # and each output slice's partial sums are reduce-scattered among its
                    # parts.
                    need = Layout("banded", group, "channels", blocks)
                    out = Layout("sharded", group, "channels")
                    moves.append((op_id, Layout("partial", group, "channels", blocks), out,
                                  op.output_bytes))
                elif by is not None:
                    out = Layout("tiled", group, "tiles", by)
                    # A grouped conv's tile reads its own groups' channels of its band (and the
                    # halo); a plain conv's every channel of its band.
                    need = out if costs.grouped(op_id) else Layout("banded", group, "rows", by)
                elif dim == "out_channels" and costs.grouped(op_id):
                    # A grouped conv's part reads its own groups' channels.
                    need = out = Layout("sharded", group, axis)
                elif dim in ("out_channels", "cols"):
                    need, out = Layout("replicated", group), Layout("sharded", group, axis)
                elif dim in REDUCTION_DIMS:
                    need, out = Layout("sharded", group, axis), Layout("partial", group)
                else:
                    need = out = Layout("sharded", group, axis)
            data = self.data[op_id]
            halo, rows = costs.problem.halos.get(op_id, (0, 0))
            # A band reads its rows and the halo: that much more than its share. Between row
            # bands already cut alike, the halo's exchange is left out: costed (as pairs of
            # neighbours gathering it), the integer program chose MobileNetV2 int8 batch-1
            # plans on simba-6x6 that simulated 24 % slower (56.6 k cycles, 45.6 k).
            bands = parts // by if by is not None else parts if dim == "rows" else 0
            grown = 1.0 + halo * bands / rows if bands and rows else 1.0
            for p, nbytes in preds:
                if p == data:
                    want = need
                elif by is not None or (out.kind == "sharded" and nbytes == op.output_bytes
                                        and op_id not in costs.problem.follow_ops):
                    # An epilogue's operand (a residual add) read tile by tile, or part by
                    # part along the output's split (not a matmul's second activation).
                    want = out
                else:
                    want = Layout("replicated", group) if parts > 1 else need
                moves.append((p, layout[p], want, nbytes * grown if p == data else nbytes))
            return out, group, parts, dim, moves
        spread = [(nbytes, -p) for p, nbytes in preds
                  if layout[p].kind in ("sharded", "partial", "tiled")]
        source = layout[-max(spread)[1]] if spread else None
        if source is not None and source.kind == "partial":
            if op_id not in self._scatter:
                self._scatter[op_id] = costs.scatter_axis(op_id, self.split_ops)
            out = Layout("sharded", source.group, self._scatter[op_id])
        else:
            out = source
        if out is not None and out.kind == "tiled" and self.reduces_tiles[op_id]:
            # Each tile reduced where it lies, each channel slice's bands combined on the
            # slice's member of the first band: sharded along the channels over them.
            parts = costs.groups[out.group].size
            reduced = Layout("sharded", costs.prefix(out.group, out.by), "channels")
            moves = [(p, layout[p], out, nbytes) for p, nbytes in preds]
            moves.append((op_id, out, reduced, op.output_bytes * (parts // out.by)))
            return reduced, out.group, parts, None, moves
        if (out is not None and out.kind == "tiled"
                and self.broken[op_id] & {"rows", "channels"} == {"channels"}):
            # An op over every channel of the rows (a layer norm over a matmul's columns)
            # reads the tiled value re-cut along its rows, inside each band.
            out = Layout("sharded", out.group, "rows")
        elif out is not None and out.kind == "tiled" and "reshape" in op.name:
            # A reshape of the columns (to attention's heads): costed as each slice gathered
            # from every band on the first band's member holding it, attention then on those
            # members. DistributeTensors runs attention on every band's members (query rows by
            # heads), faster than this estimate; costing it as built (tiles kept through
            # attention, keys and values gathered across bands) chose band counts that
            # simulated slower (BERT-base int8 batch 1 on the 16x16 mesh: 128.9 k cycles
            # against 127.1 k), so the simulator judges the realised plans.
            out = Layout("sharded", costs.prefix(out.group, out.by), "channels")
        if out is None or out.axis in self.broken[op_id] or (
                out.kind == "tiled" and self.broken[op_id] & {"rows", "channels"}
                and not _WINDOW_POOL.search(op.name)):  # a pool follows tiles with a halo
            out, parts = home, 1
        else:
            parts = costs.groups[out.group].size
        group = out.group
        moves = [(p, layout[p], out, nbytes) for p, nbytes in preds]
        if out.kind == "sharded":
            axis = renamed_axis(op.name, out.axis)
            if axis == HEADS != out.axis and self.heads_after[op_id] % parts:
                # Parts that cut through a head are re-cut at whole heads: each fetches its
                # heads from the parts holding them.
                axis = UNEVEN_HEADS
                moves.append((op_id, out, Layout("sharded", group, axis), op.output_bytes))
            heads = self.products[op_id]
            if axis in (HEADS, UNEVEN_HEADS) and heads > 0:
                if heads % parts:
                    axis = UNEVEN_HEADS
                # DistributeTensors cuts at whole heads: the largest part has
                # ceil(heads / parts) of them.
                parts = heads // -(-heads // parts)
            out = Layout("sharded", group, axis)
        return out, group, parts, None, moves

    def advance(self, state: WalkState, choice: dict, stop: int | None = None,
                limit: float = math.inf, weight: float = 0.0) -> bool:
        """Walk ``state`` on over the ops before ``stop`` (default: every op, then the model's
        outputs gathered) with ``choice``. Returns False, with ``state`` part-walked, as soon
        as ``sum + weight * largest`` of the tiles' cycles exceeds ``limit``."""
        costs, layout, total = self.costs, state.layout, state.total
        tile_of = costs.tile_of
        stopped = False

        def charge(tile: int, cycles: float) -> None:
            nonlocal stopped
            total[tile] += cycles
            state.sum += cycles
            if total[tile] > state.largest:
                state.largest = total[tile]
            if state.sum + weight * state.largest > limit:
                stopped = True

        def move(src: Layout, need: Layout, nbytes: float) -> None:
            charge(tile_of[need.group], costs.move(src, need, nbytes))

        walked = len(layout)
        for op in self.ops[walked:len(self.ops) if stop is None else stop]:
            op_id = op.op_id
            preds = self.preds[op_id]
            if self.plumbing[op_id]:
                layout[op_id] = layout[preds[0][0]] if preds else FREE
                continue
            out, group, parts, dim, moves = self.step(op_id, choice.get(op_id, FOLLOW), layout)
            for _, src, want, nbytes in moves:
                move(src, want, nbytes)
            charge(tile_of[group], costs.compute(op, group, parts, dim, state.weights_on))
            layout[op_id] = out
            if stopped:
                return False
        if stop is None:
            for out_id in costs.problem.graph.output_ops:
                where = layout.get(out_id, FREE)
                if where.kind != "free":
                    move(where, costs.home(tile_of[where.group]), self.ops[out_id].output_bytes)
        return not stopped
