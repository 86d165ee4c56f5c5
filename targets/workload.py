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
) -> tuple[list[dict], list[dict], list[bool], list[dict]]:
    """Cycles per item, one message per cross-item dependency, and DRAM weight fetches.

    A cluster whose items' weights together exceed its SRAM streams them from its nearest DRAM
    controller: each of its items with weights gets a fetch of those bytes, routed from the
    controller over the network, issued when the cluster's previous item ends (one weight
    buffer) and awaited before the item starts. The simulator shares the controller's bandwidth
    and the links among all fetches and messages, so streaming clusters contend.

    Returns
    -------
    (tasks, messages, weights_resident, fetches)
        ``tasks[i]`` = ``{"name", "cluster", "cycles"}`` (compute only); ``messages`` =
        ``{"src", "dst", "bytes", "route"}`` (empty route within a cluster);
        ``weights_resident[c]`` for every cluster; ``fetches`` = ``{"task", "cluster",
        "dram", "bytes", "route", "after"}`` (``after``: the item whose end issues it, or None).
    """
    topology = topology or Topology(system)
    weights_on = [0.0] * system.num_clusters
    for item in items:
        weights_on[item.cluster] += item.weight_bytes
    resident = [weights_on[c.id] <= c.sram_bytes for c in system.clusters]
    tasks, messages, fetches = [], [], []
    previous_on: dict[int, int] = {}
    for index, item in enumerate(items):
        cycles = cost_model.compute_cycles(
            item.flops, item.bytes_moved, system.clusters[item.cluster]
        )
        tasks.append({"name": item.name, "cluster": item.cluster, "cycles": cycles})
        if not resident[item.cluster] and item.weight_bytes > 0:
            dram = topology.nearest_dram(item.cluster)
            fetches.append({
                "task": index, "cluster": item.cluster, "dram": dram.id,
                "bytes": int(item.weight_bytes), "route": topology.route(dram.node, item.cluster),
                "after": previous_on.get(item.cluster),
            })
        previous_on[item.cluster] = index
        for producer, nbytes in item.deps:
            src = items[producer].cluster
            route = topology.route(src, item.cluster) if src != item.cluster else []
            messages.append({"src": producer, "dst": index, "bytes": int(nbytes), "route": route})
    return tasks, messages, resident, fetches
