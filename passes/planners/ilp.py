"""ILP planner: ops to pipeline stages by mixed-integer programming (pulp; CBC or HiGHS).

The stages are the clusters in the topology's snake order, as for
:class:`~tvm_chiplet.passes.planners.pipeline_planner.PipelinePlanner`, but the ops of a stage
need not be consecutive bindings: the only order constraint is that data flows forward along
every edge. The model also decides which weights and parked activations stay in SRAM; whatever
does not fit streams from DRAM at the shared cost model's price (or, with ``spill=False``, must
fit). Running the solvers (time limits, stopping CBC) is
:mod:`~tvm_chiplet.passes.planners.ilp_solvers`'s job.
"""

from __future__ import annotations

import dataclasses
import math
import time
from collections.abc import Collection, Sequence
from dataclasses import dataclass

import numpy as np
import pulp

from tvm_chiplet.passes.planners.base import PlanningProblem
from tvm_chiplet.passes.planners.evaluate import simulate_placement
from tvm_chiplet.passes.planners.ilp_solvers import SOLVERS, SolveResult, make_solver
from tvm_chiplet.passes.planners.pipeline_planner import PipelinePlanner
from tvm_chiplet.passes.planners.placement import Placement, PlanningError
from tvm_chiplet.targets import cost_model

OBJECTIVES = ("throughput", "latency")
_MB = 1e6


def parked_values(problem: PlanningProblem) -> list[list[int]]:
    """``parked[p]``: values alive across op position ``p`` (defined before ``p``, read after).

    A parked value waits in the SRAM of its producer's cluster while op ``p`` runs; an op's own
    operands stream through its local buffers and are not parked.
    """
    last_use: dict[int, int] = {}
    for u, v, _ in problem.graph.edges():
        last_use[u] = max(last_use.get(u, u), v)
    parked: list[list[int]] = [[] for _ in problem.graph.ops]
    for u, last in sorted(last_use.items()):
        for p in range(u + 1, last):
            parked[p].append(u)
    return parked


def spill_cycles(problem: PlanningProblem, value: int, cluster: int) -> float:
    """Cycles to write a parked value to DRAM and read it back on ``cluster``."""
    nbytes = problem.graph.ops[value].output_bytes
    return 2.0 * cost_model.dram_fetch_cycles(
        nbytes, problem.system.clusters[cluster], problem.system
    )


def stage_costs(
    problem: PlanningProblem,
    op_stage: Sequence[int],
    stage_clusters: Sequence[int],
    streamed_ops: Collection[int] = (),
    spilled_values: Collection[int] = (),
) -> np.ndarray:
    """Exact cycles of each pipeline stage: compute, DRAM spills and receiving its input cut.

    Stage ``k`` runs on ``stage_clusters[k]``. Its ops cost ``problem.op_cycles`` (weights
    resident) or ``problem.op_cycles_streamed`` (ops in ``streamed_ops``); each parked value it
    produces that is in ``spilled_values`` adds :func:`spill_cycles`; stage ``k > 0`` receives
    from stage ``k - 1`` every value defined before it and read at or after it (each value once,
    as :meth:`OpGraph.cut_bytes` counts them), at ``problem.transfer_cycles``.

    Returns
    -------
    ndarray, shape (len(stage_clusters),)
        Throughput objective: the maximum; latency objective: the sum.
    """
    graph = problem.graph
    costs = np.zeros(len(stage_clusters))
    for i, stage in enumerate(op_stage):
        table = problem.op_cycles_streamed if i in streamed_ops else problem.op_cycles
        costs[stage] += table[i, stage_clusters[stage]]
    for u in spilled_values:
        costs[op_stage[u]] += spill_cycles(problem, u, stage_clusters[op_stage[u]])
    last_stage: dict[int, int] = {}
    for u, v, _ in graph.edges():
        last_stage[u] = max(last_stage.get(u, op_stage[u]), op_stage[v])
    cut = np.zeros(len(stage_clusters) + 1, dtype=np.int64)
    for u, last in last_stage.items():
        cut[op_stage[u] + 1] += graph.ops[u].output_bytes
        cut[last + 1] -= graph.ops[u].output_bytes
    received = np.cumsum(cut)
    for k in range(1, len(stage_clusters)):
        costs[k] += problem.transfer_cycles(
            int(received[k]), stage_clusters[k - 1], stage_clusters[k]
        )
    return costs


