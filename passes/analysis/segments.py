"""Read a partitioned module back into its segment schedule and op-level task graph."""

from __future__ import annotations

from dataclasses import dataclass, field

import tvm
from tvm import relax

from tvm_chiplet.passes.analysis.extract_op_graph import (
    AnalysisError,
    call_flops,
    call_tir_weight_bytes,
    call_tir_weight_key,
    has_static_shape,
    main_bindings,
    moved_bytes,
    tensor_bytes,
    value_bytes,
)
from tvm_chiplet.passes.attrs import ATTR_CLUSTER, CALL_TIR, call_placement


@dataclass
class Segment:
    """One segment call of ``main``: which function, on which cluster, reading what.

    ``inputs`` holds one source per parameter: ``["input", i]`` for model input ``i`` or
    ``["segment", s, j]`` for output ``j`` of segment ``s``.
    """

    index: int
    name: str
    cluster: int
    inputs: list[list]
    output_bytes: list[int]

    def to_dict(self) -> dict:
        return dict(self.__dict__)


@dataclass
class Task:
    """One compute op of a segment, in execution order."""

    op_id: int
    name: str
    segment: int
    cluster: int
    stage: int
    flops: float
    bytes_moved: int
    weight_bytes: int
    deps: list[list[int]] = field(default_factory=list)
    output_bytes: int = 0
    weight_key: str = ""  # equal on tasks holding the same weights (call_tir_weight_key)

    def to_dict(self) -> dict:
        return dict(self.__dict__)


@dataclass
class SegmentSchedule:
    """``data_dependent_ops``: the ``call_tir`` ops of a data-dependent tail (their shapes are
    known at run time only, or they sit in a branch of control flow), which run in their
    segment but are no tasks: no cost is modelled for them."""

    segments: list[Segment]
    outputs: list[list]
    tasks: list[Task]
    input_names: list[str]
    data_dependent_ops: list[str] = field(default_factory=list)

    def to_dict(self) -> dict:
        return {
            "segments": [s.to_dict() for s in self.segments],
            "outputs": self.outputs,
            "tasks": [t.to_dict() for t in self.tasks],
            "input_names": self.input_names,
            "data_dependent_ops": self.data_dependent_ops,
        }


def read_segments(mod: tvm.IRModule, device_dtype: str | None = None,
                  partial_width: int | None = None) -> SegmentSchedule:
    """Describe ``main`` of a module partitioned by :class:`PartitionByCluster`.

    Returns the segments in call order with their data sources, the sources of ``main``'s
    results, and the compute ops as tasks whose ``deps`` are ``[producer_task, nbytes]`` pairs
    (a value read through tuple plumbing counts once per reader). Bytes are counted at
    ``device_dtype`` as :func:`~.extract_op_graph.value_bytes` does (partial sums at
    ``partial_width``); a segment result with a
    data-dependent shape counts 0 bytes (it can only be a result of ``main``: the data-dependent
    tail is the last segment's).
    """
    main = mod["main"]
    params = list(main.params)
    source: dict[relax.Var, list] = {p: ["input", i] for i, p in enumerate(params)}
    producers: dict[tuple, set[int]] = {}  # ("segment", s, j) -> task indices producing it
    segments: list[Segment] = []
    tasks: list[Task] = []
    data_dependent: list[str] = []
    flop_cache: dict = {}
    slice_cache: dict = {}
    for binding in main_bindings(mod):
        value = binding.value
        if isinstance(value, relax.Call) and isinstance(value.op, tvm.ir.GlobalVar):
            func = mod[value.op]
            if func.attrs is None or ATTR_CLUSTER not in func.attrs:
                raise AnalysisError(
                    f"'main' calls {value.op.name_hint}, which is not a segment; "
                    "run PartitionByCluster"
                )
            inputs = []
            for arg in value.args:
                if not isinstance(arg, relax.Var) or arg not in source:
                    raise AnalysisError(f"segment {value.op.name_hint} reads an unknown value")
                inputs.append(source[arg])
            index = len(segments)
            segment = Segment(
                index=index,
                name=value.op.name_hint,
                cluster=int(func.attrs[ATTR_CLUSTER]),
                inputs=inputs,
                output_bytes=[
                    _result_bytes(ty, v, f"output of {value.op.name_hint}", device_dtype,
                                  partial_width)
                    for ty, v in zip(func.ret_ty.fields, func.body.body.fields, strict=True)
                ],
            )
            segments.append(segment)
            source[binding.var] = ["segment_tuple", index]
            _segment_tasks(mod, func, segment, producers, tasks, data_dependent, flop_cache,
                           slice_cache, device_dtype, partial_width)
        elif isinstance(value, relax.TupleGetItem) and value.tuple_value in source:
            _, index = source[value.tuple_value]
            source[binding.var] = ["segment", index, int(value.index)]
        else:
            raise AnalysisError(
                f"'main' has a binding {binding.var.name} that is neither a segment call nor a "
                "tuple item; run PartitionByCluster"
            )
    result = main.body.body
    fields = result.fields if isinstance(result, relax.Tuple) else [result]
    outputs = [source[f] for f in fields]
    return SegmentSchedule(segments, outputs, tasks, [p.name for p in params], data_dependent)


