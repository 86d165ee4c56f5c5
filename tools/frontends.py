"""Model loading: ONNX files or protos, and Relax IRModules from an existing TVM flow."""

from __future__ import annotations

import contextlib
import os
import re
import warnings
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import onnx
import tvm
import tvm_ffi
from tvm import relax
from tvm.relax.expr_functor import PyExprMutator, mutator
from tvm.relax.frontend.onnx import from_onnx, onnx_frontend

from tvm_chiplet.runtime.artifact import InputSpec
from tvm_chiplet.tools.onnx_folding import fold_shapes
from tvm_chiplet.tools.onnx_rnn import recurrent_converters
from tvm_chiplet.tools.torch_import import is_torch_model, torch_to_relax


@tvm_ffi.register_error
class ModelLoadError(ValueError):
    """The model cannot be loaded; the message names the file, node or input and the remedy."""


_INPUT_SHAPE = re.compile(
    r"""\s*(?:"([^"]+)"|'([^']+)'|([^\s,'"][^\s'"]*?))\s*:\s*\[([^\]]*)\]\s*,?"""
)


def parse_input_shapes(text: str | None) -> dict[str, list[int]]:
    """Parse tvmc-style ``"x:[1,3,224,224] mask:[1,128]"`` (space or comma between inputs).

    A name is everything before the ``:[`` of its shape, so names may contain ``:`` (tf2onnx's
    ``serving_default_input_2:0:[1,224,224,3]``); quote a name that contains spaces, commas or
    ``:[`` with ``"`` or ``'`` (``'my input':[1,10]``).
    """
    if not text:
        return {}
    shapes: dict[str, list[int]] = {}
    pos = 0
    while pos < len(text.strip()):
        match = _INPUT_SHAPE.match(text, pos)
        if not match:
            raise ModelLoadError(
                f"cannot parse --input-shapes {text!r} at {text[pos:]!r}; "
                'expected e.g. "x:[1,3,224,224] y:[1,10]" (quote names with spaces: '
                "\"'my input':[1,10]\")"
            )
        name = next(group for group in match.group(1, 2, 3) if group is not None)
        dims = match.group(4)
        try:
            shapes[name] = [int(d) for d in dims.split(",") if d.strip()]
        except ValueError:
            raise ModelLoadError(
                f"input shape for {name!r} must be integers, got [{dims}]"
            ) from None
        if any(d <= 0 for d in shapes[name]):
            raise ModelLoadError(f"input shape for {name!r} must be positive, got [{dims}]")
        pos = match.end()
    return shapes


def load_onnx(path_or_model: str | os.PathLike | onnx.ModelProto) -> onnx.ModelProto:
    """Read an ONNX file with errors that name the file and say what is wrong."""
    if isinstance(path_or_model, onnx.ModelProto):
        return path_or_model
    path = os.fspath(path_or_model)
    if not os.path.exists(path):
        raise ModelLoadError(f"model file {path!r} does not exist")
    if os.path.isdir(path):
        raise ModelLoadError(f"model path {path!r} is a directory; give an .onnx file")
    try:
        model = onnx.load(path)
    except Exception as err:  # protobuf raises several unrelated types for garbage input
        raise ModelLoadError(
            f"{path!r} is not an ONNX model (could not parse it as an ONNX protobuf: {err})"
        ) from None
    if not model.graph.node and not model.graph.output:
        raise ModelLoadError(f"{path!r} is not an ONNX model (it has no graph)")
    return model


def graph_inputs(model: onnx.ModelProto) -> list[onnx.ValueInfoProto]:
    """The model's inputs that are not initializers: what a user feeds."""
    initializers = {init.name for init in model.graph.initializer}
    return [i for i in model.graph.input if i.name not in initializers]


