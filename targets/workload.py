"""The device workload of a placed model: tasks with cost-model cycles and routed messages.

One function serves the compiler (``plan.json`` of an artifact) and the planners (judging a
placement by simulation before any IR is rewritten), so both see the same numbers.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from tvm_chiplet.targets import cost_model
from tvm_chiplet.targets.system import ChipletSystem
from tvm_chiplet.targets.topology import Topology


@dataclass(frozen=True)
class WorkItem:
    """One compute op placed on a cluster, with what it reads from earlier items."""

    name: str
    cluster: int
    flops: float
    bytes_moved: float
    weight_bytes: float
    deps: Sequence[tuple[int, int]] = ()  # (producer item index, bytes read from it)


def build_workload(
    items: Sequence[WorkItem], system: ChipletSystem, topology: Topology | None = None
) -> tuple[list[dict], list[dict], list[bool]]:
    """Cycles per item and one message per cross-item dependency, with its route.

    A cluster whose items' weights together exceed its SRAM streams them from DRAM, so its
    items are costed with ``weights_resident=False``.

    Returns
    -------
    (tasks, messages, weights_resident)
        ``tasks[i]`` = ``{"name", "cluster", "cycles"}``; ``messages`` =
        ``{"src", "dst", "bytes", "route"}`` (empty route within a cluster);
        ``weights_resident[c]`` for every cluster.
    """
    topology = topology or Topology(system)
    weights_on = [0.0] * system.num_clusters
    for item in items:
        weights_on[item.cluster] += item.weight_bytes
    resident = [weights_on[c.id] <= c.sram_bytes for c in system.clusters]
    tasks, messages = [], []
    for index, item in enumerate(items):
        cycles = cost_model.op_cycles(
            item.flops, item.bytes_moved, item.weight_bytes, system.clusters[item.cluster], system,
            weights_resident=resident[item.cluster],
        )
        tasks.append({"name": item.name, "cluster": item.cluster, "cycles": cycles})
        for producer, nbytes in item.deps:
            src = items[producer].cluster
            route = topology.route(src, item.cluster) if src != item.cluster else []
            messages.append({"src": producer, "dst": index, "bytes": int(nbytes), "route": route})
    return tasks, messages, resident
