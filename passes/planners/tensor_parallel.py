"""Planners ``tensor-parallel`` and the ``layer-sequential`` baseline: ops split across clusters.

Both return a :class:`Placement` whose :attr:`~Placement.splits` name the ops to split, the
dimension and the clusters of the parts; DistributeTensors realises them with the parts kept
distributed, and collectives only where a consumer needs another layout.
"""

from __future__ import annotations

from tvm_chiplet.passes.analysis.dependency_modules import op_depth
from tvm_chiplet.passes.planners.base import PlanningProblem
from tvm_chiplet.passes.planners.placement import (
    WEIGHT_DIMS,
    OpSplit,
    Placement,
    PlanningError,
    part_bytes,
)
from tvm_chiplet.targets import cost_model


def _require_split_dims(problem: PlanningProblem, strategy: str) -> None:
    if not problem.split_dims:
        raise PlanningError(
            f"{strategy} needs to know which ops can be split along which dimensions, and this "
            "problem has none (no conv2d or matmul, or split_dims not given); "
            f"build(..., strategy={strategy!r}) provides them, or use the pipeline strategy"
        )


def hub_cluster(problem: PlanningProblem) -> int:
    """The cluster with the fewest total hops to all others (lowest id on ties)."""
    topology, clusters = problem.topology, range(problem.system.num_clusters)
    return min(clusters, key=lambda c: (sum(topology.hops(c, o) for o in clusters), c))


def depth_modules(problem: PlanningProblem) -> list[list[int]]:
    """Ops grouped by their depth (:func:`~.dependency_modules.op_depth`)."""
    modules: dict[int, list[int]] = {}
    for node, depth in enumerate(op_depth(problem.graph)):
        modules.setdefault(depth, []).append(node)
    return [modules[d] for d in sorted(modules)]


