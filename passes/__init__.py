"""IR passes of tvm-chiplet; each can be dropped into a ``tvm.transform.Sequential``."""

import tvm_ffi

from tvm_chiplet.passes.annotate_placement import AnnotatePlacement
from tvm_chiplet.passes.conv1d_as_conv2d import Conv1dAsConv2d
from tvm_chiplet.passes.einsum_as_matmul import EinsumAsMatmul
from tvm_chiplet.passes.flatten_matmul_rows import FlattenMatmulRows
from tvm_chiplet.passes.fold_constant_calls import FoldConstantCalls
from tvm_chiplet.passes.group_norm_by_channels import GroupNormByChannels
from tvm_chiplet.passes.keep_quantized_weights import KeepQuantizedWeights
from tvm_chiplet.passes.legalize_once import LegalizeOnce
from tvm_chiplet.passes.partition_by_cluster import PartitionByCluster
from tvm_chiplet.passes.pipeline import PIPELINES, get_pipeline
from tvm_chiplet.passes.plan_placement import PlanPlacement
from tvm_chiplet.passes.plan_split_placement import PlanSplitPlacement
from tvm_chiplet.passes.reduce_graph import ReduceGraph
from tvm_chiplet.passes.replicate_data_parallel import ReplicateDataParallel
from tvm_chiplet.passes.slice_strided_convs import SliceStridedConvs
from tvm_chiplet.passes.split_operators import SplitOperators
from tvm_chiplet.passes.unpack_projections import UnpackProjections

# TVM calls the passes (a module pass, an expression mutator) through its FFI, which hands an
# exception of a kind it does not know back as RuntimeError(''): Ctrl-C inside a pass reached
# `tvmc compile` as "error: RuntimeError", or was taken for a failed step and the work went on.
tvm_ffi.register_error("KeyboardInterrupt", KeyboardInterrupt)

__all__ = [
    "PIPELINES",
    "AnnotatePlacement",
    "Conv1dAsConv2d",
    "EinsumAsMatmul",
    "FlattenMatmulRows",
    "FoldConstantCalls",
    "GroupNormByChannels",
    "KeepQuantizedWeights",
    "LegalizeOnce",
    "PartitionByCluster",
    "PlanPlacement",
    "PlanSplitPlacement",
    "ReduceGraph",
    "ReplicateDataParallel",
    "SliceStridedConvs",
    "SplitOperators",
    "UnpackProjections",
    "get_pipeline",
]
