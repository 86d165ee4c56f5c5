"""ReplicateDataParallel: split the input batch across replicas of the whole graph."""

from __future__ import annotations

import tvm
from tvm import relax
from tvm.relax.expr_functor import PyExprMutator, mutator

from tvm_chiplet.passes.analysis.batch_axis import batch_axis
from tvm_chiplet.passes.attrs import CALL_TIR
from tvm_chiplet.passes.distribute_tensors import prepare_for_splits
from tvm_chiplet.passes.planners.placement import PlanningError
from tvm_chiplet.passes.rewrite_calls import calls_any
from tvm_chiplet.passes.split_operators import replica_batches

SHAPED = (tvm.ir.Op.get("relax.reshape"), tvm.ir.Op.get("relax.broadcast_to"))
_SHAPE_READS = (tvm.ir.Op.get("relax.shape_of"), tvm.ir.Op.get("relax.tensor_to_shape"))
"""Ops whose second operand is their output's shape, resized with the batch."""


@mutator
class _Rebatch(PyExprMutator):
    """Re-emit one replica: inputs renamed to the replica's slices, batch-sized shapes resized."""

    def __init__(self, mapping: dict, replica_batch: int, per_sample: list) -> None:
        super().__init__()
        self.mapping = mapping
        self.replica_batch = replica_batch
        self.per_sample = per_sample  # constants of the batch's size, every sample alike
        self.position = None  # where the batch lies in the value being re-emitted

    def visit_var_(self, var: relax.Var) -> relax.Expr:
        return self.mapping.get(var, var)

    def visit_dataflow_var_(self, var: relax.DataflowVar) -> relax.Expr:
        return self.mapping.get(var, var)

    def visit_generic_const_(self, const: relax.Expr) -> relax.Expr:
        if any(const.same_as(c) for c in self.per_sample):
            return relax.const(const.value.numpy()[:self.replica_batch], str(const.ty.dtype))
        return const

    def visit_call_(self, call: relax.Call) -> relax.Expr:
        if call.op.same_as(CALL_TIR):
            raise PlanningError(
                f"data-parallel cannot re-batch {call.args[0].name_hint}: a call_tir has fixed "
                "shapes; give the model before legalization, or use the pipeline strategy"
            )
        if (any(call.op.same_as(op) for op in SHAPED) and self.position is not None
                and isinstance(call.args[1], relax.ShapeExpr)):
            axis, (outer, inner) = self.position
            dims = list(call.args[1].values)
            dims[axis] = outer * self.replica_batch * inner
            data = self.visit_expr(call.args[0])
            return relax.Call(call.op, [data, relax.ShapeExpr(dims)], call.attrs)
        return super().visit_call_(call)


def _batch_dim(var: relax.Var, axis: int) -> int:
    ty = var.ty
    shape = getattr(ty, "shape", None)
    if not isinstance(ty, relax.TensorType) or len(getattr(shape, "values", None) or []) <= axis:
        raise PlanningError(f"input {var.name!r} is not a tensor with a batch dimension ({ty})")
    dim = ty.shape.values[axis]
    if not isinstance(dim, tvm.tirx.IntImm):
        raise PlanningError(f"input {var.name!r} has a symbolic batch dimension; give its shape")
    return int(dim)