def memory_use(
    problem: PlanningProblem,
    op_stage: Sequence[int],
    stage_clusters: Sequence[int],
    streamed_ops: Collection[int] = (),
    spilled_values: Collection[int] = (),
) -> np.ndarray:
    """Peak SRAM bytes of each stage: resident weights plus the largest set of parked values."""
    ops = problem.graph.ops
    use = np.zeros(len(stage_clusters))
    for i, stage in enumerate(op_stage):
        if i not in streamed_ops:
            use[stage] += ops[i].weight_bytes
    peak = np.zeros(len(stage_clusters))
    for values in parked_values(problem):
        live = np.zeros(len(stage_clusters))
        for u in values:
            if u not in spilled_values:
                live[op_stage[u]] += ops[u].output_bytes
        peak = np.maximum(peak, live)
    return use + peak


@dataclass
class _Candidate:
    op_stage: list[int]
    stage_clusters: list[int]
    streamed_ops: frozenset[int]
    spilled_values: frozenset[int]
    objective: float


class IlpPlanner:
    """Optimal stage assignment by mixed-integer programming, warm-started from the DP.

    Variables
        ``x[i, k]`` (binary) op ``i`` runs in stage ``k`` (cluster ``k`` of the snake order);
        ``used[k]`` (binary) stage ``k`` has ops; ``res[i, k]`` (binary) op ``i``'s weights are
        resident on stage ``k``; ``keep[u, k]`` (binary) parked value ``u`` stays in stage
        ``k``'s SRAM; ``cross[u, k]`` (continuous) value ``u`` crosses into stage ``k``;
        ``sent[k]`` (continuous) anything crosses into stage ``k``; ``T`` the bottleneck.
    Constraints
        each op in one stage; forward data flow (``stage(v) >= stage(u)`` on every edge);
        used stages form a prefix of the snake order; SRAM per cluster and per op position;
        cut linearisation ``cross[u, k] >= s[v, k] - s[u, k]`` with ``s[i, k]`` = op ``i`` at
        stage ``>= k``.
    Objective
        ``throughput``: minimise the largest stage cost (see :func:`stage_costs`);
        ``latency``: minimise the sum of stage costs.

    The result is never worse than the warm start (the pipeline DP's split with a greedy choice
    of resident weights and values) under :func:`stage_costs`: if the solver finds nothing
    better within ``time_limit`` (or is interrupted with Ctrl-C) the warm start is returned.

    Parameters
    ----------
    objective : {"throughput", "latency"}
        What to minimise.
    solver : {"cbc", "highs"}
        pulp's bundled CBC, or HiGHS through ``highspy``.
    time_limit : float or None
        Seconds the solver may take (``None``: until optimal). Must be > 0.
    warm_start : bool
        Give the DP solution to the solver as its incumbent.
    max_stages : int, optional
        Use at most this many clusters (default: all).
    msg : bool
        Print the solver's progress log (to the terminal).
    spill : bool
        Let weights and parked activations that do not fit a cluster's SRAM live in DRAM, at the
        cost model's streaming price (as the pipeline planner does). ``False`` makes SRAM a hard
        limit and raises :class:`PlanningError` naming the short cluster when nothing fits.
    judge_by_simulation : bool
        When the solver beats the warm start on :func:`stage_costs`, simulate both (64 pipelined
        inputs for throughput, one for latency) and keep the solver's answer only if the
        simulator agrees; the ILP's spill model is coarser than the device's.

    Examples
    --------
    >>> placement = IlpPlanner(time_limit=30).plan(problem)  # doctest: +SKIP
    >>> placement.notes["gap"], placement.notes["warm_start_kept"]  # doctest: +SKIP
    """

    name = "ilp"

    def __init__(
        self,
        objective: str = "throughput",
        solver: str = "cbc",
        time_limit: float | None = 60.0,
        warm_start: bool = True,
        max_stages: int | None = None,
        msg: bool = False,
        spill: bool = True,
        judge_by_simulation: bool = True,
    ) -> None:
        if objective not in OBJECTIVES:
            raise PlanningError(
                f"unknown ILP objective {objective!r}; valid objectives: {', '.join(OBJECTIVES)}"
            )
        if solver not in SOLVERS:
            raise PlanningError(
                f"unknown ILP solver {solver!r}; valid solvers: {', '.join(SOLVERS)}"
            )
        if time_limit is not None and not (
            isinstance(time_limit, int | float) and math.isfinite(time_limit) and time_limit > 0
        ):
            raise PlanningError(
                f"time_limit must be a number of seconds > 0 or None (no limit), got {time_limit!r}"
            )
        if max_stages is not None and max_stages < 1:
            raise PlanningError(f"max_stages must be >= 1, got {max_stages}")
        self.objective = objective
        self.solver = solver
        self.time_limit = time_limit
        self.warm_start = warm_start
        self.max_stages = max_stages
        self.msg = msg
        self.spill = spill
        self.judge_by_simulation = judge_by_simulation
        make_solver(solver, time_limit, msg, warm_start)  # fail early if it is not installed

    # ------------------------------------------------------------------ planning
    def plan(self, problem: PlanningProblem) -> Placement:
        order = list(problem.topology.cluster_order())
        n = len(problem.graph.ops)
        num_stages = max(1, min(len(order), n, self.max_stages or len(order)))
        order = order[:num_stages]
        if not self.spill:
            self._check_capacity(problem, order)
        start = self._warm_start(problem, order)
        backend = make_solver(self.solver, self.time_limit, self.msg, self.warm_start)
        model = _Model(problem, order, self.objective, self.spill)
        if self.warm_start and start.objective < math.inf:
            model.set_start(start)
        notes: dict = {"solver": self.solver, "objective_kind": self.objective}
        began = time.perf_counter()
        try:
            result = backend.solve(model.lp)
        except KeyboardInterrupt:
            backend.stop()
            result = SolveResult("interrupted", None, None)
        notes["solve_seconds"] = round(time.perf_counter() - began, 3)
        found = model.extract() if result.has_solution(model.lp) else None
        if found is not None:
            found.objective = self._cost(problem, found)
        keep_start = found is None or not found.objective < start.objective * (1 - 1e-9)
        if start.objective == math.inf and found is None:
            raise self._infeasible(problem, order, start)
        judged = {}
        if self.judge_by_simulation and not keep_start and start.objective < math.inf:
            # The simulator is the judge: the solution must not lose to its warm start there.
            judged = {
                "warm_start": self._simulated(problem, start),
                "solver": self._simulated(problem, found),
            }
            keep_start = judged["solver"] > judged["warm_start"] * (1 + 1e-9)
        best = start if keep_start else found
        if best.objective == math.inf:
            raise self._infeasible(problem, order, start)
        notes.update(
            status=result.status,
            objective=best.objective,
            best_bound=result.bound,
            gap=_gap(best.objective, result.bound),
            solver_objective=found.objective if found else None,
            warm_start_objective=start.objective if start.objective < math.inf else None,
            warm_start_kept=keep_start,
        )
        if judged:
            notes["simulated_cycles"] = judged
        placement = self._placement(best, notes)
        if self.judge_by_simulation:
            placement = self._against_heuristic(problem, placement)
        return placement

    def _against_heuristic(self, problem: PlanningProblem, placement: Placement) -> Placement:
        """The better, by simulation, of ``placement`` and the full pipeline heuristic.

        The ILP models one cluster per stage and whole-op streaming; the pipeline heuristic
        also searches regions, cluster orders and DRAM placement, which the ILP cannot express.
        Its plan is the ILP's best warm start, so the ILP never returns anything slower.
        """
        batches = 64 if self.objective == "throughput" else 1
        heuristic = PipelinePlanner(max_stages=self.max_stages, batches=batches).plan(problem)
        ours = float(simulate_placement(problem, placement, batches).total_cycles)
        theirs = float(simulate_placement(problem, heuristic, batches).total_cycles)
        notes = {**placement.notes, "heuristic_simulated_cycles": theirs,
                 "ilp_simulated_cycles": ours, "heuristic_kept": theirs < ours}
        if theirs < ours:
            return dataclasses.replace(heuristic, strategy=self.name,
                                       objective_cycles=placement.objective_cycles, notes=notes)
        return dataclasses.replace(placement, notes=notes)

    def _placement(self, cand: _Candidate, notes: dict) -> Placement:
        used = max(cand.op_stage) + 1 if cand.op_stage else 1
        clusters = tuple(cand.stage_clusters[:used])
        notes = {**notes, "streamed_weight_ops": sorted(cand.streamed_ops),
                 "spilled_values": sorted(cand.spilled_values)}
        return Placement(
            strategy=self.name,
            op_cluster=tuple(clusters[s] for s in cand.op_stage),
            op_stage=tuple(cand.op_stage),
            stage_clusters=clusters,
            objective_cycles=cand.objective,
            notes=notes,
        )

    def _simulated(self, problem: PlanningProblem, cand: _Candidate) -> float:
        """Simulated cycles of a candidate: 64 pipelined inputs for throughput, else one."""
        batches = 64 if self.objective == "throughput" else 1
        sim = simulate_placement(problem, self._placement(cand, {}), batches)
        return float(sim.total_cycles)

    def _cost(self, problem: PlanningProblem, cand: _Candidate) -> float:
        """The objective of ``cand`` under :func:`stage_costs`; ``inf`` if SRAM overflows."""
        args = (cand.op_stage, cand.stage_clusters, cand.streamed_ops, cand.spilled_values)
        capacity = [problem.system.clusters[c].sram_bytes for c in cand.stage_clusters]
        if np.any(memory_use(problem, *args) > np.array(capacity)):
            return math.inf
        costs = stage_costs(problem, *args)
        return float(costs.max() if self.objective == "throughput" else costs.sum())

    def _warm_start(self, problem: PlanningProblem, order: list[int]) -> _Candidate:
        """The pipeline DP's split, with a greedy choice of what stays in SRAM."""
        dp = PipelinePlanner(max_stages=len(order), search=False).plan(problem)
        op_stage = list(dp.op_stage)
        streamed: set[int] = set()
        spilled: set[int] = set()
        if self.spill:
            for k, cluster in enumerate(order):
                _greedy_residency(problem, op_stage, k, cluster, streamed, spilled)
        cand = _Candidate(op_stage, order, frozenset(streamed), frozenset(spilled), 0.0)
        cand.objective = self._cost(problem, cand)
        return cand

    # ------------------------------------------------------------------ infeasibility
    def _check_capacity(self, problem: PlanningProblem, order: list[int]) -> None:
        """Cheap necessary conditions for a placement with everything resident."""
        ops = problem.graph.ops
        capacity = [problem.system.clusters[c].sram_bytes for c in order]
        total = sum(op.weight_bytes for op in ops)
        if total > sum(capacity):
            raise PlanningError(
                f"SRAM (resident weights): the model's weights need {total / _MB:.1f} MB, the "
                f"{len(order)} clusters have {sum(capacity) / _MB:.1f} MB together (short by "
                f"{(total - sum(capacity)) / _MB:.1f} MB); increase SRAM, use a system with more "
                f"clusters, or allow DRAM streaming (spill=True)"
            )
        largest = max(capacity)
        for p, values in enumerate(parked_values(problem)):
            need = ops[p].weight_bytes if not values else 0
            need = max([need, *(ops[u].output_bytes + ops[u].weight_bytes for u in values)])
            if need > largest:
                raise PlanningError(
                    f"SRAM (per cluster, at op {p} {ops[p].name!r}): needs {need / _MB:.1f} MB on "
                    f"one cluster, the largest has {largest / _MB:.1f} MB (short by "
                    f"{(need - largest) / _MB:.1f} MB); increase SRAM or allow DRAM streaming "
                    f"(spill=True)"
                )

    def _infeasible(
        self, problem: PlanningProblem, order: list[int], start: _Candidate
    ) -> PlanningError:
        """The error for a model that does not fit: the tightest cluster of the warm start."""
        use = memory_use(problem, start.op_stage, order, start.streamed_ops, start.spilled_values)
        capacity = np.array([problem.system.clusters[c].sram_bytes for c in order], dtype=float)
        k = int(np.argmax(use - capacity))
        return PlanningError(
            f"SRAM (resident weights + parked activations): no placement fits; the best split "
            f"found needs {use[k] / _MB:.1f} MB on cluster {order[k]}, has {capacity[k] / _MB:.1f}"
            f" MB (short by {(use[k] - capacity[k]) / _MB:.1f} MB); increase SRAM, use a system "
            f"with more clusters, or allow DRAM streaming (spill=True)"
        )