def _result_bytes(ty, value: relax.Expr, what: str, device_dtype: str | None,
                  partial_width: int | None) -> int:
    """Bytes of a segment's result of type ``ty`` (0 for a data-dependent shape), a partial
    sum's at ``partial_width``."""
    if not has_static_shape(ty):
        return 0
    if isinstance(value, relax.Var):
        return value_bytes(value, what, device_dtype, partial_width)
    return tensor_bytes(ty, what, device_dtype)


def _segment_tasks(mod, func, segment, producers, tasks, data_dependent, flop_cache,
                   slice_cache, device_dtype, partial_width) -> None:
    origin: dict[relax.Var, set[int]] = {}
    for param, src in zip(func.params, segment.inputs, strict=True):
        origin[param] = producers.get(tuple(src), set()) if src[0] == "segment" else set()
    block = func.body.blocks[0]
    for binding in block.bindings:
        value = binding.value
        reads = list(relax.analysis.free_vars(value))
        placed = call_placement(value)
        is_call_tir = isinstance(value, relax.Call) and value.op.same_as(CALL_TIR)
        static = all(has_static_shape(v.ty) for v in [*reads, binding.var])
        if is_call_tir and static:
            _, stage, op_id = placed if placed else (segment.cluster, 0, -1)
            sizes = {var: value_bytes(var, var.name, device_dtype, partial_width)
                     for var in reads}
            deps: dict[int, int] = {}
            for var, nbytes in sizes.items():
                for producer in origin.get(var, ()):
                    deps[producer] = deps.get(producer, 0) + nbytes
            weight_bytes = call_tir_weight_bytes(value, device_dtype)
            output = value_bytes(binding.var, binding.var.name, device_dtype, partial_width)
            read, written = moved_bytes(mod, value, sizes, output, slice_cache)
            tasks.append(
                Task(
                    op_id=op_id,
                    name=value.args[0].name_hint,
                    segment=segment.index,
                    cluster=segment.cluster,
                    stage=stage,
                    flops=call_flops(mod, value, flop_cache),
                    bytes_moved=read + written + weight_bytes,
                    weight_bytes=weight_bytes,
                    deps=[[p, b] for p, b in sorted(deps.items())],
                    output_bytes=written,
                    weight_key=call_tir_weight_key(value),
                )
            )
            origin[binding.var] = {len(tasks) - 1}
        else:
            if is_call_tir or isinstance(value, relax.If):
                data_dependent.extend(_called_prim_funcs(value))
            origin[binding.var] = set().union(*(origin.get(v, set()) for v in reads))
    result = func.body.body
    for j, item in enumerate(result.fields):
        producers[("segment", segment.index, j)] = origin.get(item, set())


def _called_prim_funcs(expr: relax.Expr) -> list[str]:
    """Names of the PrimFuncs that the ``call_tir`` calls in ``expr`` call, in visiting order."""
    names: list[str] = []

    def visit(node) -> None:
        if isinstance(node, relax.Call) and node.op.same_as(CALL_TIR):
            names.append(node.args[0].name_hint)

    relax.analysis.post_order_visit(expr, visit)
    return names
