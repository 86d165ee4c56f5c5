"""PartitionByCluster: outline consecutive same-cluster runs of ``main`` into segment functions."""

from __future__ import annotations

import contextlib

import tvm
from tvm import relax
from tvm.relax.expr_functor import PyExprMutator, mutator

from tvm_chiplet.passes.analysis.extract_op_graph import AnalysisError, main_bindings
from tvm_chiplet.passes.attrs import ATTR_CLUSTER, ATTR_PLACEMENT, ATTR_SEGMENT, call_placement


@mutator
class _Rename(PyExprMutator):
    """Replace free variables by the segment's parameters."""

    def __init__(self, mapping: dict) -> None:
        super().__init__()
        self.mapping = mapping

    def visit_var_(self, var: relax.Var) -> relax.Expr:
        return self.mapping[var] if var in self.mapping else super().visit_var_(var)

    def visit_dataflow_var_(self, var: relax.DataflowVar) -> relax.Expr:
        return self.mapping[var] if var in self.mapping else super().visit_dataflow_var_(var)


def binding_clusters(bindings: list[relax.Binding]) -> list[int] | None:
    """Cluster of every binding: its annotation, else that of the closest annotated binding before
    it (or after it, for plumbing at the very start). None if nothing is annotated."""
    annotated = [call_placement(b.value) for b in bindings]
    if all(a is None for a in annotated):
        return None
    first = next(a[0] for a in annotated if a is not None)
    clusters, current = [], first
    for placement in annotated:
        if placement is not None:
            current = placement[0]
        clusters.append(current)
    return clusters


@tvm.transform.module_pass(opt_level=0, name="PartitionByCluster")
class PartitionByCluster:
    """Outline each maximal run of consecutive same-cluster bindings of ``main`` into a function.

    Segment ``k`` becomes a public function ``{prefix}{k}`` with attributes ``chiplet.cluster``
    and ``chiplet.segment``. Its parameters are the values it reads from outside (model inputs or
    earlier segments' results, in definition order); it returns a tuple of the values that later
    segments or ``main``'s result read. ``main`` then calls the segments in order and unpacks
    their tuples, so it computes exactly what it computed before. Constants (weights) stay inside
    the segment that uses them. A data-dependent tail of ``main`` (a ``match_cast`` and what
    follows, or control flow, which no placement covers) has no annotations, so it stays with
    the last planned binding, in one segment whose results have the shapes erased to their rank
    outside it; a segment holding an If has no dataflow block. A constant or shape that ``main``
    returns is bound to a variable first, so a segment produces it like any other result. A
    module without placement attributes is returned unchanged; a planned module (it has the
    ``chiplet.placement`` attribute) without placed calls, i.e. a model without compute ops
    (only constants, shapes and plumbing), becomes one segment on cluster 0 that runs no device
    task.

    Parameters
    ----------
    prefix : str, default "seg"
        Name prefix of segment functions; must not clash with existing functions.

    Example
    -------
    ``a = f(x) @0; b = g(a) @0; c = h(b) @1`` becomes ``seg0(x) -> (b,)`` on cluster 0,
    ``seg1(b) -> (c,)`` on cluster 1, and ``main`` calls ``seg0`` then ``seg1``.
    """

    def __init__(self, prefix: str = "seg") -> None:
        if not prefix.isidentifier():
            raise ValueError(f"segment prefix must be an identifier, got {prefix!r}")
        self.prefix = prefix

    def transform_module(self, mod: tvm.IRModule, _ctx: tvm.transform.PassContext) -> tvm.IRModule:
        planned = mod.attrs is not None and ATTR_PLACEMENT in mod.attrs
        original, mod = mod, _bind_returned_values(mod)
        bindings = main_bindings(mod)
        clusters = binding_clusters(bindings)
        if clusters is None:
            if not planned or not bindings:
                return original
            clusters = [0] * len(bindings)
        taken = {gv.name_hint for gv in mod.get_global_vars()}
        runs: list[tuple[int, int]] = []
        for i, cluster in enumerate(clusters):
            if runs and clusters[runs[-1][0]] == cluster:
                runs[-1] = (runs[-1][0], i + 1)
            else:
                runs.append((i, i + 1))
        names = [f"{self.prefix}{k}" for k in range(len(runs))]
        clash = sorted(taken.intersection(names))
        if clash:
            raise AnalysisError(
                f"the module already has function(s) {clash}; pass another prefix to "
                "PartitionByCluster(prefix=...)"
            )
        return _Partitioner(mod, bindings, clusters, runs, names).run()


def _bind_returned_values(mod: tvm.IRModule) -> tvm.IRModule:
    """``mod`` with every field of ``main``'s result that is not a variable (a constant, a shape,
    a nested tuple) bound to a variable in a dataflow block of its own."""
    main = mod["main"]
    result = main.body.body
    fields = list(result.fields) if isinstance(result, relax.Tuple) else [result]
    bindings, bound = [], []
    for field in fields:
        if isinstance(field, relax.Var):
            bound.append(field)
            continue
        var = relax.Var(f"out{len(bindings)}", field.ty)
        bindings.append(relax.VarBinding(var, field))
        bound.append(var)
    if not bindings:
        return mod
    result = relax.Tuple(bound) if isinstance(result, relax.Tuple) else bound[0]
    body = relax.SeqExpr([*main.body.blocks, relax.DataflowBlock(bindings)], result)
    out = mod.clone()
    out.update_func(mod.get_global_var("main"),
                    relax.Function(main.params, body, main.ret_ty, main.is_pure, main.attrs))
    return out