def _greedy_residency(
    problem: PlanningProblem,
    op_stage: list[int],
    stage: int,
    cluster: int,
    streamed: set[int],
    spilled: set[int],
) -> None:
    """Keep parked values (smallest first), then weights (most saved per byte first) in SRAM."""
    ops = problem.graph.ops
    budget = problem.system.clusters[cluster].sram_bytes
    members = [i for i, s in enumerate(op_stage) if s == stage]
    parked = [[u for u in values if op_stage[u] == stage] for values in parked_values(problem)]
    candidates = sorted(
        {u for values in parked for u in values}, key=lambda u: (ops[u].output_bytes, u)
    )
    kept: set[int] = set()
    for u in candidates:
        trial = kept | {u}
        if max(sum(ops[v].output_bytes for v in vs if v in trial) for vs in parked) <= budget:
            kept = trial
        else:
            spilled.add(u)
    free = budget - max([0, *(sum(ops[v].output_bytes for v in vs if v in kept) for vs in parked)])
    heavy = [i for i in members if ops[i].weight_bytes > 0]
    saving = {
        i: problem.op_cycles_streamed[i, cluster] - problem.op_cycles[i, cluster] for i in heavy
    }
    if sum(ops[i].weight_bytes for i in heavy) <= free:
        return
    for i in sorted(heavy, key=lambda i: (-saving[i] / ops[i].weight_bytes, i)):
        if ops[i].weight_bytes <= free:
            free -= ops[i].weight_bytes
        else:
            streamed.add(i)