def onnx_to_relax(
    model: onnx.ModelProto, input_shapes: dict[str, list[int]] | None = None, source: str = "model",
    report: Callable[[str], None] | None = None,
) -> tvm.IRModule:
    """Import an ONNX model into Relax, naming unsupported operators and their nodes.

    The graph's shape computations are folded first for the static input shapes
    (:func:`~tvm_chiplet.tools.onnx_folding.fold_shapes`). When the folded graph does not
    import, the graph as written is imported with the static shapes; when that fails too, it
    is imported with the dims the model declares, as plain TVM imports it, and its symbolic
    dims are then specialised to ``input_shapes`` (:func:`_specialise`): TVM's converters
    build some ops differently for a static dim than for a symbolic one (Trilu with a
    computed ``k`` on a static 0-size dim fails), so a model plain TVM imports is imported
    here too. ``report`` receives a line saying what was folded, or why nothing was, and
    which fallback was taken.
    """
    input_shapes = dict(input_shapes or {})
    names = [i.name for i in graph_inputs(model)]
    unknown = sorted(set(input_shapes) - set(names))
    if unknown:
        raise ModelLoadError(
            f"--input-shapes names {unknown} but {source} has inputs {names}"
        )
    for value in graph_inputs(model):
        declared = value.type.tensor_type
        sizes = input_shapes.get(value.name)
        if sizes is not None and declared.HasField("shape") \
                and len(declared.shape.dim) != len(sizes):
            raise _rank_error(value.name, source, len(declared.shape.dim), sizes)
    folded, folding = fold_shapes(model, input_shapes)
    if report and (folding.changed or folding.error):
        report(folding.summary())
    try:
        return _import(folded, input_shapes, source)
    except ModelLoadError as error:
        first_error = error
    fallbacks = []
    if folded is not model:
        fallbacks.append((lambda: _import(model, input_shapes, source),
                          "the folded graph did not import; imported the graph as written"))
    if input_shapes:
        reason = str(first_error).removeprefix(f"TVM could not import {source}: ")
        fallbacks.append((
            lambda: _specialise(_import(model, {}, source), model, input_shapes, source),
            f"the graph did not import with static input shapes ({reason[:200]}); imported it "
            "with the dims the model declares, as plain TVM does, and specialised them"))
    for attempt, note in fallbacks:
        try:
            mod = attempt()
        except ModelLoadError:
            continue
        if report:
            report(note)
        return mod
    raise first_error from None


def _rank_error(name: str, source: str, rank: int, sizes: list[int]) -> ModelLoadError:
    return ModelLoadError(f"input {name!r} of {source} has {rank} dims, but its given shape "
                          f"{sizes} has {len(sizes)}")


def _specialise(mod: tvm.IRModule, model: onnx.ModelProto, input_shapes: dict[str, list[int]],
                source: str) -> tvm.IRModule:
    """``mod`` with each symbolic dim of ``main``'s inputs bound to its size in
    ``input_shapes`` (``relax.transform.BindSymbolicVars``).

    Raises ModelLoadError when a given shape does not fit the dims ``mod`` has: another rank,
    another static size, or two sizes for one symbolic dim.
    """
    binding: dict[tvm.tirx.Var, int] = {}
    names = [value.name for value in graph_inputs(model)]
    params = mod["main"].params
    if len(names) != len(params):
        raise ModelLoadError(f"{source} has inputs {names} but TVM's import of it takes "
                             f"{len(params)}; cannot give them the input shapes")
    for name, param in zip(names, params, strict=True):
        ty = param.ty
        if name not in input_shapes or not isinstance(ty, relax.TensorType) \
                or not hasattr(ty.shape, "values"):
            continue
        dims, sizes = list(ty.shape.values), input_shapes[name]
        if len(dims) != len(sizes):
            raise _rank_error(name, source, len(dims), sizes)
        for dim, size in zip(dims, sizes, strict=True):
            if isinstance(dim, tvm.tirx.Var):
                if binding.setdefault(dim, size) != size:
                    raise ModelLoadError(
                        f"dim {dim.name} of {source} is given two sizes, {binding[dim]} and "
                        f"{size} (input {name!r}); give every input that shares it one size")
            elif isinstance(dim, tvm.tirx.IntImm) and int(dim) != size:
                raise ModelLoadError(f"input {name!r} of {source} has a static dim of "
                                     f"{int(dim)} where its given shape {sizes} has {size}")
    if not binding:
        return mod
    return relax.transform.BindSymbolicVars(binding, "main")(mod)


