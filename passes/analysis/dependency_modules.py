"""Depth levels, serial chains and dependency modules of an op graph (networkx, no TVM).

The modular planner (:mod:`tvm_chiplet.passes.planners.modular`) sees a model as a sequence of
*modules*: runs of consecutive depth levels whose boundaries are cuts that few bytes cross. Inside
a module, *parallel groups* (ops that do not depend on each other within the module) may run on
different clusters, and *serial groups* (chains) never run in parallel, so they are kept together.

Definitions used throughout
---------------------------
Compute dependencies
    Plumbing ops (tuples, ``get_item``) move no data on the device: the value a compute op reads
    through them comes from the compute ops behind them. :func:`compute_dependencies` contracts
    them exactly as the device workload does
    (:func:`~tvm_chiplet.passes.planners.evaluate.placement_items`).
Depth
    ``depth[v]`` = (compute ops on the longest path from a model input to ``v``, ``v`` included)
    minus one, and at least 0. A compute op without compute ancestors has depth 0, a plumbing op
    sits at the level of its deepest producer, so depth counts compute ops only.
Module complexity
    :class:`Complexity` measures how much parallelism the data dependencies inside a module
    allow: ``parallel_groups`` independent groups (weakly connected components of the module's
    subgraph, which can run on different clusters at the same time) and ``max_width``, the most
    compute ops on one depth level (ops of one level never depend on each other). A chain has
    complexity ``(1, 1)``; two independent chains ``(2, 2)``; a diamond ``(1, 2)``.

Example
-------
>>> modules = dependency_modules(graph, target_modules=4)                # doctest: +SKIP
>>> [m.depth_range for m in modules], resource_bounds(modules, 16)       # doctest: +SKIP
([(0, 9), (10, 21), (22, 35), (36, 52)], [3, 4, 5, 4])
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass

import networkx as nx

from tvm_chiplet.passes.analysis.op_graph import OpGraph


@dataclass(frozen=True)
class Complexity:
    """Data-dependency complexity of a module (see the module docstring).

    Attributes
    ----------
    parallel_groups : int
        Groups of ops that do not depend on each other inside the module.
    max_width : int
        Most compute ops on one depth level of the module.
    """

    parallel_groups: int
    max_width: int


@dataclass(frozen=True)
class Module:
    """Consecutive depth levels of an op graph.

    Attributes
    ----------
    index : int
        Position in the list of modules (modules are in dependency order).
    ops : tuple[int, ...]
        Op ids of the module, sorted (plumbing ops included).
    depth_range : tuple[int, int]
        First and last depth level, inclusive.
    flops : float
        Total FLOPs of the module's ops.
    weight_bytes : int
        Total weight bytes of the module's ops.
    parallel_groups : tuple[tuple[int, ...], ...]
        The module's ops partitioned into weakly connected components of its subgraph, each
        sorted, ordered by their first op.
    complexity : Complexity
        Number of parallel groups and largest number of compute ops on one level.
    compute_ops : int
        Number of compute ops.
    """

    index: int
    ops: tuple[int, ...]
    depth_range: tuple[int, int]
    flops: float
    weight_bytes: int
    parallel_groups: tuple[tuple[int, ...], ...]
    complexity: Complexity
    compute_ops: int


def compute_dependencies(graph: OpGraph) -> list[tuple[int, int, int]]:
    """``(producer, consumer, nbytes)`` between compute ops, plumbing ops looked through.

    Each compute op reads, from every compute op behind its inputs, the bytes the device workload
    sends (per edge, the smaller of the edge's and the plumbing value's bytes). Sorted.
    """
    reads_of: dict[int, dict[int, int]] = {}  # plumbing op -> {compute op: bytes}
    deps = []
    for op in graph.ops:
        reads: dict[int, int] = {}
        for pred in sorted(graph.graph.predecessors(op.op_id)):
            nbytes = graph.graph.edges[pred, op.op_id]["nbytes"]
            sources = {pred: nbytes} if graph.ops[pred].is_compute else reads_of.get(pred, {})
            for source, size in sources.items():
                reads[source] = reads.get(source, 0) + min(size, nbytes)
        if op.is_compute:
            deps.extend((source, op.op_id, nbytes) for source, nbytes in reads.items())
        else:
            reads_of[op.op_id] = reads
    return sorted(deps)


def op_depth(graph: OpGraph) -> list[int]:
    """Longest-path depth of every op from the model inputs, counting compute ops only.

    ``depth[v]`` is the number of compute ops on the longest path ending at ``v`` (``v``
    included) minus one, clamped at 0: compute ops with no compute ancestor are at depth 0 and a
    plumbing op shares the level of its deepest producer.

    Example: ``a -> b, a -> c, b -> d, c -> d`` (a diamond of compute ops) gives ``[0, 1, 1, 2]``.
    """
    count = [0] * len(graph.ops)
    for v in nx.lexicographical_topological_sort(graph.graph):
        deepest = max((count[p] for p in graph.graph.predecessors(v)), default=0)
        count[v] = deepest + int(graph.ops[v].is_compute)
    return [max(c - 1, 0) for c in count]


def serial_groups(graph: OpGraph) -> list[list[int]]:
    """Maximal chains of compute ops that never run in parallel, with their plumbing.

    Compute ops ``u`` and ``v`` are chained when ``v`` is ``u``'s only compute consumer and ``u``
    is ``v``'s only compute producer (:func:`compute_dependencies`); a group is a maximal run of
    chained ops (a single op when nothing chains). A plumbing op joins the group of its first
    compute producer, or forms a group of its own when it has none. Every op is in exactly one
    group; groups are sorted and ordered by their first op.
    """
    deps = compute_dependencies(graph)
    succs: dict[int, set[int]] = {}
    preds: dict[int, set[int]] = {}
    for u, v, _ in deps:
        succs.setdefault(u, set()).add(v)
        preds.setdefault(v, set()).add(u)
    group_of: dict[int, int] = {}
    groups: list[list[int]] = []
    for v in nx.lexicographical_topological_sort(graph.graph):
        op = graph.ops[v]
        if op.is_compute:
            single = preds.get(v, set())
            if len(single) == 1:
                (u,) = single
                if len(succs[u]) == 1:
                    group_of[v] = group_of[u]
                    groups[group_of[v]].append(v)
                    continue
        else:
            producers = _compute_producers(graph, v)
            if producers:
                group_of[v] = group_of[producers[0]]
                groups[group_of[v]].append(v)
                continue
        group_of[v] = len(groups)
        groups.append([v])
    return sorted(sorted(g) for g in groups)


def _compute_producers(graph: OpGraph, op_id: int) -> list[int]:
    """Compute ops behind ``op_id``'s inputs (looking through plumbing), sorted."""
    found, stack, seen = set(), [op_id], {op_id}
    while stack:
        for pred in graph.graph.predecessors(stack.pop()):
            if pred in seen:
                continue
            seen.add(pred)
            if graph.ops[pred].is_compute:
                found.add(pred)
            else:
                stack.append(pred)
    return sorted(found)


