"""IR passes of tvm-chiplet; each can be dropped into a ``tvm.transform.Sequential``."""

from tvm_chiplet.passes.annotate_placement import AnnotatePlacement
from tvm_chiplet.passes.assign_placement import AssignPlacement
from tvm_chiplet.passes.partition_by_cluster import PartitionByCluster
from tvm_chiplet.passes.pipeline import PIPELINES, get_pipeline
from tvm_chiplet.passes.reduce_graph import ReduceGraph

__all__ = [
    "PIPELINES",
    "AnnotatePlacement",
    "AssignPlacement",
    "PartitionByCluster",
    "ReduceGraph",
    "get_pipeline",
]
