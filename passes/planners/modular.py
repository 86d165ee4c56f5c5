"""Modular planner: dependency modules on runs of clusters, refined by a local search.

The graph is cut into dependency modules
(:mod:`tvm_chiplet.passes.analysis.dependency_modules`); each module takes a contiguous run of
clusters in the topology's snake order. A deterministic local search then moves ops, chains and
module boundaries to lower an estimate of the batch time that counts compute, SRAM overflow,
link congestion and DRAM load, and the device simulator judges the candidates. See
:class:`ModularPlanner`. No TVM here.
"""

from __future__ import annotations

import dataclasses
import itertools
import math
import time
from dataclasses import dataclass

import networkx as nx
import numpy as np

from tvm_chiplet.passes.analysis.dependency_modules import (
    apportion,
    compute_dependencies,
    dependency_modules,
    op_depth,
    resource_bounds,
    serial_groups,
)
from tvm_chiplet.passes.planners.base import PlanningProblem
from tvm_chiplet.passes.planners.dram import balance_dram
from tvm_chiplet.passes.planners.evaluate import simulate_placement
from tvm_chiplet.passes.planners.partition import min_bottleneck_partition
from tvm_chiplet.passes.planners.placement import Placement, PlanningError
from tvm_chiplet.targets.workload import controller_shares, overflow_bytes

_REL_TOL = 1e-12


@dataclass(frozen=True)
class _Score:
    """The estimator's verdict on one assignment of compute ops to clusters."""

    objective: float  # predicted cycles per batch (primary)
    spread: float  # sum of squared resource loads (tie-break)
    steady: float
    makespan: float
    bottleneck: tuple  # ("cluster", c, part) | ("link", l) | ("dram",)
    cluster_time: np.ndarray
    compute: np.ndarray
    fetch: np.ndarray
    streamed: np.ndarray
    weights: np.ndarray
    link_load: np.ndarray

    def better_than(self, other: _Score) -> bool:
        slack = _REL_TOL * max(1.0, abs(other.objective))
        if self.objective < other.objective - slack:
            return True
        return self.objective <= other.objective + slack and self.spread < other.spread * (
            1 - _REL_TOL
        )


