"""The result of planning: one cluster and one stage per op (no TVM here)."""

from __future__ import annotations

from dataclasses import dataclass, field

import tvm_ffi


@tvm_ffi.register_error
class PlanningError(ValueError):
    """A strategy cannot place this model on this system."""


@dataclass(frozen=True)
class Placement:
    """Where every op of the reduced ``main`` runs.

    Attributes
    ----------
    strategy : str
        Name of the planner that made it.
    op_cluster : tuple[int, ...]
        Cluster id of each op, indexed by ``op_id``.
    op_stage : tuple[int, ...]
        Pipeline stage of each op (0 for strategies without stages).
    stage_clusters : tuple[int, ...]
        Cluster that runs each stage.
    objective_cycles : float
        The planner's own estimate of what it minimised (bottleneck stage cycles for pipeline).
    """

    strategy: str
    op_cluster: tuple[int, ...]
    op_stage: tuple[int, ...]
    stage_clusters: tuple[int, ...]
    objective_cycles: float = 0.0
    notes: dict = field(default_factory=dict)

    def __post_init__(self) -> None:
        if len(self.op_cluster) != len(self.op_stage):
            raise PlanningError(
                f"placement has {len(self.op_cluster)} clusters but {len(self.op_stage)} stages"
            )

    def to_dict(self) -> dict:
        return {
            "strategy": self.strategy,
            "op_cluster": list(self.op_cluster),
            "op_stage": list(self.op_stage),
            "stage_clusters": list(self.stage_clusters),
            "objective_cycles": self.objective_cycles,
            "notes": dict(self.notes),
        }

    @classmethod
    def from_dict(cls, data: dict) -> Placement:
        return cls(
            strategy=data["strategy"],
            op_cluster=tuple(data["op_cluster"]),
            op_stage=tuple(data["op_stage"]),
            stage_clusters=tuple(data["stage_clusters"]),
            objective_cycles=float(data.get("objective_cycles", 0.0)),
            notes=dict(data.get("notes", {})),
        )
