"""Conformance: the ONNX backend node test suite through plain TVM and through the chiplet path.

Usage: ``python -m tvm_chiplet.tools.bench.conformance [--out DIR] [--limit N] [--pattern REGEX]
[--target chiplet/cluster-4] [--timeout 120] [--jobs N]``

The node tests are generated offline, in memory, from the installed onnx package's test-case
generators (``onnx.backend.test.case.node.collect_testcases``: one model, its inputs and the
expected outputs per test). Each test runs two ways:

- plain TVM: ``from_onnx`` -> ``tvm.compile(..., "llvm")`` -> ``relax.VirtualMachine``;
- the chiplet path: :func:`tvm_chiplet.build` with the test inputs' shapes as ``input_shapes``
  -> :meth:`ChipletModule.run` (one worker per cluster).

Outputs are compared as onnx's backend runner compares them (shapes, dtypes, then
``assert_allclose`` with the test's rtol / atol: 1e-3 / 1e-7). Every run happens in a worker
process with a per-run timeout, so a hang or a crash costs one test (the progress line of a
timeout names where the worker's threads were). A failure is classified by its cause: the
exception type and the first line of its message with numbers, names and shapes normalised.
Writes ``conformance.csv`` (one row per test) and ``conformance.md`` (pass counts side by side,
what the chiplet path loses and gains against plain TVM, each path's failures by cause). Ctrl-C
stops and writes the tests done so far. The whole suite (1884 tests with onnx 1.23) takes
about 3 to 4 minutes with 2 workers.
"""

from __future__ import annotations

import argparse
import faulthandler
import multiprocessing
import os
import re
import signal
import tempfile
import time
import warnings
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from multiprocessing.connection import wait

import numpy as np
import onnx

from tvm_chiplet.tools.bench.tables import markdown_table, write_csv

PATHS = ("plain", "chiplet")
DEFAULT_TARGET = "chiplet/cluster-4"


@dataclass(frozen=True)
class NodeTest:
    """One ONNX node test: the model, its inputs (graph input order), the expected outputs."""

    name: str
    model: onnx.ModelProto
    inputs: list
    expected: list
    rtol: float
    atol: float

    @property
    def input_names(self) -> list[str]:
        initializers = {init.name for init in self.model.graph.initializer}
        return [i.name for i in self.model.graph.input if i.name not in initializers]


def _to_numpy(value):
    """A test value as onnx's runner sees it: TensorProto -> ndarray, sequences element-wise."""
    if isinstance(value, onnx.TensorProto):
        return onnx.numpy_helper.to_array(value)
    if isinstance(value, list | tuple):
        return [_to_numpy(item) for item in value]
    return value


def node_tests(pattern: str | None = None, limit: int | None = None) -> list[NodeTest]:
    """The node tests of the installed onnx package, sorted by name.

    ``pattern`` keeps the tests whose name it matches (``re.search``); ``limit`` keeps the first
    ``limit`` of those.
    """
    from onnx.backend.test.case.node import collect_testcases

    # The generators compute their expected outputs with numpy, warnings included.
    with warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore")
        cases = collect_testcases()
    regex = re.compile(pattern) if pattern else None
    tests = []
    for case in sorted(cases, key=lambda c: c.name):
        if regex is not None and not regex.search(case.name):
            continue
        inputs, expected = case.data_sets[0]
        tests.append(NodeTest(case.name, case.model, [_to_numpy(v) for v in inputs],
                              [_to_numpy(v) for v in expected], case.rtol, case.atol))
    return tests[:limit] if limit is not None else tests


def _from_tvm(value):
    """A VM result as numpy: tensors to arrays, tuples to lists, shapes to int64 arrays."""
    import tvm

    if isinstance(value, tvm.runtime.Tensor):
        return value.numpy()
    if isinstance(value, tvm.runtime.ShapeTuple):
        return np.array(list(value), dtype="int64")
    if isinstance(value, list | tuple | tvm.ir.Array):
        return [_from_tvm(item) for item in value]
    return value


