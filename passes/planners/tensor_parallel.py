"""Planners ``tensor-parallel`` and the ``layer-sequential`` baseline: ops split across clusters.

Both return a :class:`Placement` whose :attr:`~Placement.splits` name the ops to split, the
dimension and the clusters of the parts; DistributeTensors realises them with the parts kept
distributed, and collectives only where a consumer needs another layout.
"""

from __future__ import annotations

from tvm_chiplet.passes.planners.base import PlanningProblem
from tvm_chiplet.passes.planners.layouts import LayoutCosts, plan_cost
from tvm_chiplet.passes.planners.placement import OpSplit, Placement, PlanningError


def _require_split_dims(problem: PlanningProblem, strategy: str) -> None:
    if not problem.split_dims:
        raise PlanningError(
            f"{strategy} needs to know which ops can be split along which dimensions, and this "
            "problem has none (no conv2d or matmul, or split_dims not given); "
            f"build(..., strategy={strategy!r}) provides them, or use the pipeline strategy"
        )


class TensorParallelPlanner:
    """Split each conv2d / matmul over a 2-D group of clusters, in the layout that makes the
    whole model fastest, with the parts kept distributed between ops.

    Each op chooses a split dimension (:data:`~.placement.SPLIT_DIMS`: output or input
    channels, rows, batch; matmul columns, reduction, rows, batch) and a group among the
    nested sub-meshes of :func:`~.layouts.allocation_groups`, or runs whole on the first
    cluster. The choice is joint over the model (CN115829017B's strategy x allocation): the
    cost (:func:`~.layouts.plan_cost`) runs the ops one after another, each split op's slowest
    part (weights stationary while its clusters' SRAM holds them, else streamed from DRAM),
    plus every redistribution between a producer's layout and what its consumer needs, timed
    on the busiest link of the collective's messages. A consumer whose layout matches its
    producer's (an input-channel split after an output-channel split over the same group,
    two row splits) pays nothing, so chains of such pairs keep activations distributed.

    The search starts from the layer-sequential choice (every op over the largest group along
    its weights) and changes one op at a time to its best option given all others, sweep after
    sweep, until a sweep gains nothing (at most ``sweeps``).

    Parameters
    ----------
    max_parts : int, optional
        Most parts per op (default: every cluster).
    sweeps : int, default 4
        Most passes of the search over the ops.
    """

    name = "tensor-parallel"

    def __init__(self, max_parts: int | None = None, sweeps: int = 4) -> None:
        if max_parts is not None and max_parts < 1:
            raise PlanningError(f"max_parts must be >= 1, got {max_parts}")
        if sweeps < 1:
            raise PlanningError(f"sweeps must be >= 1, got {sweeps}")
        self.max_parts = max_parts
        self.sweeps = sweeps

    def plan(self, problem: PlanningProblem) -> Placement:
        _require_split_dims(problem, self.name)
        costs = LayoutCosts(problem)
        limit = self.max_parts or problem.system.num_clusters
        options = {op_id: self._options(costs, dims, limit)
                   for op_id, dims in sorted(problem.split_dims.items())}
        choice = {op_id: opts[-1] for op_id, opts in options.items()}
        best = plan_cost(costs, choice)
        sweeps = 0
        for sweeps in range(1, self.sweeps + 1):  # noqa: B007 (reported below)
            gained = False
            for op_id, opts in options.items():
                kept = choice[op_id]
                for option in opts:
                    if option == kept:
                        continue
                    choice[op_id] = option
                    cost = plan_cost(costs, choice)
                    if cost < best * (1 - 1e-9):
                        best, kept, gained = cost, option, True
                choice[op_id] = kept
            if not gained:
                break
        groups = [g.members for g in costs.groups]
        splits = tuple(OpSplit(op_id, dim, groups[group])
                       for op_id, option in choice.items() if option is not None
                       for dim, group in [option])
        home = groups[0][0]
        n = len(problem.graph.ops)
        return Placement(
            strategy=self.name,
            op_cluster=(home,) * n,
            op_stage=(0,) * n,
            stage_clusters=(home,),
            objective_cycles=best,
            notes={"split_ops": len(splits), "sweeps": sweeps,
                   "groups": sorted({len(s.clusters) for s in splits})},
            splits=splits,
        )

    @staticmethod
    def _options(costs: LayoutCosts, dims: dict[str, int], limit: int
                 ) -> list[tuple[str, int] | None]:
        """Whole (None), then every (dim, group) the op's sizes allow; last: the
        layer-sequential choice (the first weight dimension over the largest group)."""
        options: list[tuple[str, int] | None] = [None]
        for dim, size in dims.items():
            for index, group in enumerate(costs.groups):
                if 2 <= group.size <= min(size, limit):
                    options.append((dim, index))
        weight = next((d for d in LAYER_SEQUENTIAL_DIMS if d in dims), None)
        fits = [o for o in options if o is not None and o[0] == weight]
        if fits:
            options.remove(fits[-1])
            options.append(fits[-1])
        return options


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
