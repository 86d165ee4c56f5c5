"""MILP solver backends of the ILP planner: CBC or HiGHS under a time limit (HiGHS also with a
looser gap once it has run long, :class:`LateGap`), and stopping them.

:func:`make_solver` gives a backend with ``solve(lp) -> SolveResult`` and ``stop()``. CBC runs as a
child process (pulp's bundled binary): a watchdog stops it when it overruns its time limit, and
``stop`` terminates it after Ctrl-C. HiGHS runs in this process through ``highspy``. A CBC solve
that is stopped or crashes returns a :class:`SolveResult` without a solution, so the planner keeps
its warm start. The integer model itself is in :mod:`~tvm_chiplet.passes.planners.ilp`.
"""

from __future__ import annotations

import math
import os
import re
import signal
import sys
import tempfile
import threading
import warnings
from dataclasses import dataclass

import pulp

from tvm_chiplet.passes.planners.placement import PlanningError

SOLVERS = ("cbc", "highs")


@dataclass(frozen=True)
class LateGap:
    """A looser gap for long solves: once a solve has run ``after`` seconds, it stops at the
    first plan within relative ``gap`` of its proven bound (status :data:`WITHIN_LATE_GAP`).
    HiGHS only: CBC runs to its own gap or time limit."""

    after: float
    gap: float

    def __post_init__(self) -> None:
        if not (isinstance(self.after, int | float) and math.isfinite(self.after)
                and self.after >= 0):
            raise PlanningError(f"a late gap's seconds must be a number >= 0, got {self.after!r}")
        check_mip_gap(self.gap)


WITHIN_LATE_GAP = "Within late gap"
"""Status of a HiGHS solve that :class:`LateGap` stopped: a plan within its gap, unproven
beyond it."""


@dataclass
class SolveResult:
    """What one solve found: pulp's status name (or ours), the best bound, the objective."""

    status: str
    bound: float | None
    objective: float | None

    def has_solution(self, lp: pulp.LpProblem) -> bool:
        """Whether the solve left a value on every variable of ``lp`` to read a solution from."""
        return self.status not in (
            "interrupted", "Infeasible", "Not Solved", "Time limit (stopped)", "CBC failed"
        ) and all(
            v.value() is not None for v in lp.variables()
        )


class _Cbc:
    """pulp's bundled CBC, run as a child process we can stop on Ctrl-C."""

    def __init__(
        self, time_limit: float | None, msg: bool, warm_start: bool, mip_gap: float
    ) -> None:
        self.time_limit, self.msg, self.warm_start = time_limit, msg, warm_start
        self.mip_gap = mip_gap
        if not _bundled_cbc().available():
            raise PlanningError(
                "the CBC solver is not available: pulp's bundled CBC binary is missing or not "
                "executable; reinstall pulp (pip install --force-reinstall pulp) or use "
                "solver='highs'"
            )

    def solve(self, lp: pulp.LpProblem) -> SolveResult:
        with tempfile.TemporaryDirectory(prefix="tvm_chiplet_cbc_") as tmp:
            log_path = None if self.msg else os.path.join(tmp, "cbc.log")
            cmd = _bundled_cbc(
                msg=self.msg,
                timeLimit=self.time_limit,
                warmStart=self.warm_start,
                logPath=log_path,
                threads=1,
                gapRel=self.mip_gap,
            )
            cmd.tmpDir = tmp
            # CBC does not always honour its own limit (preprocessing, the root LP): a watchdog
            # stops it a little after the limit and the planner keeps its warm start.
            watchdog = None
            if self.time_limit is not None:
                watchdog = threading.Timer(self.time_limit * 1.2 + 5.0, self.stop, (False,))
                watchdog.daemon = True
                watchdog.start()
            try:
                lp.solve(cmd)
            except pulp.PulpSolverError:
                # Stopped by the watchdog, or CBC 2.10 crashed (it segfaults in preprocessing
                # on some models): either way there is no solution and the warm start stands.
                stopped = watchdog is not None and not watchdog.is_alive()
                return SolveResult("Time limit (stopped)" if stopped else "CBC failed", None, None)
            finally:
                if watchdog is not None:
                    watchdog.cancel()
            status = _status(lp)
            bound = None
            if log_path and os.path.exists(log_path):
                with open(log_path) as f:
                    log = f.read()
                bound = _offset(_cbc_bound(log), lp)
                if "Stopped on time" in log:
                    status = "Time limit"
            if status == "Optimal" and bound is None:
                bound = pulp.value(lp.objective)
            return SolveResult(status, bound, pulp.value(lp.objective))

    def stop(self, reap: bool = True) -> None:
        """Terminate CBC children of this process (an interrupted or overdue solve); ``reap``
        waits for them, which only the thread that did not start them may skip."""
        me = str(os.getpid())
        for pid in filter(str.isdigit, os.listdir("/proc") if os.path.isdir("/proc") else []):
            try:
                with open(f"/proc/{pid}/stat") as f:
                    fields = f.read().rsplit(")", 1)[1].split()
                with open(f"/proc/{pid}/comm") as f:
                    name = f.read().strip()
            except OSError:
                continue
            if fields[1] == me and "cbc" in name.lower():
                try:
                    os.kill(int(pid), signal.SIGTERM)
                    if reap:
                        os.waitpid(int(pid), 0)
                except (OSError, ChildProcessError):
                    pass


