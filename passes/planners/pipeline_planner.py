"""Pipeline planner: contiguous stages over clusters in snake order, optimal bottleneck by DP.

The dynamic programs are in :mod:`~tvm_chiplet.passes.planners.partition`; this module builds
their inputs (cluster orders, DRAM stream rates, streaming variants) and judges the candidates.
"""

from __future__ import annotations

import concurrent.futures
import dataclasses
import hashlib
import itertools
import math
import os
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from tvm_chiplet.passes.planners.base import PlanningProblem
from tvm_chiplet.passes.planners.dram import balance_dram
from tvm_chiplet.passes.planners.evaluate import placement_items, simulate_placement
from tvm_chiplet.passes.planners.partition import min_bottleneck_partition, min_streaming_partition
from tvm_chiplet.passes.planners.placement import OpSplit, Placement, PlanningError
from tvm_chiplet.targets import cost_model
from tvm_chiplet.targets.workload import streamed_bytes


def stream_rates(problem: PlanningProblem, policy: str) -> dict[int, float]:
    """Bytes per cycle each cluster can stream from DRAM in steady state, by DRAM policy.

    ``interleave``: what all controllers push into the cluster alone (cost model). ``nearest``:
    a cluster hosting its controller streams at the controller's full bandwidth; any other
    cluster shares its nearest controller with every cluster that controller serves.
    ``balanced`` (weights placed by :func:`balance_dram`): half of what can enter the cluster
    (its incoming links and the controllers it hosts), the other half left to through traffic.
    """
    system, topology = problem.system, problem.topology
    if policy == "balanced":
        rate = {c.id: sum(d.bandwidth for d in system.drams if d.node == c.id)
                for c in system.clusters}
        for link in system.links:
            rate[link.dst] += link.bandwidth
        return {c: value / 2.0 for c, value in rate.items()}
    probe = 1e9
    rate = {c.id: probe / cost_model.dram_fetch_cycles(probe, c, system, policy)
            for c in system.clusters}
    if policy == "nearest":
        served: dict[int, int] = {}
        for c in system.clusters:
            dram = topology.nearest_dram(c.id).id
            served[dram] = served.get(dram, 0) + 1
        for c in system.clusters:
            dram = topology.nearest_dram(c.id)
            if dram.node != c.id:
                rate[c.id] = min(rate[c.id], dram.bandwidth / served[dram.id])
    return rate


def candidate_orders(problem: PlanningProblem, rate: dict[int, float]) -> list[list[int]]:
    """Cluster orders worth trying for the stages.

    The topology's snake order and its reverse, then snakes over the grid rows (and over the
    columns) taken in increasing order of how fast DRAM can stream into them (``rate``), so
    that the weight-heavy last stages of a network land where DRAM delivers most, and last the
    clusters sorted by that rate alone (the fastest ones may be far apart).
    """
    base = list(problem.topology.cluster_order())
    position = {c: i for i, c in enumerate(base)}
    chiplets = problem.system.chiplets
    where = {c.id: (chiplets[c.chiplet].x, chiplets[c.chiplet].y) for c in problem.system.clusters}
    orders = [base, base[::-1]]
    for axis in (1, 0):  # rows, then columns
        lines: dict[int, list[int]] = {}
        for c in base:
            lines.setdefault(where[c][axis], []).append(c)
        ranked = sorted(lines, key=lambda v: (np.mean([rate[c] for c in lines[v]]), v))
        order = []
        for i, line in enumerate(ranked):
            members = sorted(lines[line], key=lambda c: (where[c][1 - axis], position[c]))
            order += members if i % 2 == 0 else members[::-1]
        orders.append(order)
    # Clusters DRAM reaches fastest last, whether neighbours or not: the last stages carry most
    # of the weights of most networks.
    orders.append(sorted(base, key=lambda c: (rate[c], position[c])))
    unique = []
    for order in orders:
        if order not in unique:
            unique.append(order)
    return unique


@dataclass(frozen=True)
class StreamingVariant:
    """One model of streaming for
    :func:`~tvm_chiplet.passes.planners.partition.min_streaming_partition` runs.

    ``policy``: the DRAM policy whose :func:`stream_rates` the run assumes, scaled by
    ``rate_scale`` (below 1: room left for the activations and loans that share a cluster's
    links); ``exposed``: the share of the shorter of fetch and compute that is not hidden;
    ``lend``: free SRAM holds streamed weights (SRAM loans), and the candidates' weights are
    placed by :func:`~tvm_chiplet.passes.planners.dram.balance_dram` with lending;
    ``max_width``: the widest region it tries (None: the planner's ``max_region``).
    """

    policy: str
    exposed: float = 0.0
    rate_scale: float = 1.0
    lend: bool = False
    max_width: int | None = None


