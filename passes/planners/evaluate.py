"""Judge a placement before any IR is rewritten: its workload on the simulator the driver gave."""

from __future__ import annotations

import dataclasses

from tvm_chiplet.passes.analysis.op_graph import OpGraph
from tvm_chiplet.passes.planners.base import PlanningProblem
from tvm_chiplet.passes.planners.placement import (
    REDUCTION_DIMS,
    WEIGHT_DIMS,
    OpSplit,
    Placement,
    PlanningError,
    blocks_by,
    part_bytes,
    tiles_by,
    weight_replicas,
)
from tvm_chiplet.targets.workload import (
    WorkItem,
    build_workload,
    replicate_items,
    replicate_loans,
)


def placement_items(problem: PlanningProblem, placement: Placement) -> list[WorkItem]:
    """The work items of ``placement`` on ``problem.graph`` (:func:`graph_items`)."""
    return graph_items(problem.graph, placement, problem.system.partial_sum_scale)


def built_items(problem: PlanningProblem, placement: Placement) -> list[WorkItem]:
    """The work items ``placement`` runs as built: those of its realised module when it splits
    ops and ``problem`` can realise them (the realisation is cached), else
    :func:`placement_items`."""
    if placement.splits and problem.realise is not None:
        return list(_realised_items(problem, placement)[1])
    return placement_items(problem, placement)


def realisation_key(placement: Placement) -> tuple:
    """What realising ``placement``'s splits depends on: where its ops run, its splits and how
    it bounds rows (:class:`~tvm_chiplet.passes.plan_split_placement.SplitRealiser` realises
    each distinct key once)."""
    return placement.op_cluster, placement.splits, placement.even_rows


def _realised_items(problem: PlanningProblem, placement: Placement
                    ) -> tuple[Placement, list[WorkItem]]:
    """The realised placement of ``placement`` (which splits ops) and its work items, kept in
    ``problem.memo``: they depend on the realisation and the copies alone, not on where the
    weights stream from, and the DRAM placements tried of one plan (:mod:`.dram`) and its
    judgement ask for them again and again (about a second each on HF-layout BERT-base's plan
    on the 16x16 mesh, 122 k ops). Keyed by what the realisation depends on (as
    :class:`~tvm_chiplet.passes.plan_split_placement.SplitRealiser` caches it), not by the
    realised graph: a realiser may hand one graph to placements whose ops it places apart.
    Callers copy the list before changing it."""
    key = ("built items", realisation_key(placement), placement.replicas)
    graph, realised = problem.realise(placement)
    if key not in problem.memo:
        problem.memo[key] = graph_items(graph, realised)
    return realised, problem.memo[key]


def graph_items(graph: OpGraph, placement: Placement, partial_scale: float = 1.0
                ) -> list[WorkItem]:
    """Compute ops as work items on their clusters; plumbing ops pass their producers through.

    A split op (:class:`OpSplit`) becomes one item per part (bytes from :func:`part_bytes`)
    plus a combine item (concat, or add for a reduction dimension) on the op's cluster, which
    its consumers read; the parts of a reduction send their partial sums at
    ``partial_scale`` times the bytes of the output
    (:attr:`~tvm_chiplet.targets.system.ChipletSystem.partial_sum_scale`). A placement with
    :attr:`Placement.replicas` gives the items of one input on every copy
    (:func:`replicate_items`), copy 0 first.
    """
    splits = {s.op_id: s for s in placement.splits}
    producers: dict[int, dict[int, int]] = {}  # op -> {compute op: bytes}
    index_of: dict[int, int] = {}
    items: list[WorkItem] = []
    for op in graph.ops:
        reads: dict[int, int] = {}
        for pred in sorted(graph.graph.predecessors(op.op_id)):
            nbytes = graph.graph.edges[pred, op.op_id]["nbytes"]
            sources = {pred: nbytes} if pred in index_of else producers.get(pred, {})
            for source, size in sources.items():
                reads[source] = reads.get(source, 0) + min(size, nbytes)
        deps = [(index_of[s], b) for s, b in sorted(reads.items())]
        if op.is_compute and op.op_id in splits:
            index_of[op.op_id] = _split_items(items, op, splits[op.op_id], deps, partial_scale,
                                              placement.op_cluster[op.op_id])
        elif op.is_compute:
            index_of[op.op_id] = len(items)
            items.append(WorkItem(
                op.name, placement.op_cluster[op.op_id], op.flops, op.bytes_moved,
                op.weight_bytes, deps, op.output_bytes, op.weight_key,
            ))
        else:
            producers[op.op_id] = reads
    return replicate_items(items, placement.copy_maps)


