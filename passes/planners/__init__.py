"""Placement strategies. Planners work on plain graphs, arrays and dataclasses, never on IR."""

import inspect

from tvm_chiplet.passes.planners.auto import AutoPlanner
from tvm_chiplet.passes.planners.base import Planner, PlanningProblem
from tvm_chiplet.passes.planners.data_parallel import DataParallelPlanner
from tvm_chiplet.passes.planners.fault_aware import FaultAwarePlanner
from tvm_chiplet.passes.planners.ilp import IlpPlanner
from tvm_chiplet.passes.planners.modular import ModularPlanner
from tvm_chiplet.passes.planners.partition import min_bottleneck_partition
from tvm_chiplet.passes.planners.pipeline_planner import PipelinePlanner
from tvm_chiplet.passes.planners.placement import Placement, PlanningError
from tvm_chiplet.passes.planners.single import SinglePlanner
from tvm_chiplet.passes.planners.tensor_parallel import (
    LayerSequentialPlanner,
    TensorParallelPlanner,
)

PLANNERS: dict[str, type] = {
    PipelinePlanner.name: PipelinePlanner,
    DataParallelPlanner.name: DataParallelPlanner,
    IlpPlanner.name: IlpPlanner,
    AutoPlanner.name: AutoPlanner,
    TensorParallelPlanner.name: TensorParallelPlanner,
    ModularPlanner.name: ModularPlanner,
    SinglePlanner.name: SinglePlanner,
    LayerSequentialPlanner.name: LayerSequentialPlanner,
    FaultAwarePlanner.name: FaultAwarePlanner,
}
BASELINES = (SinglePlanner.name, LayerSequentialPlanner.name)


def get_planner(name: str, **options) -> Planner:
    """Instantiate the planner registered as ``name``; unknown names list the valid ones."""
    if name not in PLANNERS:
        raise PlanningError(f"unknown strategy {name!r}; valid strategies: {', '.join(PLANNERS)}")
    return PLANNERS[name](**options)


def plans_for_inputs(name: str) -> bool:
    """Whether the planner registered as ``name`` plans for a number of inputs (``batches``)."""
    return name in PLANNERS and "batches" in inspect.signature(PLANNERS[name]).parameters


def planner_for_inputs(name: str, batches: int) -> Planner:
    """The planner registered as ``name``, planned for ``batches`` inputs where it takes a
    number of inputs (:func:`plans_for_inputs`)."""
    return get_planner(name, **({"batches": batches} if plans_for_inputs(name) else {}))


__all__ = [
    "BASELINES",
    "PLANNERS",
    "AutoPlanner",
    "DataParallelPlanner",
    "FaultAwarePlanner",
    "IlpPlanner",
    "LayerSequentialPlanner",
    "ModularPlanner",
    "PipelinePlanner",
    "Placement",
    "Planner",
    "PlanningError",
    "PlanningProblem",
    "SinglePlanner",
    "TensorParallelPlanner",
    "get_planner",
    "min_bottleneck_partition",
    "planner_for_inputs",
    "plans_for_inputs",
]
