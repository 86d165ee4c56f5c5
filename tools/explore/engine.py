"""Run a study on Ray: plain Ray tasks for grid and random search, Ray Tune with Optuna's TPE
sampler for ``tpe``.

Every finished trial is appended to the results table at once (rewritten atomically), so an
interrupted study keeps what it finished, and a rerun on the same directory skips the points
already recorded. A trial that raises is recorded as ``error``; one whose worker dies as
``crashed``; one Ray's memory monitor kills, or that raises ``MemoryError``, as ``oom``; one
running past ``[search] timeout_s`` is cancelled and recorded as ``timeout``. The study goes on.
"""

from __future__ import annotations

import dataclasses
import json
import math
import socket
import sys
import time
from collections.abc import Callable
from pathlib import Path

from tvm_chiplet.runtime.files import atomic_write
from tvm_chiplet.tools.explore.results import read_results, write_results
from tvm_chiplet.tools.explore.study import (
    OBJECTIVES,
    SIMULATION_ONLY,
    Range,
    Study,
    grid_points,
    point_id,
    random_points,
)
from tvm_chiplet.tools.explore.trial import run_trial

Trial = Callable[[Study, dict, str], dict]
RAY_HINT = "pip install \".[explore]\" (ray[tune] and optuna)"


class RayUnavailableError(ConnectionError):
    """Ray (or a cluster at the given address) cannot be used; the message says why."""


@dataclasses.dataclass
class StudyRun:
    """What :func:`run_study` did: rows recorded (old and new), points skipped as done."""

    rows: list[dict]
    skipped: int
    ran: int
    interrupted: bool = False


def _check_reachable(address: str) -> None:
    if address in ("auto", "local"):
        return
    hostport = address.split("://", 1)[-1]
    host, _, port = hostport.rpartition(":")
    try:
        socket.create_connection((host or hostport, int(port or 6379)), timeout=5).close()
    except (OSError, ValueError) as err:
        raise RayUnavailableError(
            f"cannot reach the Ray cluster at {address!r} ({err}); start it (ray start --head "
            "on the head node) or run the study locally by leaving out --address"
        ) from None


def connect(address: str | None = None, workers: int | None = None) -> bool:
    """Start local Ray (``workers`` CPUs) or join the cluster at ``address``; reuse a session
    already open. Returns whether this call started it (and should shut it down)."""
    try:
        import ray
    except ImportError:
        raise RayUnavailableError(f"tvmc explore runs on Ray, which is not installed: "
                                  f"{RAY_HINT}") from None
    if address:
        _check_reachable(address)
    if ray.is_initialized():
        return False
    options = {"include_dashboard": False, "logging_level": "ERROR", "log_to_driver": False,
               "configure_logging": True}
    if address:
        try:
            ray.init(address=address, **options)
        except (ConnectionError, RuntimeError) as err:
            raise RayUnavailableError(
                f"cannot join the Ray cluster at {address!r}: {err}; run the study locally by "
                "leaving out --address") from None
    else:
        ray.init(num_cpus=workers, **options)
    return True


def _classify(err: BaseException) -> tuple[str, str]:
    """(status, one-line message) of a failed trial."""
    import ray.exceptions as rex

    if isinstance(err, rex.OutOfMemoryError):
        return "oom", "killed by Ray's memory monitor (out of memory)"
    if isinstance(err, rex.TaskCancelledError):
        return "timeout", "cancelled"
    if isinstance(err, rex.RayTaskError):
        cause = err.cause if err.cause is not None else err
        if isinstance(cause, MemoryError):
            return "oom", f"MemoryError: {cause}"
        lines = [line for line in str(cause).strip().splitlines() if line.strip()]
        return "error", f"{type(cause).__name__}: {lines[-1] if lines else cause}"
    if isinstance(err, rex.WorkerCrashedError | rex.RayError):
        lines = str(err).strip().splitlines()
        return "crashed", f"{type(err).__name__}: {lines[0] if lines else ''}"
    return "error", f"{type(err).__name__}: {err}"


START_GRACE_S = 300.0
"""How long a trial may wait for its worker (start and imports) before its timeout counts
anyway: on a cluster without a shared file system its start marker never shows."""


def _marker(cache_dir: str, point: dict) -> Path:
    return Path(cache_dir).parent / "running" / point_id(point)


def _call(trial: Trial, study: Study, point: dict, cache_dir: str) -> dict:
    # The marker says the trial has started (its worker up, TVM imported): timeouts count from
    # here, not from the hand-off, since a new worker's start takes seconds on a busy machine.
    marker = _marker(cache_dir, point)
    marker.parent.mkdir(parents=True, exist_ok=True)  # on another node without a shared disk
    marker.touch()
    try:
        return trial(study, point, cache_dir)
    finally:
        marker.unlink(missing_ok=True)


class _Clock:
    """When a trial started (its marker seen), and whether it has run past the timeout."""

    def __init__(self, marker: Path) -> None:
        self.marker, self.submitted, self.started = marker, time.monotonic(), None

    def expired(self, timeout: float | None) -> bool:
        now = time.monotonic()
        if self.started is None and self.marker.exists():
            self.started = now
        if timeout is None:
            return False
        if self.started is not None:
            return now - self.started > timeout
        return now - self.submitted > timeout + START_GRACE_S


