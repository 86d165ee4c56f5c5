"""Where the streamed weights of each cluster live: DRAM controllers and spare SRAM (pulp LP).

Given a placement, the workload fixes how many weight bytes each cluster streams per batch
(``s_c``, see :mod:`tvm_chiplet.targets.workload`). Where those bytes live is the compiler's
choice: interleaved over every controller, all in the nearest one, any mix, and -- with
lending -- partly in the spare SRAM of clusters whose own weights leave room (``spare_k``). This
LP picks the mix that minimises the busiest resource, in bytes per batch:

    minimise   T (with lending: then the sum of bytes times route hops at that T)
    subject to sum_d a[c, d] + sum_k y[c, k] = s_c                 for every streaming cluster c
               sum_c y[c, k] <= spare_k                             for every lender k
               sum_c a[c, d] <= T * bandwidth_d                     for every controller d
               b_l + sum_{c, d : l on route(d, c)} a[c, d]
                   + sum_{c, k : l on route(k, c)} y[c, k] <= T * bandwidth_l   per link l
               a, y >= 0

where ``a[c, d]`` are the bytes controller ``d`` sends to ``c``, ``y[c, k]`` the bytes lender
``k`` holds for ``c`` (only with lending) and ``b_l`` the activation traffic the placement
already puts on link ``l`` per batch. Many lenders can often serve a borrower equally well;
with lending the LP then takes, among the least-busiest solutions, the one with the fewest bytes
times hops (a controller counting as one): near lenders load fewer links (on ResNet-50 mesh-4x4
that simulated 6 % faster; without lending the second step changed little and not always for the
better, so it is left out).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Collection

import pulp

from tvm_chiplet.passes.planners.base import PlanningProblem
from tvm_chiplet.passes.planners.evaluate import (
    built_items,
    placement_items,
    simulate_placement,
)
from tvm_chiplet.passes.planners.placement import WEIGHT_DIMS, Placement
from tvm_chiplet.targets.workload import build_workload, cluster_totals, streamed_bytes


def balance_dram(problem: PlanningProblem, placement: Placement, lend: bool = False,
                 lenders: Collection[int] | None = None, as_built: bool = False) -> Placement:
    """``placement`` with DRAM shares (and, with ``lend``, SRAM loans from ``lenders``, default
    every cluster) that minimise the busiest controller or link.

    Returns the placement unchanged when nothing streams, there is one controller and nothing
    to lend, or pulp's bundled CBC cannot run. A placement with copies gets no loans here (the
    LP sees one copy's traffic); plan its tile alone and map the loans with the copies. With
    ``as_built``, a placement that splits ops is balanced on the workload of its realised
    module (``problem.realise``), as it will run: the realised parts may stream on other
    clusters than the planner's equal shares say, and a loan to a cluster that does not
    stream is invalid.
    """
    system, topology = problem.system, problem.topology
    built = as_built and bool(placement.splits) and problem.realise is not None
    items = built_items(problem, placement) if built else placement_items(problem, placement)
    weights, streams = cluster_totals(items, system, streamed_bytes(items, system))
    streamed = {c: float(nbytes) for c, nbytes in enumerate(streams) if nbytes}
    lend = lend and not placement.replicas
    # Split parts are realised as whole slices, up to one slice off the planner's equal share:
    # loans leave that much room on both sides, so they stay valid on the compiled module.
    rounding = [0.0] * system.num_clusters
    for split in () if built else placement.splits:
        if split.dim in WEIGHT_DIMS:
            op = problem.graph.ops[split.op_id]
            size = problem.split_dims.get(split.op_id, {}).get(split.dim, split.parts)
            for c in split.clusters:
                rounding[c] += op.weight_bytes / size
    spare = {c.id: c.sram_bytes - weights[c.id] - rounding[c.id] for c in system.clusters
             if lend and c.id not in streamed
             and c.sram_bytes > weights[c.id] + rounding[c.id]
             and (lenders is None or c.id in lenders)}
    if not streamed or (len(system.drams) < 2 and not spare):
        return placement
    _, messages, _, _ = build_workload(items, system, topology, "nearest")
    background = [0.0] * len(system.links)
    for message in messages:
        for link in message["route"]:
            background[link] += message["bytes"]
    scale = max(streamed.values())  # keep the LP well conditioned
    lp = pulp.LpProblem("dram_shares", pulp.LpMinimize)
    busiest = pulp.LpVariable("busiest", lowBound=0)
    # Fractions of each cluster's streamed bytes: from each controller, and lent by each lender.
    share = {
        (c, d.id): pulp.LpVariable(f"x_{c}_{d.id}", lowBound=0, upBound=1)
        for c in sorted(streamed) for d in system.drams
    }
    loan = {(c, k): pulp.LpVariable(f"y_{c}_{k}", lowBound=0, upBound=1)
            for c in sorted(streamed) for k in sorted(spare)}
    lp += busiest
    # Constraints from (variable, coefficient) lists, each variable once: pulp's arithmetic
    # builds an expression object per term, seconds for the loans of a 256-cluster grid.
    on_link: dict[int, list] = {}
    for c in sorted(streamed):
        part = streamed[c] / scale
        lp += pulp.LpAffineExpression(
            [(share[c, d.id], 1) for d in system.drams]
            + [(loan[c, k], 1) for k in sorted(spare)]) == 1, f"all_bytes_{c}"
        if spare:
            lp += (pulp.LpAffineExpression([(loan[c, k], 1) for k in sorted(spare)])
                   <= max(0.0, 1.0 - rounding[c] / streamed[c])), f"borrowed_{c}"
        for d in system.drams:
            for link in topology.route(d.node, c):
                on_link.setdefault(link, []).append((share[c, d.id], part))
        for k in sorted(spare):
            for link in topology.route(k, c):
                on_link.setdefault(link, []).append((loan[c, k], part))
    for k in sorted(spare):
        lp += (pulp.LpAffineExpression(
            [(loan[c, k], streamed[c] / scale) for c in sorted(streamed)])
               <= spare[k] / scale), f"spare_sram_{k}"
    for d in system.drams:
        lp += pulp.LpAffineExpression(
            [(share[c, d.id], streamed[c] / scale) for c in sorted(streamed)]
            + [(busiest, -d.bandwidth)]) <= 0, f"controller_{d.id}"
    for link, terms in sorted(on_link.items()):
        lp += pulp.LpAffineExpression([*terms, (busiest, -system.links[link].bandwidth)],
                                      background[link] / scale) <= 0, f"link_{link}"
    try:
        lp.solve(pulp.PULP_CBC_CMD(msg=False, timeLimit=10))
        if spare and pulp.LpStatus[lp.status] == "Optimal":
            # Among the solutions as good (up to solver tolerance), the shortest routes.
            lp += busiest <= (1.0 + 1e-6) * busiest.value(), "least_busiest"
            lp.setObjective(pulp.LpAffineExpression(
                [(var, streamed[c] / scale * (1 + len(topology.route(system.drams[d].node, c))))
                 for (c, d), var in share.items()]
                + [(var, streamed[c] / scale * len(topology.route(k, c)))
                   for (c, k), var in loan.items()]))
            lp.solve(pulp.PULP_CBC_CMD(msg=False, timeLimit=10))
    except pulp.PulpSolverError:
        return placement  # no working solver: the placement keeps its own DRAM policy
    if pulp.LpStatus[lp.status] != "Optimal":
        return placement
    loans, room = [], {k: int(spare[k]) for k in spare}
    for c in sorted(streamed):
        for k in sorted(spare):
            nbytes = min(int((loan[c, k].value() or 0.0) * streamed[c]), room[k])
            if nbytes >= 1:  # whole bytes, within the lender's room despite solver tolerance
                loans.append((c, k, nbytes))
                room[k] -= nbytes
    loans = tuple(loans)
    shares = []
    for c in sorted(streamed):
        from_dram = sum(share[c, d.id].value() or 0.0 for d in system.drams)
        shares += [(c, d.id, float(share[c, d.id].value() / from_dram)) for d in system.drams
                   if from_dram > 0 and (share[c, d.id].value() or 0.0) > 1e-6 * from_dram]
    notes = {**placement.notes, "dram_busiest_cycles": float(busiest.value()) * scale}
    if loans:
        notes["sram_lent_bytes"] = sum(nbytes for _, _, nbytes in loans)
    return dataclasses.replace(placement, dram_policy="balanced", dram_shares=tuple(shares),
                               sram_loans=loans, notes=notes)


def fastest_dram(problem: PlanningProblem, placement: Placement, batches: int,
                 as_built: bool = False, nearest: bool = False) -> tuple[Placement, float]:
    """``placement`` with the DRAM placement of its streamed weights that simulates fastest for
    ``batches`` inputs (``as_built``: op splits realised), and its cycles: interleaved over
    every controller, balanced over them by :func:`balance_dram`, balanced with SRAM loans,
    and with ``nearest`` also all in the nearest controller; for copies, also kept once between
    them in a weight pool (:attr:`~.placement.Placement.weight_pool`; what the pool's SRAM
    cannot hold interleaved, or with ``nearest`` from the nearest controller).
    ``notes["dram_placement"]`` names the pick, ``notes["dram_placement_simulated_cycles"]``
    every candidate's cycles and ``notes["simulated_as_built"]`` whether its op splits were
    realised for that. A placement that has a weight pool keeps it (its planner chose it), its
    overflow interleaved, or with ``nearest`` in the nearest controller only (each simulation
    of many copies is costly, and the nearest was as fast or faster on the four standard cases
    and BERT-base on a 16x16 mesh). The placement's microbatch is kept (with one above 1, no
    SRAM loans are tried)."""
    # Every candidate starts from the placement's work alone, wherever its weights were.
    pooled = placement.weight_pool
    placement = dataclasses.replace(placement.without_loans(), dram_policy="interleave",
                                    dram_shares=(), weight_pool=False)
    candidates = {}
    if not pooled:
        balanced = balance_dram(problem, placement, as_built=as_built)
        candidates["interleave"] = placement
        if nearest and balanced is not placement:  # else nothing streams, or one controller
            candidates["nearest"] = dataclasses.replace(placement, dram_policy="nearest")
        candidates["balanced"] = balanced
        if not placement.replicas and placement.microbatch == 1:
            # Copies borrow no SRAM (balance_dram); loans are sized for one input at a time.
            candidates["balanced+loans"] = balance_dram(problem, placement, lend=True,
                                                        as_built=as_built)
    if pooled or (placement.replicas and any(
            streamed_bytes(placement_items(problem, placement), problem.system))):
        # Copies that stream may keep one set of weights between them instead (a weight pool).
        if not (pooled and nearest):
            candidates["pooled"] = dataclasses.replace(placement, weight_pool=True)
        if nearest:
            candidates["pooled+nearest"] = dataclasses.replace(
                placement, weight_pool=True, dram_policy="nearest")
    simulated = {}
    for name, cand in candidates.items():
        if cand is placement and name != "interleave":
            continue  # nothing streams: the same placement
        simulated[name] = float(simulate_placement(problem, cand, batches,
                                                   as_built=as_built).total_cycles)
    pick = min(simulated, key=simulated.get)
    notes = {**placement.notes, "dram_placement": pick,
             "dram_placement_simulated_cycles": simulated, "simulated_as_built": as_built}
    return dataclasses.replace(candidates[pick], notes=notes), simulated[pick]
