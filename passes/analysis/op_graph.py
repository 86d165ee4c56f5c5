"""Extract the op graph of a reduced Relax module: FLOPs from TVM's estimator, bytes from types."""

from __future__ import annotations

import math
import re

import networkx as nx
import tvm
import tvm_ffi
from tvm import relax

from tvm_chiplet.passes.analysis.graph import OpGraph, OpNode

CALL_TIR = tvm.ir.Op.get("relax.call_tir")


@tvm_ffi.register_error
class AnalysisError(ValueError):
    """The module does not have the form an analysis needs."""


def tensor_bytes(ty: tvm.ir.Type, what: str) -> int:
    """Bytes of a value of type ``ty`` (tensor or tuple of tensors) with static shape."""
    if isinstance(ty, relax.TensorType):
        if ty.shape is None or not hasattr(ty.shape, "values"):
            raise AnalysisError(f"{what} has no static shape ({ty}); give static input shapes")
        dims = []
        for dim in ty.shape.values:
            if not isinstance(dim, tvm.tirx.IntImm):
                raise AnalysisError(
                    f"{what} has a symbolic dimension {dim} ({ty}); give static input shapes, "
                    "e.g. --input-shapes \"x:[1,3,224,224]\""
                )
            dims.append(int(dim))
        dtype = tvm.runtime.DataType(str(ty.dtype))
        return math.prod(dims) * ((dtype.bits * dtype.lanes + 7) // 8)
    if isinstance(ty, tvm.ir.TupleType):
        return sum(tensor_bytes(field, what) for field in ty.fields)
    return 0


def main_bindings(mod: tvm.IRModule) -> list[relax.VarBinding]:
    """The bindings of ``main`` in order, over all its blocks (ReduceGraph leaves one dataflow
    block; a data-parallel module keeps its scatter and gather in blocks of their own)."""
    if "main" not in [gv.name_hint for gv in mod.get_global_vars()]:
        raise AnalysisError("the module has no 'main' function")
    bindings = [b for block in mod["main"].body.blocks for b in block.bindings]
    for binding in bindings:
        if not isinstance(binding, relax.VarBinding):
            raise AnalysisError(f"'main' has a match_cast binding of {binding.var.name}")
        if isinstance(binding.value, relax.If):
            raise AnalysisError(f"'main' has control flow at {binding.var.name}; not supported")
    return bindings


def call_flops(mod: tvm.IRModule, gvar: tvm.ir.GlobalVar, cache: dict) -> float:
    """FLOPs of the PrimFunc ``gvar`` from TVM's estimator (0 if it cannot tell), cached."""
    if gvar not in cache:
        func = mod[gvar]
        try:
            cache[gvar] = float(tvm.s_tir.analysis.estimate_tir_flops(tvm.IRModule({"main": func})))
        except tvm.error.TVMError:
            cache[gvar] = 0.0
    return cache[gvar]


def call_tir_weight_bytes(call: relax.Call) -> int:
    """Bytes of the constant arguments (weights) a ``call_tir`` reads.

    A gather (a PrimFunc legalized from ``take``, e.g. an embedding lookup) reads only the rows
    it selects, so each of its constants counts at most the bytes of the call's output.
    """
    name = call.args[0].name_hint
    cap = None
    if any(re.fullmatch(r"take\d*", part) for part in name.split("_")):
        cap = tensor_bytes(call.ty, f"result of {name}") if isinstance(
            call.ty, relax.TensorType) else None
    total = 0
    for arg in call.args[1].fields:
        if isinstance(arg, tvm.ir.GenericConst):
            nbytes = tensor_bytes(arg.ty, f"constant of {name}")
            total += nbytes if cap is None else min(nbytes, cap)
    return total


def _value_vars(expr: relax.Expr) -> list[relax.Var]:
    return list(relax.analysis.free_vars(expr))


def extract_op_graph(mod: tvm.IRModule) -> OpGraph:
    """Build the :class:`OpGraph` of ``main`` of a reduced module.

    Parameters
    ----------
    mod : IRModule
        A module whose ``main`` is one dataflow block of ``call_tir`` (and tuple) bindings, as
        :class:`ReduceGraph` leaves it.

    Returns
    -------
    OpGraph
        One node per binding; an edge per use of a value, weighted by the value's bytes.
    """
    bindings = main_bindings(mod)
    func = mod["main"]
    params = list(func.params)
    param_index = {param: i for i, param in enumerate(params)}
    defined_by: dict[relax.Var, int] = {}
    flop_cache: dict = {}
    ops: list[OpNode] = []
    graph = nx.DiGraph()
    input_uses: list[list[int]] = [[] for _ in params]

    for op_id, binding in enumerate(bindings):
        value = binding.value
        out_bytes = tensor_bytes(binding.var.ty, f"value {binding.var.name} (op {op_id})")
        weight_bytes, flops = 0, 0.0
        if isinstance(value, relax.Call) and value.op.same_as(CALL_TIR):
            kind, name = "call_tir", value.args[0].name_hint
            flops = call_flops(mod, value.args[0], flop_cache)
            weight_bytes = call_tir_weight_bytes(value)
        elif isinstance(value, relax.Tuple):
            kind, name = "tuple", "tuple"
        elif isinstance(value, relax.TupleGetItem):
            kind, name = "get_item", "get_item"
        else:
            kind = "other"
            name = value.op.name if isinstance(value, relax.Call) and hasattr(value.op, "name") \
                else type(value).__name__
        input_bytes = 0
        graph.add_node(op_id)
        for var in _value_vars(value):
            nbytes = tensor_bytes(var.ty, f"value {var.name}")
            if var in defined_by:
                producer = defined_by[var]
                graph.add_edge(producer, op_id, nbytes=nbytes)
            elif var in param_index:
                input_uses[param_index[var]].append(op_id)
            input_bytes += nbytes
        defined_by[binding.var] = op_id
        ops.append(OpNode(op_id, name, kind, flops, input_bytes, out_bytes, weight_bytes))

    output_ops = [defined_by[var] for var in _value_vars(func.body.body) if var in defined_by]
    return OpGraph(
        ops=ops,
        graph=graph,
        input_names=[param.name for param in params],
        input_uses=input_uses,
        output_ops=output_ops,
    )