class _BatchTimeEstimator:
    """Estimated cycles per batch of an assignment of the compute ops to clusters (see
    :class:`ModularPlanner`); the local search's objective, the simulator judges its results."""

    def __init__(self, problem: PlanningProblem, batches: int, policy: str) -> None:
        graph, system, topology = problem.graph, problem.system, problem.topology
        self.batches = batches
        self.ops = [op.op_id for op in graph.ops if op.is_compute]
        pos = {op: i for i, op in enumerate(self.ops)}
        n, c = len(self.ops), system.num_clusters
        self.num_clusters = c
        self.cycles = problem.op_cycles[self.ops]
        self.weights = np.array([graph.ops[o].weight_bytes for o in self.ops], dtype=np.float64)
        self.sram = np.array([cl.sram_bytes for cl in system.clusters], dtype=np.float64)
        deps = [(pos[u], pos[v], b) for u, v, b in compute_dependencies(graph)]
        self.dep_src = np.array([d[0] for d in deps], dtype=np.int64)
        self.dep_dst = np.array([d[1] for d in deps], dtype=np.int64)
        self.dep_bytes = np.array([d[2] for d in deps], dtype=np.float64)
        self.preds: list[list[tuple[int, float]]] = [[] for _ in range(n)]
        self.succs: list[list[int]] = [[] for _ in range(n)]
        for u, v, b in deps:
            if u >= v:
                raise PlanningError(
                    f"op {self.ops[v]} reads op {self.ops[u]}, which comes after it; expected "
                    "ops in binding order (a topological order), as extract_op_graph gives"
                )
            self.preds[v].append((u, float(b)))
            self.succs[u].append(v)
        self.topology = topology
        self.link_inv_bw = np.array([1.0 / link.bandwidth for link in system.links])
        self._pairs: dict[int, tuple[float, float, np.ndarray]] = {}
        links = system.links
        # Streamed weights: every controller sends its share of a fetch over its route.
        self.policy = policy
        self.fetch_inv = np.zeros((c, len(links)))
        self.fetch_rate_inv = np.zeros(c)
        drams = system.drams
        self.dram_share = np.zeros((c, len(drams)))
        self.dram_bw = np.array([d.bandwidth for d in drams], dtype=np.float64)
        for cl in range(c):
            for dram_id, share in controller_shares(system, topology, cl, policy):
                dram = drams[dram_id]
                route = topology.route(dram.node, cl)
                narrowest = min([dram.bandwidth, *(links[i].bandwidth for i in route)])
                self.fetch_rate_inv[cl] = max(self.fetch_rate_inv[cl], share / narrowest)
                self.dram_share[cl, dram_id] += share
                for i in route:
                    self.fetch_inv[cl, i] += share / links[i].bandwidth

    def pair(self, src: int, dst: int) -> tuple[float, float, np.ndarray]:
        """``(latency, 1 / narrowest bandwidth, link ids)`` of the route ``src -> dst``."""
        key = src * self.num_clusters + dst
        if key not in self._pairs:
            route = np.array(self.topology.route(src, dst), dtype=np.int64)
            latency = float(sum(self.topology.system.links[i].latency for i in route))
            inv_bw = float(self.link_inv_bw[route].max()) if len(route) else 0.0
            self._pairs[key] = (latency, inv_bw, route)
        return self._pairs[key]

    def data_load(self, assign: np.ndarray) -> np.ndarray:
        """Cycles every link spends per batch on the bytes of cut dependencies."""
        c = self.num_clusters
        pair_bytes = np.bincount(
            assign[self.dep_src] * c + assign[self.dep_dst], self.dep_bytes, c * c
        )
        load = np.zeros(len(self.link_inv_bw))
        for key in np.flatnonzero(pair_bytes):
            src, dst = divmod(int(key), c)
            if src != dst:
                route = self.pair(src, dst)[2]
                load[route] += pair_bytes[key] * self.link_inv_bw[route]
        return load

    def score(self, assign: np.ndarray) -> _Score:
        c = self.num_clusters
        own = self.cycles[np.arange(len(assign)), assign]
        compute = np.bincount(assign, own, c)
        weights = np.bincount(assign, self.weights, c)
        streamed = overflow_bytes(weights, self.sram)
        link_load = self.data_load(assign) + streamed @ self.fetch_inv
        dram_load = (streamed @ self.dram_share) / self.dram_bw
        dram = float(dram_load.max(initial=0.0))
        fetch = streamed * self.fetch_rate_inv
        # Every streamed item streams the same fraction of its weights; its fetch overlaps the
        # previous item's compute (double buffer), so each item takes the longer of the two.
        per_byte = np.divide(fetch, weights, out=np.zeros(c), where=weights > 0)
        fetch_each = self.weights * per_byte[assign]
        busy = np.bincount(assign, np.maximum(own, fetch_each), c)
        cost = np.maximum(own, fetch_each).tolist()
        cl = assign.tolist()
        makespan, round_trips = self._longest_paths(cl, cost)
        cluster_time = busy
        candidates = [
            (float(cluster_time.max(initial=0.0)), "cluster"),
            (float(link_load.max(initial=0.0)), "link"),
            (dram, "dram"),
        ]
        steady, kind = max(candidates, key=lambda t: t[0])
        if kind == "cluster":
            worst = int(np.argmax(cluster_time))
            part = "fetch" if fetch[worst] > compute[worst] else "compute"
            bottleneck: tuple = ("cluster", worst, part)
        elif kind == "link":
            bottleneck = ("link", int(np.argmax(link_load)))
        else:
            bottleneck = ("dram",)
        total = makespan + (self.batches - 1) * steady
        if round_trips:
            total = math.inf
        spread = float(np.square(cluster_time).sum() + np.square(link_load).sum() + dram**2)
        return _Score(total / self.batches, spread, steady, makespan, bottleneck, cluster_time,
                      compute, fetch, streamed, weights, link_load)

    def _longest_paths(self, cl: list[int], cost: list[float]) -> tuple[float, set[int]]:
        """One batch's makespan (data and same-cluster order) and the clusters it re-enters."""
        n = len(cl)
        finish = [0.0] * n
        reach = [0] * n
        last: dict[int, int] = {}
        round_trips: set[int] = set()
        for i in range(n):
            c = cl[i]
            start, mask = 0.0, 1 << c
            for p, nbytes in self.preds[i]:
                q = cl[p]
                t = finish[p]
                if q != c:
                    latency, inv_bw, _ = self.pair(q, c)
                    t += latency + nbytes * inv_bw
                    if (reach[p] >> c) & 1:
                        round_trips.add(c)
                start = max(start, t)
                mask |= reach[p]
            j = last.get(c)
            if j is not None:
                start = max(start, finish[j])
                mask |= reach[j]
            last[c] = i
            finish[i] = start + cost[i]
            reach[i] = mask
        return max(finish, default=0.0), round_trips