def _import(model: onnx.ModelProto, input_shapes: dict[str, list[int]],
            source: str) -> tvm.IRModule:
    try:
        with warnings.catch_warnings(), _clip_as_relax_ops(), _pad_as_relax_ops(), \
                _einsum_as_relax_op(), recurrent_converters():
            warnings.simplefilter("ignore")
            mod = from_onnx(model, shape_dict=input_shapes or None)
    except tvm.error.OpNotImplemented as err:
        raise ModelLoadError(_unsupported_ops_message(model, str(err), source)) from None
    except Exception as err:
        first = str(err).strip().splitlines()[-1] if str(err).strip() else type(err).__name__
        raise ModelLoadError(f"TVM could not import {source}: {first}") from None
    return _with_onnx_input_names(_complete_input_dtypes(mod, model), model)


ATTR_INPUT_NAMES = "chiplet.onnx_input_names"
"""Module attribute: the ONNX names of ``main``'s parameters, in order, where TVM's importer
changed them (``x:0`` becomes ``x_0``), so that inputs are given and named as the model names
them."""


def _with_onnx_input_names(mod: tvm.IRModule, model: onnx.ModelProto) -> tvm.IRModule:
    names = [value.name for value in graph_inputs(model)]
    params = [param.name for param in mod["main"].params]
    if len(names) != len(params) or names == params:
        return mod
    return mod.with_attr(ATTR_INPUT_NAMES, names)


@mutator
class _Substitute(PyExprMutator):
    def __init__(self, mapping: dict) -> None:
        super().__init__()
        self.mapping = mapping

    def visit_var_(self, var: relax.Var) -> relax.Expr:
        return self.mapping[var] if var in self.mapping else super().visit_var_(var)


def _complete_input_dtypes(mod: tvm.IRModule, model: onnx.ModelProto) -> tvm.IRModule:
    """``mod`` with the dtype of every input that TVM's importer leaves open (an ONNX optional
    tensor input) taken from the model, so that run inputs are checked against it."""
    declared = {}
    for value in graph_inputs(model):
        ty = value.type.optional_type.elem_type if value.type.HasField("optional_type") \
            else value.type
        if ty.HasField("tensor_type") and ty.tensor_type.elem_type:
            declared[value.name] = str(onnx.helper.tensor_dtype_to_np_dtype(
                ty.tensor_type.elem_type))
    main = mod["main"]
    mapping = {
        param: relax.Var(param.name, relax.TensorType(param.ty.shape, declared[param.name])
                         if param.ty.shape is not None
                         else relax.TensorType(dtype=declared[param.name], ndim=param.ty.ndim))
        for param in main.params
        if isinstance(param.ty, relax.TensorType) and param.ty.dtype is None
        and param.name in declared
    }
    if not mapping:
        return mod
    body = _Substitute(mapping).visit_expr(main.body)
    params = [mapping.get(param, param) for param in main.params]
    out = mod.clone()
    out.update_func(mod.get_global_var("main"),
                    relax.Function(params, body, main.ret_ty, main.is_pure, main.attrs))
    return out


_QUANTIZED_OP = re.compile(r"Q[A-Z]\w*|\w+Integer\w*|DynamicQuantize\w+|\w+NBits")
"""Quantized operators of the QOperator format and of onnxruntime's contrib domain (QLinearConv,
QLinearMatMul, QGemm, ConvInteger, MatMulIntegerToFloat, DynamicQuantizeMatMul, MatMulNBits...),
as opposed to the QDQ format's QuantizeLinear / DequantizeLinear, which TVM imports."""


