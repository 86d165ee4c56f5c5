"""ReduceGraph: legalize and fuse a Relax module with TVM's own passes."""

from __future__ import annotations

import tvm
from tvm import relax

from tvm_chiplet.passes.fold_constant_calls import FoldConstantCalls
from tvm_chiplet.passes.keep_quantized_weights import KeepQuantizedWeights
from tvm_chiplet.passes.legalize_once import LegalizeOnce
from tvm_chiplet.passes.separate_broadcast_epilogues import SeparateBroadcastEpilogues


@tvm.transform.module_pass(opt_level=0, name="ReduceGraph")
class ReduceGraph:
    """Lower high-level Relax ops to TIR and fuse them into a flat list of ``call_tir``.

    Runs TVM's ``DecomposeOpsForInference``, ``LegalizeOps``, ``AnnotateTIROpPattern``,
    ``FoldConstant``, ``FuseOps``, ``FuseTIR`` and ``DeadCodeElimination`` under ``target``,
    with :class:`LegalizeOnce` before ``LegalizeOps`` and :class:`FoldConstantCalls` before
    ``FoldConstant`` (same result; each op signature legalized, each PrimFunc built, once
    instead of once per call), and :class:`SeparateBroadcastEpilogues` before ``FuseOps`` (a
    squeeze-and-excitation gate's multiply is not fused into its conv).
    Constants are folded before anything is partitioned, so weight-only computations (e.g. a
    transposed weight) do not become values that cross clusters. The integer weights of a
    quantized model stay integers, decoded inside the kernel reading them
    (:class:`KeepQuantizedWeights` runs the steps before dead code elimination).

    Parameters
    ----------
    target : str or tvm.target.Target, default "llvm"
        Target whose legalization rules apply. A ``chiplet/<preset>`` tag is an llvm target.
    fuse : bool, default True
        Fuse operators (``False`` leaves one ``call_tir`` per legalized op).

    Example
    -------
    ``main`` of ``conv2d -> relu`` becomes ``lv = R.call_tir(cls.fused_conv2d_relu, (x, w))``.
    """

    def __init__(self, target: str | tvm.target.Target = "llvm", fuse: bool = True) -> None:
        self.target = tvm.target.Target(target) if isinstance(target, str) else target
        self.fuse = fuse

    def transform_module(self, mod: tvm.IRModule, _ctx: tvm.transform.PassContext) -> tvm.IRModule:
        lowering = [
            relax.transform.DecomposeOpsForInference(),
            LegalizeOnce(),
            relax.transform.LegalizeOps(),
            relax.transform.AnnotateTIROpPattern(),
            FoldConstantCalls(self.target),
            relax.transform.FoldConstant(),
        ]
        if self.fuse:
            lowering += [SeparateBroadcastEpilogues(), relax.transform.FuseOps(),
                         relax.transform.FuseTIR()]
        passes = [
            KeepQuantizedWeights(tvm.transform.Sequential(lowering), fuse_decode=self.fuse),
            relax.transform.DeadCodeElimination(["main"]),
        ]
        with self.target:
            return tvm.transform.Sequential(passes)(mod)
