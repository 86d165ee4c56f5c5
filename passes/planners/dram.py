"""Which DRAM controller holds the streamed weights of each cluster: a small LP (pulp).

Given a placement, the workload fixes how many weight bytes each cluster streams per batch
(``s_c``, see :mod:`tvm_chiplet.targets.workload`). Where those bytes live is the compiler's
choice: interleaved over every controller, all in the nearest one, or any mix. This LP picks
the mix that minimises the busiest resource:

    minimise   T
    subject to sum_d x[c, d] = 1                                   for every streaming cluster c
               sum_c s_c * x[c, d] <= T * bandwidth_d               for every controller d
               a_l + sum_{c, d : l on route(d, c)} s_c * x[c, d] <= T * bandwidth_l   per link l
               x >= 0

where ``a_l`` is the activation traffic the placement already puts on link ``l`` per batch.
"""

from __future__ import annotations

import dataclasses

import pulp

from tvm_chiplet.passes.planners.base import PlanningProblem
from tvm_chiplet.passes.planners.evaluate import placement_items
from tvm_chiplet.passes.planners.placement import Placement
from tvm_chiplet.targets.workload import build_workload, streamed_bytes


def balance_dram(problem: PlanningProblem, placement: Placement) -> Placement:
    """``placement`` with DRAM shares that minimise the busiest controller or link.

    Returns the placement unchanged when nothing streams, there is one controller, or pulp's
    bundled CBC cannot run.
    """
    system, topology = problem.system, problem.topology
    items = placement_items(problem, placement)
    streamed: dict[int, float] = {}
    for item, nbytes in zip(items, streamed_bytes(items, system), strict=True):
        if nbytes:
            streamed[item.cluster] = streamed.get(item.cluster, 0.0) + nbytes
    if not streamed or len(system.drams) < 2:
        return placement
    _, messages, _, _ = build_workload(items, system, topology, "nearest")
    background = [0.0] * len(system.links)
    for message in messages:
        for link in message["route"]:
            background[link] += message["bytes"]
    scale = max(streamed.values())  # keep the LP well conditioned
    lp = pulp.LpProblem("dram_shares", pulp.LpMinimize)
    busiest = pulp.LpVariable("busiest", lowBound=0)
    share = {
        (c, d.id): pulp.LpVariable(f"x_{c}_{d.id}", lowBound=0, upBound=1)
        for c in sorted(streamed) for d in system.drams
    }
    lp += busiest
    on_link: dict[int, list] = {}
    for c in sorted(streamed):
        lp += pulp.lpSum(share[c, d.id] for d in system.drams) == 1, f"all_bytes_{c}"
        for d in system.drams:
            for link in topology.route(d.node, c):
                on_link.setdefault(link, []).append(streamed[c] / scale * share[c, d.id])
    for d in system.drams:
        lp += (pulp.lpSum(streamed[c] / scale * share[c, d.id] for c in sorted(streamed))
               <= busiest * d.bandwidth), f"controller_{d.id}"
    for link, terms in sorted(on_link.items()):
        lp += (background[link] / scale + pulp.lpSum(terms)
               <= busiest * system.links[link].bandwidth), f"link_{link}"
    try:
        lp.solve(pulp.PULP_CBC_CMD(msg=False, timeLimit=10))
    except pulp.PulpSolverError:
        return placement  # no working solver: the placement keeps its own DRAM policy
    if pulp.LpStatus[lp.status] != "Optimal":
        return placement
    shares = tuple(
        (c, d.id, float(share[c, d.id].value()))
        for c in sorted(streamed) for d in system.drams
        if share[c, d.id].value() and share[c, d.id].value() > 1e-6
    )
    notes = {**placement.notes, "dram_busiest_cycles": float(busiest.value()) * scale}
    return dataclasses.replace(placement, dram_policy="balanced", dram_shares=shares, notes=notes)