ORDERED_COMBOS = 2
"""(streaming variant, region width) pairs whose candidates also run on the other cluster
orders of :func:`candidate_orders`: those whose candidates on the topology's order simulate
fastest (pairs whose stages there are the same count once), and the lending variant."""

STREAMING_VARIANTS = (
    StreamingVariant("interleave"),
    StreamingVariant("balanced"),
    StreamingVariant("balanced", exposed=0.5),
    StreamingVariant("balanced", rate_scale=0.7, lend=True, max_width=1),
)
"""The streaming DP runs of :class:`PipelinePlanner`. Rates of the ``nearest`` policy never
produced the winner on ResNet-50 or BERT-base (mesh-4x4, simba-6x6), so they are not tried;
the lending variant keeps to one-cluster stages (its regions never won on those cases
either, and every width costs a DP run per cluster order)."""


class PipelinePlanner:
    """Contiguous pipeline stages over clusters taken in the topology's snake order.

    The ops of the reduced ``main`` keep their order; each stage is a run of consecutive ops on
    one cluster, and consecutive stages sit on neighbouring clusters so stage-to-stage traffic
    crosses few hops. The split minimises the bottleneck stage (compute cycles plus the cycles to
    receive the values crossing its input cut), which maximises steady-state throughput. A stage
    whose weights do not fit its cluster's SRAM is costed with weights streamed from DRAM, as
    the simulator will run it.

    When that split leaves weights streaming from DRAM (they overflow the total SRAM, or one
    stage's ops hold more than its cluster's SRAM), streaming dominates: then the planner also
    runs :func:`~tvm_chiplet.passes.planners.partition.min_streaming_partition` (stages of one
    or more clusters balancing compute against DRAM traffic, pipeline fill included) for
    every region width and stream-rate model (:data:`STREAMING_VARIANTS`) on the topology's
    order, then for the :data:`ORDERED_COMBOS` fastest of those on the other cluster orders
    (:func:`candidate_orders`); each candidate is kept as is and with its weights placed in
    DRAM by :func:`~tvm_chiplet.passes.planners.dram.balance_dram`, and the candidate the device
    simulator finds fastest for ``batches`` pipelined inputs wins.

    With ``replicate``, the planner also tries input-level data parallelism: the chiplet grid
    cut into ``R`` congruent tiles (:meth:`~tvm_chiplet.targets.topology.Topology.tilings`),
    a pipeline planned on the first tile for ``ceil(batches / R)`` inputs, and copies of it on
    the other tiles (:attr:`Placement.replicas`; input ``b`` runs on copy ``b mod R``). Fewer
    stages per pipeline mean less activation traffic and a shorter fill, at the price of
    holding the weights ``R`` times, so only tilings whose tile holds all the weights in SRAM
    are tried. The simulator judges these candidates with the others.

    Parameters
    ----------
    max_stages : int, optional
        Use at most this many clusters (default: every cluster of the system).
    batches : int, default 64
        Pipelined inputs the candidates are simulated with.
    search : bool, default True
        Try the streaming candidates; ``False`` keeps the compute DP on the snake order.
    max_region : int, default 4
        Most clusters one stage may span in the streaming candidates; a stage on a region splits
        each of its convolutions / matmuls over all the region's clusters along output channels
        (columns), so each cluster holds a slice of the weights (``1``: one cluster per stage).
    replicate : bool, default True
        Also try copies of a smaller pipeline on congruent tiles of the grid (see above); not
        with ``max_stages`` (which caps the clusters used) or ``clusters``.
    clusters : sequence of int, optional
        Plan on these clusters only, and lend SRAM from these only (default: every cluster),
        in the topology's order.
    other_orders : bool, default True
        The streaming candidates also follow :func:`candidate_orders` besides the topology's
        order; ``False`` keeps to the topology's order (a caller that hands in its own order
        and has tried the others).
    """

    name = "pipeline"

    def __init__(self, max_stages: int | None = None, batches: int = 64,
                 search: bool = True, max_region: int = 4, replicate: bool = True,
                 clusters: Sequence[int] | None = None, other_orders: bool = True) -> None:
        if max_stages is not None and max_stages < 1:
            raise PlanningError(f"max_stages must be >= 1, got {max_stages}")
        if batches < 1:
            raise PlanningError(f"batches must be >= 1, got {batches}")
        if max_region < 1:
            raise PlanningError(f"max_region must be >= 1, got {max_region}")
        if clusters is not None and not clusters:
            raise PlanningError("clusters must name at least one cluster, got none")
        self.max_stages = max_stages
        self.batches = batches
        self.search = search
        self.max_region = max_region
        self.clusters = None if clusters is None else frozenset(clusters)
        self.replicate = replicate and max_stages is None and clusters is None
        self.other_orders = other_orders

    def plan(self, problem: PlanningProblem) -> Placement:
        unknown = sorted((self.clusters or set()) - set(range(problem.system.num_clusters)))
        if unknown:
            raise PlanningError(f"clusters {unknown} are not clusters of {problem.system.name} "
                                f"(it has 0..{problem.system.num_clusters - 1})")
        best = self._plan_pipeline(problem)
        if not self.replicate:
            return best
        candidates = [best, *self._replicated(problem)]
        if len(candidates) == 1:
            return best
        def cycles(cand: Placement) -> float:
            return float(simulate_placement(problem, cand, self.batches).total_cycles)

        # The single pipeline was simulated already when its search ran.
        simulated = [best.notes.get("simulated_cycles") or cycles(best),
                     *map(cycles, candidates[1:])]
        pick = int(np.argmin(simulated))
        notes = {**candidates[pick].notes, "copies": candidates[pick].copies,
                 "copies_tried": [c.copies for c in candidates],
                 "copies_simulated_cycles": simulated}
        return dataclasses.replace(candidates[pick], notes=notes)

    def _replicated(self, problem: PlanningProblem) -> list[Placement]:
        """One placement per number of copies whose tile holds every weight in SRAM."""
        topology, system = problem.topology, problem.system
        weights = problem.graph.total_weight_bytes
        found = []
        for copies in range(2, min(system.num_clusters, self.batches) + 1):
            tilings = topology.tilings(copies)
            if not tilings:
                continue
            tiles = tilings[0]
            if sum(system.clusters[c].sram_bytes for c in tiles[0]) < weights:
                continue
            # The search judges a tile's candidates alone, without the copies that share DRAM
            # with it, so the compute DP's pipeline is a candidate too.
            for search in sorted({False, self.search}):
                base = PipelinePlanner(batches=math.ceil(self.batches / copies), search=search,
                                       max_region=self.max_region, replicate=False,
                                       clusters=tiles[0]).plan(problem)
                replicated = base.copied_onto(tiles)
                if replicated not in found:
                    found.append(replicated)
        return found

    def _plan_pipeline(self, problem: PlanningProblem) -> Placement:
        """The best single pipeline (no copies) over the allowed clusters."""
        order = self._allowed(problem.topology.cluster_order())

        def boundary(order: list[int]) -> np.ndarray:  # receive costs, once per order
            key = ("pipeline boundary", tuple(order))
            if key not in problem.memo:
                problem.memo[key] = self._boundary(problem, order)
            return problem.memo[key]

        starts, bottleneck = self._compute_dp(problem, order, boundary(order))
        best = self._placement(problem, order, starts, bottleneck, "interleave", {})
        if not self.search or not any(streamed_bytes(placement_items(problem, best),
                                                     problem.system)):
            return best

        # The DP's model is rough (regions, fetch/compute overlap): every streaming variant and
        # region width is a candidate on the topology's order, and the best few of them
        # (simulated) also on the other orders.
        widths = sorted({1, min(2, self.max_region), self.max_region})
        combos = [(variant, width) for variant in STREAMING_VARIANTS for width in widths
                  if variant.max_width is None or width <= variant.max_width]
        candidates, cycles = [best], [None]
        found = self._streaming_runs(problem, [(v, w, order) for v, w in combos], boundary)
        for cands in found.values():
            candidates += cands
        self._simulate(problem, candidates, cycles)
        if self.other_orders:
            def fastest(combo):
                return min((cycles[candidates.index(c)] for c in found[combo]),
                           default=math.inf)

            # Variants that solve to the same stages on this order count once.
            ranked, seen = [], set()
            for combo in sorted(combos, key=fastest):
                same = (found[combo][:1] and found[combo][0].op_stage, combo[0].lend,
                        found[combo][:1] and found[combo][0].splits)
                if same not in seen:
                    seen.add(same)
                    ranked.append(combo)
            # Loans depend on which clusters sit next to the streaming stages: the lending
            # variant runs on every order.
            ranked = ranked[:ORDERED_COMBOS] + [combo for combo in ranked[ORDERED_COMBOS:]
                                                if combo[0].lend]
            runs = [(variant, width, self._allowed(other)) for variant, width in ranked
                    for other in candidate_orders(problem, stream_rates(problem, variant.policy))
                    if self._allowed(other) != order]
            for cands in self._streaming_runs(problem, runs, boundary).values():
                candidates += cands
            self._simulate(problem, candidates, cycles)
        pick = int(np.argmin(cycles))
        notes = {**candidates[pick].notes, "candidates": len(candidates),
                 "simulated_cycles": cycles[pick], "compute_dp_cycles": cycles[0]}
        return dataclasses.replace(candidates[pick], notes=notes)

    def _simulate(self, problem: PlanningProblem, candidates: list, cycles: list) -> None:
        """Extend ``cycles`` with the simulated cycles of the ``candidates`` after them and of
        those it holds None for, for the planner's inputs, on the usable cores."""
        cycles += [None] * (len(candidates) - len(cycles))
        todo = [i for i, value in enumerate(cycles) if value is None]
        with concurrent.futures.ThreadPoolExecutor(_usable_cores()) as pool:
            found = list(pool.map(lambda i: float(simulate_placement(
                problem, candidates[i], self.batches).total_cycles), todo))
        for i, value in zip(todo, found, strict=True):
            cycles[i] = value

    def _streaming_runs(self, problem: PlanningProblem, runs, boundary) -> dict:
        """The candidates of streaming DP runs ``(variant, width, order)``: each run's stages,
        as they are and with their weights placed by
        :func:`~tvm_chiplet.passes.planners.dram.balance_dram`, by ``(variant, width)``.

        A run depends on its inputs alone, so runs whose inputs are equal (orders that are
        images of each other on a symmetric grid) are solved once and their stages mapped to
        each order, and another call on the problem (another planner's) reuses them."""
        keyed = []
        for variant, width, order in runs:
            rate = stream_rates(problem, variant.policy)
            inputs = self._streaming_inputs(problem, order, boundary(order), rate, variant)
            digest = hashlib.sha1(repr((variant, width, self.max_stages, self.batches)).encode())
            for array in inputs:
                digest.update(np.ascontiguousarray(array).tobytes())
            keyed.append((("pipeline streaming", digest.hexdigest()), variant, width, inputs))
        todo = {key: (variant, width, inputs) for key, variant, width, inputs in keyed
                if key not in problem.memo}
        # numpy releases the GIL in the DP's array work: the runs share the cores.
        with concurrent.futures.ThreadPoolExecutor(_usable_cores()) as pool:
            solved = list(pool.map(lambda run: self._solve(problem, *run), todo.values()))
        problem.memo.update(zip(todo, solved, strict=True))
        placed = [(*key, tuple(order), self.clusters)
                  for (key, *_), (_, _, order) in zip(keyed, runs, strict=True)]
        todo = {}
        for where, (key, variant, *_), (_, _, order) in zip(placed, keyed, runs, strict=True):
            if where not in problem.memo:
                todo[where] = (self._stages_placement(problem, order, problem.memo[key], variant),
                               variant.lend)

        def balanced(placement, lend):  # the LP solver runs outside Python: threads overlap
            return [] if placement is None else [
                placement, balance_dram(problem, placement, lend=lend, lenders=self.clusters)]

        with concurrent.futures.ThreadPoolExecutor(_usable_cores()) as pool:
            problem.memo.update(zip(todo, pool.map(lambda run: balanced(*run), todo.values()),
                                    strict=True))
        found: dict = {}
        for where, (_, variant, width, _) in zip(placed, keyed, strict=True):
            found.setdefault((variant, width), []).extend(problem.memo[where])
        return found

    def _allowed(self, order: Sequence[int]) -> list[int]:
        return [c for c in order if self.clusters is None or c in self.clusters]

    def _placement(self, problem, order, starts, objective, policy, notes) -> Placement:
        n = len(problem.graph.ops)
        bounds = [*starts, n]
        op_stage = [0] * n
        for stage, (lo, hi) in enumerate(itertools.pairwise(bounds)):
            op_stage[lo:hi] = [stage] * (hi - lo)
        stage_clusters = tuple(order[: len(starts)])
        return Placement(
            strategy=self.name,
            op_cluster=tuple(stage_clusters[s] for s in op_stage),
            op_stage=tuple(op_stage),
            stage_clusters=stage_clusters,
            objective_cycles=objective,
            notes=notes,
            dram_policy=policy,
        )

    def _boundary(self, problem: PlanningProblem, order: list[int]) -> np.ndarray:
        return problem.receive_cycles(order, problem.graph.cut_bytes())

    def _compute_dp(self, problem: PlanningProblem, order: list[int],
                    boundary: np.ndarray) -> tuple[list[int], float]:
        """Stage starts minimising the bottleneck stage (weights streamed if they overflow)."""
        bottleneck, starts = min_bottleneck_partition(
            problem.op_cycles[:, order], boundary, self.max_stages,
            problem.op_cycles_streamed[:, order], *_memory(problem, order),
        )
        return starts, bottleneck

    def _streaming_inputs(self, problem, order, boundary, rate, variant: StreamingVariant):
        """The arrays a streaming DP run over ``order`` depends on."""
        weights, capacity = _memory(problem, order)
        return (problem.op_cycles[:, order], boundary, weights, capacity,
                np.array([rate[c] * variant.rate_scale for c in order]))

    def _solve(self, problem, variant: StreamingVariant, width: int, inputs):
        """One streaming DP run: ``(objective, stages, streamed)``, stages None if it fails."""
        graph = problem.graph
        stage_costs, boundary, weights, capacity, rate = inputs
        dram = sum(d.bandwidth for d in problem.system.drams)
        spread_rate = 2.0 * min(link.bandwidth for link in problem.system.links) if (
            problem.system.links) else 1.0
        objective, stages, streamed = min_streaming_partition(
            stage_costs, boundary, weights, capacity, rate, dram, self.max_stages,
            split_max=_split_max(problem),
            spread_bytes=np.array([op.input_bytes for op in graph.ops], dtype=float),
            spread_rate=spread_rate, max_width=width, batches=self.batches,
            exposed=variant.exposed, lend=variant.lend,
        )
        return objective, stages if np.isfinite(objective) else None, streamed

    def _stages_placement(self, problem, order, solved, variant: StreamingVariant
                          ) -> Placement | None:
        """The placement of a streaming DP run's stages over ``order`` (None if it failed)."""
        objective, stages, streamed = solved
        if stages is None:
            return None
        n = len(problem.graph.ops)
        dims = [_region_dim(problem.split_dims.get(op.op_id, {})) for op in problem.graph.ops]
        op_cluster, op_stage, splits = [0] * n, [0] * n, []
        for index, stage in enumerate(stages):
            region = tuple(order[stage.first:stage.first + stage.width])
            for op_id in range(stage.lo, stage.hi):
                op_cluster[op_id], op_stage[op_id] = region[0], index
                if stage.width > 1 and dims[op_id][1] >= stage.width:
                    splits.append(OpSplit(op_id, dims[op_id][0], region))
        return Placement(
            strategy=self.name,
            op_cluster=tuple(op_cluster),
            op_stage=tuple(op_stage),
            stage_clusters=tuple(order[st.first] for st in stages),
            objective_cycles=objective,
            notes={"dram_bytes_per_batch": streamed,
                   "regions": [st.width for st in stages if st.width > 1]},
            splits=tuple(splits),
            dram_policy=variant.policy,
        )


def _split_max(problem: PlanningProblem) -> np.ndarray:
    """How many parts a region may split each op into (1: not along a region dimension)."""
    return np.array([_region_dim(problem.split_dims.get(op.op_id, {}))[1]
                     for op in problem.graph.ops], dtype=np.int64)


def _usable_cores() -> int:
    """Cores this process may run on (its CPU affinity where the OS has one)."""
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0))
    return os.cpu_count() or 1


def _memory(problem: PlanningProblem, order: list[int]) -> tuple[np.ndarray, np.ndarray]:
    """Weight bytes of every op, and SRAM bytes of every cluster of ``order``."""
    weights = np.array([op.weight_bytes for op in problem.graph.ops], dtype=np.float64)
    capacity = np.array([problem.system.clusters[c].sram_bytes for c in order], dtype=float)
    return weights, capacity


REGION_DIMS = ("out_channels", "cols")
"""Dimensions a region splits its ops along: each part holds a slice of the weights."""


def _region_dim(dims: dict[str, int]) -> tuple[str | None, int]:
    """The dimension a region stage splits an op along, and how many parts it allows."""
    for dim in REGION_DIMS:
        if dims.get(dim, 0) >= 2:
            return dim, dims[dim]
    return None, 1
