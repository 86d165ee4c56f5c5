"""Named pass pipelines, a registry in the manner of ``relax.pipeline``."""

from __future__ import annotations

from collections.abc import Callable

import tvm

from tvm_chiplet.passes.conv1d_as_conv2d import Conv1dAsConv2d
from tvm_chiplet.passes.einsum_as_matmul import EinsumAsMatmul
from tvm_chiplet.passes.group_norm_by_channels import GroupNormByChannels
from tvm_chiplet.passes.partition_by_cluster import PartitionByCluster
from tvm_chiplet.passes.plan_placement import PlanPlacement
from tvm_chiplet.passes.plan_split_placement import PlanSplitPlacement
from tvm_chiplet.passes.planners import DataParallelPlanner, Planner
from tvm_chiplet.passes.planners.base import WorkloadSimulator
from tvm_chiplet.passes.reduce_graph import ReduceGraph
from tvm_chiplet.passes.replicate_data_parallel import ReplicateDataParallel
from tvm_chiplet.passes.slice_strided_convs import SliceStridedConvs
from tvm_chiplet.passes.unpack_projections import UnpackProjections
from tvm_chiplet.targets.system import ChipletSystem


def prepare_splits() -> tvm.transform.Pass:
    """The rewrites of a model before it is planned for splits, with the same results:
    EinsumAsMatmul (an einsum split as the matmul it stands for), Conv1dAsConv2d (1-D
    convolutions split as 2-D ones), SliceStridedConvs (a strided
    1x1 conv reads only the pixels it uses), GroupNormByChannels (a group norm's statistics
    taken on the image, not a flattened view of each group) and UnpackProjections (a packed
    Q/K/V projection as three). Benchmarks that plan a model apply it as the
    ``chiplet-default`` pipeline does. FlattenMatmulRows (one-row projections as one of many
    rows) is planned beside it, not in its place (:func:`~.plan_split_placement.plan_splits`)."""
    return tvm.transform.Sequential([EinsumAsMatmul(), Conv1dAsConv2d(), SliceStridedConvs(),
                                     GroupNormByChannels(), UnpackProjections()],
                                    name="chiplet-prepare-splits")


def _chiplet_default(
    system: ChipletSystem, target: str | tvm.target.Target = "llvm",
    strategy: str | Planner = "pipeline", simulator: WorkloadSimulator | None = None,
) -> tvm.transform.Pass:
    if strategy == DataParallelPlanner.name:
        # An einsum's batch is followed through the matmul it stands for.
        passes = [EinsumAsMatmul(), ReplicateDataParallel(max_replicas=system.num_clusters),
                  ReduceGraph(target), PlanPlacement(system, strategy, simulator)]
    else:
        passes = [prepare_splits(), PlanSplitPlacement(system, strategy, target, simulator)]
    return tvm.transform.Sequential([*passes, PartitionByCluster()], name="chiplet-default")


def _chiplet_reduce(
    system: ChipletSystem, target: str | tvm.target.Target = "llvm",
    strategy: str | Planner = "pipeline", simulator: WorkloadSimulator | None = None,
) -> tvm.transform.Pass:
    del system, strategy, simulator
    return tvm.transform.Sequential([ReduceGraph(target)], name="chiplet-reduce")


PIPELINES: dict[str, Callable[..., tvm.transform.Pass]] = {
    "chiplet-default": _chiplet_default,
    "chiplet-reduce": _chiplet_reduce,
}


def get_pipeline(name: str = "chiplet-default", **options) -> tvm.transform.Pass:
    """The pass pipeline registered as ``name``.

    ``chiplet-default``: :func:`prepare_splits` -> PlanSplitPlacement (ReduceGraph, plan, and for
    strategies that split ops DistributeTensors and ReduceGraph again) -> PartitionByCluster;
    for the ``data-parallel`` strategy EinsumAsMatmul -> ReplicateDataParallel -> ReduceGraph
    -> PlanPlacement -> PartitionByCluster.
    ``chiplet-reduce``: ReduceGraph only (what the plain fused TVM build sees).

    Parameters
    ----------
    name : str
        A registered pipeline name.
    **options
        ``system`` (ChipletSystem, required), ``target``, ``strategy`` and ``simulator`` (the
        device simulator that judges the planner's candidates, e.g.
        :func:`tvm_chiplet.runtime.device.simulate_workload`).
    """
    if name not in PIPELINES:
        raise ValueError(f"unknown pipeline {name!r}; valid pipelines: {', '.join(PIPELINES)}")
    if "system" not in options:
        raise ValueError(f"pipeline {name!r} needs system=ChipletSystem")
    return PIPELINES[name](**options)