def _split_items(items: list[WorkItem], op, split: OpSplit, deps: list[tuple[int, int]],
                 partial_scale: float, home: int) -> int:
    """Append the parts and the combine item of a split op; return the combine item's index."""
    k = split.parts
    reduction = split.dim in REDUCTION_DIMS or blocks_by(split.dim) is not None
    part_in, part_out, weights = part_bytes(op.input_bytes, op.output_bytes, op.weight_bytes,
                                            split.dim, k, partial_scale)
    reads_all = split.dim in WEIGHT_DIMS and not reduction
    by = tiles_by(split.dim) or blocks_by(split.dim) or 1
    share = 1.0 if reads_all else by / k  # of each input read
    # Parts that hold the same weights: all of a row or batch split's, and a tiles split's
    # parts of one output-channel slice (part p holds slice p % by).
    replicated = weight_replicas(split.dim, k) > 1
    parts = []
    for p, cluster in enumerate(split.clusters):
        parts.append(len(items))
        items.append(WorkItem(
            f"{op.name}#{p}", cluster, op.flops / k, part_in + part_out + weights, weights,
            [(src, nbytes * share) for src, nbytes in deps], part_out,
            f"{op.weight_key or op.op_id}/{p % by}" if replicated else "",
        ))
    combine_flops = (k - 1) * op.output_bytes / 4.0 if reduction else 0.0
    items.append(WorkItem(
        f"{op.name}#combine", home, combine_flops, k * part_out + op.output_bytes, 0.0,
        [(part, part_out) for part in parts], op.output_bytes,
    ))
    return len(items) - 1


def simulate_placement(
    problem: PlanningProblem, placement: Placement, batches: int = 1, network: str = "flow",
    as_built: bool = False,
):
    """Simulate ``placement``: its workload from the shared cost model on ``problem.simulator``.

    With ``as_built``, a placement that splits ops is first realised by ``problem.realise``
    (when the problem has one) and simulated exactly as the compiled artifact runs; that costs
    a rewrite and reduction of the module (seconds), so searches over many candidates judge
    split ops from :func:`graph_items` and keep ``as_built`` for their final comparisons.

    The one door from planners to the device simulator; a placement simulated before on the
    same problem (``problem.memo``) is not simulated again. Raises :class:`PlanningError` when
    the problem carries no simulator.
    """
    if problem.simulator is None:
        raise PlanningError(
            "this strategy judges its candidates on the device simulator, but the planning "
            "problem has none; pass simulator=tvm_chiplet.runtime.device.simulate_workload to "
            "PlanPlacement / PlanSplitPlacement / get_pipeline (tvm_chiplet.build does)"
        )
    key = ("simulate", placement_key(placement), batches, network, as_built, problem.simulator)
    if key not in problem.memo:
        problem.memo[key] = _simulate(problem, placement, batches, network, as_built)
    return problem.memo[key]


def placement_key(placement: Placement) -> tuple:
    """What of ``placement`` its workload depends on: every field but its notes, strategy and
    objective (a field added to :class:`Placement` is keyed without another change here)."""
    return tuple(getattr(placement, f.name) for f in dataclasses.fields(placement)
                 if f.name not in _UNKEYED)


_UNKEYED = ("strategy", "objective_cycles", "notes")
"""The fields of a :class:`Placement` its workload does not depend on."""


def placement_workload(problem: PlanningProblem, placement: Placement,
                       graph: OpGraph | None = None):
    """The device workload of ``placement`` on ``graph`` (default ``problem.graph``):
    :func:`~tvm_chiplet.targets.workload.build_workload` of its items, DRAM placement, loans,
    pool and microbatch."""
    return _workload(problem, placement,
                     graph_items(problem.graph if graph is None else graph, placement))


def _workload(problem: PlanningProblem, placement: Placement, items: list[WorkItem]):
    """:func:`placement_workload` of ``placement``'s work ``items``."""
    return build_workload(
        items, problem.system, problem.topology, placement.dram_policy, placement.dram_shares,
        replicate_loans(placement.sram_loans, placement.copy_maps), placement.pool(),
        placement.microbatch)


def _simulate(problem: PlanningProblem, placement: Placement, batches: int, network: str,
              as_built: bool):
    if as_built and placement.splits and problem.realise is not None:
        placement, items = _realised_items(problem, placement)
        tasks, messages, _, fetches = _workload(problem, placement, items)
    else:
        tasks, messages, _, fetches = placement_workload(problem, placement)
    return problem.simulator(tasks, messages, problem.system, batches, network, fetches=fetches,
                             copies=placement.copies, microbatch=placement.microbatch)