class TensorParallelPlanner:
    """Split each op over the clusters around a hub when that lowers its modeled time.

    Ops are grouped into scheduling modules by depth. Within a module, each op picks the
    combination of a split dimension and an allocation (the ``k`` clusters nearest the hub, ``k``
    a power of two up to ``max_parts``, or no split) with least cost: the slowest part's compute
    (weights streamed from DRAM once a cluster's SRAM is full), plus the re-distribution traffic
    (scattering the inputs from the hub, gathering the parts back), where the hub's own links
    are shared by all parts. Ops of one module take disjoint allocations so that independent
    branches run side by side. Ops that cannot be split run on the hub.

    Parameters
    ----------
    max_parts : int, optional
        Most parts per op (default: every cluster).
    """

    name = "tensor-parallel"

    def __init__(self, max_parts: int | None = None) -> None:
        if max_parts is not None and max_parts < 1:
            raise PlanningError(f"max_parts must be >= 1, got {max_parts}")
        self.max_parts = max_parts

    def plan(self, problem: PlanningProblem) -> Placement:
        _require_split_dims(problem, self.name)
        system, topology, graph = problem.system, problem.topology, problem.graph
        hub = hub_cluster(problem)
        near = sorted(range(system.num_clusters), key=lambda c: (topology.hops(hub, c), c))
        hub_out = sum(link.bandwidth for link in system.links if link.src == hub) or 1.0
        weights_on = [0.0] * system.num_clusters
        splits, total, op_stage = [], 0.0, [0] * len(graph.ops)
        for stage, module in enumerate(depth_modules(problem)):
            free = list(near)
            compute_ops = [i for i in module if graph.ops[i].is_compute]
            for op_id in module:
                op_stage[op_id] = stage
            for rank, op_id in enumerate(compute_ops):
                share = free if rank == len(compute_ops) - 1 else free[: max(
                    1, len(free) // (len(compute_ops) - rank))]
                cost, dim, clusters = self._best(problem, op_id, share, weights_on, hub, hub_out)
                total += cost
                op = graph.ops[op_id]
                part_weights = op.weight_bytes / len(clusters) if dim in WEIGHT_DIMS else (
                    op.weight_bytes)
                for c in clusters:
                    weights_on[c] += part_weights
                if dim is not None:
                    splits.append(OpSplit(op_id, dim, tuple(clusters)))
                if len(compute_ops) > 1:
                    free = [c for c in free if c not in clusters] or list(near)
        return Placement(
            strategy=self.name,
            op_cluster=(hub,) * len(graph.ops),
            op_stage=tuple(op_stage),
            stage_clusters=(hub,),
            objective_cycles=total,
            notes={"hub": hub, "split_ops": len(splits)},
            splits=tuple(splits),
        )

    def _best(self, problem, op_id, allowed, weights_on, hub, hub_out):
        """(cost, dim or None, clusters) of the cheapest way to run ``op_id``."""
        op = problem.graph.ops[op_id]
        options = [(None, 1)]
        limit = min(len(allowed), self.max_parts or len(allowed))
        for dim, size in problem.split_dims.get(op_id, {}).items():
            k = 2
            while k <= min(limit, size):
                options.append((dim, k))
                k *= 2
            if min(limit, size) >= 2 and min(limit, size) & (min(limit, size) - 1):
                options.append((dim, min(limit, size)))
        best = None
        for dim, k in options:
            clusters = allowed[:k] if dim is not None else [allowed[0]]
            cost = _split_cost(problem, op, dim, clusters, weights_on, hub, hub_out)
            if best is None or cost < best[0] - 1e-9:
                best = (cost, dim, clusters)
        return best


def _split_cost(problem, op, dim, clusters, weights_on, hub, hub_out) -> float:
    """Modeled cycles of ``op`` split along ``dim`` over ``clusters`` (``dim=None``: whole)."""
    system = problem.system
    k = len(clusters)
    part_in, part_out, weights = part_bytes(op.input_bytes, op.output_bytes, op.weight_bytes,
                                            dim, k)
    compute = 0.0
    for c in clusters:
        cluster = system.clusters[c]
        resident = weights_on[c] + weights <= cluster.sram_bytes
        compute = max(compute, cost_model.op_cycles(
            op.flops / k, part_in + part_out + weights, weights, cluster, system,
            weights_resident=resident,
        ))
    remote = [c for c in clusters if c != hub]
    if not remote:
        return compute
    scatter = max(problem.transfer_cycles(int(part_in), hub, c) for c in remote)
    gather = max(problem.transfer_cycles(int(part_out), c, hub) for c in remote)
    shared = len(remote) * (part_in + part_out) / hub_out
    return compute + max(scatter + gather, shared)


LAYER_SEQUENTIAL_DIMS = ("out_channels", "cols", "rows", "batch")
"""Dimensions the layer-sequential baseline splits along, in order of preference."""


class LayerSequentialPlanner:
    """Baseline: every layer over all clusters, weights stationary, one layer at a time.

    As Simba and Tangram run a network: each conv2d / matmul is split along its first weight
    dimension (output channels, matmul columns) over every cluster in snake order (fewer when
    the dimension is smaller), so each cluster holds its slice of every layer's weights (in
    SRAM when they fit). DistributeTensors keeps the activations distributed between layers:
    the ops in between follow the channel split, and each layer gathers its input from every
    cluster (an all-gather), not through one cluster. Ops that nothing splits run on the first
    cluster. For comparison only (``auto`` does not try it).
    """

    name = "layer-sequential"

    def plan(self, problem: PlanningProblem) -> Placement:
        _require_split_dims(problem, self.name)
        order = list(problem.topology.cluster_order())
        home = order[0]
        splits = []
        for op_id in sorted(problem.split_dims):
            dims = problem.split_dims[op_id]
            dim = next((d for d in LAYER_SEQUENTIAL_DIMS if d in dims), None)
            parts = min(len(order), dims[dim]) if dim else 1
            if parts >= 2:
                splits.append(OpSplit(op_id, dim, tuple(order[:parts])))
        n = len(problem.graph.ops)
        return Placement(
            strategy=self.name,
            op_cluster=(home,) * n,
            op_stage=(0,) * n,
            stage_clusters=(home,),
            notes={"split_ops": len(splits)},
            splits=tuple(splits),
        )