def _unsupported_ops_message(model: onnx.ModelProto, error: str, source: str) -> str:
    """Name the operators TVM's importer rejected (its message lists them) and their nodes.

    Quantized operators get their own remedy: TVM imports quantized models in the QDQ format.
    """
    listed = re.findall(r"ONNX: (.*)$", error.splitlines()[0]) if error.strip() else []
    if not listed:
        return f"TVM could not import {source}: {error.strip() or 'an operator is unsupported'}"
    ops = sorted({op.strip() for op in listed[0].split(",") if op.strip()})
    quantized = [op for op in ops if _QUANTIZED_OP.fullmatch(op)]
    other = [op for op in ops if op not in quantized]

    def at_nodes(types: list[str]) -> str:
        nodes = [f"{n.name or '<unnamed>'} ({n.op_type})" for n in model.graph.node
                 if n.op_type in types]
        return ", ".join(nodes[:10]) + (f" and {len(nodes) - 10} more" if len(nodes) > 10 else "")

    problems = []
    if other:
        problems.append(
            f"{source} uses operator(s) {', '.join(other)} that TVM's ONNX importer does not "
            f"support, at node(s) {at_nodes(other)}; replace them or export with another opset"
        )
    if quantized:
        problems.append(
            f"{source} uses quantized operator(s) {', '.join(quantized)} that TVM's ONNX "
            f"importer does not support, at node(s) {at_nodes(quantized)}; TVM imports "
            "quantized models in the QDQ format (QuantizeLinear / DequantizeLinear around float "
            "operators): quantize the fp32 model again with onnxruntime.quantization."
            "quantize_static(..., quant_format=QuantFormat.QDQ)"
        )
    return ". ".join(problems)


@contextlib.contextmanager
def _converter_replaced(converter: type, name: str, impl: Callable) -> Iterator[None]:
    """TVM's ONNX ``converter`` with its classmethod ``name`` replaced by ``impl`` while the
    context lasts (the importer's own converter back afterwards, on errors too)."""
    original = converter.__dict__[name]
    setattr(converter, name, classmethod(impl))
    try:
        yield
    finally:
        setattr(converter, name, original)


@contextlib.contextmanager
def _clip_as_relax_ops() -> Iterator[None]:
    """Import ONNX Clip (opset >= 11) as ``R.maximum`` / ``R.minimum`` instead of TVM's
    ``call_tir`` of topi kernels.

    TVM 0.27's importer emits Clip as ``call_tir`` with the shapes of the import fixed in the
    PrimFunc, which no pass can re-shape (ReplicateDataParallel splits the batch, so it refuses
    them). The Relax ops legalize to the same topi kernels; NaN bounds are still treated as
    unbounded, as ONNX and onnxruntime do.
    """
    def impl_v13(cls, bb, inputs, attr, params):
        result = inputs[0]
        if inputs[1] is not None:
            low = cls._sanitize_nan_clip_bound(bb, inputs[1], for_min=True)
            result = bb.emit(relax.op.maximum(result, low))
        if inputs[2] is not None:
            high = cls._sanitize_nan_clip_bound(bb, inputs[2], for_min=False)
            result = bb.emit(relax.op.minimum(result, high))
        return result

    with _converter_replaced(onnx_frontend.Clip, "_impl_v13", impl_v13):
        yield


@contextlib.contextmanager
def _pad_as_relax_ops() -> Iterator[None]:
    """Import ONNX Pad of constant or reflect mode as ``R.nn.pad`` instead of TVM's
    ``call_tir`` of topi kernels.

    As with Clip, a ``call_tir`` has the import's shapes fixed: data-parallel refused it, and a
    split gathered the whole image before it (a U-Net pads each upsampled map to its skip's
    size with F.pad; a style-transfer net reflects before each conv). ``R.nn.pad`` legalizes to
    the same kernels; DistributeTensors pads each row band where it lies. Edge (TVM's Relax op
    legalizes it to different values) and wrap modes keep the importer's kernels.
    """
    original = onnx_frontend.Pad.__dict__["_lower_pad"].__func__

    def lower_pad(cls, bb, inputs, attr, params, allowed_modes):
        mode = attr.get("mode", b"constant").decode("utf-8")
        if mode not in ("constant", "reflect") or mode not in allowed_modes:
            return original(cls, bb, inputs, attr, params, allowed_modes)
        before, after, value = cls._parse_pads_and_axes(inputs, params)
        widths = [int(w) for pair in zip(before, after, strict=True) for w in pair]
        return bb.emit(relax.op.nn.pad(inputs[0], widths, pad_mode=mode, pad_value=value))

    with _converter_replaced(onnx_frontend.Pad, "_lower_pad", lower_pad):
        yield