class _Search:
    """Deterministic first-improvement local search over assignments (see ModularPlanner)."""

    def __init__(self, problem: PlanningProblem, estimator: _BatchTimeEstimator,
                 module: np.ndarray, depth: list[int], seed: int) -> None:
        self.estimator = estimator
        self.rng = np.random.default_rng(seed)
        self.depth = np.array(depth, dtype=np.int64)[estimator.ops]
        self.num_clusters = estimator.num_clusters
        self.neighbours = [
            sorted(problem.topology.graph.successors(c)) for c in range(self.num_clusters)
        ]
        pos = {op: i for i, op in enumerate(estimator.ops)}
        self.groups = [
            np.array([pos[o] for o in group if o in pos], dtype=np.int64)
            for group in serial_groups(problem.graph)
        ]
        self.groups = [g for g in self.groups if len(g)]
        self.group_of = np.zeros(len(estimator.ops), dtype=np.int64)
        for index, group in enumerate(self.groups):
            self.group_of[group] = index
        self.module = module
        self.num_modules = int(module.max()) + 1

    def run(self, assign: np.ndarray, iterations: int, deadline: float
            ) -> tuple[list[tuple[np.ndarray, _Score, np.ndarray]], dict]:
        """Search from ``assign``; returns every accepted state (the first is ``assign``)."""
        best = self.estimator.score(assign)
        trajectory = [(assign, best, self.module)]
        rounds = idle = 0
        while idle < iterations and time.perf_counter() < deadline:
            rounds += 1
            candidate, module = self._propose(assign, best) or (None, None)
            if candidate is None:
                idle += 1
                continue
            score = self.estimator.score(candidate)
            if score.better_than(best):
                assign, best = candidate, score
                if module is not None:
                    self.module = module
                trajectory.append((assign, best, self.module))
                idle = 0
            else:
                idle += 1
        stats = {"rounds": rounds, "accepted": len(trajectory) - 1,
                 "objective_before": trajectory[0][1].objective,
                 "objective_after": best.objective,
                 "stopped": "converged" if idle >= iterations else "time_limit"}
        return trajectory, stats

    # ------------------------------------------------------------------ proposals
    def _propose(self, assign: np.ndarray, score: _Score):
        """One move: ``(new assignment, new module of each op or None)``, or None."""
        draw = self.rng.random()
        if draw < 0.1 and self.num_modules > 1:
            return self._shift_boundary(assign)
        cluster = self._focus(assign, score) if draw < 0.75 else int(self.rng.choice(assign))
        if self.rng.random() < 0.5 and score.streamed[cluster] > 0:
            return self._shed_weights(assign, score, cluster), None
        if self.rng.random() < 0.15:
            return self._swap(assign, cluster), None
        return self._cross(assign, score, cluster), None

    def _focus(self, assign: np.ndarray, score: _Score) -> int:
        """A cluster whose ops or weights feed the current bottleneck."""
        estimator, kind = self.estimator, score.bottleneck[0]
        if kind == "cluster":
            return score.bottleneck[1]
        if kind == "dram":
            return self._pick(np.arange(self.num_clusters), score.streamed)
        link, c = score.bottleneck[1], self.num_clusters
        data = np.array([
            nbytes if link in estimator.pair(int(assign[u]), int(assign[v]))[2] else 0.0
            for u, v, nbytes in zip(estimator.dep_src, estimator.dep_dst, estimator.dep_bytes,
                                    strict=True)
        ])
        fetch = score.streamed * estimator.fetch_inv[:, link]
        if self.rng.random() * (data.sum() + fetch.sum()) < fetch.sum():
            return self._pick(np.arange(c), fetch)
        dep = self._pick(np.arange(len(data)), data)
        ends = (estimator.dep_src[dep], estimator.dep_dst[dep])
        return int(assign[ends[int(self.rng.integers(2))]])

    def _unit(self, op: int, assign: np.ndarray) -> np.ndarray:
        """The op alone, or with the ops of its chain on the same cluster."""
        if self.rng.random() < 0.6:
            return np.array([op])
        chain = self.groups[self.group_of[op]]
        return chain[assign[chain] == assign[op]]

    def _pick(self, items: np.ndarray, weights: np.ndarray | None = None) -> int:
        if weights is not None and weights.sum() > 0:
            return int(self.rng.choice(items, p=weights / weights.sum()))
        return int(self.rng.choice(items))

    def _move(self, assign: np.ndarray, unit: np.ndarray, cluster: int) -> np.ndarray | None:
        if np.all(assign[unit] == cluster):
            return None
        moved = assign.copy()
        moved[unit] = cluster
        return moved

    def _cross(self, assign: np.ndarray, score: _Score, cluster: int) -> np.ndarray | None:
        """Move an op of ``cluster`` that talks to another cluster (or an idle neighbour)
        over there: a stage boundary moves by one op, which keeps the dataflow acyclic."""
        estimator = self.estimator
        mine = assign == cluster
        edges = np.flatnonzero(mine[estimator.dep_src] != mine[estimator.dep_dst])
        idle = [n for n in self.neighbours[cluster] if score.compute[n] == 0]
        if idle and (not len(edges) or self.rng.random() < 0.2):
            ops = np.flatnonzero(mine)
            op = int(ops[0] if self.rng.random() < 0.5 else ops[-1])
            return self._move(assign, self._unit(op, assign), int(self.rng.choice(idle)))
        if not len(edges):
            return None
        dep = self._pick(edges, estimator.dep_bytes[edges] + 1.0)
        src, dst = int(estimator.dep_src[dep]), int(estimator.dep_dst[dep])
        op, other = (src, dst) if assign[src] == cluster else (dst, src)
        return self._move(assign, self._unit(op, assign), int(assign[other]))

    def _swap(self, assign: np.ndarray, cluster: int) -> np.ndarray | None:
        """Exchange an op (or chain) of ``cluster`` with one of a neighbouring cluster."""
        others = [n for n in self.neighbours[cluster] if np.any(assign == n)]
        mine = np.flatnonzero(assign == cluster)
        if not others or not len(mine):
            return None
        other = int(self.rng.choice(others))
        unit = self._unit(int(self.rng.choice(mine)), assign)
        theirs = self._unit(int(self.rng.choice(np.flatnonzero(assign == other))), assign)
        moved = assign.copy()
        moved[unit], moved[theirs] = other, cluster
        return moved

    def _shed_weights(self, assign: np.ndarray, score: _Score, cluster: int
                      ) -> np.ndarray | None:
        """Move weights off streaming ``cluster``: to a cluster it talks to, or one with room."""
        estimator = self.estimator
        ops = np.flatnonzero((assign == cluster) & (estimator.weights > 0))
        if not len(ops):
            return None
        op = self._pick(ops, estimator.weights[ops])
        unit = self._unit(op, assign)
        talks = {int(assign[p]) for p, _ in estimator.preds[op]} | {
            int(assign[q]) for q in estimator.succs[op]}
        room = estimator.sram - score.weights
        fits = set(np.flatnonzero(room >= estimator.weights[unit].sum()).tolist())
        options = sorted((talks | (fits & set(self.neighbours[cluster]))) - {cluster})
        if not options:
            return None
        return self._move(assign, unit, int(self.rng.choice(options)))

    def _shift_boundary(self, assign: np.ndarray):
        """Move the last level of a module into the next one, or the next one's first level back.

        The moved ops go to the cluster of their first consumer (forward) or producer
        (backward) in the receiving module, else to where that module's nearest op runs.
        """
        boundary = int(self.rng.integers(self.num_modules - 1))
        forward = self.rng.random() < 0.5
        giver, taker = (boundary, boundary + 1) if forward else (boundary + 1, boundary)
        given = np.flatnonzero(self.module == giver)
        taken = np.flatnonzero(self.module == taker)
        if not len(given) or not len(taken):
            return None
        levels = self.depth[given]
        level = levels.max() if forward else levels.min()
        if level == (levels.min() if forward else levels.max()):
            return None  # the giver would be left empty
        ops = given[levels == level]
        fallback = int(assign[taken.min() if forward else taken.max()])
        moved = assign.copy()
        for op in ops:
            near = (self.estimator.succs[op] if forward
                    else [p for p, _ in self.estimator.preds[op]])
            near = [q for q in near if self.module[q] == taker]
            moved[op] = int(assign[near[0]]) if near else fallback
        module = self.module.copy()
        module[ops] = taker
        return moved, module


