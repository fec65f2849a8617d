"""keep_freed_memory: a buffer freed and allocated again is reused, not faulted in again; small_numpy_pages."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
LOOP = textwrap.dedent("""
    import resource, sys
    from curate.core.malloc import keep_freed_memory
    if sys.argv[1] == "keep":
        assert keep_freed_memory() and keep_freed_memory()  # once per process; a second call changes nothing
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    for _ in range(20):  # a processor's 40 MB temporaries, one record after another
        buffer = bytearray(40 << 20)
        del buffer
    print(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
""")


def _faults(mode: str) -> int:
    done = subprocess.run([sys.executable, "-c", LOOP, mode], capture_output=True, text=True, check=True,
                          env={**os.environ, "PYTHONPATH": str(ROOT)})
    return int(done.stdout.strip())


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's allocator")
def test_freed_buffers_are_reused_not_faulted_in_again() -> None:
    pages = (40 << 20) // 4096
    default, kept = _faults("default"), _faults("keep")
    assert default > 10 * pages  # each 40 MB buffer a fresh mapping: every page faulted again
    assert kept < 2 * pages  # faulted in once, then reused


def test_small_numpy_pages_turns_the_huge_page_advice_off_and_back() -> None:
    from numpy._core import multiarray

    from curate.core.malloc import small_numpy_pages

    previous = multiarray._set_madvise_hugepage(True)
    try:
        with small_numpy_pages():
            inside = multiarray._set_madvise_hugepage(False)  # returns the setting in force
        after = multiarray._set_madvise_hugepage(True)
    finally:
        multiarray._set_madvise_hugepage(previous)
    assert inside is False and after is True
