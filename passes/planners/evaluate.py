"""Judge a placement before any IR is rewritten: its workload on the simulated device."""

from __future__ import annotations

from tvm_chiplet.passes.planners.base import PlanningProblem
from tvm_chiplet.passes.planners.placement import Placement
from tvm_chiplet.runtime.profile import simulate_workload
from tvm_chiplet.runtime.simulator import SimResult
from tvm_chiplet.targets.workload import WorkItem, build_workload


def placement_items(problem: PlanningProblem, placement: Placement) -> list[WorkItem]:
    """Compute ops as work items on their clusters; plumbing ops pass their producers through."""
    graph = problem.graph
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
        if op.is_compute:
            index_of[op.op_id] = len(items)
            items.append(WorkItem(
                op.name, placement.op_cluster[op.op_id], op.flops, op.bytes_moved,
                op.weight_bytes, [(index_of[s], b) for s, b in sorted(reads.items())],
            ))
        else:
            producers[op.op_id] = reads
    return items


def simulate_placement(
    problem: PlanningProblem, placement: Placement, batches: int = 1, network: str = "flow"
) -> SimResult:
    """Simulate ``placement`` with the shared cost model and the C++ device simulator."""
    items = placement_items(problem, placement)
    tasks, messages, _, fetches = build_workload(items, problem.system, problem.topology)
    return simulate_workload(tasks, messages, problem.system, batches, network, fetches=fetches)
