"""Extract the op graph of a reduced Relax module: FLOPs from TVM's estimator, bytes from types.

Bytes are counted at the device's precision: with a ``device_dtype`` (``"int8"``, ``"fp16"``,
``"bf16"``, ``"fp32"``), every floating-point tensor counts that many bytes per element, as the
device stores it, whatever the IR computes in on the host; integer tensors (quantized int8
weights, int64 indices) count at their own width.
"""

from __future__ import annotations

import functools
import hashlib
import math
import re

import networkx as nx
import numpy as np
import tvm
import tvm_ffi
from tvm import relax

from tvm_chiplet.passes.analysis.op_graph import OpGraph, OpNode
from tvm_chiplet.passes.analysis.structural_key import StructuralKey
from tvm_chiplet.passes.attrs import ATTR_IN_PLACE, CALL_TIR, is_partial_sum
from tvm_chiplet.targets.system import DTYPE_BYTES, partial_sum_width

# Kinds of the "op_pattern" attribute that relax.transform.AnnotateTIROpPattern writes.
_OUTPUT_SIZED_PATTERNS = (0, 1, 2)  # elementwise, broadcast, injective
_REDUCTION_PATTERN = 3


_FLOAT_CODES = (tvm.runtime.DataTypeCode.FLOAT, tvm.runtime.DataTypeCode.BFLOAT)


@tvm_ffi.register_error
class AnalysisError(ValueError):
    """The module does not have the form an analysis needs."""


def tensor_dims(ty: relax.TensorType) -> tuple[int | None, ...] | None:
    """The dimensions of a tensor type (``None`` where symbolic), or ``None`` without a known
    shape. Cached by the type (:class:`~.structural_key.StructuralKey`): two calls into TVM
    instead of one per dimension, which a split module's hundreds of thousands of values pay
    many times over."""
    return _dims(StructuralKey(ty))


@functools.lru_cache(maxsize=1 << 16)
def _dims(key: StructuralKey) -> tuple[int | None, ...] | None:
    shape = key.node.shape
    if shape is None or not hasattr(shape, "values"):
        return None
    return tuple(int(d) if isinstance(d, tvm.tirx.IntImm) else None for d in shape.values)


def _static_dims(ty: relax.TensorType, what: str) -> tuple[int, ...]:
    dims = tensor_dims(ty)
    if dims is None:
        raise AnalysisError(f"{what} has no static shape ({ty}); give static input shapes")
    if None in dims:
        symbolic = ty.shape.values[dims.index(None)]
        raise AnalysisError(
            f"{what} has a symbolic dimension {symbolic} ({ty}); give static input shapes, "
            "e.g. --input-shapes \"x:[1,3,224,224]\""
        )
    return dims


def tensor_bytes(ty: tvm.ir.Type, what: str, device_dtype: str | None = None,
                 partial_width: int | None = None) -> int:
    """Bytes of a value of type ``ty`` (tensor or tuple of tensors) with static shape.

    With ``device_dtype``, a floating-point tensor counts ``DTYPE_BYTES[device_dtype]`` bytes
    per element (module docstring), or ``partial_width`` when it is a partial sum (given for
    those only); without it, every tensor counts at its IR dtype.
    """
    if isinstance(ty, relax.TensorType):
        dtype = tvm.runtime.DataType(str(ty.dtype))
        if device_dtype is not None and dtype.type_code in _FLOAT_CODES:
            width = (partial_width or DTYPE_BYTES[device_dtype]) * dtype.lanes
        else:
            width = (dtype.bits * dtype.lanes + 7) // 8
        return math.prod(_static_dims(ty, what)) * width
    if isinstance(ty, tvm.ir.TupleType):
        return sum(tensor_bytes(field, what, device_dtype, partial_width)
                   for field in ty.fields)
    return 0