class _Recorder:
    """Holds the rows, writes the table after each one, prints progress."""

    def __init__(self, out: Path, study: Study, rows: list[dict], total: int,
                 progress: Callable[[str], None] | None) -> None:
        self.out, self.study, self.rows, self.total = out, study, rows, total
        self.progress = progress
        self.done = self.failed = self.cached = 0
        self.started = time.monotonic()

    def record(self, point: dict, status: str, result: dict | None = None, error: str = "") -> None:
        row = {"point_id": point_id(point), "status": status, **point, **(result or {}),
               "error": error}
        self.rows.append(row)
        write_results(self.out, self.rows, self.study)
        self.done += 1
        self.failed += status != "ok"
        self.cached += bool(result and result.get("cached"))
        if self.progress:
            elapsed = time.monotonic() - self.started
            eta = elapsed / self.done * (self.total - self.done)
            self.progress(
                f"{self.done}/{self.total} points ({self.cached} from cached plans, "
                f"{self.failed} failed), {elapsed:.0f} s, ~{eta:.0f} s left; "
                f"{point_id(point)} {status}" + (f": {error}" if error else ""))


def plan_group(point: dict) -> str:
    """Points with the same group compile the same plan: they differ only in
    :data:`~tvm_chiplet.tools.explore.study.SIMULATION_ONLY` parameters."""
    return point_id({k: v for k, v in point.items() if k not in SIMULATION_ONLY})


def _run_tasks(study: Study, points: list[dict], cache_dir: str, trial: Trial,
               recorder: _Recorder) -> None:
    import ray

    remote = ray.remote(num_cpus=1, max_retries=0)(_call)
    study_ref = ray.put(study)
    slots = max(1, int(ray.cluster_resources().get("CPU", 1)))
    queue = list(points)
    running: dict = {}
    try:
        while queue or running:
            # Points sharing a plan wait for the first of them, which compiles and caches it.
            busy = {plan_group(point) for point, _clock in running.values()}
            while len(running) < slots:
                index = next((i for i, p in enumerate(queue) if plan_group(p) not in busy), None)
                if index is None:
                    break
                point = queue.pop(index)
                busy.add(plan_group(point))
                running[remote.remote(trial, study_ref, point, cache_dir)] = (
                    point, _Clock(_marker(cache_dir, point)))
            ready, _ = ray.wait(list(running), num_returns=1, timeout=0.5)
            for ref in ready:
                point, _clock = running.pop(ref)
                try:
                    recorder.record(point, "ok", ray.get(ref))
                except Exception as err:  # every failure is recorded, and the study goes on
                    status, error = _classify(err)
                    recorder.record(point, status, error=error)
            for ref, (point, clock) in list(running.items()):
                if clock.expired(study.timeout_s):
                    ray.cancel(ref, force=True)
                    running.pop(ref)
                    recorder.record(point, "timeout",
                                    error=f"ran longer than {study.timeout_s:g} s")
    finally:
        for ref in running:
            ray.cancel(ref, force=True)


def _tune_space(study: Study):
    from ray import tune

    space = {}
    for name, dom in study.space.items():
        if isinstance(dom, list):
            space[name] = tune.choice(dom)
        elif dom.integer:
            low, high = int(dom.low), int(dom.high) + 1
            space[name] = tune.lograndint(low, high) if dom.log else tune.randint(low, high)
        else:
            space[name] = tune.loguniform(dom.low, dom.high) if dom.log else \
                tune.uniform(dom.low, dom.high)
    return space


def _run_tune(study: Study, out: Path, done: list[dict], remaining: int, cache_dir: str,
              trial: Trial, recorder: _Recorder) -> None:
    import ray
    from ray import tune
    from ray.tune.search.optuna import OptunaSearch

    column, mode = OBJECTIVES[study.metric]
    ok = [row for row in done if row["status"] == "ok" and _finite(row.get(column))]
    searcher = OptunaSearch(
        metric=column, mode=mode, seed=study.seed,
        points_to_evaluate=[{name: row[name] for name in study.space} for row in ok] or None,
        evaluated_rewards=[float(row[column]) for row in ok] or None,
    )
    # The Tune trial holds the CPU while its trial runs as a Ray task of its own (0 CPUs), so a
    # timeout cancels it and a dead worker is reported as in a grid.
    remote = ray.remote(num_cpus=0, max_retries=0)(_call)
    study_ref = ray.put(study)
    failed_value = math.inf if mode == "min" else -math.inf

    def trainable(config: dict) -> None:
        point = {name: config[name] for name in study.space}
        ref = remote.remote(trial, study_ref, point, cache_dir)
        clock = _Clock(_marker(cache_dir, point))
        ready: list = []
        while not ready and not clock.expired(study.timeout_s):
            ready, _ = ray.wait([ref], timeout=0.5)
        if not ready:
            ray.cancel(ref, force=True)
            status, result, error = "timeout", {}, f"ran longer than {study.timeout_s:g} s"
        else:
            try:
                status, result, error = "ok", ray.get(ref), ""
            except Exception as err:  # recorded as the trial's status
                (status, error), result = _classify(err), {}
        tune.report({**result, column: result.get(column, failed_value),
                     "explore_status": status, "explore_error": error, "explore_point": point})

    class Record(tune.Callback):
        def on_trial_result(self, iteration, trials, trial, result, **info):
            metrics = {k: v for k, v in result.items() if k in recorder_columns}
            status = result["explore_status"]
            recorder.record(result["explore_point"], status,
                            metrics if status == "ok" else None, result["explore_error"])

    recorder_columns = _result_columns(study)
    tuner = tune.Tuner(
        trainable,
        param_space=_tune_space(study),
        tune_config=tune.TuneConfig(
            search_alg=searcher, num_samples=remaining, metric=column, mode=mode,
            max_concurrent_trials=max(1, int(ray.cluster_resources().get("CPU", 1)))),
        run_config=tune.RunConfig(storage_path=str((out / "tune").resolve()), name=study.name,
                                  verbose=0, callbacks=[Record()]),
    )
    tuner.fit()


