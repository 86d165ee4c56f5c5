"""Forked: results computed in forked copies of the process, read back when asked for."""

import os
import tempfile
import time

import pytest

from tvm_chiplet.passes.forked import Forked, spare_cores

pytestmark = pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork (POSIX)")


@pytest.fixture
def files(tmp_path, monkeypatch):
    """The directory the children's results are written to, empty when none is left over."""
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    return tmp_path


def test_a_child_computes_what_this_process_would_and_changes_nothing_here(files):
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
    assert "a" not in forked and not list(files.iterdir())


def test_a_failed_child_gives_none_for_the_caller_to_compute_here(files):
    def fail():
        raise ValueError("no")

    forked = Forked()
    forked.start("a", fail)
    assert forked.take("a") is None
    assert not list(files.iterdir())


def test_cancel_stops_the_children_not_taken(files):
    forked = Forked()
    forked.start("a", lambda: time.sleep(60))
    started = time.perf_counter()
    forked.cancel()
    assert time.perf_counter() - started < 30
    assert len(forked) == 0 and not list(files.iterdir())


def test_a_key_started_twice_runs_once(files):
    forked = Forked()
    forked.start("a", lambda: 1)
    forked.start("a", lambda: 2)
    assert len(forked) == 1 and forked.take("a") == 1


def test_spare_cores_leave_this_process_its_own():
    assert 0 <= spare_cores() < (os.cpu_count() or 1)