@contextlib.contextmanager
def _einsum_as_relax_op() -> Iterator[None]:
    """Import ONNX Einsum as ``R.einsum`` instead of TVM's ``call_tir`` of the topi kernel.

    The kernel ran whole on one cluster, and no pass can look inside it; the Relax op legalizes
    to the same kernel, and EinsumAsMatmul rewrites it as the matmul it stands for, which the
    planners split. An equation ``R.einsum`` rejects keeps the importer's kernel.
    """
    original = onnx_frontend.Einsum.__dict__["_impl_v12"].__func__

    def impl_v12(cls, bb, inputs, attr, params):
        try:
            return bb.emit(relax.op.einsum(list(inputs), attr["equation"].decode("utf-8")))
        except tvm.error.InternalError:
            return original(cls, bb, inputs, attr, params)

    with _converter_replaced(onnx_frontend.Einsum, "_impl_v12", impl_v12):
        yield


def load_model(
    model: str | os.PathLike | onnx.ModelProto | tvm.IRModule | Any,
    input_shapes: dict[str, list[int]] | None = None,
    report: Callable[[str], None] | None = None,
    example_inputs: Sequence[Any] | None = None,
) -> tvm.IRModule:
    """Load a model as an IRModule with ``main``: an ONNX file / proto, a Relax IRModule (passed
    through), or a PyTorch program (a ``torch.nn.Module`` called on ``example_inputs``, an
    ``ExportedProgram`` or a ``.pt2`` file; :mod:`~tvm_chiplet.tools.torch_import`).

    ``report`` receives what the ONNX import did to the graph (:func:`onnx_to_relax`)."""
    if is_torch_model(model):
        if input_shapes:
            raise ModelLoadError(
                "input shapes come from the PyTorch program's example inputs; drop "
                "--input-shapes / input_shapes"
            )
        return torch_to_relax(model, example_inputs, ModelLoadError)
    if example_inputs is not None:
        raise ModelLoadError("example_inputs are for PyTorch modules; an ONNX model takes "
                             "input_shapes")
    if isinstance(model, tvm.IRModule):
        if "main" not in [gv.name_hint for gv in model.get_global_vars()]:
            raise ModelLoadError("the IRModule has no 'main' function to compile")
        return model
    source = repr(os.fspath(model)) if not isinstance(model, onnx.ModelProto) else "the model"
    return onnx_to_relax(load_onnx(model), input_shapes, source, report=report)


def describe_inputs(model: str | os.PathLike | onnx.ModelProto) -> list[tuple[str, str, list]]:
    """``(name, dtype, dims)`` of each input of an ONNX model, as ``--input-shapes`` takes them:
    a dim is an int, the name of a symbolic dim, or ``"?"`` when the model leaves it open; of
    a PyTorch program (``.pt2``), its inputs as exported."""
    if is_torch_model(model):
        return [(spec.name, spec.dtype, list(spec.shape))
                for spec in input_specs(load_model(model))]
    described = []
    for value in graph_inputs(load_onnx(model)):
        tensor = value.type.tensor_type
        dtype = (onnx.helper.tensor_dtype_to_np_dtype(tensor.elem_type).name
                 if tensor.elem_type else "?")
        dims = [d.dim_value if d.HasField("dim_value") else (d.dim_param or "?")
                for d in tensor.shape.dim]
        described.append((value.name, dtype, dims))
    return described