def value_bytes(var: relax.Var, what: str, device_dtype: str | None = None,
                partial_width: int | None = None) -> int:
    """:func:`tensor_bytes` of ``var``; a partial sum (:func:`~tvm_chiplet.passes.attrs.
    is_partial_sum`) counts ``partial_width`` bytes an element, by default
    :func:`~tvm_chiplet.targets.system.partial_sum_width` of ``device_dtype`` (a system's is
    :attr:`~tvm_chiplet.targets.system.ChipletSystem.partial_sum_bytes`)."""
    if device_dtype is None or not is_partial_sum(var):
        return tensor_bytes(var.ty, what, device_dtype)
    return tensor_bytes(var.ty, what, device_dtype,
                        partial_width or partial_sum_width(device_dtype))


def tensor_elements(ty: tvm.ir.Type, what: str) -> int:
    """Elements of a value of type ``ty`` (tensor or tuple of tensors) with static shape."""
    if isinstance(ty, relax.TensorType):
        return math.prod(_static_dims(ty, what))
    if isinstance(ty, tvm.ir.TupleType):
        return sum(tensor_elements(field, what) for field in ty.fields)
    return 0


def has_static_shape(ty: tvm.ir.Type) -> bool:
    """Whether the shape of a value of type ``ty`` is known at compile time: a tensor or a shape
    with constant dimensions, a tuple of such, or a value without a shape (e.g. an object)."""
    if isinstance(ty, relax.TensorType):
        dims = tensor_dims(ty)  # cached: asked of every value of a split module
        return dims is not None and None not in dims
    if isinstance(ty, relax.ShapeType):
        return ty.values is not None and all(isinstance(d, tvm.tirx.IntImm) for d in ty.values)
    if isinstance(ty, tvm.ir.TupleType):
        return all(has_static_shape(field) for field in ty.fields)
    return True


def main_bindings(mod: tvm.IRModule) -> list[relax.Binding]:
    """The bindings of ``main`` in order, over all its blocks (ReduceGraph leaves one dataflow
    block; a data-parallel module keeps its scatter and gather in blocks of their own)."""
    if "main" not in [gv.name_hint for gv in mod.get_global_vars()]:
        raise AnalysisError("the module has no 'main' function")
    return [b for block in mod["main"].body.blocks for b in block.bindings]


def planned_bindings(mod: tvm.IRModule) -> list[relax.VarBinding]:
    """The bindings of ``main`` that a placement covers: those before the first one whose shape
    is data-dependent (a ``match_cast``, or a value whose shape is known at run time only, as
    the results of NonZero, Unique or a Slice by input values) or that is control flow (an If,
    whose branch is chosen at run time).

    The data-dependent tail cannot be costed at compile time: it is not planned, and
    :class:`~tvm_chiplet.passes.PartitionByCluster` keeps it on the cluster of the last planned
    binding.
    """
    bindings = main_bindings(mod)
    for index, binding in enumerate(bindings):
        if (isinstance(binding, relax.MatchCast) or isinstance(binding.value, relax.If)
                or not has_static_shape(binding.var.ty)):
            return bindings[:index]
    return bindings


def call_flops(mod: tvm.IRModule, call: relax.Call, cache: dict) -> float:
    """FLOPs of the PrimFunc a ``call_tir`` calls, cached per PrimFunc.

    TVM's estimator counts the arithmetic of each loop nest (an ``estimated_flops`` attribute on
    the PrimFunc overrides it). It rejects some TIR, e.g. a ``Let`` expression or vector lanes
    ("Do not have a default for prim.Let"). Such a PrimFunc counts one operation per output
    element if its op pattern (written by ``AnnotateTIROpPattern``) is elementwise, broadcast
    or injective, and one per input element if it is a reduction; any other raises
    :class:`AnalysisError`, so that no op is taken to be free.
    """
    gvar = call.args[0]
    if gvar not in cache:
        func = mod[gvar]
        try:
            cache[gvar] = float(tvm.s_tir.analysis.estimate_tir_flops(tvm.IRModule({"main": func})))
        except tvm.error.InternalError as err:
            cache[gvar] = _flops_from_shapes(call, func, str(err).strip().splitlines()[0])
    return cache[gvar]


