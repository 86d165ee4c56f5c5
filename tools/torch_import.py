"""PyTorch programs in: ``torch.nn.Module`` (with example inputs), ``ExportedProgram``, ``.pt2``.

Everything goes through ``torch.export`` and TVM's ``from_exported_program``. PyTorch is an
optional extra (``pip install ".[torch]"``); this module imports it only when a PyTorch model
is given, so ONNX users never pay for it.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

import numpy as np
import tvm
from tvm import relax

from tvm_chiplet.passes.rewrite_calls import rewrite_calls

TORCH_EXTRA = 'pip install ".[torch]" (PyTorch, CPU build)'

PT2_SUFFIX = ".pt2"


def is_torch_model(model: Any) -> bool:
    """Whether ``model`` is a PyTorch module or exported program, or names a ``.pt2`` file."""
    if isinstance(model, (str, os.PathLike)):
        return os.fspath(model).endswith(PT2_SUFFIX)
    return type(model).__module__.split(".")[0] == "torch" or any(
        cls.__module__.startswith("torch.") for cls in type(model).__mro__[1:])


def torch_to_relax(model: Any, example_inputs: Sequence[Any] | None, error: type[Exception]
                   ) -> tvm.IRModule:
    """Export ``model`` (a module called on ``example_inputs``, an ExportedProgram or a ``.pt2``
    file) and import it into Relax; problems raise ``error`` with the remedy."""
    try:
        import torch
        from tvm.relax.frontend.torch import from_exported_program
    except ImportError:
        raise error(f"importing a PyTorch model needs PyTorch: {TORCH_EXTRA}") from None
    if isinstance(model, (str, os.PathLike)):
        path = os.fspath(model)
        if not os.path.exists(path):
            raise error(f"model file {path!r} does not exist")
        try:
            model = torch.export.load(path)
        except Exception as err:
            raise error(f"{path!r} is not a torch.export program (.pt2): {_first_line(err)}"
                        ) from None
    if isinstance(model, torch.nn.Module):
        if example_inputs is None:
            raise error(
                "a torch.nn.Module needs example_inputs (a tuple of tensors it is called with) "
                "to be exported; pass build(module, example_inputs=(x,)), or export it yourself "
                "with torch.export.export and pass the ExportedProgram"
            )
        inputs = tuple(example_inputs) if isinstance(example_inputs, (list, tuple)) \
            else (example_inputs,)
        try:
            model = torch.export.export(model.eval(), inputs)
        except Exception as err:
            raise error(f"torch.export could not export the module: {_first_line(err)}") from None
    if not isinstance(model, torch.export.ExportedProgram):
        raise error(f"expected a torch.nn.Module, an ExportedProgram or a .pt2 file, got "
                    f"{type(model).__name__}")
    try:
        mod = from_exported_program(model, keep_params_as_input=False)
    except Exception as err:
        raise error(f"TVM could not import the PyTorch program: {_first_line(err)}") from None
    return rewrite_calls(mod, tvm.ir.Op.get("relax.take"), _from_the_end)


def _from_the_end(call: relax.Call) -> relax.Expr | None:
    """``take`` with its constant negative indices counted from the end of the axis.

    TVM's importer turns ``x[:, -1]`` (``aten.select``) into ``take(x, -1, mode="fast")``,
    whose kernel reads out of bounds at a negative index, and the result is garbage; ONNX's
    importer normalises them (``_normalize_negative_indices``). Indices known only at run
    time, or on an axis of unknown length, are left as they are."""
    data, indices = call.args
    if not isinstance(indices, tvm.ir.expr.Constant):
        return None
    array = indices.value.numpy()
    shape = getattr(data.ty, "shape", None)
    if not (array < 0).any() or shape is None:
        return None
    axis = int(call.attrs.axis) if call.attrs.axis is not None else None
    dims = [d.value if isinstance(d, tvm.tirx.IntImm) else None for d in shape]
    known = dims if axis is None else [dims[axis]]
    if None in known:
        return None
    extent = int(np.prod(known))
    array = np.where(array < 0, array + extent, array).astype(array.dtype)
    return relax.op.take(data, relax.const(array, str(indices.ty.dtype)), axis,
                         mode=str(call.attrs.mode))


def _first_line(err: Exception) -> str:
    lines = [line for line in str(err).strip().splitlines() if line.strip()]
    return lines[0] if lines else type(err).__name__
