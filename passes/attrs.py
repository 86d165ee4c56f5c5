"""The IR attributes tvm-chiplet writes and reads, and the helpers that read them.

Every decision a later stage needs is written on the IR (see the design notes): placement as
attributes of ``call_tir`` calls, segments as functions with attributes, the plan summary as a
module attribute. Passes and analyses name these attributes only through this module.
"""

from __future__ import annotations

import tvm
from tvm import relax

CALL_TIR = tvm.ir.Op.get("relax.call_tir")

ATTR_CLUSTER = "chiplet.cluster"  # call_tir call and segment function: the cluster running it
ATTR_STAGE = "chiplet.stage"  # call_tir call: the pipeline stage of the op
ATTR_OP_ID = "chiplet.op_id"  # call_tir call: the op's position in the planned ``main``
ATTR_SEGMENT = "chiplet.segment"  # segment function: its index in call order
ATTR_PLACEMENT = "chiplet.placement"  # module: JSON of strategy, objective and notes
ATTR_IN_PLACE = "chiplet.in_place"  # PrimFunc: assembles operands written in place (no bytes)

PARTIAL_SUM = "__psum"
"""In a value's name: the value is a partial sum (an input-channel or reduction split's part, a
cut of one, or a sum on its way), which the device holds and sends at the accumulators' width
(:attr:`~tvm_chiplet.targets.system.ChipletSystem.partial_sum_bytes`), not at the device
dtype's. A name, not an attribute, as Relax values carry none; FuseOps and PartitionByCluster
keep the names of the values they bind. Two underscores, so that no importer's name (``lv12``,
an ONNX input's) has it."""


def is_partial_sum(var: relax.Var) -> bool:
    """Whether ``var`` holds a partial sum (its name has :data:`PARTIAL_SUM`)."""
    return PARTIAL_SUM in var.name


def call_placement(value: relax.Expr) -> tuple[int, int, int] | None:
    """``(cluster, stage, op_id)`` written by AnnotatePlacement on a call, or None."""
    if not isinstance(value, relax.Call) or value.attrs is None:
        return None
    attrs = value.attrs
    if not isinstance(attrs, tvm.ir.DictAttrs) or ATTR_CLUSTER not in attrs:
        return None
    return int(attrs[ATTR_CLUSTER]), int(attrs[ATTR_STAGE]), int(attrs[ATTR_OP_ID])
