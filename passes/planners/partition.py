"""Partition dynamic programs: ops in order cut into contiguous stages on resources in order.

Pure functions on numpy arrays (no graphs, no systems): :func:`min_bottleneck_partition`
minimises the most expensive stage; :func:`min_streaming_partition` minimises the time of many
pipelined inputs when weights stream from DRAM, with stages that may span regions of resources.
The pipeline and modular planners build their arrays and call these.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from tvm_chiplet.targets.workload import overflow_bytes


def min_bottleneck_partition(
    stage_costs: np.ndarray,
    boundary_costs: np.ndarray,
    max_stages: int | None = None,
    streamed_costs: np.ndarray | None = None,
    weight_bytes: np.ndarray | None = None,
    capacity: np.ndarray | None = None,
) -> tuple[float, list[int]]:
    """Split ops ``0..n-1`` into contiguous stages minimising the most expensive stage.

    Stage ``k`` runs on the ``k``-th resource; its cost is the sum of its ops' costs on that
    resource plus ``boundary_costs[k, i]``, the cost of receiving the values that cross the cut
    before op ``i`` (zero for the first stage). Exact dynamic program, ``O(K n^2)`` arithmetic in
    ``O(K n)`` numpy steps.

    Parameters
    ----------
    stage_costs : ndarray, shape (n, K)
        ``stage_costs[i, k]``: cost of op ``i`` on resource ``k``.
    boundary_costs : ndarray, shape (K, n + 1)
        Receive cost of stage ``k`` when it starts at op ``i`` (row 0 is ignored: the first
        stage receives only model inputs).
    max_stages : int, optional
        Use at most this many of the ``K`` resources (default all).
    streamed_costs, weight_bytes, capacity : ndarray, optional
        Memory-aware costs: a stage whose ops' ``weight_bytes`` (shape ``(n,)``) exceed the
        resource's ``capacity[k]`` pays ``streamed_costs`` (shape ``(n, K)``, weights streamed
        from DRAM) instead of ``stage_costs``.

    Returns
    -------
    (bottleneck, starts)
        The optimal bottleneck and the first op of each stage (``starts[0] == 0``). Ties go to
        fewer stages, then to earlier cuts.
    """
    n, num_resources = stage_costs.shape
    if n == 0:
        return 0.0, [0]
    k_max = min(num_resources, n, max_stages or num_resources)
    def prefix_sums(costs: np.ndarray) -> np.ndarray:
        return np.vstack([np.zeros(num_resources), np.cumsum(costs, axis=0)])

    prefix = prefix_sums(stage_costs)
    memory_aware = streamed_costs is not None
    if memory_aware:
        streamed = prefix_sums(streamed_costs)
        weights = np.concatenate([[0.0], np.cumsum(weight_bytes)])

    def stage_cost(k: int, starts: np.ndarray, j: int) -> np.ndarray:
        cost = prefix[j, k] - prefix[starts, k]
        if memory_aware:
            spills = weights[j] - weights[starts] > capacity[k]
            cost = np.where(spills, streamed[j, k] - streamed[starts, k], cost)
        return cost + boundary_costs[k, starts] if k > 0 else cost

    inf = np.inf
    # best[k][j]: optimal bottleneck of ops 0..j-1 in exactly k+1 stages;
    # arg[k][j]: first op of stage k in that optimum.
    best = np.full((k_max, n + 1), inf)
    arg = np.zeros((k_max, n + 1), dtype=np.int64)
    best[0, 1:] = [stage_cost(0, np.array([0]), j)[0] for j in range(1, n + 1)]
    for k in range(1, k_max):
        for j in range(k + 1, n + 1):
            starts = np.arange(k, j)
            stage = stage_cost(k, starts, j)
            candidates = np.maximum(best[k - 1, starts], stage)
            pick = int(np.argmin(candidates))
            best[k, j], arg[k, j] = candidates[pick], starts[pick]
    stages = int(np.argmin(best[:, n]))
    bottleneck = float(best[stages, n])
    cuts, j = [], n
    for k in range(stages, 0, -1):
        j = int(arg[k, j])
        cuts.append(j)
    return bottleneck, [0, *cuts[::-1]]


@dataclass(frozen=True)
class StreamingStage:
    """A stage found by :func:`min_streaming_partition`: ops ``lo..hi-1`` on the ``width``
    resources starting at position ``first``, its splittable ops split over all of them."""

    lo: int
    hi: int
    first: int
    width: int


def min_streaming_partition(
    stage_costs: np.ndarray,
    boundary_costs: np.ndarray,
    weight_bytes: np.ndarray,
    capacity: np.ndarray,
    stream_rate: np.ndarray,
    dram_bandwidth: float,
    max_stages: int | None = None,
    split_max: np.ndarray | None = None,
    spread_bytes: np.ndarray | None = None,
    spread_rate: float = 1.0,
    max_width: int = 1,
    batches: int = 64,
    exposed: float = 0.0,
    grid: int = 24,
    lend: bool = False,
) -> tuple[float, list[StreamingStage], float]:
    """Contiguous stages, each on a region of resources, minimising the steady batch time when
    weights stream from DRAM.

    Stage ops ``lo..hi-1`` run on ``w`` consecutive resources (a region, ``w <= max_width``)
    starting at ``k``: an op with ``split_max >= w`` is split over the whole region (each
    resource gets ``1/w`` of its compute and weights, and its home -- the first resource --
    sends its input to the others: ``(w - 1) * spread_bytes / spread_rate`` cycles), any other
    op runs on the home. A resource holding weights ``W`` streams ``0`` bytes per batch if
    ``W <= capacity``, else ``W - resident_fraction * capacity``. A stage computes for
    ``c = max(home compute + spreading, boundary)`` (receiving the next input overlaps
    computing) and fetches for ``f = streamed per resource / stream_rate``; it takes
    ``t = max(c, f) + exposed * min(c, f)`` per batch (``exposed``: the share of the shorter
    one that op-by-op prefetching fails to hide), and all stages share the DRAM, so
    ``batches`` pipelined inputs take

        ``sum_k t_k + (batches - 1) * max(max_k t_k, total streamed / dram_bandwidth)``

    (the first input crosses every stage, then one leaves per period). With ``lend``, a
    resource whose weights fit leaves ``capacity - W`` of SRAM free, which holds streamed weights
    of other stages (SRAM loans, :func:`~tvm_chiplet.passes.planners.dram.balance_dram`): that
    room counts against the total streamed from DRAM (never below zero), while the borrowing
    stages still receive all their streamed bytes. For each target ``T``
    of a geometric grid, a min-plus dynamic program over (ops placed, resources used) finds the
    partition minimising ``sum_k (t_k + (batches - 1) * streamed_k / dram_bandwidth)`` whose
    stages all take ``t <= T``; the best objective over the grid wins.

    Returns
    -------
    (objective, stages, streamed)
        The time of ``batches`` inputs, the stages in order, and the bytes streamed per batch.
    """
    n, num_resources = stage_costs.shape
    if n == 0:
        return 0.0, [], 0.0
    k_max = min(num_resources, max_stages or num_resources)
    split_max = np.ones(n, dtype=np.int64) if split_max is None else np.asarray(split_max)
    spread_bytes = np.zeros(n) if spread_bytes is None else np.asarray(spread_bytes, float)
    # Stage matrices are indexed [hi, lo] (ops lo..hi-1, hi > lo): the DP reduces over lo.
    empty = np.triu(np.ones((n + 1, n + 1), dtype=bool))

    def spans(values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Prefix sums of ``values`` as a column (by a stage's end, ``hi``) and as a row (by
        its start, ``lo``): their difference is every stage's sum."""
        summed = np.concatenate([[0.0], np.cumsum(values)])
        return summed[:, None], summed[None, :]

    options = {}  # (first, width) -> (time, streamed) as (n + 1, n + 1) matrices over [hi, lo]
    for width in range(1, max_width + 1):
        split = split_max >= width if width > 1 else np.zeros(n, dtype=bool)
        if width > 1 and not split.any():
            continue
        (w_split, w_split_lo), (w_home, w_home_lo) = spans(weight_bytes * split), spans(
            weight_bytes * ~split)
        spread, spread_lo = (v * (width - 1) / spread_rate
                             for v in spans(spread_bytes * split))
        part = (w_split - w_split_lo) / width
        home = part + w_home - w_home_lo
        # Resources alike (same op costs, receive costs, SRAM, stream rate: most of a regular
        # grid) have the same stages: built once.
        built: dict[tuple, tuple[np.ndarray, np.ndarray]] = {}
        for k in range(k_max - width + 1):
            rate = min(stream_rate[k:k + width])
            alike = (stage_costs[:, k].tobytes(), k > 0 and boundary_costs[k].tobytes(),
                     capacity[k], rate)
            if alike in built:
                options[k, width] = built[alike]
                continue
            cost_split, cost_split_lo = (v / width for v in spans(stage_costs[:, k] * split))
            cost_home, cost_home_lo = spans(stage_costs[:, k] * ~split)
            # Receiving the next input overlaps computing the current one.
            compute = np.maximum(
                cost_home - cost_home_lo + cost_split - cost_split_lo
                + spread - spread_lo, boundary_costs[k][None, :] if k > 0 else 0.0)
            on_home = overflow_bytes(home, capacity[k])
            on_other = overflow_bytes(part, capacity[k])
            fetch = np.maximum(on_home, on_other) / rate
            time = np.maximum(compute, fetch) + exposed * np.minimum(compute, fetch)
            time[empty] = np.inf
            if width > 1:
                time[~(cost_split > cost_split_lo)] = np.inf
            if lend:  # free SRAM (negative) offsets what other stages stream from DRAM
                on_home = np.where(home > capacity[k], on_home, home - capacity[k])
                on_other = np.where(part > capacity[k], on_other, part - capacity[k])
            options[k, width] = built[alike] = (time, on_home + (width - 1) * on_other)
    every_op = stage_costs[:, :k_max].min(axis=1)
    t_lo = max(float(every_op.max()) / max_width, float(every_op.sum()) / k_max, 1.0)
    t_hi = max(float(options[0, 1][0][n, 0]), t_lo)  # (0, n): everything on the first resource
    best = (np.inf, [], 0.0)
    for found in _least_streamed(options, n, k_max, np.geomspace(t_lo, t_hi, grid),
                                 (batches - 1) / dram_bandwidth):
        if found is None:
            continue
        stages, streamed, slowest, latency = found
        streamed = max(streamed, 0.0)
        objective = latency + (batches - 1) * max(slowest, streamed / dram_bandwidth)
        if objective < best[0] - 1e-9 * max(1.0, objective):
            best = (objective, stages, streamed)
    return best


