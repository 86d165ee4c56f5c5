"""Partition strategy and parallel group of every split op as integer variables (CN115860081A).

The integer program behind ``TensorParallelPlanner(search="ilp")`` and the split plans of the
``ilp`` strategy. It chooses, for every op that can be split, one option of
:meth:`~.tensor_parallel.TensorParallelPlanner._options` (a dimension over one of the nested
2-D groups of :func:`~.layouts.allocation_groups`, or whole), for the cost of
:class:`~.layouts.CostWalk`:

- **Roots.** An op that is not split follows the value it reads most (its largest input) back
  to the split op whose choice fixes its layout: its *root*. Its compute, and the moves between
  values of one root, depend on that root's choice alone (unary terms); a move of a value of
  root ``b`` into an op of root ``a`` depends on both choices (a pairwise term).
- **Variables.** ``x[a, o]``: op ``a`` takes option ``o``, one per op. Pairwise terms are
  linearised exactly by the marginal (local-polytope) formulation: ``y[b, a, ob, oa] >= 0``
  with ``sum_oa y = x[b, ob]`` and ``sum_ob y = x[a, oa]``; options of one side whose terms
  are equal against every option of the other (``b``'s options that leave the value in one
  layout, ``a``'s that want it in one) share one marginal, their ``x`` summed: the same
  optimum, with far fewer ``y`` on a large grid.
- **Memory**, as the device keeps weights: a cluster holds the parts of the ops it runs and
  the weights of the ops that follow them; what exceeds its weight budget (its SRAM less the
  stream buffer) streams from DRAM every input, ``over[c] >= held[c] - budget[c]``, and every
  tile's streamed bytes take their time at the DRAM controllers' share of bandwidth.
- **Objective.** Cycles of one input on each tile (stage) summed, plus ``inputs - 1`` times the
  busiest tile's, as :class:`~.tensor_parallel._Space` estimates.

Where the program and the walk differ, the walk (then the simulator) judges: the walk lets an op
follow its largest *distributed* input, known only as it walks, where the program fixes the
largest input; the walk keeps weights resident first come, first served and adds a part's fetch
to its compute, where the program streams each cluster's overflow, as the device does.
Attention's matmuls of two activations (``FOLLOW`` among their options) follow their inputs'
heads in the program.
"""

from __future__ import annotations

import time
from collections import defaultdict
from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np
import pulp

from tvm_chiplet.passes.planners.ilp_solvers import LateGap, make_solver
from tvm_chiplet.passes.planners.layouts import FOLLOW, FREE, CostWalk, Layout


@dataclass
class LayoutIlpResult:
    """What :func:`solve_layouts` found: the choice (op -> option), the solver's status, its
    objective and bound (cycles, as the program models them), seconds and variables."""

    choice: dict
    status: str
    objective: float | None
    bound: float | None
    seconds: float
    variables: int


class _Tree(Mapping):
    """The layouts of one root's values; any other value reads as FREE (its moves are pairwise
    terms, and the walk's step ignores a free input when choosing what to follow)."""

    def __init__(self) -> None:
        self.layout: dict[int, Layout] = {}

    def __getitem__(self, op_id: int) -> Layout:
        return self.layout.get(op_id, FREE)

    def __iter__(self):
        return iter(self.layout)

    def __len__(self) -> int:
        return len(self.layout)


@dataclass
class _Option:
    """One option of one root: its values' layouts, its cycles per tile (weights resident),
    the weight bytes it leaves on each cluster, and the moves into its ops from other roots:
    (value, want, bytes)."""

    layout: dict[int, Layout]
    cycles: np.ndarray
    weights: dict[int, float]
    inbound: list[tuple[int, Layout, float]]


def _roots(walk: CostWalk, decided: set[int]) -> list[int | None]:
    """Each op's root: itself when decided, else its largest input's root (plumbing: its
    first input's); None when it reads no split op's value."""
    root: list[int | None] = []
    for op in walk.ops:
        v, preds = op.op_id, walk.preds[op.op_id]
        if v in decided:
            root.append(v)
        elif walk.plumbing[v]:
            root.append(root[preds[0][0]] if preds else None)
        else:
            data = walk.data[v]
            root.append(root[data] if data is not None else None)
    return root