def _to_tvm(value):
    import tvm

    if isinstance(value, list):
        return [_to_tvm(item) for item in value]
    return value if value is None else tvm.runtime.tensor(np.asarray(value))


def run_plain(test: NodeTest, stages: list[str] | None = None,
              static_shapes: bool = False) -> list:
    """The test's outputs with plain TVM: from_onnx, tvm.compile for llvm, the Relax VM.

    ``static_shapes`` gives ``from_onnx`` the inputs' shapes (its ``shape_dict``, as a user
    of a model with symbolic dims does); else it imports the dims the model declares.
    ``stages``, when given, gets ``"import"``, ``"compile"`` and ``"run"`` appended as each
    starts: after an exception its last item says where it happened."""
    import tvm
    from tvm import relax

    stages = [] if stages is None else stages
    stages.append("import")
    shape_dict = {name: list(np.shape(value))
                  for name, value in zip(test.input_names, test.inputs, strict=True)
                  if isinstance(value, np.ndarray | np.generic)} if static_shapes else None
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        mod = relax.frontend.onnx.from_onnx(test.model, shape_dict=shape_dict)
    stages.append("compile")
    executable = tvm.compile(mod, target="llvm")
    stages.append("run")
    result = relax.VirtualMachine(executable, tvm.cpu())["main"](
        *[_to_tvm(value) for value in test.inputs])
    outputs = _from_tvm(result)
    return _onnx_outputs(test, outputs if isinstance(outputs, list) else [outputs])


def run_chiplet(test: NodeTest, target: str = DEFAULT_TARGET, stages: list[str] | None = None,
                notes: list[str] | None = None, strategy: str | None = None) -> list:
    """The test's outputs on the chiplet path: :func:`tvm_chiplet.build` with the inputs' shapes
    as ``input_shapes`` (and ``strategy``, default the target's), then the host executor.

    ``stages``, when given, gets ``"build"`` (import, planning and compilation) and ``"run"``
    appended as each starts; ``notes`` gets the build's import notes (what folding did)."""
    import tvm_chiplet

    stages = [] if stages is None else stages
    shapes = {name: list(np.shape(value))
              for name, value in zip(test.input_names, test.inputs, strict=True)
              if isinstance(value, np.ndarray | np.generic)}
    stages.append("build")
    module = tvm_chiplet.build(test.model, target=target, input_shapes=shapes, strategy=strategy)
    if notes is not None:
        notes.extend(module.plan["import_notes"])
    stages.append("run")
    outputs = module.run(dict(zip(test.input_names, test.inputs, strict=True))).outputs
    return _onnx_outputs(test, list(outputs))


def _onnx_outputs(test: NodeTest, outputs: list) -> list:
    """``main``'s outputs (the fields of its tuple result, or the result alone) as the model's
    ONNX outputs: ``main`` of a model whose one output is a sequence returns the sequence."""
    graph_outputs = test.model.graph.output
    if len(graph_outputs) == 1 and graph_outputs[0].type.HasField("sequence_type"):
        return [outputs]
    return outputs


def check_outputs(test: NodeTest, outputs: list) -> None:
    """Raise AssertionError unless ``outputs`` match the expected ones as onnx's runner judges."""
    from onnx.backend.test.runner import Runner

    Runner.assert_similar_outputs(test.expected, outputs, rtol=test.rtol, atol=test.atol)


def run_test(test: NodeTest, path: str, target: str = DEFAULT_TARGET) -> None:
    """Run ``test`` on ``path`` (``"plain"`` or ``"chiplet"``) and check its outputs."""
    outputs = run_plain(test) if path == "plain" else run_chiplet(test, target)
    check_outputs(test, outputs)


_NORMALISE = (
    (re.compile(r"ErrorContext\(.*\)"), "ErrorContext(..)"),
    (re.compile(r"'[^']*'|\"[^\"]*\""), "'_'"),
    (re.compile(r"\[[-\d,\s]*\]|\([-\d,\s]+\)"), "[..]"),
    (re.compile(r"0x[0-9a-fA-F]+"), "0x_"),
    (re.compile(r"(?<![\w.])[-+]?\d+(\.\d+)?(e[-+]?\d+)?"), "N"),
    (re.compile(r"\s+"), " "),
)