def _flops_from_shapes(call: relax.Call, func: tvm.tirx.PrimFunc, reason: str) -> float:
    """One operation per output element (elementwise, broadcast, injective) or per input element
    (reduction) of a PrimFunc TVM's estimator rejected for ``reason``."""
    name = call.args[0].name_hint
    attrs = func.attrs if func.attrs is not None else {}
    pattern = int(attrs["op_pattern"]) if "op_pattern" in attrs else None
    if pattern in _OUTPUT_SIZED_PATTERNS:
        return float(tensor_elements(call.ty, f"result of {name}"))
    if pattern == _REDUCTION_PATTERN:
        return float(sum(tensor_elements(arg.ty, f"argument of {name}")
                         for arg in call.args[1].fields))
    known = "no op pattern" if pattern is None else f"op pattern {pattern}"
    raise AnalysisError(
        f"cannot count the FLOPs of PrimFunc {name!r}: TVM's estimator rejects it ({reason}), "
        f"and with {known} (not elementwise, broadcast, injective or reduction) its work does "
        "not follow from its shapes; give it its count, which the estimator then uses: "
        f"mod[gv] = mod[gv].with_attr(\"estimated_flops\", n), gv = mod.get_global_var({name!r})"
    )


def call_tir_weight_bytes(call: relax.Call, device_dtype: str | None = None) -> int:
    """Bytes of the constant arguments (weights) a ``call_tir`` reads (at ``device_dtype``, see
    :func:`tensor_bytes`).

    A gather (a PrimFunc legalized from ``take``, e.g. an embedding lookup) reads only the rows
    it selects, so each of its constants counts at most the bytes of the call's output.
    """
    name = call.args[0].name_hint
    cap = None
    if any(re.fullmatch(r"take\d*", part) for part in name.split("_")):
        out = call.ty_args[0] if call.ty_args else call.ty  # the call_tir's declared output
        cap = tensor_bytes(out, f"result of {name}", device_dtype) if isinstance(
            out, relax.TensorType) else None
    total = 0
    for arg in call.args[1].fields:
        if isinstance(arg, tvm.ir.GenericConst):
            nbytes = tensor_bytes(arg.ty, f"constant of {name}", device_dtype)
            total += nbytes if cap is None else min(nbytes, cap)
    return total


WEIGHT_KEY_SAMPLES = 1 << 16
"""Values of each constant that :func:`call_tir_weight_key` reads (evenly strided)."""


