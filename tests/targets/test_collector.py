"""The collector pause: off inside, as it was after, as a block or a decorator."""

import gc

import pytest

from tvm_chiplet.targets.collector import collection_paused


@collection_paused()
def collecting() -> bool:
    return gc.isenabled()


@pytest.fixture
def collector_on():
    enabled = gc.isenabled()
    gc.enable()
    yield
    (gc.enable if enabled else gc.disable)()


def test_the_collector_is_paused_inside_and_resumed_after(collector_on):
    with collection_paused():
        assert not gc.isenabled()
        with collection_paused():  # nested: the outer pause still holds after the inner one
            pass
        assert not gc.isenabled()
    assert gc.isenabled()
    assert collecting() is False
    assert gc.isenabled()


def test_a_paused_collector_stays_paused_after(collector_on):
    gc.disable()
    with collection_paused():
        pass
    assert collecting() is False
    assert not gc.isenabled()


def test_an_error_inside_still_resumes_the_collector(collector_on):
    with pytest.raises(KeyError), collection_paused():
        raise KeyError("x")
    assert gc.isenabled()