def input_specs(mod: tvm.IRModule) -> list[InputSpec]:
    """Name, static shape and dtype of each parameter of ``main``; named as the ONNX model
    names its inputs (:data:`ATTR_INPUT_NAMES`) when TVM's importer renamed them."""
    params = mod["main"].params
    names = [param.name for param in params]
    if mod.attrs is not None and ATTR_INPUT_NAMES in mod.attrs:
        names = [str(name) for name in mod.attrs[ATTR_INPUT_NAMES]]
    ranges = _index_ranges(mod["main"])
    specs = []
    for name, param in zip(names, params, strict=True):
        ty = param.ty
        if not isinstance(ty, relax.TensorType) or not hasattr(ty.shape, "values"):
            raise ModelLoadError(f"input {name!r} is not a tensor with a known shape ({ty})")
        dims = []
        for dim in ty.shape.values:
            if not isinstance(dim, tvm.tirx.IntImm):
                raise ModelLoadError(
                    f"input {name!r} has a symbolic dimension {dim}; give its shape with "
                    f'--input-shapes "{name}:[...]"'
                )
            dims.append(int(dim))
        specs.append(InputSpec(name, tuple(dims), str(ty.dtype), ranges.get(param)))
    return specs


_SHAPE_ONLY = frozenset(f"relax.{name}" for name in (
    "astype", "reshape", "expand_dims", "squeeze", "permute_dims", "flatten"))
"""Ops that move an input's values without changing them."""


def _index_ranges(main: relax.Function) -> dict[relax.Var, tuple[int, int]]:
    """``{input: [low, high)}`` of each integer input of ``main`` that a table lookup reads
    unchecked (``take`` in ``"fast"`` mode, which reads past the table, or crashes, outside
    it): its values index the table's rows directly (``[0, rows)``), or through the ONNX
    importer's wrap of negative indices (``where(x < 0, x + rows, x)``: ``[-rows, rows)``).
    The tightest over every lookup; an input transformed otherwise before a lookup is not
    checked (its valid values are not the table's)."""
    params = {p for p in main.params
              if isinstance(p.ty, relax.TensorType) and "int" in str(p.ty.dtype)}
    values: dict[relax.Var, tuple[relax.Var, bool]] = {p: (p, False) for p in params}
    negative: dict[relax.Var, relax.Var] = {}  # x < 0 of an input's values -> the input
    ranges: dict[relax.Var, tuple[int, int]] = {}
    for block in main.body.blocks:
        for binding in block.bindings:
            call = binding.value
            if not (isinstance(call, relax.Call) and isinstance(call.op, tvm.ir.Op)):
                continue
            name = call.op.name
            if name in _SHAPE_ONLY and call.args[0] in values:
                values[binding.var] = values[call.args[0]]
            elif (name == "relax.less" and call.args[0] in values
                  and isinstance(call.args[1], tvm.ir.expr.Constant)
                  and not call.args[1].value.numpy().any()):
                negative[binding.var] = values[call.args[0]][0]
            elif (name == "relax.where" and call.args[2] in values
                  and call.args[0] in negative
                  and negative[call.args[0]].same_as(values[call.args[2]][0])):
                values[binding.var] = (values[call.args[2]][0], True)
            elif (name == "relax.take" and call.args[1] in values
                  and str(call.attrs.mode) == "fast"):
                shape = getattr(call.args[0].ty, "shape", None)
                dims = getattr(shape, "values", None)
                axis = int(call.attrs.axis) if call.attrs.axis is not None else None
                if dims is None or axis is None or not isinstance(dims[axis], tvm.tirx.IntImm):
                    continue
                param, wraps = values[call.args[1]]
                rows = int(dims[axis])
                low, high = (-rows if wraps else 0), rows
                if param in ranges:
                    low, high = max(low, ranges[param][0]), min(high, ranges[param][1])
                ranges[param] = (low, high)
    return ranges