def failure_class(error_type: str, message: str) -> str:
    """A short cause: the exception type and the first line of its message, with quoted names,
    shapes and numbers replaced by placeholders so that one cause groups many tests."""
    lines = [line.strip() for line in message.strip().splitlines() if line.strip()]
    first = lines[0] if lines else ""
    for regex, placeholder in _NORMALISE:
        first = regex.sub(placeholder, first)
    first = first.strip()
    if len(first) > 100:
        first = first[:97] + "..."
    return f"{error_type}: {first}" if first else error_type


_READY = "ready"


def _serve(conn, job: Callable, target: str, stacks_path: str) -> None:
    """A worker: say when it is ready, then run ``job(item, path, target)`` for each (item,
    path) from ``conn`` and answer ``(value, None)`` or ``(None, (error type, message))``.
    SIGUSR1 writes the Python stacks of its threads to ``stacks_path``."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the parent's to handle
    quiet = os.open(os.devnull, os.O_WRONLY)  # TVM logs importer errors on stdout and stderr
    os.dup2(quiet, 1)
    os.dup2(quiet, 2)
    stacks = open(stacks_path, "w")  # noqa: SIM115  (open for the worker's lifetime)
    faulthandler.register(signal.SIGUSR1, file=stacks, all_threads=True)
    # Imported before the first job, outside its timeout.
    import onnx.backend.test.runner  # noqa: F401
    import tvm.relax.frontend.onnx  # noqa: F401

    import tvm_chiplet  # noqa: F401

    conn.send(_READY)
    while True:
        try:
            item, path = conn.recv()
        except EOFError:
            return
        try:
            conn.send((job(item, path, target), None))
        except Exception as err:  # every failure is a result to classify
            conn.send((None, (type(err).__name__, str(err))))


class _Worker:
    def __init__(self, context, job: Callable, target: str, folder: str) -> None:
        self.conn, child = context.Pipe()
        handle, self.stacks_path = tempfile.mkstemp(prefix="stacks-", dir=folder)
        os.close(handle)
        self.process = context.Process(target=_serve,
                                       args=(child, job, target, self.stacks_path), daemon=True)
        self.process.start()
        child.close()
        self.ready = False
        self.job: tuple[int, str] | None = None
        self.started = 0.0

    def submit(self, index: int, path: str, item) -> None:
        self.job = (index, path)
        self.started = time.monotonic()
        self.conn.send((item, path))

    def where(self) -> str:
        """The innermost Python frame of each of the worker's threads, as it runs now."""
        os.kill(self.process.pid, signal.SIGUSR1)
        time.sleep(0.5)
        with open(self.stacks_path) as handle:
            threads = handle.read().split("\n\n")
        frames = [lines[1].strip() for lines in (t.strip().splitlines() for t in threads)
                  if len(lines) > 1]
        return "; ".join(frames) or "no stack written"

    def stop(self) -> None:
        self.process.kill()
        self.process.join()
        self.conn.close()


Result = tuple[object, tuple[str, str] | None]
"""What a job gave: ``(value, None)``, or ``(None, (error type, message))`` when it raised."""


