"""Fold an ONNX graph's shape computations once its input shapes are static, before TVM imports it.

Exporters (tf2onnx, torch.onnx, keras2onnx) write shapes as computations: ``Shape -> Gather ->
Concat -> Reshape`` chains, ``ConstantOfShape``, ``Range`` over a ``Shape``. TVM's importer keeps
them as data-dependent shapes (a ``match_cast`` in ``main``), or fails on them. With every
input's shape fixed, they are constants: :func:`fold_shapes` fixes the inputs' dimensions, runs
ONNX shape inference and folds constant subgraphs with onnxscript's optimizer (constant folding
only: its rewrite rules, e.g. batch norm into convolution, are TVM's job), then drops the nodes
nothing reads any more.

Why onnxscript's optimizer: it is the ONNX project's maintained optimizer (the one
``torch.onnx`` runs on every export), it folds through shape inference with ONNX's reference
implementation of every standard op, and it leaves large initializers alone (it does not fold
subgraphs whose inputs exceed a size limit), so weights are not duplicated. onnx-simplifier
does the same folding but needs onnxruntime at run time, which we only use as a test oracle.
"""

from __future__ import annotations

import collections
import warnings
from dataclasses import dataclass, field

import numpy as np
import onnx


@dataclass(frozen=True)
class Folding:
    """What :func:`fold_shapes` did: the nodes it removed and added by type (a rewrite, e.g.
    ``Flatten`` as ``Reshape``, shows as both), or why it did nothing."""

    removed: dict[str, int]
    nodes_before: int
    nodes_after: int
    error: str = ""
    added: dict[str, int] = field(default_factory=dict)

    @property
    def changed(self) -> bool:
        return bool(self.removed or self.added)

    def summary(self) -> str:
        """One line for the compile log."""
        if self.error:
            return f"shape folding failed ({self.error}); importing the graph as written"
        if not self.removed and not self.added:
            return f"shape folding: nothing to fold ({self.nodes_before} nodes)"
        changes = [f"{what} " + ", ".join(f"{op} x{n}" for op, n in sorted(
                       ops.items(), key=lambda kv: (-kv[1], kv[0])))
                   for what, ops in (("removed", self.removed), ("added", self.added)) if ops]
        return (f"shape folding: {self.nodes_before} -> {self.nodes_after} nodes "
                f"({'; '.join(changes)})")


def fix_input_shapes(model: onnx.ModelProto, shapes: dict[str, list[int]]) -> onnx.ModelProto:
    """A copy of ``model`` whose graph inputs named in ``shapes`` have those static dims."""
    fixed = onnx.ModelProto()
    fixed.CopyFrom(model)
    for value in fixed.graph.input:
        # Touching tensor_type of another type (an optional, a sequence) would make it one.
        if value.name not in shapes or not value.type.HasField("tensor_type"):
            continue
        shape = value.type.tensor_type.shape
        shape.ClearField("dim")
        for size in shapes[value.name]:
            shape.dim.add().dim_value = int(size)
    return fixed


SMALL_CONSTANT_OF_SHAPE = 8192
"""Elements up to which a ``ConstantOfShape`` of a constant shape is folded: the size of a
shape computation's values (the optimizer's own input size limit), far below an activation's."""


def _should_fold(node) -> bool | None:
    """The optimizer's own rule (None), with two exceptions.

    - Keep quantized weights quantized: a ``DequantizeLinear`` of a constant stays, so the
      importer sees int8 weights.
    - Fold a small ``ConstantOfShape``, which the optimizer keeps so as not to grow the model:
      exporters build pads and shapes with it (``ConstantOfShape -> Concat -> Reshape -> Pad``
      in torch.onnx's reflect padding), and TVM's importer needs those as constants ("Dynamic
      pads are not supported yet"). One the size of an activation stays an op.
    """
    if node.op_type == "DequantizeLinear":
        return False
    if node.op_type == "ConstantOfShape" and node.domain in ("", "ai.onnx"):
        shape = node.inputs[0].const_value if node.inputs and node.inputs[0] else None
        if shape is not None and int(np.prod(shape.numpy())) <= SMALL_CONSTANT_OF_SHAPE:
            return True
    return None


def fold_shapes(model: onnx.ModelProto,
                shapes: dict[str, list[int]]) -> tuple[onnx.ModelProto, Folding]:
    """``model`` with ``shapes`` fixed and its constant (shape) subgraphs folded.

    Returns the model as written and a :class:`Folding` with the error when folding fails (the
    caller imports the raw graph then).
    """
    before = collections.Counter(node.op_type for node in model.graph.node)
    try:
        # Heavy imports, only when folding.
        import onnxscript.optimizer
        from onnxscript import ir
        from onnxscript.ir.passes.common import (
            LiftConstantsToInitializersPass,
            RemoveUnusedNodesPass,
        )

        fixed = ir.serde.deserialize_model(fix_input_shapes(model, shapes))
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            onnxscript.optimizer.fold_constants(fixed, onnx_shape_inference=True,
                                                should_fold=_should_fold)
        RemoveUnusedNodesPass()(fixed)
        # Folded values become Constant nodes, some of a form (value_ints) that TVM's importer
        # rejects: make every one an initializer.
        LiftConstantsToInitializersPass(lift_all_constants=True, size_limit=0)(fixed)
        folded = ir.serde.serialize_model(fixed)
    except Exception as err:  # the optimizer raises many types on graphs it cannot handle
        first = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
        return model, Folding({}, len(model.graph.node), len(model.graph.node), first[:200])
    after = collections.Counter(node.op_type for node in folded.graph.node)
    return folded, Folding(dict(before - after), len(model.graph.node),
                           len(folded.graph.node), added=dict(after - before))
