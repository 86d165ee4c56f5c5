"""Contiguous stages solved by decomposition: an interval DP master, exact per-stage residency.

In the ILP planner's ``contiguous`` stage model, stage ``k`` runs ops ``[p, q)`` of the op
order on cluster ``order[k]``, and its cost (:func:`~tvm_chiplet.passes.planners.ilp.stage_costs`)
depends only on that interval and that cluster: its ops' compute, the weights it streams, the
parked values it spills, and the input cut it receives. Choosing what stays in its SRAM is an
integer program of its own (a knapsack of weights, with the parked values alive at each op
position), independent of every other stage. So the problem splits into

master
    choose the intervals: a dynamic program over (stage, first op) minimising the bottleneck
    (throughput) or the sum (latency) of the interval costs; exact for the chain of stages;
subproblem
    the cheapest residency of one interval on one cluster (:func:`stage_residency`), solved
    exactly: every choice of parked values to keep, then a 0-1 knapsack of weights by branch
    and bound.

Every interval starts with a *floor* (:func:`interval_floors`): its cost with the knapsack's LP
relaxation (fractional weights) and its parked values kept for free, never above its exact cost.
The master on floors gives a lower bound on every contiguous plan; the intervals of its
solution are then solved exactly and the master is run again (lazy refinement). When the
master's solution uses only exactly solved intervals, it is optimal; otherwise its value is a
proven lower bound and the best exactly costed plan seen is the incumbent, and
:func:`solve_intervals` stops at the requested gap or time.
"""

from __future__ import annotations

import itertools
import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import pulp

from tvm_chiplet.passes.planners.base import PlanningProblem
from tvm_chiplet.targets import cost_model


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


@dataclass
class IntervalSolution:
    """What :func:`solve_intervals` found.

    ``op_stage``, ``streamed_ops``, ``spilled_values``: the best plan (exactly costed);
    ``objective``: its cost; ``bound``: the proven lower bound over all contiguous plans;
    ``rounds``: master runs; ``solved``: intervals solved exactly; ``seconds``: time taken.
    """

    op_stage: list[int]
    streamed_ops: frozenset[int]
    spilled_values: frozenset[int]
    objective: float
    bound: float
    rounds: int
    solved: int
    seconds: float


class _Stages:
    """Per-cluster data of the intervals: costs, weights, parked values, receive costs."""

    def __init__(self, problem: PlanningProblem, order: Sequence[int], spill: bool) -> None:
        ops = problem.graph.ops
        self.n, self.order, self.spill = len(ops), list(order), spill
        self.weights = np.array([op.weight_bytes for op in ops], dtype=float)
        self.outputs = np.array([op.output_bytes for op in ops], dtype=float)
        self.parked = parked_values(problem)
        self.parked_ids = sorted({u for values in self.parked for u in values})
        self.capacity = np.array([problem.system.clusters[c].sram_bytes for c in order], float)
        self.resident = problem.op_cycles[:, order]
        self.streamed = problem.op_cycles_streamed[:, order]
        self.spill_cost = {
            (u, k): spill_cycles(problem, u, c)
            for u in self.parked_ids
            for k, c in enumerate(order)
        }
        self.receive = problem.receive_cycles(order, problem.graph.cut_bytes())

    def compute_floor(self, k: int) -> np.ndarray:
        """``floor[p, q]``: least cost of ops ``[p, q)`` on stage ``k``'s cluster, no receive.

        Spill mode: everything streamed minus the fractional knapsack of the savings of the
        weights that fit at all; parked values are kept for free. Without spill, every weight
        stays resident, and an interval whose weights exceed the SRAM costs ``inf``.
        """
        n = self.n
        prefix = np.concatenate([[0.0], np.cumsum(self.streamed[:, k])])
        base = prefix[None, :] - prefix[:, None]
        if not self.spill:
            resident = np.concatenate([[0.0], np.cumsum(self.resident[:, k])])
            weights = np.concatenate([[0.0], np.cumsum(self.weights)])
            cost = resident[None, :] - resident[:, None]
            return np.where(weights[None, :] - weights[:, None] <= self.capacity[k], cost, np.inf)
        saving = self.streamed[:, k] - self.resident[:, k]
        cap = self.capacity[k]
        items = [i for i in range(n) if 0 < self.weights[i] <= cap and saving[i] > 0]
        items.sort(key=lambda i: (-saving[i] / self.weights[i], i))
        if not items:
            return base
        index = np.array(items)
        w, v = self.weights[index], saving[index]
        best = np.zeros((n + 1, n + 1))
        for p in range(n + 1):
            # members[q, j]: item j lies in [p, q).
            members = (index[None, :] >= p) & (index[None, :] < np.arange(n + 1)[:, None])
            cw = np.cumsum(members * w, axis=1)
            cv = np.cumsum(members * v, axis=1)
            over = cw > cap
            first = np.where(over.any(axis=1), over.argmax(axis=1), -1)
            rows = np.arange(n + 1)
            whole = cv[:, -1]
            j = np.maximum(first, 0)
            partial = cv[rows, j] - v[j] + v[j] * (cap - (cw[rows, j] - w[j])) / w[j]
            best[p] = np.where(first >= 0, partial, whole)
        return base - best