def depth_cut_bytes(graph: OpGraph, depth: list[int] | None = None) -> list[int]:
    """``cut[d]``: bytes of compute dependencies from levels ``< d`` to levels ``>= d``.

    Indexed ``0 .. max_depth + 1``; ``cut[0]`` and ``cut[max_depth + 1]`` are 0. Each dependency
    counts once per consumer, as the device sends one message per consumer.
    """
    depth = op_depth(graph) if depth is None else depth
    top = max(depth, default=0)
    delta = [0] * (top + 3)
    for u, v, nbytes in compute_dependencies(graph):
        delta[depth[u] + 1] += nbytes
        delta[depth[v] + 1] -= nbytes
    cut, running = [], 0
    for d in range(top + 2):
        running += delta[d]
        cut.append(running)
    return cut


def dependency_modules(
    graph: OpGraph, target_modules: int = 8, max_modules: int | None = None
) -> list[Module]:
    """Group consecutive depth levels into modules whose boundaries few bytes cross.

    A level's *share* is the mean of its share of the model's FLOPs and of its weight bytes (only
    the FLOPs when the model has no weights, and the other way round), so memory-bound and
    compute-bound parts are both balanced. Scanning the levels in order, a new module starts
    before level ``d``

    - when the current module's share has reached ``1 / target_modules``, or
    - when it has reached half of that and the bytes crossing the depth cut before ``d``
      (:func:`depth_cut_bytes`) are a local minimum (fewer than at the cut before ``d - 1``, no
      more than at the cut before ``d + 1``: a flat stretch counts once, at its start); the
      half-share guard keeps local minima from making tiny modules.

    A last module lighter than half the target joins the one before it. This gives between
    about ``target_modules`` and ``2 * target_modules`` modules. With
    ``max_modules``, the adjacent pair with the smallest combined share is merged until at most
    that many remain.

    Parameters
    ----------
    graph : OpGraph
        The op graph.
    target_modules : int
        Wanted number of modules (>= 1).
    max_modules : int, optional
        Hard upper bound on the number of modules (>= 1).

    Returns
    -------
    list[Module]
        In dependency order; every op is in exactly one module. Empty for an empty graph.
    """
    if target_modules < 1:
        raise ValueError(f"target_modules must be >= 1, found {target_modules}; pass e.g. 8")
    if max_modules is not None and max_modules < 1:
        raise ValueError(f"max_modules must be >= 1 or None, found {max_modules}")
    if not graph.ops:
        return []
    depth = op_depth(graph)
    levels = max(depth) + 1
    share = _level_shares(graph, depth, levels)
    cut = depth_cut_bytes(graph, depth)
    target = 1.0 / target_modules
    starts, acc = [0], 0.0
    for d in range(1, levels):
        acc += share[d - 1]
        before = cut[d - 1] if d > 1 else math.inf
        after = cut[d + 1] if d + 1 < levels else math.inf
        local_min = cut[d] < before and cut[d] <= after  # a plateau counts at its start
        if acc >= target * (1 - 1e-9) or (acc >= target / 2 and local_min):
            starts.append(d)
            acc = 0.0
    if len(starts) > 1 and acc + share[-1] < target / 2:
        starts.pop()  # a light tail joins the last module instead of taking a cluster alone
    while max_modules is not None and len(starts) > max_modules:
        bounds = [*starts, levels]
        sizes = [sum(share[lo:hi]) for lo, hi in itertools.pairwise(bounds)]
        pair = min(range(len(sizes) - 1), key=lambda i: (sizes[i] + sizes[i + 1], i))
        del starts[pair + 1]
    bounds = [*starts, levels]
    members: list[list[int]] = [[] for _ in starts]
    module_of_level = []
    for index, (lo, hi) in enumerate(itertools.pairwise(bounds)):
        module_of_level.extend([index] * (hi - lo))
    for op in graph.ops:
        members[module_of_level[depth[op.op_id]]].append(op.op_id)
    return [
        _module(graph, depth, index, ops, (bounds[index], bounds[index + 1] - 1))
        for index, ops in enumerate(members)
    ]


