"""Forked: compute in a forked copy of this process while this one goes on (POSIX only)."""

from __future__ import annotations

import os
import pickle
import signal
import tempfile
from collections.abc import Callable, Hashable
from typing import Any


def spare_cores() -> int:
    """Cores this process may use beside the one it runs on (0 where it cannot fork)."""
    if not hasattr(os, "fork"):
        return 0
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    return max(0, (cores or 1) - 1)


class Forked:
    """Results computed in forked children, one child per key, read back when asked for.

    ``start(key, compute)`` forks; the child runs ``compute()``, pickles what it returns to a
    file and leaves with ``os._exit`` (none of this process's exit handlers, buffers or
    resources are run or flushed twice). The child shares this process's state as it was at
    the fork and changes none of it. ``take(key)`` waits for that child and returns its
    result, or None when it failed (the caller computes it here, which raises what failed);
    ``cancel()`` kills and reaps the children not taken. Made for work that takes seconds and
    whose result is much smaller than what computing it builds (a realised plan's op graph).
    """

    def __init__(self) -> None:
        self._children: dict[Hashable, tuple[int, str]] = {}

    def __contains__(self, key: Hashable) -> bool:
        return key in self._children

    def __len__(self) -> int:
        return len(self._children)

    def start(self, key: Hashable, compute: Callable[[], Any]) -> None:
        if key in self._children:
            return
        handle, path = tempfile.mkstemp(prefix="tvm-chiplet-forked-", suffix=".pkl")
        pid = os.fork()
        if pid == 0:  # the child
            status = 1
            try:
                with os.fdopen(handle, "wb") as out:
                    pickle.dump(compute(), out, protocol=pickle.HIGHEST_PROTOCOL)
                status = 0
            finally:
                os._exit(status)
        os.close(handle)
        self._children[key] = (pid, path)

    def take(self, key: Hashable) -> Any | None:
        pid, path = self._children.pop(key)
        try:
            _, status = os.waitpid(pid, 0)
            if status != 0:
                return None
            with open(path, "rb") as result:
                return pickle.load(result)
        finally:
            os.unlink(path)

    def cancel(self) -> None:
        for pid, path in self._children.values():
            try:
                os.kill(pid, signal.SIGKILL)
                os.waitpid(pid, 0)
            except (ProcessLookupError, ChildProcessError):
                pass
            if os.path.exists(path):
                os.unlink(path)
        self._children.clear()