class _Partitioner:
    def __init__(self, mod, bindings, clusters, runs, names) -> None:
        self.mod = mod
        self.main = mod["main"]
        self.bindings = bindings
        self.clusters = clusters
        self.runs = runs
        self.names = names

    def run(self) -> tvm.IRModule:
        main = self.main
        num_params = len(main.params)
        def_index: dict[relax.Var, int] = {p: i - num_params for i, p in enumerate(main.params)}
        for i, binding in enumerate(self.bindings):
            def_index[binding.var] = i
        uses: list[list[relax.Var]] = [
            list(relax.analysis.free_vars(b.value)) for b in self.bindings
        ]
        result_vars = set(relax.analysis.free_vars(main.body.body))
        # The last binding reading each variable (the result reads past every binding): a
        # segment returns what is read after it, found without walking the bindings after it.
        last_use: dict[relax.Var, int] = dict.fromkeys(result_vars, len(self.bindings))
        for i, used in enumerate(uses):
            for v in used:
                last_use[v] = max(last_use.get(v, i), i)
        builder = relax.BlockBuilder(self.mod)
        segment_io = []
        for k, (lo, hi) in enumerate(self.runs):
            inside = {b.var for b in self.bindings[lo:hi]}
            # A variable no binding defines stands for a symbolic shape (FuseTIR passes
            # data-dependent sizes on that way): the segment defining the shape has it.
            reads = {v for used in uses[lo:hi] for v in used
                     if v not in inside and v in def_index}
            writes = {v for v in inside if last_use.get(v, -1) >= hi}
            inputs = sorted(reads, key=def_index.__getitem__)
            outputs = sorted(writes, key=def_index.__getitem__)
            gvar = self._emit_segment(builder, k, lo, hi, inputs, outputs)
            segment_io.append((gvar, inputs, outputs))
        new_main = self._emit_main(builder, segment_io)
        out = builder.get()
        main_gv = out.get_global_var("main")
        out.update_func(main_gv, new_main)
        return out

    def _emit_segment(self, builder, k, lo, hi, inputs, outputs) -> tvm.ir.GlobalVar:
        params = [relax.Var(v.name, v.ty) for v in inputs]
        mapping = dict(zip(inputs, params, strict=True))
        attrs = {ATTR_CLUSTER: self.clusters[lo], ATTR_SEGMENT: k}
        output_set = set(outputs)
        bindings = self.bindings[lo:hi]
        # Control flow cannot sit in a dataflow block: a segment holding an If has none.
        dataflow = not any(isinstance(b.value, relax.If) for b in bindings)
        with builder.function(self.names[k], params, attrs=attrs):
            with builder.dataflow() if dataflow else contextlib.nullcontext():
                for binding in bindings:
                    value = _Rename(mapping).visit_expr(binding.value)
                    name = binding.var.name
                    if isinstance(binding, relax.MatchCast):
                        new_var = builder.match_cast(value, binding.ty, name_hint=name)
                        if dataflow and binding.var in output_set:
                            new_var = builder.emit_output(new_var, name_hint=name)
                    elif dataflow and binding.var in output_set:
                        new_var = builder.emit_output(value, name_hint=name)
                    else:
                        new_var = builder.emit(value, name_hint=name)
                    mapping[binding.var] = new_var
            builder.emit_func_output(relax.Tuple([mapping[v] for v in outputs]))
        return builder.get().get_global_var(self.names[k])

    def _emit_main(self, builder, segment_io) -> relax.Function:
        main = self.main
        mapping: dict = {}
        result_vars = set(relax.analysis.free_vars(main.body.body))
        new_bindings = []
        for gvar, inputs, outputs in segment_io:
            args = [mapping.get(v, v) for v in inputs]
            call = builder.normalize(relax.Call(gvar, args))
            tuple_var = relax.DataflowVar(f"{gvar.name_hint}_out", call.ty)
            new_bindings.append(relax.VarBinding(tuple_var, call))
            for index, var in enumerate(outputs):
                item = builder.normalize(relax.TupleGetItem(tuple_var, index))
                var_cls = relax.Var if var in result_vars else relax.DataflowVar
                # item.ty, not var.ty: a data-dependent shape is only defined inside its segment
                new_var = var_cls(var.name, item.ty)
                new_bindings.append(relax.VarBinding(new_var, item))
                mapping[var] = new_var
        body_result = _Rename(mapping).visit_expr(main.body.body)
        body = relax.SeqExpr([relax.DataflowBlock(new_bindings)], body_result)
        return relax.Function(main.params, body, main.ret_ty, main.is_pure, main.attrs)