MAX_ENUMERATED = 10
"""Most parked values of one interval whose keep-or-spill choices :func:`stage_residency`
enumerates; an interval with more is solved as a small MILP."""

MAX_INTERVAL_CELLS = 50_000_000
"""Largest table of interval costs (stages x (ops + 1)^2, 400 MB of float64) the decomposition
builds; BERT-base on simba-6x6 needs 1.2 million. Larger problems go to the compact MILP."""

Residency = tuple[float, frozenset[int], frozenset[int], bool]
"""Cost of one stage's ops (no receive), ops whose weights stream, values that spill, and
whether the cost is proven the least (else it is only an upper bound)."""


def stage_residency(
    stages: _Stages, k: int, p: int, q: int, solve: Callable | None = None
) -> Residency:
    """The cheapest residency of ops ``[p, q)`` on stage ``k``.

    Every subset of the interval's parked values to keep (the rest spill), then the weights
    that stay resident in the SRAM left over (a 0-1 knapsack of the cycles saved, by branch and
    bound). An interval with more than :data:`MAX_ENUMERATED` parked values is solved as a
    small MILP by ``solve`` (a backend's ``solve(lp) -> SolveResult``), proven when the solver
    says optimal; without ``solve`` it streams every weight and spills every value (unproven).
    Returns the cost (``inf`` if nothing fits), the ops whose weights stream, the values that
    spill and whether the cost is proven least.
    """
    members = range(p, q)
    cap = stages.capacity[k]
    streamed_cost = float(stages.streamed[p:q, k].sum())
    heavy = [i for i in members if stages.weights[i] > 0]
    if not stages.spill:
        weights = sum(stages.weights[i] for i in heavy)
        live = max([0.0, *(sum(stages.outputs[u] for u in values if p <= u < q)
                           for values in stages.parked)])
        cost = float(stages.resident[p:q, k].sum()) if weights + live <= cap else math.inf
        return cost, frozenset(), frozenset(), True
    saving = {i: stages.streamed[i, k] - stages.resident[i, k] for i in heavy}
    items = [i for i in heavy if saving[i] > 0 and stages.weights[i] <= cap]
    items.sort(key=lambda i: (-saving[i] / stages.weights[i], i))
    values = [u for u in stages.parked_ids if p <= u < q and stages.outputs[u] <= cap]
    positions = [[u for u in vs if p <= u < q] for vs in stages.parked]
    positions = [vs for vs in positions if vs]
    forced = frozenset(u for u in stages.parked_ids if p <= u < q and u not in values)
    if len(values) > MAX_ENUMERATED:
        return _residency_milp(stages, k, p, q, items, saving, values, positions, solve)
    best = (math.inf, frozenset(), frozenset(), True)
    for keep_flags in itertools.product((True, False), repeat=len(values)):
        kept = {u for u, flag in zip(values, keep_flags, strict=True) if flag}
        reserved = max([0.0, *(sum(stages.outputs[u] for u in vs if u in kept)
                               for vs in positions)])
        if reserved > cap:
            continue
        spilled = forced | frozenset(u for u in values if u not in kept)
        spill = sum(stages.spill_cost[u, k] for u in spilled)
        saved, chosen = _knapsack([stages.weights[i] for i in items],
                                  [saving[i] for i in items], cap - reserved)
        cost = streamed_cost - saved + spill
        if cost < best[0]:
            resident = {items[j] for j in chosen}
            best = (cost, frozenset(i for i in heavy if i not in resident), spilled, True)
    return best