def _option(walk: CostWalk, root: list[int | None], members: list[int], r: int | None,
            chosen, fixed: dict) -> _Option:
    """Walk the values of root ``r`` with its choice ``chosen`` (see :class:`_Option`)."""
    costs = walk.costs
    tiles = len(costs.first) - 1
    tree = _Tree()
    cycles = np.zeros(tiles)
    weights_on: dict[int, float] = defaultdict(float)
    inbound = []
    for v in members:
        op, preds = walk.ops[v], walk.preds[v]
        if walk.plumbing[v]:
            tree.layout[v] = tree[preds[0][0]] if preds else FREE
            continue
        out, group, parts, dim, moves = walk.step(v, chosen if v == r else fixed.get(v, FOLLOW),
                                                  tree)
        for p, src, want, nbytes in moves:
            if p == v or root[p] == r:
                cycles[costs.tile_of[want.group]] += costs.move(src, want, nbytes)
            else:
                inbound.append((p, want, nbytes))
        fast, _, weights, held, _ = costs.part(op, group, parts, dim)
        cycles[costs.tile_of[group]] += fast
        for c in held if weights else ():
            weights_on[int(c)] += weights
        tree.layout[v] = out
    return _Option(tree.layout, cycles, dict(weights_on), inbound)


def _classes(cost: np.ndarray) -> list[list[int]]:
    """The options along ``cost``'s first axis grouped by equal costs against every option of
    the second axis (on every tile), in order of their first member."""
    groups: dict[bytes, list[int]] = {}
    for index in range(cost.shape[0]):
        groups.setdefault(cost[index].tobytes(), []).append(index)
    return list(groups.values())


