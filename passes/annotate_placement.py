"""AnnotatePlacement: write a Placement onto ``call_tir`` calls of ``main`` as attributes."""

from __future__ import annotations

import json

import tvm
from tvm import relax

from tvm_chiplet.passes.analysis.extract_op_graph import main_bindings, planned_bindings
from tvm_chiplet.passes.attrs import (
    ATTR_CLUSTER,
    ATTR_OP_ID,
    ATTR_PLACEMENT,
    ATTR_STAGE,
    CALL_TIR,
)
from tvm_chiplet.passes.planners.placement import Placement, PlanningError


@tvm.transform.module_pass(opt_level=0, name="AnnotatePlacement")
class AnnotatePlacement:
    """Write a :class:`Placement` onto the IR as call attributes.

    Each ``call_tir`` binding ``i`` of ``main`` gets the attributes ``chiplet.cluster``,
    ``chiplet.stage`` and ``chiplet.op_id`` (= ``i``); the module gets ``chiplet.placement``, the
    strategy, its objective and its notes (e.g. an ILP's gap) as JSON. Tuple plumbing is left as
    it is and goes with its neighbours when partitioned, and so is a data-dependent tail of
    ``main``, which no placement covers (:func:`~.analysis.extract_op_graph.planned_bindings`).
    The pass decides nothing; the planner did.

    Parameters
    ----------
    placement : Placement
        One cluster and one stage per binding of ``main`` (``op_id`` order).

    Example
    -------
    ``lv = R.call_tir(cls.f, (x,))`` becomes the same call with
    ``attrs={"chiplet.cluster": 3, "chiplet.stage": 1, "chiplet.op_id": 0}``.
    """

    def __init__(self, placement: Placement) -> None:
        if not isinstance(placement, Placement):
            raise TypeError(f"AnnotatePlacement needs a Placement, got {type(placement).__name__}")
        if min(placement.op_cluster, default=0) < 0:
            raise PlanningError("placement has a negative cluster id")
        self.placement = placement

    def transform_module(self, mod: tvm.IRModule, _ctx: tvm.transform.PassContext) -> tvm.IRModule:
        bindings = main_bindings(mod)
        planned = len(planned_bindings(mod))
        if planned != len(self.placement.op_cluster):
            tail = " before its data-dependent tail" if planned < len(bindings) else ""
            raise PlanningError(
                f"placement covers {len(self.placement.op_cluster)} ops but 'main' has "
                f"{planned} bindings{tail}; plan the module you annotate (after ReduceGraph)"
            )
        new_bindings = []
        for op_id, binding in enumerate(bindings[:planned]):
            value = binding.value
            if isinstance(value, relax.Call) and value.op.same_as(CALL_TIR):
                attrs = {
                    ATTR_CLUSTER: int(self.placement.op_cluster[op_id]),
                    ATTR_STAGE: int(self.placement.op_stage[op_id]),
                    ATTR_OP_ID: op_id,
                }
                value = relax.Call(
                    value.op, value.args, attrs=attrs, ty_args=value.ty_args, ret_ty=value.ty
                )
                binding = relax.VarBinding(binding.var, value)
            new_bindings.append(binding)
        new_bindings += bindings[planned:]
        main = mod["main"]
        blocks, start = [], 0
        for block in main.body.blocks:
            count = len(block.bindings)
            blocks.append(type(block)(new_bindings[start:start + count]))
            start += count
        body = relax.SeqExpr(blocks, main.body.body)
        new_main = relax.Function(main.params, body, main.ret_ty, main.is_pure, main.attrs)
        out = mod.clone()
        out.update_func(mod.get_global_var("main"), new_main)
        summary = {
            "strategy": self.placement.strategy,
            "objective_cycles": self.placement.objective_cycles,
            "notes": self.placement.notes,
            "dram_policy": self.placement.dram_policy,
            "dram_shares": [list(share) for share in self.placement.dram_shares],
            "replicas": [[list(pair) for pair in mapping] for mapping in self.placement.replicas],
            "sram_loans": [list(loan) for loan in self.placement.sram_loans],
            "weight_pool": self.placement.weight_pool,
            "microbatch": self.placement.microbatch,
        }
        return out.with_attr(ATTR_PLACEMENT, json.dumps(summary, sort_keys=True, default=str))

