"""The device workload of a placed model: tasks with cost-model cycles and routed messages.

One function serves the compiler (``plan.json`` of an artifact) and the planners (judging a
placement by simulation before any IR is rewritten), so both see the same numbers.

Weights and SRAM (the memory model the simulator runs)
------------------------------------------------------
A cluster keeps the weights of its items in SRAM when they all fit. When they do not, it
reserves :data:`STREAM_BUFFER_FRACTION` of its SRAM as a double buffer for streamed weights and
fills the rest with the weights of as many items as fit (largest first, the order that fills a
budget best with few items); the room left over pins the same fraction of every other item's
weight tiles, and the rest of those items' weights are fetched from DRAM for every batch.
A streamed item's fetch is issued when the streamed item two places before it on the cluster has
finished (two buffers: one being computed from, one being filled), so fetches overlap compute;
the simulator streams a large item's weights through the buffers in pieces, the item computing
on each as the next lands (:func:`~tvm_chiplet.runtime.device.simulate_workload`).
Weights are interleaved over every DRAM controller in proportion to its bandwidth, as memory
systems interleave addresses across channels (``dram_policy="nearest"`` fetches from the nearest
controller only, ``"balanced"`` in the proportions a planner chose per cluster): each fetch is
one message per controller, routed over the network, and the simulator shares controllers and
links among all fetches and messages.

SRAM loans
----------
A cluster whose own weights leave part of its SRAM free may hold some of a streaming cluster's
weights instead (a *loan*: ``(borrower, lender, bytes)``, as a planner decides). Every batch, the
borrower then fetches that share of each streamed item from the lender's SRAM, over the network,
and only the rest from DRAM: the SRAM of all clusters acts as one pool in front of DRAM. A
lender must keep all its own weights resident and hold its loans beside them.

Weight pools (copies sharing one set of weights)
------------------------------------------------
Copies of a placement (input-level data parallelism) hold the same weights. When their clusters
stream, each group of clusters that run the same work in every copy (:func:`pool_groups`) may
instead keep *one* set of that work's weights striped over their SRAM, as sharded data
parallelism does (ZeRO-3 / FSDP, Graphcore's replicated tensor sharding): a member keeps the
fraction ``cap_k / max(W, sum cap)`` of every one of the group's items resident (``cap_k`` its
resident budget, ``W`` the weights of one copy's cluster), and every batch a cluster fetches the
other members' stripes of its items over the network, and from DRAM only what the group's SRAM
cannot hold. Each part of an item (a member's stripe, the DRAM rest) is one fetch for the whole
pool (``"shared"``), issued by the first member that reads it once every reader's buffer is
free, and sent once to all its readers, as the copies run the same op at about the same time:
around a ring of them or as a multicast tree, as a fan-out below (a part that can take neither
is fetched by each reader alone). Nothing else stays resident on a member. A group whose SRAM
holds several sets keeps several, each in a pool of consecutive copies (fewer and shorter
fetches).

Replicas (the parts of a split holding the same weights)
-------------------------------------------------------
The parts of a row split each hold all of their op's weights, and a 2-D split's bands of one
column slice that slice: items with one :attr:`WorkItem.weight_key` (a digest of the weights'
values) at one depth of the dependency graph, counted in items with weights (the plumbing
between parts, a halo's slices or a band's concatenation, differs from part to part). Where a
member of such a group would stream (its items' weights exceed its SRAM), the group pools them
as a weight pool does (:func:`replica_groups`): each member keeps a ``1 / r`` stripe resident
before all its other weights, and every batch fetches the other ``r - 1`` stripes from their
holders, each stripe one shared fetch sent once to all its readers. Replicas that wait for
each other (layers that share weights) never pool, nor do copies (above) as replicas: their
keys differ per copy.

Microbatches (several inputs per weight fetch)
----------------------------------------------
With a microbatch of ``g`` inputs (:func:`microbatch_items`), each item that batches
(:func:`batched`: its weights outweigh one input's activations, :func:`reuses_weights`, and
``g - 1`` more inputs' activations fit :data:`BATCH_ROOM` of its cluster's SRAM) runs the ``g``
inputs back to back on the weights it holds, as accelerators batch to reuse weights: its
compute, its activation bytes and its messages are ``g`` times one input's, but a streamed
weight is fetched once per microbatch, not once per input. Its activations for the microbatch
take SRAM that would otherwise hold weights: a cluster sets aside ``(g - 1)`` times the largest
activation footprint (inputs and outputs) of one input of any item that batches on it
(:func:`activation_reserve`; one input's worth is not charged, as it is not without a
microbatch), so fewer weights stay resident. The other items (activations outweigh the weights:
early convolutions, attention's score products; or the microbatch's activations would crowd
out the weights: a language model's head, whose logits per input fill a chiplet) run the inputs
one at a time, as a schedule that keeps their large activations out of SRAM would: ``g`` times
the work of one input, and each streamed weight fetched ``g`` times, with no reserve.

Fan-outs: rings and multicast
-----------------------------
An item's whole output read by items on several other clusters is one value sent to all of
them. Those messages form one *shared transfer* (``"multicast"``: the index of its first
message), which the simulator sends once over the union of their routes:

- around a ring of the clusters involved, each forwarding it to its neighbour, when
  :func:`~tvm_chiplet.targets.collectives.gather_ring` finds that an all-gather over them loads
  the busiest link less that way (the messages' routes then follow the ring);
- else, when every link on the way has ``multicast`` routers, as one multicast tree (its
  branches :meth:`~tvm_chiplet.targets.topology.Topology.tree_route`);
- else as separate messages on the system's routes.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from tvm_chiplet.targets import cost_model
from tvm_chiplet.targets.collectives import gather_ring, ring_route, y_first_sources
from tvm_chiplet.targets.collector import collection_paused
from tvm_chiplet.targets.system import ChipletSystem
from tvm_chiplet.targets.topology import Topology

STREAM_BUFFER_FRACTION = 1 / 16
"""Share of a streaming cluster's SRAM kept as the double buffer for streamed weights.