class ModularPlanner:
    """Dependency modules on runs of clusters, refined by a local search, judged by simulation.

    1. **Modules.** :func:`~.dependency_modules.dependency_modules` cuts the graph at depth
       levels that few bytes cross (at most one module per cluster), and
       :func:`~.dependency_modules.resource_bounds` estimates each module's clusters from its
       share of FLOPs and weights.
    2. **Initial placement.** Modules take consecutive runs of clusters in the topology's snake
       order (neighbours). A dynamic program over the modules sizes the runs to minimise the
       slowest cluster, each module taking between 1 and twice its resource bound (and no more
       clusters than ops). Inside a run, independent parallel groups go to different clusters
       (largest first onto the least loaded); when the run has more clusters than groups, each
       group gets a share of them and is cut into consecutive pipeline segments by the pipeline
       planner's exact bottleneck DP, which charges ``op_cycles_streamed`` when a segment's
       weights overflow SRAM. Serial ops are never split otherwise. Two module granularities
       (about a quarter and half as many modules as clusters, or ``target_modules``) are
       built and simulated; the faster one is the start of the search.
    3. **Local search** (deterministic: seeded, first improvement), once per DRAM policy
       (``"interleave"``, and ``"nearest"`` when the weights overflow the total SRAM). Each round
       proposes one move: an op or the part of its chain on its cluster goes to a cluster it
       exchanges data with or to an idle topology neighbour (a stage boundary moves), two such
       units on neighbouring clusters swap, weights leave a streaming cluster, or a module
       boundary shifts by one depth level. Most proposals start at the current bottleneck (the
       busiest cluster, the clusters whose data or weight fetches load the busiest link, the
       clusters streaming the most). A move is kept only if it lowers the objective below (ties:
       the sum of squared loads); placements in which a cluster waits, within one batch, for work
       that depends on its own earlier ops elsewhere are refused, because the device runs each
       cluster's ops in a fixed order and such a round trip serialises the pipeline. The search
       stops after ``iterations`` rounds in a row without improvement, or at ``time_limit``
       (then the result may depend on the machine's speed; ``notes`` say which stop happened).
    4. **Judging.** The initial placements, ``checkpoints`` states spread over each search's
       trajectory (its first and last included) and, when weights stream, the fastest of those
       with DRAM shares balanced by :func:`~tvm_chiplet.passes.planners.dram.balance_dram`, with
       and without SRAM loans (spare SRAM holding streamed weights), are
       simulated (:func:`~tvm_chiplet.passes.planners.evaluate.simulate_placement`, ``batches``
       pipelined inputs, ``"flow"`` network); the fastest is returned, so the result is never
       slower than the initial placement.

    The objective (predicted cycles per batch)::

        objective  = (makespan + (batches - 1) * steady) / batches
        steady     = max(max_c time_c, max_l load_l, max_d dram_d)
        time_c     = sum over c's ops i of max(cycles_i, fetch_i)
        fetch_i    = w_i * streamed_c / W_c * max_d share_cd / min(bw_d, narrowest link d -> c)
        streamed_c = W_c - (1 - PLANNED_HEADROOM) * sram_c  if W_c > sram_c, else 0
        load_l     = (bytes of cut dependencies routed over l
                      + sum_c streamed_c * share_cd of every controller d routed over l) / bw_l
        dram_d     = sum_c streamed_c * share_cd / bw_d
        makespan   = one batch's longest path through data and same-cluster order, ops taking
                     max(cycles_i, fetch_i) and cut dependencies problem.transfer_cycles

    ``cycles_i`` are ``problem.op_cycles`` (weights resident), ``w_i`` an op's weights, ``W_c``
    the weights on cluster ``c`` and ``share_cd`` the fraction of ``c``'s fetches controller
    ``d`` serves under the DRAM policy. ``streamed_c`` is what the device's memory model
    streams per batch (:mod:`tvm_chiplet.targets.workload`); a fetch overlaps the previous op's
    compute (double buffer), hence ``max`` rather than the ``op_cycles_streamed`` sum. ``steady``
    is the per-batch time of the busiest resource (a cluster, a link, a DRAM controller) and
    ``makespan`` the latency of one batch, so ``objective * batches`` predicts the simulated
    total; the prediction ignores contention, which is why the simulator has the last word.

    Parameters
    ----------
    iterations : int, default 200
        Search rounds in a row without improvement before a search stops (0: no search).
    batches : int, default 64
        Pipelined inputs the objective and the simulations are for (>= 1).
    seed : int, default 0
        Seed of the search's random proposals; same seed and inputs, same placement.
    time_limit : float, default 10.0
        Wall-clock cap on planning before judging, in seconds (> 0), shared by the searches.
    target_modules : int, optional
        Build only this module granularity (>= 1) instead of trying two.
    checkpoints : int, default 4
        States of each search trajectory that are simulated (>= 2: its first and last).

    Example
    -------
    >>> placement = ModularPlanner(iterations=100).plan(problem)         # doctest: +SKIP
    >>> placement.notes["modules"], placement.notes["candidates"][0]      # doctest: +SKIP
    """

    name = "modular"

    def __init__(self, iterations: int = 200, batches: int = 64, seed: int = 0,
                 time_limit: float = 10.0, target_modules: int | None = None,
                 checkpoints: int = 4) -> None:
        for label, value, low in (("iterations", iterations, 0), ("batches", batches, 1),
                                  ("seed", seed, 0), ("checkpoints", checkpoints, 2)):
            if not isinstance(value, int) or isinstance(value, bool) or value < low:
                raise PlanningError(f"{label} must be an integer >= {low}, got {value!r}")
        if not time_limit > 0:
            raise PlanningError(f"time_limit must be > 0 seconds, got {time_limit!r}")
        if target_modules is not None and (not isinstance(target_modules, int)
                                           or target_modules < 1):
            raise PlanningError(
                f"target_modules must be an integer >= 1 or None, got {target_modules!r}"
            )
        self.iterations = iterations
        self.batches = batches
        self.seed = seed
        self.time_limit = float(time_limit)
        self.target_modules = target_modules
        self.checkpoints = checkpoints

    def plan(self, problem: PlanningProblem) -> Placement:
        started = time.perf_counter()
        graph = problem.graph
        order = list(problem.topology.cluster_order())
        if not any(op.is_compute for op in graph.ops):
            n = len(graph.ops)
            return Placement(self.name, (order[0],) * n, (0,) * n, (order[0],), 0.0,
                             {"modules": 0})
        estimators = {"interleave": _BatchTimeEstimator(problem, self.batches, "interleave")}
        streaming = graph.total_weight_bytes > problem.system.total_sram_bytes
        if streaming and problem.system.drams:
            # Streaming dominates, so where the weights live in DRAM matters.
            estimators["nearest"] = _BatchTimeEstimator(problem, self.batches, "nearest")
        rows: list[dict] = []
        judged: list[tuple[float, int, Placement]] = []

        def judge(placement: Placement, **row) -> float:
            cycles = float(simulate_placement(problem, placement, self.batches,
                                              "flow").total_cycles)
            judged.append((cycles, len(judged), placement))
            rows.append({**row, "dram_policy": placement.dram_policy, "simulated_cycles": cycles})
            return cycles

        layouts = []
        for target in self._module_targets(len(order)):
            layout = _Layout.build(problem, estimators["interleave"], target, order)
            cycles = judge(layout.placement(problem, estimators["interleave"], layout.assign,
                                            layout.module, "interleave"),
                           candidate=f"initial/{target}", modules=len(layout.modules),
                           objective=estimators["interleave"].score(layout.assign).objective)
            layouts.append((cycles, len(layouts), layout))
        layout = min(layouts, key=lambda row: row[:2])[2]
        depth = op_depth(graph)
        stats = {}
        for index, (policy, estimator) in enumerate(estimators.items()):
            search = _Search(problem, estimator, layout.module, depth, self.seed + index)
            deadline = started + self.time_limit * (index + 1) / len(estimators)
            trajectory, stats[policy] = search.run(layout.assign, self.iterations, deadline)
            for step in _checkpoints(len(trajectory), self.checkpoints):
                if step == 0 and policy == "interleave":
                    continue  # judged above
                assign, score, module = trajectory[step]
                judge(layout.placement(problem, estimator, assign, module, policy),
                      candidate=f"search/{step}", modules=len(layout.modules),
                      objective=score.objective)
        # Where streamed weights live: the controller mix that unloads the busiest link or
        # controller (an LP), and the same with spare SRAM holding streamed weights (SRAM
        # loans). balance_dram returns a placement that streams nothing unchanged.
        fastest = sorted(judged, key=lambda row: row[:2])[: self.checkpoints // 2]
        for _, index, placement in fastest:
            for lend, kind in ((False, "balanced"), (True, "lent")):
                placed = balance_dram(problem, placement, lend=lend)
                if placed is not placement:
                    judge(placed, candidate=f"{kind}/{index}", modules=len(layout.modules),
                          objective=placement.objective_cycles)
        _, pick, best = min(judged, key=lambda row: row[:2])
        notes = {
            "modules": len(layout.modules),
            "clusters_per_module": [len(run) for run in layout.runs],
            "resource_bounds": layout.bounds,
            "candidates": rows,
            "chosen": pick,
            "search": stats,
            "batches": self.batches,
        }
        return dataclasses.replace(best, notes=notes)

    def _module_targets(self, num_clusters: int) -> list[int]:
        if self.target_modules is not None:
            return [min(self.target_modules, num_clusters)]
        return sorted({max(1, num_clusters // 4), max(1, num_clusters // 2)})


@dataclass
class _Layout:
    """Modules, their runs of clusters and the initial assignment of the compute ops."""

    modules: list
    bounds: list[int]
    runs: list[list[int]]
    assign: np.ndarray
    module: np.ndarray  # module of every compute op (position)

    @classmethod
    def build(cls, problem: PlanningProblem, estimator: _BatchTimeEstimator, target: int,
              order: list[int]) -> _Layout:
        graph = problem.graph
        modules = dependency_modules(graph, target, max_modules=len(order))
        sram = min(c.sram_bytes for c in problem.system.clusters)
        bounds = resource_bounds(modules, len(order), sram)
        # The bounds estimate from FLOP and weight shares; the allocation may give a module up
        # to twice its bound (never more clusters than ops).
        caps = [max(1, min(m.compute_ops, 2 * b)) for m, b in zip(modules, bounds, strict=True)]
        pos = {op: i for i, op in enumerate(estimator.ops)}
        groups = [[[pos[o] for o in g if o in pos] for g in m.parallel_groups] for m in modules]
        runs, assign = _allocate(problem, estimator, [[g for g in gs if g] for gs in groups], caps,
                                 order)
        module = np.zeros(len(estimator.ops), dtype=np.int64)
        for m in modules:
            module[[pos[o] for o in m.ops if o in pos]] = m.index
        return cls(modules, bounds, runs, assign, module)

    def placement(self, problem: PlanningProblem, estimator: _BatchTimeEstimator,
                  assign: np.ndarray, module: np.ndarray, policy: str) -> Placement:
        """Every op placed: plumbing ops on their first producer's cluster and module."""
        graph = problem.graph
        cluster = dict(zip(estimator.ops, assign.tolist(), strict=True))
        stage = dict(zip(estimator.ops, module.tolist(), strict=True))
        for m in self.modules:
            for op in m.ops:
                stage.setdefault(op, m.index)
        for v in nx.lexicographical_topological_sort(graph.graph):
            if v not in cluster:
                producers = sorted(graph.graph.predecessors(v))
                cluster[v] = cluster[producers[0]] if producers else self.runs[0][0]
                if producers:
                    stage[v] = stage[producers[0]]
        n = len(graph.ops)
        return Placement(
            strategy=ModularPlanner.name,
            op_cluster=tuple(cluster[i] for i in range(n)),
            op_stage=tuple(stage[i] for i in range(n)),
            stage_clusters=tuple(run[0] for run in self.runs),
            objective_cycles=estimator.score(assign).objective,
            dram_policy=policy,
        )


def _checkpoints(length: int, count: int) -> list[int]:
    """``count`` steps spread evenly over a trajectory of ``length`` states, ends included."""
    if length <= count:
        return list(range(length))
    return sorted({round(i * (length - 1) / (count - 1)) for i in range(count)})


def _allocate(problem: PlanningProblem, estimator: _BatchTimeEstimator,
              groups: list[list[list[int]]], caps: list[int],
              order: list[int]) -> tuple[list[list[int]], np.ndarray]:
    """Runs of clusters for the modules minimising the slowest cluster, and the assignment.

    ``groups[i]`` are module ``i``'s parallel groups (op positions). Dynamic program over the
    modules in order: ``best[i][q]`` is the smallest bottleneck of modules ``0..i`` on the first
    ``q`` clusters of ``order``, module ``i`` taking ``1..caps[i]`` of them (its cost for ``k``
    clusters is :func:`_place_module` on a run where it would roughly start). Ties are broken
    by the sum of the modules' slowest clusters, then towards more clusters (less weight per
    cluster, less streaming).
    """
    m, n = len(groups), len(order)
    total = [float(estimator.cycles[[p for g in gs for p in g], order[0]].sum()) for gs in groups]
    prefix = np.concatenate([[0.0], np.cumsum(total)]) / max(sum(total), 1e-300)
    cost = []
    for i, gs in enumerate(groups):
        row = {}
        for k in range(1, min(caps[i], n - (m - 1)) + 1):
            start = min(round(prefix[i] * n), n - k)
            row[k] = _place_module(problem, estimator, gs, order[start:start + k])[1]
        cost.append(row)
    # best[i][q] = (slowest, sum of the modules' slowest) of modules 0..i-1 on q clusters:
    # the bottleneck first, then every other module as fast as the clusters allow.
    best = [[(math.inf, math.inf)] * (n + 1) for _ in range(m + 1)]
    best[0][0] = (0.0, 0.0)
    take = np.zeros((m + 1, n + 1), dtype=np.int64)
    for i in range(m):
        for q in range(i + 1, n + 1):
            for k, value in cost[i].items():
                if k <= q:
                    before = best[i][q - k]
                    option = (max(before[0], value), before[1] + value)
                    if option < best[i + 1][q]:
                        best[i + 1][q], take[i + 1, q] = option, k
    q = min(range(n + 1), key=lambda q: (best[m][q], -q))
    sizes = []
    for i in range(m, 0, -1):
        sizes.append(int(take[i, q]))
        q -= sizes[-1]
    runs, start = [], 0
    assign = np.zeros(len(estimator.ops), dtype=np.int64)
    for gs, k in zip(groups, sizes[::-1], strict=True):
        runs.append(order[start:start + k])
        start += k
        for positions, cluster in _place_module(problem, estimator, gs, runs[-1])[0]:
            assign[positions] = cluster
    return runs, assign


def _place_module(problem: PlanningProblem, estimator: _BatchTimeEstimator,
                  groups: list[list[int]],
                  run: list[int]) -> tuple[list[tuple[list[int], int]], float]:
    """A module's ops on ``run``: ``([(positions, cluster)], slowest cluster's cycles)``.

    With at least as many parallel groups as clusters, groups go whole onto the least loaded
    cluster, largest first. Otherwise every group gets a share of the run in proportion to its
    cycles and is cut into consecutive segments by :func:`_segments`.
    """
    if len(groups) >= len(run):
        load = {c: [] for c in run}
        for group in sorted(groups, key=lambda g: (-float(estimator.cycles[g, run[0]].sum()), g)):
            cluster = min(run, key=lambda c: (_cluster_cycles(problem, estimator, load[c], c), c))
            load[cluster] = load[cluster] + group
        pieces = [(ops, c) for c, ops in load.items() if ops]
        return pieces, max(_cluster_cycles(problem, estimator, ops, c) for ops, c in pieces)
    shares = apportion([float(estimator.cycles[g, run[0]].sum()) for g in groups],
                        [len(g) for g in groups], len(run))
    pieces, slowest, start = [], 0.0, 0
    for group, share in zip(groups, shares, strict=True):
        clusters = run[start:start + share]
        start += share
        segments, bottleneck = _segments(problem, estimator, group, clusters)
        pieces += list(zip(segments, clusters, strict=False))
        slowest = max(slowest, bottleneck)
    return pieces, slowest


def _cluster_cycles(problem: PlanningProblem, estimator: _BatchTimeEstimator,
                    positions: list[int], cluster: int) -> float:
    """Cycles of ``positions`` on ``cluster``, weights streamed if they overflow its SRAM."""
    if not positions:
        return 0.0
    ops = [estimator.ops[p] for p in positions]
    fits = estimator.weights[positions].sum() <= problem.system.clusters[cluster].sram_bytes
    table = problem.op_cycles if fits else problem.op_cycles_streamed
    return float(table[ops, cluster].sum())


def _segments(problem: PlanningProblem, estimator: _BatchTimeEstimator, group: list[int],
              clusters: list[int]) -> tuple[list[list[int]], float]:
    """``group`` (positions in topological order) cut into at most ``len(clusters)`` segments
    by the pipeline planner's exact bottleneck DP; returns the segments and the bottleneck."""
    index = {op: k for k, op in enumerate(group)}
    cut = np.zeros(len(group) + 1)
    for v in group:
        for u, nbytes in estimator.preds[v]:
            if u in index:
                cut[index[u] + 1] += nbytes
                cut[index[v] + 1] -= nbytes
    cut = np.cumsum(cut)
    boundary = problem.receive_cycles(clusters, cut)
    ops = [estimator.ops[p] for p in group]
    capacity = np.array([problem.system.clusters[c].sram_bytes for c in clusters], dtype=float)
    bottleneck, starts = min_bottleneck_partition(
        problem.op_cycles[np.ix_(ops, clusters)], boundary, None,
        problem.op_cycles_streamed[np.ix_(ops, clusters)], estimator.weights[group], capacity,
    )
    bounds = [*starts, len(group)]
    return [group[lo:hi] for lo, hi in itertools.pairwise(bounds)], bottleneck


__all__ = ["ModularPlanner"]