def _result_columns(study: Study) -> set[str]:
    return {OBJECTIVES[name][0] for name in study.objectives} | {
        "plan_strategy", "ops", "segments", "clusters_used", "copies", "transfers",
        "dram_bytes_per_input", "bound_ratio", "bound_binding", "compile_s", "clusters",
        "plan_key", "cached", "trial_s"}


def _finite(value) -> bool:
    try:
        return math.isfinite(float(value))
    except (TypeError, ValueError):
        return False


def _same_point(row: dict, study: Study) -> dict:
    """A recorded row's point, its values as the study's space types them."""
    point = {}
    for name, dom in study.space.items():
        value = row[name]
        sample = dom[0] if isinstance(dom, list) else (1 if dom.integer else 1.0)
        point[name] = type(sample)(value) if isinstance(sample, int | float) and \
            not isinstance(sample, bool) else value
    return point


def run_study(study: Study, out: str | Path, address: str | None = None,
              workers: int | None = None, trial: Trial = run_trial,
              progress: Callable[[str], None] | None = None,
              retry_failed: bool = False) -> StudyRun:
    """Run ``study`` on Ray, writing ``results.csv`` (and ``study.json``) under ``out``.

    Parameters
    ----------
    study : Study
        From :func:`~tvm_chiplet.tools.explore.study.load_study`.
    out : path
        Results directory; rows already there are kept and their points skipped (those that
        failed too, unless ``retry_failed``); ``out/plans`` caches the compiled plans.
    address : str, optional
        A Ray cluster (``ray://head:10001`` or ``head:6379``); default a local Ray.
    workers : int, optional
        CPUs of the local Ray (concurrent trials); default all cores.
    trial : callable
        ``trial(study, point, cache_dir) -> dict`` run per point (default :func:`run_trial`).
    progress : callable, optional
        Called with a line of text after every trial.
    """
    out = Path(out)
    cache_dir = out / "plans"
    cache_dir.mkdir(parents=True, exist_ok=True)
    (out / "running").mkdir(exist_ok=True)
    for stale in (out / "running").iterdir():
        stale.unlink()
    atomic_write(out / "study.json",
                 lambda tmp: Path(tmp).write_text(json.dumps(study.to_dict(), indent=1)))
    rows = read_results(out) if (out / "results.csv").is_file() else []
    if retry_failed:
        rows = [row for row in rows if row["status"] == "ok"]
    done = {row["point_id"] for row in rows}
    if study.method == "grid":
        points = grid_points(study)
    elif study.method == "random":
        points = random_points(study, study.budget)
    else:
        points = []
    todo = [p for p in points if point_id(p) not in done]
    skipped = len(points) - len(todo)
    if study.method == "tpe":
        skipped = len(rows)
        remaining = max(0, study.budget - len(rows))
    else:
        remaining = len(todo)
    if progress and skipped:
        progress(f"{skipped} points already in {out / 'results.csv'}: skipped")
    recorder = _Recorder(out, study, rows, remaining, progress)
    if remaining == 0:
        write_results(out, rows, study)
        return StudyRun(rows, skipped, 0)
    started_here = connect(address, workers)
    interrupted = False
    try:
        if study.method == "tpe":
            _run_tune(study, out, [{**r, **_same_point(r, study)} for r in rows], remaining,
                      str(cache_dir), trial, recorder)
        else:
            _run_tasks(study, todo, str(cache_dir), trial, recorder)
    except KeyboardInterrupt:
        interrupted = True
        if progress:
            progress(f"interrupted: {recorder.done} of {remaining} points done, results in "
                     f"{out / 'results.csv'}; rerun the same command to go on")
    finally:
        if started_here:
            import ray

            ray.shutdown()
    if interrupted:
        raise KeyboardInterrupt
    return StudyRun(recorder.rows, skipped, recorder.done, interrupted)


def stderr_progress(line: str) -> None:
    print(f"[explore] {line}", file=sys.stderr, flush=True)


__all__ = ["Range", "RayUnavailableError", "StudyRun", "connect", "run_study"]