def _status(lp: pulp.LpProblem) -> str:
    """Status name: "Optimal" only when proven; a solution found without proof is "Time limit"."""
    if lp.sol_status == pulp.LpSolutionIntegerFeasible:
        return "Time limit"
    return pulp.LpStatus[lp.status]


def _offset(bound: float | None, lp: pulp.LpProblem) -> float | None:
    """A solver's bound plus the objective's constant term, which solvers leave out."""
    return None if bound is None else bound + float(lp.objective.constant)


def _bundled_cbc(**options) -> pulp.LpSolver:
    """pulp's bundled CBC (its PULP_CBC_CMD deprecation notice is about pulp 4.0, not us)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        return pulp.PULP_CBC_CMD(**options)


def _cbc_bound(log: str) -> float | None:
    """The best bound from a CBC log ("Objective value" when optimal, else "Lower bound")."""
    if "Optimal solution found" in log:
        match = re.search(r"Objective value:\s+(\S+)", log)
    else:
        match = re.search(r"Lower bound:\s+(\S+)", log)
    try:
        return float(match.group(1)) if match else None
    except ValueError:
        return None


class _Highs:
    """HiGHS through highspy, in process (so Ctrl-C leaves no child behind)."""

    def __init__(
        self, time_limit: float | None, msg: bool, warm_start: bool, mip_gap: float,
        late_gap: LateGap | None = None,
    ) -> None:
        if not pulp.HiGHS().available():
            raise PlanningError(
                "the HiGHS solver is not available: install it with 'pip install highspy', or "
                "use solver='cbc' (bundled with pulp)"
            )
        self.time_limit, self.msg, self.warm_start = time_limit, msg, warm_start
        self.mip_gap, self.late_gap = mip_gap, late_gap

    def solve(self, lp: pulp.LpProblem) -> SolveResult:
        import highspy

        if not self.msg:
            _swallow_banner()
        warm, late = self.warm_start, self.late_gap

        def settle(event) -> None:
            out = event.data_out
            if out.running_time >= late.after and out.mip_gap <= late.gap:
                event.interrupt()

        class WarmHiGHS(pulp.HiGHS):
            def callSolver(self, lp: pulp.LpProblem) -> None:
                if warm and all(v.value() is not None for v in lp.variables()):
                    solution = highspy.HighsSolution()
                    solution.col_value = [float(v.value()) for v in lp.variables()]
                    solution.value_valid = True
                    lp.solverModel.setSolution(solution)
                if late is not None:
                    lp.solverModel.cbMipInterrupt += settle
                lp.solverModel.run()

        cmd = WarmHiGHS(msg=self.msg, timeLimit=self.time_limit, threads=1, gapRel=self.mip_gap)
        lp.solve(cmd)
        info = lp.solverModel.getInfo()
        bound = _offset(info.mip_dual_bound if math.isfinite(info.mip_dual_bound) else None, lp)
        status = pulp.LpStatus[lp.status]
        if lp.solverModel.getModelStatus() == highspy.HighsModelStatus.kTimeLimit:
            status = "Time limit"
        elif (late is not None and info.mip_gap <= late.gap
              and lp.solverModel.getModelStatus() == highspy.HighsModelStatus.kInterrupt):
            status = WITHIN_LATE_GAP
        if info.primal_solution_status != 2:
            return SolveResult("Not Solved" if status != "Infeasible" else status, bound, None)
        return SolveResult(status, bound, pulp.value(lp.objective))

    def stop(self) -> None:
        """Nothing to stop: HiGHS runs in this process."""


_banner_swallowed = False


def _swallow_banner() -> None:
    """Build this process's first HiGHS with standard output pointed at /dev/null: HiGHS prints
    its banner (version, copyright) to standard output when the first one is built, whatever
    its options, which would land in the middle of ``tvmc compile``'s summary."""
    global _banner_swallowed
    if _banner_swallowed:
        return
    import highspy

    sys.stdout.flush()
    saved = os.dup(1)
    try:
        with open(os.devnull, "w") as null:
            os.dup2(null.fileno(), 1)
            highspy.Highs()
    finally:
        os.dup2(saved, 1)
        os.close(saved)
    _banner_swallowed = True


def check_mip_gap(mip_gap: float) -> float:
    """``mip_gap`` as a float; raises :class:`PlanningError` unless it is a relative gap in
    ``[0, 1)``."""
    if not (isinstance(mip_gap, int | float) and 0 <= mip_gap < 1):
        raise PlanningError(f"mip_gap must be a relative gap in [0, 1), got {mip_gap!r}")
    return float(mip_gap)


def make_solver(
    name: str, time_limit: float | None, msg: bool, warm_start: bool, mip_gap: float = 1e-4,
    late_gap: LateGap | None = None,
) -> _Cbc | _Highs:
    """The backend for solver ``name`` (one of :data:`SOLVERS`); raises if it is not installed.

    ``mip_gap``: the relative gap between incumbent and bound at which the solver stops;
    ``late_gap``: a looser one for long solves (HiGHS only, :class:`LateGap`).
    """
    if name == "cbc":
        return _Cbc(time_limit, msg, warm_start, mip_gap)
    return _Highs(time_limit, msg, warm_start, mip_gap, late_gap)


__all__ = ["SOLVERS", "WITHIN_LATE_GAP", "LateGap", "SolveResult", "check_mip_gap", "make_solver"]
