"""Forked: results computed in forked copies of the process, read back when asked for."""

import glob
import os
import tempfile

import pytest

from tvm_chiplet.passes.forked import Forked, spare_cores

pytestmark = pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork (POSIX)")


def leftovers() -> set[str]:
    return set(glob.glob(os.path.join(tempfile.gettempdir(), "tvm-chiplet-forked-*")))


def test_a_child_computes_what_this_process_would_and_changes_nothing_here():
    before = leftovers()
    state = {"calls": 0}

    def compute():
        state["calls"] += 1  # the child's copy
        return {"pid": os.getpid(), "squares": [i * i for i in range(5)]}

    forked = Forked()
    forked.start("a", compute)
    assert "a" in forked and len(forked) == 1
    result = forked.take("a")
    assert result["squares"] == [0, 1, 4, 9, 16]
    assert result["pid"] != os.getpid()
    assert state["calls"] == 0
    assert "a" not in forked and leftovers() == before


def test_a_failed_child_gives_none_for_the_caller_to_compute_here():
    before = leftovers()

    def fail():
        raise ValueError("no")

    forked = Forked()
    forked.start("a", fail)
    assert forked.take("a") is None
    assert leftovers() == before


def test_cancel_stops_the_children_not_taken():
    before = leftovers()
    forked = Forked()
    forked.start("a", lambda: __import__("time").sleep(60))
    forked.cancel()
    assert len(forked) == 0 and leftovers() == before


def test_a_key_started_twice_runs_once():
    forked = Forked()
    forked.start("a", lambda: 1)
    forked.start("a", lambda: 2)
    assert len(forked) == 1 and forked.take("a") == 1


def test_spare_cores_leave_this_process_its_own():
    assert 0 <= spare_cores() < (os.cpu_count() or 1)