def _residency_milp(
    stages: _Stages, k: int, p: int, q: int, items: list[int], saving: dict[int, float],
    values: list[int], positions: list[list[int]], solve: Callable | None,
) -> Residency:
    """:func:`stage_residency` of an interval with many parked values, as a small MILP.

    Variables ``res[i]`` (weights of op ``i`` resident) and ``keep[u]`` (value ``u`` kept);
    constraints: SRAM at every op position (resident weights plus the kept values alive
    there); objective: the stage's cycles (streamed compute minus savings plus spills).
    """
    heavy = [i for i in range(p, q) if stages.weights[i] > 0]
    parked = [u for u in stages.parked_ids if p <= u < q]
    everything = (float(stages.streamed[p:q, k].sum())
                  + sum(stages.spill_cost[u, k] for u in parked))
    fallback = (everything, frozenset(heavy), frozenset(parked), False)
    if solve is None:
        return fallback
    lp = pulp.LpProblem("stage_residency", pulp.LpMinimize)
    res = {i: lp.add_variable(f"res_{i}", cat="Binary") for i in items}
    keep = {u: lp.add_variable(f"keep_{u}", cat="Binary") for u in values}
    weights = pulp.lpSum(stages.weights[i] * res[i] for i in items)
    cap = stages.capacity[k]
    lp += weights <= cap, "sram_weights"
    for j, vs in enumerate(positions):
        lp += weights + pulp.lpSum(stages.outputs[u] * keep[u] for u in vs if u in keep) <= cap, (
            f"sram_at_{j}"
        )
    lp += everything - pulp.lpSum(saving[i] * res[i] for i in items) - pulp.lpSum(
        stages.spill_cost[u, k] * keep[u] for u in values
    )
    result = solve(lp)
    if not result.has_solution(lp):
        return fallback
    resident = {i for i in items if res[i].value() > 0.5}
    kept = {u for u in values if keep[u].value() > 0.5}
    cost = (everything - sum(saving[i] for i in resident)
            - sum(stages.spill_cost[u, k] for u in kept))
    return (cost, frozenset(i for i in heavy if i not in resident),
            frozenset(u for u in parked if u not in kept), result.status == "Optimal")


def _knapsack(weights: list[float], values: list[float], cap: float) -> tuple[float, list[int]]:
    """0-1 knapsack, maximise value: depth-first branch and bound on the fractional bound.

    Items must come sorted by value per weight, best first. Returns the value and the items.
    """
    n = len(weights)
    best_value, best_items = 0.0, []

    def fractional(j: int, room: float) -> float:
        total = 0.0
        while j < n and weights[j] <= room:
            room -= weights[j]
            total += values[j]
            j += 1
        if j < n:
            total += values[j] * room / weights[j]
        return total

    stack = [(0, cap, 0.0, [])]
    while stack:
        j, room, value, taken = stack.pop()
        if value > best_value:
            best_value, best_items = value, taken
        if j >= n or value + fractional(j, room) <= best_value * (1 + 1e-12):
            continue
        stack.append((j + 1, room, value, taken))  # without item j (explored second)
        if weights[j] <= room:
            stack.append((j + 1, room - weights[j], value + values[j], [*taken, j]))
    return best_value, best_items