def _level_shares(graph: OpGraph, depth: list[int], levels: int) -> list[float]:
    flops, weights = [0.0] * levels, [0.0] * levels
    for op in graph.ops:
        flops[depth[op.op_id]] += op.flops
        weights[depth[op.op_id]] += op.weight_bytes
    parts = [
        [value / sum(column) for value in column] for column in (flops, weights) if sum(column) > 0
    ]
    if not parts:
        return [1.0 / levels] * levels
    return [sum(values) / len(parts) for values in zip(*parts, strict=True)]


def _module(
    graph: OpGraph, depth: list[int], index: int, ops: list[int], depth_range: tuple[int, int]
) -> Module:
    sub = graph.graph.subgraph(ops)
    groups = sorted(tuple(sorted(c)) for c in nx.weakly_connected_components(sub))
    width: dict[int, int] = {}
    for v in ops:
        if graph.ops[v].is_compute:
            width[depth[v]] = width.get(depth[v], 0) + 1
    compute = [graph.ops[v] for v in ops if graph.ops[v].is_compute]
    return Module(
        index=index,
        ops=tuple(sorted(ops)),
        depth_range=depth_range,
        flops=sum(op.flops for op in compute),
        weight_bytes=sum(op.weight_bytes for op in compute),
        parallel_groups=tuple(groups),
        complexity=Complexity(len(groups), max(width.values(), default=0)),
        compute_ops=len(compute),
    )


def resource_bounds(
    modules: list[Module], num_clusters: int, sram_bytes: float | None = None
) -> list[int]:
    """How many clusters each module may take: its share of the cost, between 1 and its ops.

    A module's demand is ``num_clusters`` times the mean of its FLOP share and its weight share
    (weights count only when ``sram_bytes`` is given and the model's weights exceed one cluster's
    SRAM, i.e. when where the weights go matters). Clusters are handed out one at a time to the
    module with the largest demand per cluster already given (D'Hondt apportionment, ties to the
    earlier module), starting from 1 each, never beyond the module's compute ops (a cluster
    without an op is wasted; this is at most ``max_width`` times the module's levels) and never
    beyond ``num_clusters`` in total. The sum exceeds ``num_clusters`` only when there are more
    modules than clusters (each still needs one).

    Parameters
    ----------
    modules : list[Module]
        From :func:`dependency_modules`.
    num_clusters : int
        Clusters of the system (>= 1).
    sram_bytes : float, optional
        SRAM of one cluster, to weigh weight bytes.

    Returns
    -------
    list[int]
        Clusters per module, each >= 1.
    """
    if num_clusters < 1:
        raise ValueError(f"num_clusters must be >= 1, found {num_clusters}")
    if not modules:
        return []
    flops = sum(m.flops for m in modules)
    weights = sum(m.weight_bytes for m in modules)
    use_weights = sram_bytes is not None and weights > sram_bytes
    parts = []
    if flops > 0:
        parts.append([m.flops / flops for m in modules])
    if use_weights or (flops == 0 and weights > 0):
        parts.append([m.weight_bytes / weights for m in modules])
    if parts:
        share = [sum(values) / len(parts) for values in zip(*parts, strict=True)]
    else:
        share = [1.0 / len(modules)] * len(modules)
    demand = [num_clusters * s for s in share]
    return apportion(demand, [max(1, m.compute_ops) for m in modules], num_clusters)


def apportion(demand: list[float], caps: list[int], seats: int) -> list[int]:
    """``seats`` handed out in proportion to ``demand`` (D'Hondt), between 1 and ``caps[i]``
    each: one at a time to the largest demand per seat already given, ties to the earlier one.
    The total stays below ``seats`` when every cap is reached, and is ``len(demand)`` when
    ``seats`` is smaller (each still gets one)."""
    given = [1] * len(demand)
    while sum(given) < seats:
        open_ = [i for i in range(len(demand)) if given[i] < caps[i]]
        if not open_:
            break
        best = max(open_, key=lambda i: (demand[i] / given[i], -i))
        given[best] += 1
    return given


__all__ = [
    "Complexity",
    "Module",
    "apportion",
    "compute_dependencies",
    "dependency_modules",
    "depth_cut_bytes",
    "op_depth",
    "resource_bounds",
    "serial_groups",
]
