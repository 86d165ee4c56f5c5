"""Functional multi-cluster execution: one worker thread and one VirtualMachine per cluster.

The workers run the segments, that is copy 0 of a placement with copies (``plan["copies"]``):
every copy computes the same function, so the other copies matter to the simulated timing only.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass, field

import numpy as np
import tvm
import tvm_ffi


@tvm_ffi.register_error
class InputError(ValueError):
    """Run inputs do not match the compiled model's input specs."""


@dataclass
class SegmentRun:
    segment: int
    name: str
    cluster: int
    start_s: float
    end_s: float


@dataclass
class ExecutionResult:
    """Outputs of one run plus what the host measured.

    ``outputs``: one per output of ``main``, that is one per field of its result when that is a
    tuple, else the result alone; tensors as numpy arrays, shapes as int64 arrays, tuples (e.g.
    an ONNX sequence) as lists of those.
    ``segments``: host wall time of every segment call; ``transfers``: every value that crossed
    clusters (bytes, route, source and destination segments); ``cluster_seconds``: host busy
    time per cluster; ``wall_seconds``: the whole run.
    """

    outputs: list[np.ndarray]
    segments: list[SegmentRun] = field(default_factory=list)
    transfers: list[dict] = field(default_factory=list)
    cluster_seconds: dict[int, float] = field(default_factory=dict)
    wall_seconds: float = 0.0


def check_inputs(specs, inputs: Mapping[str, np.ndarray] | list) -> list[np.ndarray]:
    """Order and check inputs against the specs; errors name expected and given."""
    names = [s.name for s in specs]
    if not isinstance(inputs, Mapping):
        inputs = list(inputs)
        if len(inputs) != len(names):
            raise InputError(f"expected {len(names)} inputs {names}, got {len(inputs)}")
        inputs = dict(zip(names, inputs, strict=True))
    unknown = sorted(set(inputs) - set(names))
    missing = [n for n in names if n not in inputs]
    if unknown or missing:
        raise InputError(
            f"inputs do not match the model: expected {names}, given {sorted(inputs)}"
            + (f"; unknown {unknown}" if unknown else "")
            + (f"; missing {missing}" if missing else "")
        )
    ordered = []
    for spec in specs:
        value = np.asarray(inputs[spec.name])
        if tuple(value.shape) != tuple(spec.shape):
            raise InputError(
                f"input {spec.name!r}: expected shape {list(spec.shape)}, given "
                f"{list(value.shape)}"
            )
        if str(value.dtype) != spec.dtype:
            raise InputError(
                f"input {spec.name!r}: expected dtype {spec.dtype}, given {value.dtype}"
            )
        if spec.index_range is not None and value.size:
            low, high = spec.index_range
            outside = (value < low) | (value >= high)
            if outside.any():
                raise InputError(
                    f"input {spec.name!r} indexes a table of {high} rows: its values must lie "
                    f"in [{low}, {high}), given {value[outside].flat[0]} (and "
                    f"{int(outside.sum()) - 1} more outside)"
                )
        ordered.append(np.asarray(value, order="C"))  # ascontiguousarray makes 0-d 1-d
    return ordered


def _as_numpy(value):
    """A VM value as numpy: a tensor as an array, a shape as an int64 array, a tuple as a list."""
    if isinstance(value, tvm.runtime.Tensor):
        return value.numpy()
    if isinstance(value, tvm_ffi.Shape):
        return np.array(list(value), dtype="int64")
    if isinstance(value, tvm_ffi.Array | list | tuple):
        return [_as_numpy(item) for item in value]
    return np.asarray(value)


class Executor:
    """Run a :class:`ChipletModule` segment by segment, one worker per cluster.

    Each cluster used by the plan gets a thread with its own ``VirtualMachine`` over the shared
    executable (a VM is not thread-safe; VM calls release the GIL). A worker runs its segments
    in plan order, each as soon as all its inputs have arrived. The outputs equal ``main``'s.
    """

    def __init__(self, module) -> None:
        self.module = module
        self.plan = module.plan
        self._vms: dict[int, object] = {}

    def _vm(self, cluster: int):
        if cluster not in self._vms:
            self._vms[cluster] = self.module.vm()
        return self._vms[cluster]

    def run(self, inputs: Mapping[str, np.ndarray] | list) -> ExecutionResult:
        args = [tvm.runtime.tensor(a) for a in check_inputs(self.module.input_specs, inputs)]
        segments = self.plan["segments"]
        results: list[object] = [None] * len(segments)
        ready = [threading.Event() for _ in segments]
        runs: list[SegmentRun | None] = [None] * len(segments)
        errors: list[BaseException] = []
        by_cluster: dict[int, list[dict]] = {}
        for segment in segments:
            by_cluster.setdefault(segment["cluster"], []).append(segment)
        for cluster in by_cluster:
            self._vm(cluster)
        origin = time.perf_counter()

        def worker(cluster: int) -> None:
            vm = self._vms[cluster]
            for segment in by_cluster[cluster]:
                try:
                    values = []
                    for src in segment["inputs"]:
                        if src[0] == "input":
                            values.append(args[src[1]])
                            continue
                        ready[src[1]].wait()
                        if errors:
                            return
                        values.append(results[src[1]][src[2]])
                    start = time.perf_counter()
                    results[segment["index"]] = vm[segment["name"]](*values)
                    end = time.perf_counter()
                    runs[segment["index"]] = SegmentRun(
                        segment["index"], segment["name"], cluster, start - origin, end - origin
                    )
                except BaseException as err:
                    errors.append(err)
                    for event in ready:
                        event.set()
                    return
                ready[segment["index"]].set()

        threads = [
            threading.Thread(target=worker, args=(c,), name=f"cluster-{c}", daemon=True)
            for c in sorted(by_cluster)
        ]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        wall = time.perf_counter() - origin
        if errors:
            raise errors[0]
        outputs = [
            _as_numpy(args[src[1]] if src[0] == "input" else results[src[1]][src[2]])
            for src in self.plan["outputs"]
        ]
        if len(outputs) == 1 and isinstance(outputs[0], list):
            outputs = outputs[0]  # main returns a tuple variable: its fields are the outputs
        cluster_seconds: dict[int, float] = {}
        for run in runs:
            cluster_seconds[run.cluster] = cluster_seconds.get(run.cluster, 0.0) + (
                run.end_s - run.start_s
            )
        return ExecutionResult(
            outputs=outputs,
            segments=[r for r in runs if r is not None],
            transfers=list(self.plan.get("transfers", [])),
            cluster_seconds=cluster_seconds,
            wall_seconds=wall,
        )