_CACHED = 2**17
"""Candidate values the streaming DP handles per numpy call (1 MB: one core's L2 cache)."""


def _least_streamed(options, n, k_max, targets, dram_weight):
    """Min-plus DP over (resources used, ops placed) of stage time plus ``dram_weight`` times
    its streamed bytes, every stage within the target; all ``targets`` at once (axis 0 of the
    tables). ``options[first, width]``: the (time, streamed) matrices of the stages on that
    region.

    Returns, per target, ``(stages, streamed, slowest, latency)`` or None if no partition has
    every stage within it.
    """
    targets = np.asarray(targets, dtype=float)
    shape = (k_max + 1, len(targets), n + 1)
    g = np.full(shape, np.inf)
    g[0, :, 0] = 0.0
    # Where the best partition of (used, target, ops placed) comes from: its last stage.
    from_first, from_width, from_op = (np.zeros(shape, dtype=np.int64) for _ in range(3))
    ending: dict[int, list] = {}
    for (first, width), matrices in options.items():
        ending.setdefault(first + width, []).append((first, width, matrices))
    within = targets[:, None, None]
    for used in range(1, k_max + 1):
        for first, width, (time, streams) in ending.get(used, []):
            # Only the ops-placed counts some partition reaches with ``first`` resources can
            # start the stage, and a stage ends after its start: the rest is infinite.
            finite = np.isfinite(g[first])
            reached = np.flatnonzero(finite.any(axis=0))
            if not len(reached):
                continue
            live = np.flatnonzero(finite.any(axis=1))
            t0, t1 = int(live[0]), int(live[-1]) + 1
            lo, hi = int(reached[0]), int(reached[-1]) + 1
            start = g[first][t0:t1, lo:hi]
            block = slice(lo + 1, n + 1), slice(lo, hi)  # [stage end, stage start]
            stage_time = time[block]
            cost = stage_time + dram_weight * streams[block]
            arg = np.empty((t1 - t0, n - lo), dtype=np.int64)
            value = np.empty((t1 - t0, n - lo))
            # A few targets at a time: the (targets, ends, starts) candidates stay in cache.
            step = max(1, _CACHED // max(1, cost.size))
            for c0 in range(0, t1 - t0, step):
                c1 = min(c0 + step, t1 - t0)
                candidates = start[c0:c1, None, :] + np.where(
                    stage_time <= within[t0 + c0:t0 + c1], cost, np.inf)
                arg[c0:c1] = found = np.argmin(candidates, axis=2)
                value[c0:c1] = np.take_along_axis(candidates, found[:, :, None], axis=2)[:, :, 0]
            target = g[used][t0:t1, block[0]]
            better = value < target
            target[better] = value[better]
            from_first[used][t0:t1, block[0]][better] = first
            from_width[used][t0:t1, block[0]][better] = width
            from_op[used][t0:t1, block[0]][better] = arg[better] + lo
    results = []
    for t in range(len(targets)):
        totals = g[1:, t, n]
        if not np.isfinite(totals.min()):
            results.append(None)
            continue
        used = int(np.argmin(totals)) + 1
        stages, j = [], n
        slowest, latency, streamed = 0.0, 0.0, 0.0
        while j > 0:
            first, width, i = (int(a[used, t, j]) for a in (from_first, from_width, from_op))
            stages.append(StreamingStage(i, j, first, width))
            time, streams = options[first, width]
            slowest = max(slowest, float(time[j, i]))
            latency += float(time[j, i])
            streamed += float(streams[j, i])
            used, j = first, i
        results.append((stages[::-1], streamed, slowest, latency))
    return results


__all__ = ["StreamingStage", "min_bottleneck_partition", "min_streaming_partition"]