def run_jobs(items: list, job: Callable, target: str = DEFAULT_TARGET, jobs: int = 2,
             timeout: float = 120.0, progress=print,
             on_result: Callable[[int, str, Result], None] | None = None,
             label: str = "conformance", paths: tuple[str, ...] = PATHS
             ) -> tuple[dict[tuple[int, str], Result], bool]:
    """Run ``job(item, path, target)`` for every item (with a ``name``) and path of ``paths``
    (default :data:`PATHS`) in ``jobs`` worker processes, each within ``timeout`` seconds from
    when its worker gets it (a run that overruns or crashes its worker fails with ``Timeout`` or
    ``WorkerCrash``, and the worker is replaced). ``job`` is a module-level function.

    Returns the :data:`Result` of each ``(item index, path)`` that finished, and whether the
    run completed (False after Ctrl-C). ``on_result`` is called as each result comes in.
    """
    context = multiprocessing.get_context("spawn")
    pending = [(index, path) for index in range(len(items)) for path in paths]
    pending.reverse()
    results: dict[tuple[int, str], Result] = {}
    folder = tempfile.TemporaryDirectory(prefix=f"{label}-")
    workers = [_Worker(context, job, target, folder.name) for _ in range(max(1, jobs))]
    completed = True

    def finish(worker: _Worker, result: Result) -> None:
        key, worker.job = worker.job, None
        results[key] = result
        if on_result:
            on_result(*key, result)

    try:
        while pending or any(w.job for w in workers):
            for worker in workers:
                if worker.ready and worker.job is None and pending:
                    index, path = pending.pop()
                    worker.submit(index, path, items[index])
            busy = [w for w in workers if w.job is not None]
            deadline = min(w.started for w in busy) + timeout if busy else None
            ready = wait([w.conn for w in workers if not w.ready or w.job is not None],
                         None if deadline is None else max(0.0, deadline - time.monotonic()))
            for i, worker in enumerate(workers):
                if worker.conn in ready:
                    try:
                        message = worker.conn.recv()
                    except EOFError:
                        worker.process.join()
                        if worker.job is None:
                            raise RuntimeError(
                                f"a {label} worker died while starting (exit code "
                                f"{worker.process.exitcode}); run a job in-process to see "
                                "why") from None
                        error = ("WorkerCrash", f"exit code {worker.process.exitcode}")
                        error_at = ""
                    else:
                        if message == _READY:
                            worker.ready = True
                        else:
                            finish(worker, message)
                        continue
                elif worker.job is not None and time.monotonic() - worker.started >= timeout:
                    error = ("Timeout", f"no result within {timeout:g} s")
                    error_at = f"; at {worker.where()}"
                else:
                    continue
                progress(f"[{label}] {items[worker.job[0]].name} ({worker.job[1]}): "
                         f"{error[0]}: {error[1]}{error_at}")
                finish(worker, (None, error))
                worker.stop()
                workers[i] = _Worker(context, job, target, folder.name)
    except KeyboardInterrupt:
        completed = False
        progress(f"[{label}] interrupted; writing what is done so far")
    finally:
        for worker in workers:
            worker.stop()
        folder.cleanup()
    return results, completed


def run_suite(tests: list[NodeTest], target: str = DEFAULT_TARGET, jobs: int = 2,
              timeout: float = 120.0, progress=print) -> tuple[list[dict], bool]:
    """Run every test on both paths with :func:`run_test` in worker processes
    (:func:`run_jobs`).

    Returns one row per test that finished on both paths, in test order, and whether the run
    completed (False after Ctrl-C).
    """
    started, reported = time.monotonic(), 0
    errors: dict[tuple[int, str], tuple[str, str] | None] = {}

    def count(index: int, path: str, result: Result) -> None:
        nonlocal reported
        errors[index, path] = result[1]
        done = sum(1 for i in range(len(tests)) if all((i, p) in errors for p in PATHS))
        if done - reported >= 50 or (done == len(tests) and reported < done):
            reported = done
            plain = sum(1 for (_, p), e in errors.items() if p == "plain" and e is None)
            chiplet = sum(1 for (_, p), e in errors.items() if p == "chiplet" and e is None)
            progress(f"[conformance] {done}/{len(tests)} tests, passing: plain {plain}, "
                     f"chiplet {chiplet} ({time.monotonic() - started:.0f} s)")

    _, completed = run_jobs(tests, run_test, target, jobs, timeout, progress, on_result=count)
    rows = []
    for index, test in enumerate(tests):
        if not all((index, path) in errors for path in PATHS):
            continue
        row: dict = {"test": test.name}
        for path in PATHS:
            row[f"{path}_pass"] = errors[index, path] is None
        for path in PATHS:
            error = errors[index, path]
            row[f"{path}_error"] = failure_class(*error) if error else ""
        rows.append(row)
    return rows, completed