def call_tir_weight_key(call: relax.Call) -> str:
    """A digest of the constant arguments (weights) a ``call_tir`` reads: equal for calls
    reading equal weights (the replicas a row split makes of its op's weights), "" for a call
    without constants.

    It hashes each constant's dtype, shape and :data:`WEIGHT_KEY_SAMPLES` evenly strided
    values, read in place: hashing every byte cost 0.26 s per op graph of BERT-base, which
    ``tvmc compile`` extracts several times. Weights that differ only between the samples get
    one key; the key only models where weights are fetched from, never what an op computes."""
    digest = hashlib.blake2b(digest_size=8)
    found = False
    for arg in call.args[1].fields:
        if isinstance(arg, tvm.ir.GenericConst):
            found = True
            try:
                values = np.from_dlpack(arg.value).reshape(-1)
            except (TypeError, BufferError, RuntimeError):  # a dtype numpy lacks (bfloat16)
                digest.update(f"{tvm_ffi.structural_hash(arg)}".encode())
                continue
            step = max(1, values.size // WEIGHT_KEY_SAMPLES)
            digest.update(f"{values.dtype}{tuple(arg.value.shape)}".encode())
            digest.update(np.ascontiguousarray(values[::step]).tobytes())
    return digest.hexdigest() if found else ""


def _value_vars(expr: relax.Expr) -> list[relax.Var]:
    return list(relax.analysis.free_vars(expr))


_SLICE = re.compile(r"strided_slice\d*")
"""Kernels that copy a region of their input (FuseOps names a lone op's kernel after it)."""


def read_bytes(kernel: str, operand_bytes: int, output_bytes: int) -> int:
    """Bytes a kernel reads of its tensor operands (``operand_bytes`` in all): a slice reads
    only the region it copies."""
    return min(operand_bytes, output_bytes) if _SLICE.fullmatch(kernel) else operand_bytes


_SLICE_BLOCK = "T_strided_slice"
"""Prefix of the blocks TOPI's strided slice computes in (``T_strided_slice_with_axes``)."""


def sliced_fractions(func: tvm.tirx.PrimFunc) -> dict[int, float]:
    """Per parameter of a fused PrimFunc that only strided slices read, the fraction of it they
    read (the sum of their regions over its size, at most 1): a kernel that slices an operand
    and adds it to another (a reduce-scatter's step) reads the slice, not the whole operand.
    Parameters read by any other block, and every parameter of TIR this walk does not know, are
    left out (read whole)."""
    readers: dict[object, list[tuple[str, int | None]]] = {}

    def walk(stmt) -> bool:
        if isinstance(stmt, tvm.s_tir.SBlockRealize):
            return walk(stmt.block)
        if isinstance(stmt, tvm.s_tir.SBlock):
            written = _elements(stmt.writes[0].source) if len(stmt.writes) == 1 else None
            for region in stmt.reads:
                readers.setdefault(region.source, []).append((stmt.name_hint, written))
            return walk(stmt.body) and (stmt.init is None or walk(stmt.init))
        if isinstance(stmt, tvm.tirx.SeqStmt):
            return all(walk(child) for child in stmt.seq)
        if isinstance(stmt, (tvm.tirx.For, tvm.tirx.AttrStmt, tvm.tirx.DeclBuffer)):
            return walk(stmt.body)
        return isinstance(stmt, (tvm.tirx.BufferStore, tvm.tirx.Evaluate, tvm.tirx.AllocBuffer))

    if not walk(func.body):
        return {}
    fractions = {}
    for index, param in enumerate(func.params):
        reads = readers.get(param, [])
        whole = _elements(param)
        if not whole or not reads or not all(name.startswith(_SLICE_BLOCK) and size is not None
                                             for name, size in reads):
            continue
        fractions[index] = min(1.0, sum(size for _, size in reads) / whole)
    return fractions


def _elements(buffer) -> int | None:
    """Elements of a TIR buffer of static shape, else None."""
    shape = getattr(buffer, "shape", None)
    if shape is None or not all(isinstance(d, tvm.tirx.IntImm) for d in shape):
        return None
    return math.prod(int(d) for d in shape)


def operand_bytes(mod: tvm.IRModule, call: relax.Call, sizes: dict[relax.Var, int],
                  output_bytes: int, cache: dict) -> int:
    """Bytes a ``call_tir`` reads of its Var operands, whose sizes are ``sizes``: each whole, but
    what its kernel only slices (:func:`sliced_fractions`, cached per kernel in ``cache``) and
    a lone slice's operand (:func:`read_bytes`)."""
    fractions = _read_fractions(mod, call, cache)
    total = sum(round(nbytes * fractions.get(hash(var), 1.0)) for var, nbytes in sizes.items())
    return read_bytes(call.args[0].name_hint, total, output_bytes)


def moved_bytes(mod: tvm.IRModule, call: relax.Call, sizes: dict[relax.Var, int],
                output_bytes: int, cache: dict) -> tuple[int, int]:
    """(bytes read, bytes written) of a ``call_tir``'s tensors on its cluster: its operands as
    :func:`operand_bytes` counts them, and its output. A kernel marked :data:`ATTR_IN_PLACE`
    (an all-gather's or halo exchange's concat) moves none: the network writes each received
    piece into place in the assembled buffer, and the local piece's producer writes there too,
    as accelerators' DMA engines and buffer allocators do, so no copy runs."""
    func = mod[call.args[0]]
    if isinstance(func, tvm.tirx.PrimFunc) and func.attrs is not None \
            and ATTR_IN_PLACE in func.attrs:
        return 0, 0
    return operand_bytes(mod, call, sizes, output_bytes, cache), output_bytes


def _read_fractions(mod: tvm.IRModule, call: relax.Call, cache: dict) -> dict[int, float]:
    """The fraction of each Var operand of a ``call_tir`` its kernel reads
    (:func:`sliced_fractions`, cached per kernel); operands read whole are left out."""
    gvar = call.args[0]
    if gvar not in cache:
        func = mod[gvar]
        cache[gvar] = sliced_fractions(func) if isinstance(func, tvm.tirx.PrimFunc) else {}
    fractions = cache[gvar]
    return {hash(arg): fractions[i] for i, arg in enumerate(call.args[1].fields)
            if i in fractions and isinstance(arg, relax.Var)}


def extract_op_graph(mod: tvm.IRModule, device_dtype: str | None = None,
                     partial_width: int | None = None) -> OpGraph:
    """Build the :class:`OpGraph` of ``main`` of a reduced module.

    Parameters
    ----------
    mod : IRModule
        A module whose ``main`` is one dataflow block of ``call_tir`` (and tuple) bindings, as
        :class:`ReduceGraph` leaves it; a data-dependent tail is left out
        (:func:`planned_bindings`).
    device_dtype : str, optional
        Count floating-point tensors at this device precision (module docstring); default the
        IR's own dtypes.
    partial_width : int, optional
        Bytes per element of a partial sum at ``device_dtype`` (:func:`value_bytes`).

    Returns
    -------
    OpGraph
        One node per planned binding; an edge per use of a value, weighted by the value's bytes.
    """
    bindings = planned_bindings(mod)
    func = mod["main"]
    params = list(func.params)
    # Values are keyed by their node (hash: the handle), not by the Python objects the IR
    # hands out anew at every read, whose comparisons go through the FFI (a million of them
    # in a 256-way split).
    param_index = {hash(param): i for i, param in enumerate(params)}
    defined_by: dict[int, int] = {}
    flop_cache: dict = {}
    slice_cache: dict = {}
    ops: list[OpNode] = []
    graph = nx.DiGraph()
    input_uses: list[list[int]] = [[] for _ in params]
    known: dict[int, int] = {}  # bytes of each value bound so far, read by many ops

    for op_id, binding in enumerate(bindings):
        value = binding.value
        out_bytes = value_bytes(binding.var, f"value {binding.var.name} (op {op_id})",
                                device_dtype, partial_width)
        weight_bytes, flops, weight_key = 0, 0.0, ""
        if isinstance(value, relax.Call) and value.op.same_as(CALL_TIR):
            kind, name = "call_tir", value.args[0].name_hint
            flops = call_flops(mod, value, flop_cache)
            if any(isinstance(arg, tvm.ir.GenericConst) for arg in value.args[1].fields):
                weight_bytes = call_tir_weight_bytes(value, device_dtype)
                weight_key = call_tir_weight_key(value)
        elif isinstance(value, relax.Tuple):
            kind, name = "tuple", "tuple"
        elif isinstance(value, relax.TupleGetItem):
            kind, name = "get_item", "get_item"
        else:
            kind = "other"
            name = value.op.name if isinstance(value, relax.Call) and hasattr(value.op, "name") \
                else type(value).__name__
        graph.add_node(op_id)
        sizes = {var: known[hash(var)] if hash(var) in known
                 else value_bytes(var, f"value {var.name}", device_dtype, partial_width)
                 for var in _value_vars(value)}
        for var, nbytes in sizes.items():
            key = hash(var)
            if key in defined_by:
                graph.add_edge(defined_by[key], op_id, nbytes=nbytes)
            elif key in param_index:
                input_uses[param_index[key]].append(op_id)
        input_bytes, written = (moved_bytes(mod, value, sizes, out_bytes, slice_cache)
                                if kind == "call_tir" else (sum(sizes.values()), out_bytes))
        defined_by[hash(binding.var)] = op_id
        known[hash(binding.var)] = out_bytes
        ops.append(OpNode(op_id, name, kind, flops, input_bytes, written, weight_bytes,
                          weight_key))

    output_ops = [defined_by[hash(var)] for var in _value_vars(func.body.body)
                  if hash(var) in defined_by]
    return OpGraph(
        ops=ops,
        graph=graph,
        input_names=[param.name for param in params],
        input_uses=input_uses,
        output_ops=output_ops,
    )