@tvm.transform.module_pass(opt_level=0, name="ReplicateDataParallel")
class ReplicateDataParallel:
    """Rebuild ``main`` as ``replicas`` copies of the graph, each on a slice of the batch.

    Every input is split along axis 0 (``R.split``; along axis 1 in a sequence-first model,
    whose axis 0 is not a batch but whose axis 1 is) into slices of nearly equal batch (a batch
    not divisible by the replica count gives the first replicas one more sample); the whole
    graph is re-emitted once per slice, with the batch's axis of reshape and broadcast targets
    resized (wherever the ops moved it, :func:`~.analysis.batch_axis.batch_axis`), constants of
    the batch's size with every sample alike (a class token expanded to the batch) cut to the
    slice's, and types re-inferred; the replicas' results are concatenated along the axis that
    carries the batch in each output. Weights are constants and so are replicated with the
    graph. Run it on the high-level module, before ReduceGraph; the ``data-parallel`` planner
    then puts each replica on its own cluster.

    Parameters
    ----------
    replicas : int, optional
        Number of replicas; default ``min(batch, max_replicas)``.
    max_replicas : int, optional
        Upper bound for the default (the number of clusters).

    Example
    -------
    ``y = f(x)`` with ``x: [4, 3]`` and ``replicas=2`` becomes ``s = split(x, [2]);
    y0 = f(s[0]); y1 = f(s[1]); y = concat((y0, y1), axis=0)``.
    """

    def __init__(self, replicas: int | None = None, max_replicas: int | None = None) -> None:
        for name, value in (("replicas", replicas), ("max_replicas", max_replicas)):
            if value is not None and value < 1:
                raise PlanningError(f"{name} must be >= 1, got {value}")
        self.replicas = replicas
        self.max_replicas = max_replicas

    def _batch_and_replicas(self, main: relax.Function, broken: str | None, positions: dict
                            ) -> tuple[int, int]:
        """The batch (on the inputs' axis that carries it, axis 0 when none does) and the
        replica count, or an error when they cannot be split."""
        axis = positions[main.params[0]][0] if not broken else 0
        batches = {p.name: _batch_dim(p, axis) for p in main.params}
        if len(set(batches.values())) != 1:
            raise PlanningError(f"data-parallel needs one batch size for all inputs, got {batches}")
        batch = next(iter(batches.values()))
        replicas = self.replicas or min(batch, self.max_replicas or batch)
        if batch < 2 or batch < replicas:
            needed = max(replicas, 2)
            raise PlanningError(
                f"data-parallel needs a batch of at least {needed} to split over {needed} "
                f"clusters, but input {', '.join(map(repr, batches))} has batch {batch}; export "
                f"the model with batch >= {needed}, or use the pipeline strategy"
            )
        return batch, replicas

    def transform_module(self, mod: tvm.IRModule, _ctx: tvm.transform.PassContext) -> tvm.IRModule:
        main = mod["main"]
        broken, per_sample, positions = batch_axis(main)
        batch, replicas = self._batch_and_replicas(main, broken, positions)
        for block in main.body.blocks:
            if not isinstance(block, relax.DataflowBlock):
                raise PlanningError("data-parallel needs 'main' made of dataflow blocks")
        if replicas == 1:
            return mod
        if broken and calls_any(main, lambda call: any(call.op.same_as(op) for op in _SHAPE_READS)):
            # Shapes the model computes from its values as it runs (torch's export of
            # nn.MultiheadAttention reads them) are constants once folded. Folding builds
            # kernels: only a model with a batch to split that reads shapes is folded.
            folded = prepare_for_splits(mod)
            found = batch_axis(folded["main"])
            if found[0] is None:
                mod, main = folded, folded["main"]
                broken, per_sample, positions = found
                batch, replicas = self._batch_and_replicas(main, broken, positions)
        if broken:
            raise PlanningError(
                f"data-parallel cuts the inputs along axis 0 and runs a copy of the model on "
                f"each slice, which needs every op to treat axis 0 as a batch of independent "
                f"samples, but {broken}; use the pipeline strategy (or another that does not "
                "replicate), or export the model with a leading batch axis"
            )
        axis = positions[main.params[0]][0]  # 1: sequence first
        sizes = replica_batches(batch, replicas)
        builder = relax.BlockBuilder(mod)
        params = [relax.Var(p.name, p.ty) for p in main.params]
        # The scatter and the gather stay outside the dataflow block: FuseOps fuses only inside
        # one, so no kernel can mix two replicas.
        with builder.function("__replicated_main", params, private=True):
            slices = []
            for param in params:
                split = builder.emit(relax.op.split(param, _cut_points(sizes), axis=axis))
                slices.append([builder.emit(relax.TupleGetItem(split, r)) for r in range(replicas)])
            with builder.dataflow():
                results = []
                for r, size in enumerate(sizes):
                    mapping = {p: s[r] for p, s in zip(main.params, slices, strict=True)}
                    rebatch = _Rebatch(mapping, size, per_sample)
                    for block in main.body.blocks:
                        for binding in block.bindings:
                            rebatch.position = positions.get(binding.var)
                            value = rebatch.visit_expr(binding.value)
                            emit = (builder.emit if isinstance(binding.var, relax.DataflowVar)
                                    else builder.emit_output)
                            mapping[binding.var] = emit(value, binding.var.name)
                    result = rebatch.visit_expr(main.body.body)
                    if isinstance(result, relax.Var) and isinstance(result.ty,
                                                                    tvm.ir.TupleType):
                        result = relax.Tuple([builder.emit(relax.TupleGetItem(result, i))
                                              for i in range(len(result.ty.fields))])
                    fields = result.fields if isinstance(result, relax.Tuple) else [result]
                    results.append([
                        f if isinstance(f, relax.Var) and not isinstance(f, relax.DataflowVar)
                        else builder.emit_output(f)
                        for f in fields
                    ])
            output = builder.emit(_concat_results(
                results, _output_axes(main.body.body, positions),
                isinstance(main.body.body.ty, tvm.ir.TupleType)))
            builder.emit_func_output(output)
        replicated = builder.get()
        gvar = replicated.get_global_var("__replicated_main")
        func = replicated[gvar]
        new_main = relax.Function(func.params, func.body, func.ret_ty, main.is_pure, main.attrs)
        functions = {
            gv: new_main if gv.name_hint == "main" else f
            for gv, f in replicated.functions_items()
            if not gv.same_as(gvar)
        }
        return tvm.IRModule(functions, attrs=mod.attrs, global_infos=mod.global_infos)


def _cut_points(sizes: list[int]) -> list[int]:
    cuts, total = [], 0
    for size in sizes[:-1]:
        total += size
        cuts.append(total)
    return cuts


def _output_axes(outputs: relax.Expr, positions: dict) -> list[int]:
    """The axis of each output of ``main`` that carries the batch (a Tuple's fields, each
    field of a tuple-typed Var, or the one output)."""
    if isinstance(outputs, relax.Tuple):
        return [positions[f][0] for f in outputs.fields]
    if isinstance(outputs.ty, tvm.ir.TupleType):  # fields of one tuple value: on axis 0 alike
        return [0] * len(outputs.ty.fields)
    return [positions[outputs][0]]


def _concat_results(results: list[list[relax.Expr]], axes: list[int], as_tuple: bool
                    ) -> relax.Expr:
    gathered = [relax.op.concat([r[i] for r in results], axis=axes[i])
                for i in range(len(results[0]))]
    return relax.Tuple(gathered) if as_tuple else gathered[0]
