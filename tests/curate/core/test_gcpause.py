"""curate.core.gcpause: automatic collection off inside the block, the collector's state restored after."""

from __future__ import annotations

import gc
import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from curate.core.gcpause import paused_gc

ROOT = Path(__file__).resolve().parents[3]


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


def _python(code: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                          cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)})


def test_settle_for_exit_finalizes_cyclic_garbage_then_freezes(tmp_path: Path) -> None:
    """In a child (freezing this process would keep the tests' garbage): a cycle holding an object with a finalizer
    is finalized by the one collection, and what is left is frozen."""
    marker = tmp_path / "finalized"
    code = f"""
import gc
from curate.core.gcpause import settle_for_exit
class Closes:
    def __del__(self):
        open({str(marker)!r}, "w").write("yes")
a = [Closes()]
a.append(a)
del a
gc.disable()
settle_for_exit()
print(gc.get_freeze_count() > 1000, {str(marker)!r} and open({str(marker)!r}).read())
"""
    done = _python(code)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["True", "yes"]


@pytest.mark.parametrize("argv, code", [(["curate", "--help"], 0), (["curate", "no-such-verb"], 2)])
def test_the_console_entry_settles_before_exit(argv: list[str], code: int) -> None:
    """``curate`` (``entry``) leaves the heap frozen when it exits, on success and on a usage error."""
    program = f"""
import atexit, gc, sys
atexit.register(lambda: print("frozen", gc.get_freeze_count() > 0))
sys.argv = {argv!r}
from curate.cli import entry
entry()
"""
    done = _python(program)
    assert done.returncode == code, done.stderr
    assert done.stdout.strip().splitlines()[-1] == "frozen True"