def _gap(objective: float, bound: float | None) -> float | None:
    """Relative gap of the returned objective to the solver's best bound (0: proven optimal)."""
    if bound is None:
        return None
    return max(0.0, objective - bound) / max(abs(objective), 1e-12)


# ---------------------------------------------------------------------- the model
class _Model:
    """The MILP of one planning problem (see :class:`IlpPlanner` for its families)."""

    def __init__(
        self, problem: PlanningProblem, order: list[int], objective: str, spill: bool
    ) -> None:
        graph = problem.graph
        ops = graph.ops
        n, num = len(ops), len(order)
        stages = range(num)
        self.problem, self.order, self.spill = problem, order, spill
        lp = pulp.LpProblem("chiplet_stages", pulp.LpMinimize)
        # Variables.
        x = {(i, k): lp.add_variable(f"x_{i}_{k}", cat="Binary") for i in range(n) for k in stages}
        used = {k: lp.add_variable(f"used_{k}", cat="Binary") for k in stages}
        heavy = [i for i in range(n) if ops[i].weight_bytes > 0]
        parked = parked_values(problem)
        parked_ids = sorted({u for values in parked for u in values})
        if spill:
            res = {
                (i, k): lp.add_variable(f"res_{i}_{k}", cat="Binary") for i in heavy for k in stages
            }
            keep = {
                (u, k): lp.add_variable(f"keep_{u}_{k}", cat="Binary")
                for u in parked_ids
                for k in stages
            }
        else:
            res = {(i, k): x[i, k] for i in heavy for k in stages}
            keep = {(u, k): x[u, k] for u in parked_ids for k in stages}
        senders = sorted({u for u, _, _ in graph.edges()})
        cross = {
            (u, k): lp.add_variable(f"cross_{u}_{k}", 0, 1) for u in senders for k in range(1, num)
        }
        sent = {k: lp.add_variable(f"sent_{k}", 0, 1) for k in range(1, num)}

        after = {
            (i, k): lp.add_variable(f"after_{i}_{k}", 0, 1) for i in range(n) for k in range(1, num)
        }

        def at_or_after(i: int, k: int) -> pulp.LpVariable:
            return after[i, k]

        # Assignment: every op runs in exactly one stage.
        for i in range(n):
            lp += pulp.lpSum(x[i, k] for k in stages) == 1, f"assign_{i}"
        # Stage prefix sums: after[i, k] = op i runs in stage k or later (sparse flow and cuts).
        for i, k in after:
            later = after[i, k + 1] if k + 1 < num else 0
            lp += after[i, k] == x[i, k] + later, f"after_{i}_{k}"
        # Forward data flow: stage(v) >= stage(u) on every edge.
        edges = graph.edges()
        for u, v, _ in edges:
            for k in range(1, num):
                lp += at_or_after(v, k) >= at_or_after(u, k), f"flow_{u}_{v}_{k}"
        # Used stages form a prefix of the snake order (no empty stage in between).
        for k in stages:
            for i in range(n):
                lp += x[i, k] <= used[k], f"used_ub_{i}_{k}"
            lp += used[k] <= pulp.lpSum(x[i, k] for i in range(n)), f"used_lb_{k}"
            if k > 0:
                lp += used[k] <= used[k - 1], f"used_prefix_{k}"
        # Residency: only ops (values) of a stage can keep weights (values) in its SRAM.
        if spill:
            for (i, k), var in res.items():
                lp += var <= x[i, k], f"res_{i}_{k}"
            for (u, k), var in keep.items():
                lp += var <= x[u, k], f"keep_{u}_{k}"
        # SRAM per cluster: resident weights + values parked across each op position.
        for k in stages:
            capacity = problem.system.clusters[order[k]].sram_bytes
            weights = pulp.lpSum(ops[i].weight_bytes * res[i, k] for i in heavy)
            lp += weights <= capacity, f"sram_weights_{k}"
            for p, values in enumerate(parked):
                if values:
                    live = pulp.lpSum(ops[u].output_bytes * keep[u, k] for u in values)
                    lp += weights + live <= capacity, f"sram_{k}_at_{p}"
        # Cut: value u crosses into stage k if defined before k and read at or after k.
        for u, v, _ in edges:
            for k in range(1, num):
                lp += cross[u, k] >= at_or_after(v, k) - at_or_after(u, k), f"cut_{u}_{v}_{k}"
        for (u, k), var in cross.items():
            lp += sent[k] >= var, f"sent_{u}_{k}"
        # Stage cost: compute (+ DRAM streaming and spills) + receiving the cut.
        costs = []
        for k in stages:
            c = order[k]
            resident, streamed = problem.op_cycles[:, c], problem.op_cycles_streamed[:, c]
            cost = pulp.lpSum(float(streamed[i]) * x[i, k] for i in range(n) if streamed[i])
            cost -= pulp.lpSum(float(streamed[i] - resident[i]) * res[i, k] for i in heavy)
            if spill:
                cost += pulp.lpSum(
                    spill_cycles(problem, u, c) * (x[u, k] - keep[u, k]) for u in parked_ids
                )
            if k > 0:
                route = problem.topology.route(order[k - 1], c)
                links = [problem.system.links[j] for j in route]
                latency = sum(link.latency for link in links)
                per_byte = 1.0 / min(link.bandwidth for link in links) if links else 0.0
                cost += latency * sent[k] + pulp.lpSum(
                    ops[u].output_bytes * per_byte * cross[u, k] for u in senders
                )
            costs.append(cost)
        if objective == "throughput":
            bottleneck = lp.add_variable("bottleneck", 0)
            for k, cost in enumerate(costs):
                lp += bottleneck >= cost, f"bottleneck_{k}"
            # Valid inequality (tightens the LP bound): the bottleneck is at least the mean.
            lp += num * bottleneck >= pulp.lpSum(costs), "bottleneck_mean"
            lp += bottleneck
        else:
            lp += pulp.lpSum(costs)
        self.lp, self.x, self.used, self.res, self.keep = lp, x, used, res, keep
        self.cross, self.sent, self.edges, self.after = cross, sent, edges, after
        self.bottleneck = bottleneck if objective == "throughput" else None
        self.heavy, self.parked_ids, self.n = heavy, parked_ids, n

    def set_start(self, start: _Candidate) -> None:
        """Load ``start`` as values of every variable (HiGHS needs a complete solution)."""
        stage = start.op_stage
        for (i, k), var in self.after.items():
            var.setInitialValue(int(stage[i] >= k))
        for var in self.cross.values():
            var.setInitialValue(0)
        for u, v, _ in self.edges:
            for k in range(stage[u] + 1, stage[v] + 1):
                self.cross[u, k].setInitialValue(1)
        for k, var in self.sent.items():
            var.setInitialValue(
                max((c.value() for (_, j), c in self.cross.items() if j == k), default=0)
            )
        if self.bottleneck is not None:
            costs = stage_costs(
                self.problem, stage, self.order, start.streamed_ops, start.spilled_values
            )
            self.bottleneck.setInitialValue(float(costs.max()) * (1 + 1e-7))
        for (i, k), var in self.x.items():
            var.setInitialValue(int(start.op_stage[i] == k))
        for k, var in self.used.items():
            var.setInitialValue(int(k in start.op_stage))
        if self.spill:
            for (i, k), var in self.res.items():
                var.setInitialValue(int(start.op_stage[i] == k and i not in start.streamed_ops))
            for (u, k), var in self.keep.items():
                var.setInitialValue(int(start.op_stage[u] == k and u not in start.spilled_values))

    def extract(self) -> _Candidate:
        """The solver's assignment (costed later by :func:`stage_costs`)."""
        stages = len(self.order)
        op_stage = [
            max(range(stages), key=lambda k, i=i: self.x[i, k].value() or 0.0)
            for i in range(self.n)
        ]
        streamed, spilled = set(), set()
        if self.spill:
            streamed = {i for i in self.heavy if (self.res[i, op_stage[i]].value() or 0) < 0.5}
            spilled = {u for u in self.parked_ids if (self.keep[u, op_stage[u]].value() or 0) < 0.5}
        return _Candidate(op_stage, self.order, frozenset(streamed), frozenset(spilled), 0.0)


__all__ = ["IlpPlanner", "memory_use", "parked_values", "spill_cycles", "stage_costs"]
