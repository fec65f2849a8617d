"""curate.core.gcpause: automatic collection off inside the block, the collector's state restored after."""

from __future__ import annotations

import gc
import threading

import pytest

from curate.core.gcpause import paused_gc


@pytest.fixture(autouse=True)
def _collector_on():
    gc.enable()
    yield
    gc.enable()


def _cycles(n: int) -> None:
    for _ in range(n):
        a: list = []
        a.append(a)


def test_no_automatic_collection_inside_and_restored_after() -> None:
    before = gc.get_stats()[0]["collections"]
    with paused_gc():
        assert not gc.isenabled()
        _cycles(20_000)  # far past the first generation's threshold
        assert gc.get_stats()[0]["collections"] == before
    assert gc.isenabled()
    _cycles(20_000)
    assert gc.get_stats()[0]["collections"] > before


def test_explicit_collect_still_works_inside() -> None:
    with paused_gc():
        _cycles(100)
        assert gc.collect() >= 100


def test_nested_blocks_restore_only_at_the_outermost() -> None:
    with paused_gc():
        with paused_gc():
            assert not gc.isenabled()
        assert not gc.isenabled()
    assert gc.isenabled()


def test_a_disabled_collector_stays_disabled() -> None:
    gc.disable()
    with paused_gc():
        pass
    assert not gc.isenabled()


def test_restored_after_an_exception() -> None:
    with pytest.raises(RuntimeError), paused_gc():
        raise RuntimeError("boom")
    assert gc.isenabled()


def test_overlapping_blocks_in_two_threads() -> None:
    """The collector comes back on only when the last of two overlapping blocks ends, whichever ends first."""
    inside, release = threading.Event(), threading.Event()
    seen: list[bool] = []

    def other() -> None:
        with paused_gc():
            inside.set()
            release.wait(10)
            seen.append(gc.isenabled())

    thread = threading.Thread(target=other)
    with paused_gc():
        thread.start()
        assert inside.wait(10)
    assert not gc.isenabled()  # this block ended, the other thread's has not
    release.set()
    thread.join(10)
    assert seen == [False]
    assert gc.isenabled()