A buffer holds two pieces of the weights in flight, not a set of weights: a larger one keeps
fewer weights resident, a smaller one prefetches less far ahead. ResNet-50 int8 at batch 1 on
simba-6x6 (``tensor-parallel``, its replicas pooled) simulates 409.8 k / 394.6 k / 412.2 k /
500.9 k cycles with 2 / 5 / 10 / 25 % of SRAM kept (25 % was this model's earlier value)."""

PLANNED_HEADROOM = 0.25
"""Share of a cluster's SRAM the planners' estimates keep free of resident weights
(:func:`overflow_bytes`, the tensor-parallel planner's budgets): the stream buffer and room
for what they leave out (activations). With the device's budget (all but
:data:`STREAM_BUFFER_FRACTION`) the tensor-parallel program chose BERT-base batch-1 plans on a
16x16 mesh that simulated slower (3.003x against 2.972x the bound), and the pipeline planner
judged more candidates (BERT-base on simba-6x6 compiled 2.53x as long as plain TVM, against
1.86x)."""

DRAM_POLICIES = ("interleave", "nearest", "balanced")


BATCH_ROOM = 1.0 - STREAM_BUFFER_FRACTION
"""Share of a cluster's SRAM that a microbatch's activations (beyond one input's) may take from
the weights of an item that batches (:func:`batched`): all but the stream buffer."""


@dataclass(frozen=True)
class WorkItem:
    """One compute op placed on a cluster, with what it reads from earlier items, and the
    digest of its weights (module docstring: replicas)."""

    name: str
    cluster: int
    flops: float
    bytes_moved: float
    weight_bytes: float
    deps: Sequence[tuple[int, int]] = ()  # (producer item index, bytes read from it)
    output_bytes: float = 0.0  # what the item writes (0: unknown, so never multicast)
    weight_key: str = ""  # equal on items holding the same weights ("": unknown, none shared)


def replicate_items(items: Sequence[WorkItem],
                    copies: Sequence[dict[int, int]]) -> list[WorkItem]:
    """``items`` followed by one copy of them per cluster map in ``copies``.

    Copy ``r`` (``1 ..``) runs item ``i`` on ``copies[r - 1][items[i].cluster]``, reads from
    its own copy's items, and is named ``"<name>@r"`` (its weight key too: copies pool their
    weights in a weight pool, not as replicas): the work of one input, laid out so that
    consecutive inputs can run on consecutive copies (input-level data parallelism).
    """
    replicated = list(items)
    for number, clusters in enumerate(copies, start=1):
        offset = number * len(items)
        replicated += [
            WorkItem(f"{item.name}@{number}", clusters[item.cluster], item.flops,
                     item.bytes_moved, item.weight_bytes,
                     [(producer + offset, nbytes) for producer, nbytes in item.deps],
                     item.output_bytes, item.weight_key and f"{item.weight_key}@{number}")
            for item in items
        ]
    return replicated


def replicate_loans(loans: Sequence[tuple[int, int, int]],
                    copies: Sequence[dict[int, int]]) -> list[tuple[int, int, int]]:
    """``loans`` followed by the same loans between the mapped clusters of every copy (the
    cluster maps of :func:`replicate_items`, which must map the lenders too)."""
    return [*loans, *((clusters[borrower], clusters[lender], nbytes)
                      for clusters in copies for borrower, lender, nbytes in loans)]


def reuses_weights(item: WorkItem) -> bool:
    """Whether a microbatch runs ``item`` on all its inputs per read of its weights: when they
    are at least one input's activation bytes (module docstring)."""
    return 0 < item.weight_bytes >= item.bytes_moved - item.weight_bytes


def batched(items: Sequence[WorkItem], system: ChipletSystem, microbatch: int) -> list[bool]:
    """Per item of one input, whether a microbatch of ``microbatch`` runs all its inputs per read
    of the item's weights (module docstring): it :func:`reuses_weights` and the other inputs'
    activations fit :data:`BATCH_ROOM` of its cluster's SRAM. None batches for ``1``."""
    if microbatch == 1:
        return [False] * len(items)
    room = [BATCH_ROOM * c.sram_bytes for c in system.clusters]
    return [reuses_weights(item)
            and (microbatch - 1) * (item.bytes_moved - item.weight_bytes) <= room[item.cluster]
            for item in items]


def microbatch_items(items: Sequence[WorkItem], system: ChipletSystem,
                     microbatch: int) -> list[WorkItem]:
    """``items`` running ``microbatch`` inputs (module docstring): compute, activation bytes
    and the bytes read from producers scaled; weights read once when the item is
    :func:`batched`, else once per input."""
    if isinstance(microbatch, bool) or not isinstance(microbatch, int) or microbatch < 1:
        raise ValueError(f"microbatch must be an integer >= 1, found {microbatch!r}")
    if microbatch == 1:
        return list(items)
    g = microbatch
    return [
        WorkItem(item.name, item.cluster, item.flops * g,
                 (item.weight_bytes + (item.bytes_moved - item.weight_bytes) * g
                  if once else item.bytes_moved * g),
                 item.weight_bytes, [(producer, nbytes * g) for producer, nbytes in item.deps],
                 item.output_bytes * g, item.weight_key)
        for item, once in zip(items, batched(items, system, g), strict=True)
    ]


def activation_reserve(items: Sequence[WorkItem], system: ChipletSystem,
                       microbatch: int) -> list[float]:
    """Per cluster, the SRAM bytes a microbatch's activations take from its weights (module
    docstring: ``microbatch - 1`` inputs' activations of the items that are :func:`batched`),
    for ``items`` of one input each."""
    reserve = [0.0] * system.num_clusters
    for item, once in zip(items, batched(items, system, microbatch), strict=True):
        if once:
            footprint = (microbatch - 1) * max(item.bytes_moved - item.weight_bytes, 0.0)
            reserve[item.cluster] = max(reserve[item.cluster], footprint)
    return reserve


def weight_sram(system: ChipletSystem, reserve: Sequence[float] = ()) -> list[float]:
    """Per cluster, the SRAM bytes left for weights: its SRAM less ``reserve`` (none if
    empty)."""
    return [c.sram_bytes - (reserve[c.id] if reserve else 0.0) for c in system.clusters]


def overflow_bytes(weight_bytes, sram_bytes):
    """Bytes per batch the planners estimate a cluster holding ``weight_bytes`` of weights
    streams, however they divide into ops: none if they fit its SRAM, else all beyond its SRAM
    less :data:`PLANNED_HEADROOM`.

    Works on numbers and element-wise on numpy arrays (what planners estimate stages with).
    """
    return np.where(weight_bytes > sram_bytes,
                    weight_bytes - (1.0 - PLANNED_HEADROOM) * sram_bytes, 0.0)


def resident_budget(sram_bytes: float, weight_bytes: float) -> float:
    """Bytes of weights a cluster keeps resident when its items need ``weight_bytes``."""
    if weight_bytes <= sram_bytes:
        return sram_bytes
    return (1.0 - STREAM_BUFFER_FRACTION) * sram_bytes


def streamed_bytes(items: Sequence[WorkItem], system: ChipletSystem,
                   reserve: Sequence[float] = (),
                   replicas: Mapping[int, Sequence[int]] | None = None) -> list[int]:
    """Per item, the bytes of its weights fetched each batch (module docstring): from DRAM,
    but for pooled replicas (``replicas``, :func:`replica_groups`, with ``items`` holding their
    stripes, :func:`held_items`), whose stripes stay resident before all other weights and
    which fetch the other members' stripes (whole bytes each); ``reserve``: SRAM per cluster
    held for activations (:func:`activation_reserve`)."""
    sram = weight_sram(system, reserve)
    pinned = replicas or {}
    streamed = [0] * len(items)
    holding: dict[int, list[int]] = {}
    for i, item in enumerate(items):
        if item.weight_bytes > 0:
            holding.setdefault(item.cluster, []).append(i)
    for cluster, mine in holding.items():
        total = sum(items[i].weight_bytes for i in mine)
        # A pooled replica fetches the other stripes: its cluster streams, with a buffer.
        if total <= sram[cluster] and not any(i in pinned for i in mine):
            continue
        room = (1.0 - STREAM_BUFFER_FRACTION) * sram[cluster]
        rest = []
        for i in sorted(mine, key=lambda i: (i not in pinned, -items[i].weight_bytes, i)):
            if i in pinned:
                room -= items[i].weight_bytes
                streamed[i] = int(items[i].weight_bytes) * (len(pinned[i]) - 1)
            elif items[i].weight_bytes <= room:
                room -= items[i].weight_bytes
            else:
                rest.append(i)
        kept = max(room, 0.0) / sum(items[i].weight_bytes for i in rest) if rest else 1.0
        for i in rest:
            streamed[i] = int(items[i].weight_bytes * (1.0 - kept))
    return streamed


def replica_groups(items: Sequence[WorkItem], system: ChipletSystem,
                   reserve: Sequence[float] = ()) -> dict[int, tuple[int, ...]]:
    """Per item whose weights its replicas pool (module docstring), the items of its group
    (itself among them), in order.

    Replicas are items with one :attr:`WorkItem.weight_key` at one depth of the dependency
    graph, counted in items with weights on the longest path to them (so none waits for
    another: the parts of one split op, whatever plumbing leads to each, not layers that share
    weights) on different clusters (one item each). They pool when a member would stream (its
    items' weights exceed its SRAM) and every member then keeps its stripe resident; a group
    whose stripe some member cannot keep stays unpooled (its replicas stream from DRAM)."""
    sram = weight_sram(system, reserve)
    full, _ = cluster_totals(items, system, [0] * len(items))
    depth: list[int] = []
    by_key: dict[tuple[str, int], list[int]] = {}
    for index, item in enumerate(items):
        # Weighted items on the longest path here: plumbing between the parts of one op (a
        # halo's slices, a band's concatenation) leaves them at one depth.
        depth.append(max((depth[p] + (items[p].weight_bytes > 0) for p, _ in item.deps),
                         default=0))
        if item.weight_key and item.weight_bytes > 0:
            by_key.setdefault((item.weight_key, depth[index]), []).append(index)
    pooled: dict[tuple[str, int], list[int]] = {}
    for key, group in by_key.items():
        clusters = {items[i].cluster for i in group}
        if len(group) >= 2 and len(clusters) == len(group) and any(
                full[c] > sram[c] for c in clusters):
            pooled[key] = group
    # Stripes stay resident first; where a member's stripes exceed its resident budget, the
    # groups with its largest stripes are left unpooled until the rest fit.
    while True:
        striped: dict[int, list[tuple[float, tuple]]] = {}  # cluster -> (stripe, group key)
        for key, group in pooled.items():
            for i in group:
                striped.setdefault(items[i].cluster, []).append(
                    (items[i].weight_bytes / len(group), key))
        over = [mine for c, mine in striped.items()
                if sum(b for b, _ in mine) > (1.0 - STREAM_BUFFER_FRACTION) * sram[c]]
        if not over:
            return {i: tuple(group) for group in pooled.values() for i in group}
        for mine in over:
            pooled.pop(max(mine)[1], None)


def held_items(items: Sequence[WorkItem], replicas: dict[int, tuple[int, ...]]
               ) -> list[WorkItem]:
    """``items`` with each pooled replica (``replicas``, :func:`replica_groups`) holding only
    its stripe of the weights."""
    return [dataclasses.replace(item, weight_bytes=item.weight_bytes / len(replicas[i]))
            if i in replicas else item for i, item in enumerate(items)]


def pool_groups(clusters: Sequence[int],
                copies: Sequence[dict[int, int]]) -> list[tuple[int, ...]]:
    """The weight pool's groups: each of copy 0's ``clusters`` with its image in every other
    copy (the cluster maps of :func:`replicate_items`)."""
    return [(c, *(mapping[c] for mapping in copies)) for c in sorted(clusters)]


def pooled_stripes(items: Sequence[WorkItem], system: ChipletSystem,
                   groups: Sequence[Sequence[int]],
                   reserve: Sequence[float] = ()) -> dict[int, dict[int, float]]:
    """Per pooled cluster, ``{member: fraction}`` of its pool: the share of each of its
    items' weights each member keeps resident (module docstring). The streaming members of a
    group form as many pools of consecutive copies as their SRAM holds whole sets of their
    weights (at least one); a pool needs two members."""
    weights, _ = cluster_totals(items, system, [0] * len(items))
    sram = weight_sram(system, reserve)
    stripes: dict[int, dict[int, float]] = {}
    for group in groups:
        members = [k for k in group if weights[k] > sram[k]]
        if len(members) < 2:
            continue
        cap = {k: resident_budget(sram[k], weights[k]) for k in members}
        # As many pools as the members' SRAM holds whole sets of the weights, each of
        # consecutive copies: fewer, shorter fetches than one pool over every copy.
        pools = max(1, int(sum(cap.values()) // max(weights[k] for k in members)))
        for chunk in np.array_split(np.array(members, dtype=int), pools):
            chunk = [int(k) for k in chunk]
            if len(chunk) < 2:
                continue
            held = max(max(weights[k] for k in chunk), sum(cap[k] for k in chunk))
            share = {k: cap[k] / held for k in chunk}
            stripes.update({k: share for k in chunk})
    return stripes


def controller_shares(system: ChipletSystem, topology: Topology, cluster: int,
                policy: str = "interleave",
                shares: Sequence[tuple[int, int, float]] = ()) -> list[tuple[int, float]]:
    """``(controller id, fraction of the bytes)`` a fetch into ``cluster`` takes from each.

    ``balanced`` takes the ``(cluster, controller, fraction)`` triples of ``shares`` (a cluster
    without any falls back to ``interleave``).
    """
    if policy not in DRAM_POLICIES:
        raise ValueError(f"dram_policy must be one of {DRAM_POLICIES}, found {policy!r}")
    if policy == "balanced":
        mine = [(d, f) for c, d, f in shares if c == cluster and f > 0]
        if mine:
            total = sum(f for _, f in mine)
            return [(int(d), f / total) for d, f in mine]
        policy = "interleave"
    if policy == "nearest":
        return [(topology.nearest_dram(cluster).id, 1.0)]
    total = sum(d.bandwidth for d in system.drams)
    return [(d.id, d.bandwidth / total) for d in system.drams]


def cluster_totals(items: Sequence[WorkItem], system: ChipletSystem,
                   streamed: Sequence[int]) -> tuple[list[float], list[int]]:
    """Per cluster: the weight bytes its items hold, and the bytes they stream per batch
    (``streamed`` as :func:`streamed_bytes` gives it)."""
    weights, streams = [0.0] * system.num_clusters, [0] * system.num_clusters
    for item, nbytes in zip(items, streamed, strict=True):
        weights[item.cluster] += item.weight_bytes
        streams[item.cluster] += nbytes
    return weights, streams


def check_loans(items: Sequence[WorkItem], system: ChipletSystem,
                loans: Sequence[tuple[int, int, int]],
                reserve: Sequence[float] = ()) -> dict[int, list[tuple[int, int]]]:
    """``{borrower: [(lender, bytes), ...]}`` of valid SRAM loans (module docstring).

    Raises
    ------
    ValueError
        For a loan between unknown or equal clusters, of no bytes, from a lender that streams
        its own weights or has no room for the loan, or of more bytes than the borrower streams.
    """
    if not loans:
        return {}
    weights, streams = cluster_totals(items, system, streamed_bytes(items, system, reserve))
    sram = weight_sram(system, reserve)
    by_borrower: dict[int, list[tuple[int, int]]] = {}
    lent = [0] * system.num_clusters
    for borrower, lender, nbytes in loans:
        where = f"SRAM loan ({borrower}, {lender}, {nbytes})"
        known = range(system.num_clusters)
        if borrower not in known or lender not in known or borrower == lender or nbytes <= 0:
            raise ValueError(
                f"{where}: expected (borrower, lender, bytes) with two different clusters of "
                f"0..{system.num_clusters - 1} and bytes > 0"
            )
        by_borrower.setdefault(borrower, []).append((lender, int(nbytes)))
        lent[lender] += nbytes
    for cluster in system.clusters:
        c = cluster.id
        if lent[c] and weights[c] + lent[c] > sram[c]:
            raise ValueError(
                f"cluster {c} lends {lent[c]} B of SRAM but holds {weights[c]:.0f} B of its own "
                f"weights in {sram[c]:.0f} B; lend at most "
                f"{max(0, sram[c] - weights[c]):.0f} B from it"
            )
        borrowed = sum(nbytes for _, nbytes in by_borrower.get(c, []))
        if borrowed > streams[c]:
            raise ValueError(
                f"cluster {c} borrows {borrowed} B of SRAM but streams only {streams[c]} B of "
                f"weights per batch; borrow at most that"
            )
    return by_borrower


def dram_reads(fetches: Sequence[dict]) -> list[dict]:
    """The fetches of :func:`build_workload` that read a DRAM controller: a fetch shared by a
    weight pool's members once (its first)."""
    return [f for n, f in enumerate(fetches)
            if f.get("dram") is not None and f.get("shared") in (None, n)]


def dram_bytes(fetches: Sequence[dict]) -> int:
    """Bytes ``fetches`` read from DRAM controllers (:func:`dram_reads`)."""
    return sum(f["bytes"] for f in dram_reads(fetches))


def fetch_source(fetch: dict, system: ChipletSystem) -> int:
    """The network node a fetch of :func:`build_workload` comes from: its DRAM controller's
    node, or the lending cluster."""
    return fetch["lender"] if fetch.get("dram") is None else system.drams[fetch["dram"]].node


@collection_paused()
def build_workload(
    items: Sequence[WorkItem], system: ChipletSystem, topology: Topology | None = None,
    dram_policy: str = "interleave", dram_shares: Sequence[tuple[int, int, float]] = (),
    sram_loans: Sequence[tuple[int, int, int]] = (),
    pool: Sequence[Sequence[int]] = (), microbatch: int = 1,
) -> tuple[list[dict], list[dict], list[bool], list[dict]]:
    """Cycles per item, one message per cross-item dependency, and weight fetches.

    ``pool``: the groups of clusters that keep one set of their items' weights between them
    (:func:`pool_groups`, module docstring); a pooled cluster fetches the other members'
    stripes and takes no loans. ``microbatch``: inputs each item runs per round (module
    docstring: one weight fetch for all of them where it is :func:`batched`); tasks and
    messages are then those of the whole microbatch.

    Returns
    -------
    (tasks, messages, weights_resident, fetches)
        ``tasks[i]`` = ``{"name", "cluster", "cycles", "mac_pj", "sram_pj"}`` (compute only,
        energy from :func:`~tvm_chiplet.targets.cost_model.op_energy_pj`); ``messages`` =
        ``{"src", "dst", "bytes", "route", "multicast"}`` (empty route within a cluster;
        ``multicast`` None or the index of the shared transfer's first message, module
        docstring);
        ``weights_resident[c]``: whether cluster ``c`` keeps all its weights in SRAM;
        ``fetches`` = ``{"task", "cluster", "dram", "lender", "bytes", "route", "after",
        "shared"}``, one per streamed item and source: a DRAM controller (``dram``; ``lender``
        None) or, with ``sram_loans`` or a pool, a lending cluster (``lender``; ``dram`` None).
        ``after``: the item whose end issues the fetch, or None. ``shared``: for a pool's
        part, the index of the fetch that all its readers share (module docstring), else None.
    """
    topology = topology or Topology(system)
    scaled = microbatch_items(items, system, microbatch)  # checks microbatch
    reserve = activation_reserve(items, system, microbatch)
    # Fetches of each item's streamed weights per microbatch (module docstring).
    reads = [1 if once else microbatch for once in batched(items, system, microbatch)]
    items = scaled
    replicas = {} if pool or sram_loans else replica_groups(items, system, reserve)
    held = held_items(items, replicas)
    streamed = streamed_bytes(held, system, reserve, replicas)
    stripes = pooled_stripes(items, system, pool, reserve)
    if stripes and sram_loans:
        raise ValueError("a weight pool and SRAM loans cannot be combined: the pool already "
                         "holds the streamed weights in the SRAM of its members")
    loans = check_loans(items, system, sram_loans, reserve)
    for index, item in enumerate(items):
        if item.cluster in stripes:
            streamed[index] = int(item.weight_bytes * (1.0 - stripes[item.cluster][item.cluster]))
    _, stream_total = cluster_totals(items, system, streamed)
    resident = [True] * system.num_clusters
    tasks, messages, fetches = [], [], []
    streamed_on: dict[int, list[int]] = {}
    # (pool leader, j, controller, lender) or (replicas, first replica, lender) -> the fetch
    shared_from: dict[tuple, int] = {}
    for index, item in enumerate(items):
        cluster = system.clusters[item.cluster]
        cycles = cost_model.compute_cycles(item.flops, item.bytes_moved, cluster)
        mac_pj, sram_pj = cost_model.op_energy_pj(item.flops, item.bytes_moved, cluster, system)
        tasks.append({"name": item.name, "cluster": item.cluster, "cycles": cycles,
                      "mac_pj": mac_pj, "sram_pj": sram_pj})
        if streamed[index] > 0:
            resident[item.cluster] = False
            earlier = streamed_on.setdefault(item.cluster, [])
            after = earlier[-2] if len(earlier) >= 2 else None
            parts = [(None, k, int(item.weight_bytes * fraction), topology.route(k, item.cluster))
                     for k, fraction in stripes.get(item.cluster, {}).items()
                     if k != item.cluster]
            parts += [(None, items[j].cluster, int(held[index].weight_bytes),
                       topology.route(items[j].cluster, item.cluster))
                      for j in replicas.get(index, ()) if j != index]
            for lender, nbytes in loans.get(item.cluster, []):
                share = int(streamed[index] * nbytes / stream_total[item.cluster])
                parts.append((None, lender, share, topology.route(lender, item.cluster)))
            rest = streamed[index] - sum(part[2] for part in parts)
            # A pool's members fetch each part of their j-th streamed item (a member's stripe,
            # the DRAM rest from the first member's controllers) as one shared fetch.
            leader = next(iter(stripes[item.cluster])) if item.cluster in stripes else None
            shares = controller_shares(system, topology, leader if leader is not None
                                       else item.cluster, dram_policy, dram_shares)
            sizes = _split_bytes(rest, [share for _, share in shares])
            parts += [(dram_id, None, nbytes,
                       topology.route(system.drams[dram_id].node, item.cluster))
                      for (dram_id, _), nbytes in zip(shares, sizes, strict=True)]
            for dram_id, lender, nbytes, route in parts:
                nbytes *= reads[index]
                if nbytes > 0:  # they add up to streamed[index] > 0: at least one is
                    key = ((leader, len(earlier), dram_id, lender) if leader is not None
                           else ("replicas", replicas[index][0], lender)
                           if index in replicas else None)
                    shared = None if key is None else shared_from.setdefault(key, len(fetches))
                    if shared is not None and shared < len(fetches):
                        nbytes = fetches[shared]["bytes"]
                    fetches.append({
                        "task": index, "cluster": item.cluster, "dram": dram_id,
                        "lender": lender, "bytes": nbytes, "route": route, "after": after,
                        "shared": shared,
                    })
            earlier.append(index)
        for producer, nbytes in item.deps:
            src = items[producer].cluster
            route = topology.route(src, item.cluster) if src != item.cluster else []
            messages.append({"src": producer, "dst": index, "bytes": int(nbytes), "route": route,
                             "multicast": None})
    _group_fan_outs(items, messages, system, topology)
    _share_pool_fetches(fetches, system, topology)
    return tasks, messages, resident, fetches


def _group_fan_outs(items: Sequence[WorkItem], messages: list[dict], system: ChipletSystem,
                    topology: Topology) -> None:
    """Make each item's whole output read on other clusters one shared transfer, around a ring
    or as a multicast tree where that pays (module docstring)."""
    readers: dict[int, list[int]] = {}
    for index, message in enumerate(messages):
        whole = items[message["src"]].output_bytes
        if message["route"] and whole > 0 and message["bytes"] == int(whole):
            readers.setdefault(message["src"], []).append(index)
    shared: dict = {}
    for source, group in readers.items():
        if len(group) < 2:
            continue
        routes = _shared_routes(topology, system, items[source].cluster,
                                [items[messages[i]["dst"]].cluster for i in group], shared)
        if routes is None:
            continue
        for index in group:
            messages[index]["route"] = routes[items[messages[index]["dst"]].cluster]
            messages[index]["multicast"] = group[0]


def _share_pool_fetches(fetches: list[dict], system: ChipletSystem, topology: Topology) -> None:
    """Route each shared fetch of a weight pool (module docstring) as one transfer from its
    source to its readers, around a ring or as a multicast tree; a part that can take neither
    is fetched by each reader alone."""
    groups: dict[int, list[dict]] = {}
    for fetch in fetches:
        if fetch["shared"] is not None:
            groups.setdefault(fetch["shared"], []).append(fetch)
    shared: dict = {}
    for group in groups.values():
        if len(group) < 2:
            continue
        first = group[0]
        # A stripe leaves its member; the DRAM rest reaches the first reader, then the others.
        src = first["lender"] if first["dram"] is None else first["cluster"]
        prefix = [] if first["dram"] is None else topology.route(
            system.drams[first["dram"]].node, src)
        readers = [f["cluster"] for f in group if f["cluster"] != src]
        routes = _shared_routes(topology, system, src, readers, shared)
        if routes is not None:
            routes = {c: prefix + route for c, route in routes.items()}
            if any(len(set(route)) < len(route) for route in routes.values()):
                routes = None  # the way to the first reader and on from it cross
        for fetch in group:
            if routes is None:
                fetch["shared"] = None
            elif fetch["cluster"] != src:
                fetch["route"] = routes[fetch["cluster"]]


def _shared_routes(topology: Topology, system: ChipletSystem, src: int, readers: list[int],
                   known: dict) -> dict[int, list[int]] | None:
    """Routes of one transfer from cluster ``src`` to every reader: around a ring of them when
    an all-gather over them loads the busiest link less that way, else a multicast tree when
    every link on it has multicast routers; None when neither. ``known`` memoises them by
    source and readers (a split op's parts fan out to the same groups again and again); the
    lists are shared, and read only."""
    key = (src, frozenset(readers))
    if key not in known:
        known[key] = _fan_out_routes(topology, system, src, key[1])
    return known[key]


def _fan_out_routes(topology: Topology, system: ChipletSystem, src: int, readers: frozenset[int]
                    ) -> dict[int, list[int]] | None:
    ring = gather_ring(topology, tuple(sorted({src, *readers})))
    if ring is not None:
        routes = {c: ring_route(topology, ring, src, c) for c in readers}
        if all(route is not None for route in routes.values()):
            return routes
    y_first = src in y_first_sources(topology, (src, *readers))
    routes = {c: topology.tree_route(src, c, y_first) for c in readers}
    if all(system.links[link].multicast for route in routes.values() for link in route):
        return routes
    return None


def _split_bytes(nbytes: int, shares: list[float]) -> list[int]:
    """``nbytes`` in whole bytes by ``shares`` (summing to 1); the remainder goes to the first."""
    sizes = [int(nbytes * share) for share in shares]
    sizes[0] += nbytes - sum(sizes)
    return sizes