def _by_cause(rows: list[dict], path: str, heading: str) -> list[dict]:
    """Failures of ``rows`` on ``path`` grouped by cause, most frequent first, with examples."""
    causes = Counter(row[f"{path}_error"] for row in rows)
    return [
        {heading: cause, "tests": count,
         "examples": ", ".join(row["test"] for row in rows
                               if row[f"{path}_error"] == cause)[:100]}
        for cause, count in sorted(causes.items(), key=lambda item: (-item[1], item[0]))
    ]


def summary_lines(rows: list[dict], seconds: float, target: str, total: int,
                  completed: bool) -> list[str]:
    """The markdown report: pass counts side by side, what the chiplet path loses (and gains)
    against plain TVM by cause, and every failure class of each path."""
    import tvm

    plain = sum(row["plain_pass"] for row in rows)
    chiplet = sum(row["chiplet_pass"] for row in rows)
    lost = [row for row in rows if row["plain_pass"] and not row["chiplet_pass"]]
    gained = [row for row in rows if row["chiplet_pass"] and not row["plain_pass"]]
    lines = [
        "# Conformance: ONNX backend node tests, plain TVM vs the chiplet path", "",
        f"onnx {onnx.__version__}, TVM {tvm.__version__}, chiplet target `{target}`; "
        f"{len(rows)} of {total} tests run" + ("" if completed else " (interrupted)")
        + f" in {seconds:.0f} s.", "",
        "| | plain TVM | chiplet path |", "|---|---|---|",
        f"| tests passing | {plain} | {chiplet} |",
        f"| pass rate | {plain / max(1, len(rows)):.1%} | {chiplet / max(1, len(rows)):.1%} |",
        "",
        f"The chiplet path loses {len(lost)} test(s) that plain TVM passes and passes "
        f"{len(gained)} that plain TVM fails.", "",
    ]
    if lost:
        lines += ["## Tests plain TVM passes and the chiplet path fails, by cause", "",
                  *markdown_table(_by_cause(lost, "chiplet", "cause (chiplet path)")), ""]
    if gained:
        lines += ["## Tests the chiplet path passes and plain TVM fails, by cause", "",
                  *markdown_table(_by_cause(gained, "plain", "cause (plain TVM)")), ""]
    for path, name in (("plain", "plain TVM"), ("chiplet", "the chiplet path")):
        failed = [row for row in rows if not row[f"{path}_pass"]]
        lines += [f"## Every failure of {name}, by cause", "",
                  *markdown_table(_by_cause(failed, path, "cause")), ""]
    return lines[:-1]


def write(out: str, rows: list[dict], lines: list[str]) -> None:
    os.makedirs(out, exist_ok=True)
    write_csv(os.path.join(out, "conformance.csv"), rows,
              ["test", "plain_pass", "chiplet_pass", "plain_error", "chiplet_error"])
    with open(os.path.join(out, "conformance.md"), "w") as handle:
        handle.write("\n".join(lines) + "\n")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="tools/bench/results")
    parser.add_argument("--limit", type=int, default=None, help="run the first N tests only")
    parser.add_argument("--pattern", default=None, help="run the tests whose name matches")
    parser.add_argument("--target", default=DEFAULT_TARGET, help="chiplet target")
    parser.add_argument("--timeout", type=float, default=120.0, help="seconds per test and path")
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 1,
                        help="worker processes")
    args = parser.parse_args(argv)
    started = time.monotonic()
    tests = node_tests(args.pattern, args.limit)
    print(f"[conformance] {len(tests)} node tests, {args.jobs} worker(s), target {args.target}",
          flush=True)
    rows, completed = run_suite(tests, args.target, args.jobs, args.timeout,
                                progress=lambda line: print(line, flush=True))
    seconds = time.monotonic() - started
    lines = summary_lines(rows, seconds, args.target, len(tests), completed)
    write(args.out, rows, lines)
    print(f"[conformance] plain {sum(r['plain_pass'] for r in rows)}, chiplet "
          f"{sum(r['chiplet_pass'] for r in rows)} of {len(rows)} in {seconds:.0f} s; wrote "
          f"{args.out}/conformance.csv and conformance.md", flush=True)
    return 0 if completed else 130


if __name__ == "__main__":
    raise SystemExit(main())
