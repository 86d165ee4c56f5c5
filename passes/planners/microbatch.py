"""Choose how many inputs share each fetch of the streamed weights (batching, by simulation)."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable

from tvm_chiplet.passes.planners.base import PlanningProblem
from tvm_chiplet.passes.planners.evaluate import placement_items, simulate_placement
from tvm_chiplet.passes.planners.placement import Placement
from tvm_chiplet.targets.workload import batched, streamed_bytes


def microbatches(placement: Placement, batches: int) -> list[int]:
    """The microbatches worth trying for ``batches`` inputs: 2, 4, 8, ... above the
    placement's own, while a round of every copy runs no more inputs than ``batches`` rounded
    up to whole rounds of one input per copy (so that every candidate runs the same inputs or
    fewer)."""
    rounds = math.ceil(batches / placement.copies)
    sizes, size = [], 2 * placement.microbatch
    while size <= rounds:
        if math.ceil(rounds / size) * size == rounds:
            sizes.append(size)
        size *= 2
    return sizes


def fastest_microbatch(problem: PlanningProblem, placement: Placement, batches: int,
                       cost: Callable, network: str = "flow", as_built: bool = True):
    """``placement`` with the microbatch (:attr:`Placement.microbatch`) whose simulation of
    ``batches`` inputs costs least (``cost(sim)``), and that simulation.

    A placement keeps the microbatch its planner chose (1: inputs one by one) when it streams
    no weights, as a larger one only saves fetches. Otherwise the larger microbatches of
    :func:`microbatches` are simulated in increasing size until one costs more than the one
    before, or none of the placement's ops would batch it
    (:func:`~tvm_chiplet.targets.workload.batched`): larger microbatches fetch less often but
    hold more activations (and batch fewer ops), and fill a pipeline later. A larger
    microbatch lends no SRAM (:attr:`Placement.sram_loans`, sized for one input at a time,
    would crowd the lenders' activations); its weights keep the placement's DRAM placement.
    ``notes["microbatch_simulated_cycles"]`` gives every size tried and its cycles.
    """
    sim = simulate_placement(problem, placement, batches, network, as_built=as_built)
    sizes = microbatches(placement, batches)
    items = placement_items(problem, placement)
    if not sizes or not any(streamed_bytes(items, problem.system)):
        return placement, sim
    best, tried = (cost(sim), placement, sim), {placement.microbatch: float(sim.total_cycles)}
    for size in sizes:
        if not any(batched(items, problem.system, size)):
            break  # every op would run the inputs one by one: no fetch saved
        candidate = dataclasses.replace(placement.without_loans(), microbatch=size)
        sim = simulate_placement(problem, candidate, batches, network, as_built=as_built)
        tried[size] = float(sim.total_cycles)
        if cost(sim) >= best[0]:
            break
        best = (cost(sim), candidate, sim)
    chosen = dataclasses.replace(best[1], notes={**best[1].notes,
                                                 "microbatch_simulated_cycles": tried})
    return chosen, best[2]