def solve_layouts(walk: CostWalk, options: dict[int, list], inputs: int = 1,
                  solver: str = "highs", time_limit: float | None = 30.0,
                  mip_gap: float = 1e-4, late_gap: LateGap | None = None) -> LayoutIlpResult:
    """The choice of ``options`` (op -> its options, as tensor-parallel lists them) that
    minimises the program of the module docstring on ``walk``'s costs, for ``inputs`` inputs
    one after another, pipelined over the tiles, to within relative ``mip_gap`` of its
    optimum, or ``late_gap``'s once that has run long enough (:class:`~.ilp_solvers.LateGap`).
    Ops whose options include ``FOLLOW`` follow. When the solver finds no solution in
    ``time_limit`` seconds, the result has no objective and the choice is every op's last
    option."""
    began = time.perf_counter()
    costs, problem = walk.costs, walk.costs.problem
    tiles = len(costs.first) - 1
    fixed = {a: FOLLOW for a, opts in options.items() if FOLLOW in opts}
    decided = {a: list(opts) for a, opts in options.items() if a not in fixed}
    root = _roots(walk, set(decided))
    members: dict[int | None, list[int]] = defaultdict(list)
    for op in walk.ops:
        members[root[op.op_id]].append(op.op_id)
    table = {r: [_option(walk, root, members[r], r, o, fixed)
                 for o in (decided[r] if r is not None else [None])]
             for r in members}

    constant = np.zeros(tiles)
    unary: dict[int, list[np.ndarray]] = {r: [o.cycles.copy() for o in table[r]]
                                          for r in decided}
    pairs: dict[tuple[int, int], np.ndarray] = {}

    def unary_of(r: int | None, index: int) -> np.ndarray:
        return constant if r is None else unary[r][index]

    for r, opts in table.items():
        for index, option in enumerate(opts):
            for p, want, nbytes in option.inbound:
                b = root[p]
                tile = costs.tile_of[want.group]
                senders = table[b]
                moved = [costs.move(o.layout.get(p, FREE), want, nbytes) for o in senders]
                if b is None or r is None:
                    # One side has one option: the move is a term of the other's choice.
                    for ob, cycles in enumerate(moved):
                        unary_of(b if r is None else r, ob if r is None else index)[tile] += (
                            cycles)
                    continue
                if (b, r) not in pairs:
                    pairs[b, r] = np.zeros((len(senders), len(opts), tiles))
                pairs[b, r][:, index, tile] += moved
    for out_id in problem.graph.output_ops:
        r = root[out_id]
        for index, option in enumerate(table[r]):
            where = option.layout.get(out_id, FREE)
            if where.kind != "free":
                home = costs.home(costs.tile_of[where.group])
                unary_of(r, index)[costs.tile_of[home.group]] += costs.move(
                    where, home, walk.ops[out_id].output_bytes)
    constant += table[None][0].cycles if None in table else 0.0

    lp = pulp.LpProblem("layouts", pulp.LpMinimize)
    x = {(r, index): pulp.LpVariable(f"x_{r}_{index}", cat="Binary")
         for r, opts in decided.items() for index in range(len(opts))}
    for r, opts in decided.items():
        lp += pulp.lpSum(x[r, index] for index in range(len(opts))) == 1, f"one_{r}"

    tile_cost = [pulp.LpAffineExpression(constant=float(constant[t])) for t in range(tiles)]
    for r, opts in decided.items():
        for index in range(len(opts)):
            for t in range(tiles):
                if unary[r][index][t]:
                    tile_cost[t] += float(unary[r][index][t]) * x[r, index]
    for (b, a), cost in pairs.items():
        if not cost.any():
            continue
        # Options of one side whose moves cost the same against every option of the other
        # (they leave the value in one layout, or want it in one) share their marginals.
        senders, receivers = _classes(cost), _classes(cost.transpose(1, 0, 2))
        cost = cost[[group[0] for group in senders]][:, [group[0] for group in receivers]]
        nb, na = len(senders), len(receivers)
        y = {(i, j): pulp.LpVariable(f"y_{b}_{a}_{i}_{j}", lowBound=0)
             for i in range(nb) for j in range(na)}
        for i, group in enumerate(senders):
            lp += pulp.lpSum(y[i, j] for j in range(na)) == pulp.lpSum(
                x[b, o] for o in group), f"m_{b}_{a}_b{i}"
        for j, group in enumerate(receivers):
            lp += pulp.lpSum(y[i, j] for i in range(nb)) == pulp.lpSum(
                x[a, o] for o in group), f"m_{b}_{a}_a{j}"
        for t in range(tiles):
            terms = [(y[i, j], float(cost[i, j, t])) for i in range(nb) for j in range(na)
                     if cost[i, j, t]]
            if terms:
                tile_cost[t] += pulp.LpAffineExpression(terms)

    # Memory: each cluster streams what its weights exceed its budget by, at the DRAM rate.
    held: dict[int, list] = defaultdict(list)
    for r, opts in decided.items():
        for index in range(len(opts)):
            for c, nbytes in table[r][index].weights.items():
                held[c].append((x[r, index], nbytes))
    fixed_held = table[None][0].weights if None in table else {}
    for c, terms in held.items():
        over = pulp.LpVariable(f"over_{c}", lowBound=0)
        lp += over >= pulp.lpSum(nbytes * v for v, nbytes in terms) + fixed_held.get(c, 0.0) - (
            costs.budget(c)), f"sram_{c}"
        tile_cost[costs.tile_of_cluster(c)] += over * (1.0 / costs.dram_rate)

    if tiles == 1:
        lp += inputs * tile_cost[0]
    else:
        busiest = pulp.LpVariable("busiest", lowBound=0)
        for t in range(tiles):
            lp += busiest >= tile_cost[t], f"busiest_{t}"
        lp += pulp.lpSum(tile_cost) + (inputs - 1) * busiest

    result = make_solver(solver, time_limit, False, False, mip_gap, late_gap).solve(lp)
    choice = dict(fixed)
    if result.has_solution(lp):
        for r, opts in decided.items():
            best = max(range(len(opts)), key=lambda i: x[r, i].value() or 0.0)
            choice[r] = opts[best]
    else:
        choice.update({r: opts[-1] for r, opts in decided.items()})
    return LayoutIlpResult(choice, result.status, result.objective, result.bound,
                           time.perf_counter() - began, len(lp.variables()))