def _master(costs: np.ndarray, objective: str) -> tuple[float, list[tuple[int, int, int]]]:
    """Best chain of intervals: ``costs[k, p, q]`` per stage; stages used form a prefix.

    Returns the value (bottleneck or sum) and the intervals ``(k, p, q)`` of the best plan;
    ties go to fewer stages, then to earlier cuts.
    """
    num, size, _ = costs.shape
    n = size - 1
    combine = np.maximum if objective == "throughput" else np.add
    best = np.full((num, size), np.inf)
    choice = np.zeros((num, size), dtype=np.int64)
    best[0] = costs[0, 0]
    for k in range(1, num):
        table = combine(best[k - 1][:, None], costs[k])
        choice[k] = table.argmin(axis=0)
        best[k] = table[choice[k], np.arange(size)]
    last = int(np.argmin(best[:, n]))
    value = float(best[last, n])
    intervals, q = [], n
    for k in range(last, 0, -1):
        p = int(choice[k, q])
        intervals.append((k, p, q))
        q = p
    intervals.append((0, 0, q))
    return value, intervals[::-1]


def solve_intervals(
    problem: PlanningProblem,
    order: Sequence[int],
    objective: str,
    spill: bool,
    gap: float,
    time_limit: float | None,
    solve: Callable | None = None,
) -> IntervalSolution | None:
    """The best contiguous plan over ``order`` within relative ``gap``, with a proven bound.

    Runs the master on the current interval costs (floors, exact once solved), solves its
    intervals exactly, and repeats until the master's plan is exactly costed, the best plan is
    within ``gap`` of the master's value, or ``time_limit`` seconds have passed. ``None`` when
    no contiguous plan fits (``spill=False`` only), when the interval table would exceed
    :data:`MAX_INTERVAL_CELLS`, or when the time runs out before the first bound.
    """
    began = time.perf_counter()
    n, num = len(problem.graph.ops), len(order)
    if n == 0:
        return IntervalSolution([], frozenset(), frozenset(), 0.0, 0.0, 0, 0, 0.0)
    if num * (n + 1) ** 2 > MAX_INTERVAL_CELLS:
        return None
    stages = _Stages(problem, order, spill)

    def out_of_time() -> bool:
        return time_limit is not None and time.perf_counter() - began > time_limit

    valid = np.zeros((num, n + 1, n + 1), dtype=bool)
    upper = np.triu(np.ones((n + 1, n + 1), dtype=bool), 1)
    valid[0, 0] = upper[0]
    valid[1:, 1:] = upper[1:]
    floors: dict[bytes, np.ndarray] = {}
    costs = np.full((num, n + 1, n + 1), np.inf)
    for k in range(num):
        key = (stages.capacity[k].tobytes() + stages.streamed[:, k].tobytes()
               + stages.resident[:, k].tobytes())
        if key not in floors:
            if out_of_time():
                return None
            floors[key] = stages.compute_floor(k)
        costs[k] = np.where(valid[k], floors[key] + stages.receive[k][:, None], np.inf)
    exact: dict[tuple[int, int, int], Residency] = {}
    best: tuple[float, list[tuple[int, int, int]]] = (math.inf, [])
    rounds, bound = 0, 0.0
    while True:
        rounds += 1
        bound, intervals = _master(costs, objective)
        if not math.isfinite(bound):
            break
        fresh = [iv for iv in intervals if iv not in exact]
        for k, p, q in fresh:
            exact[k, p, q] = stage_residency(stages, k, p, q, solve)
            if exact[k, p, q][3]:  # an unproven cost is no floor: the master keeps the floor
                costs[k, p, q] = exact[k, p, q][0] + stages.receive[k, p]
        parts = [exact[k, p, q][0] + stages.receive[k, p] for k, p, q in intervals]
        value = float(max(parts) if objective == "throughput" else sum(parts))
        if value < best[0]:
            best = (value, intervals)
        if not fresh or best[0] - bound <= gap * best[0] or out_of_time():
            break
    if not math.isfinite(best[0]):
        return None
    op_stage = [0] * n
    streamed: set[int] = set()
    spilled: set[int] = set()
    for k, p, q in best[1]:
        op_stage[p:q] = [k] * (q - p)
        streamed |= exact[k, p, q][1]
        spilled |= exact[k, p, q][2]
    return IntervalSolution(op_stage, frozenset(streamed), frozenset(spilled), best[0],
                            min(bound, best[0]), rounds, len(exact),
                            time.perf_counter() - began)


__all__ = [
    "IntervalSolution", "parked_values", "solve_intervals", "spill_cycles", "stage_residency"
]
