"""The C allocator's settings for processes that allocate and free large buffers one record after another.

glibc's ``malloc`` serves a large request (past a threshold that starts at 128 KiB and
grows with what the process frees) with a fresh ``mmap``, and gives freed memory at the
top of its heap back to the kernel. A process that decodes an image, runs it through a
processor and frees every buffer, record after record, so faults in and zeroes fresh
pages each time: ≈2,000 page faults per full-size image in pack's check, measured, several
milliseconds of kernel time each record on a VM. :func:`keep_freed_memory` raises both
thresholds so that freed buffers are reused instead. It changes nothing but where memory
comes from, and does nothing where the C library is not glibc.

Used by pack's count step, ``embed``, the training loader's DataLoader workers and ``resample``
(whose column work frees and allocates arrays of tens of megabytes: 10M × 5 tags, ≈52K → ≈40K
page faults). Decoding a
12-megapixel JPEG (a 36 MB buffer, past glibc's largest dynamic threshold of 32 MiB) took
6,332 page faults and ≈104 ms by default, 781 faults and 92–97 ms with it (2 alternating runs).

:func:`small_numpy_pages` turns NumPy's huge-page advice off for a block (``resample``).
"""

from __future__ import annotations

import ctypes
import sys
from collections.abc import Iterator
from contextlib import contextmanager

M_TRIM_THRESHOLD = -1
M_MMAP_THRESHOLD = -3
#: Requests from this size on still get their own mapping (and give it back when freed).
MMAP_THRESHOLD = 64 << 20
#: Free memory kept at the top of the heap before any is given back.
TRIM_THRESHOLD = 256 << 20

_applied: bool | None = None


def keep_freed_memory() -> bool:
    """Make glibc keep freed memory (up to :data:`TRIM_THRESHOLD`) for reuse; once per process.

    Returns:
        Whether the settings are in effect (False off glibc).
    """
    global _applied
    if _applied is not None:
        return _applied
    _applied = False
    if sys.platform.startswith("linux"):
        try:
            mallopt = ctypes.CDLL(None).mallopt
        except (OSError, AttributeError):
            return False
        mallopt.argtypes, mallopt.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
        _applied = mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD) == 1 and mallopt(M_TRIM_THRESHOLD, TRIM_THRESHOLD) == 1
    return _applied


@contextmanager
def small_numpy_pages() -> Iterator[None]:
    """Within the block, NumPy does not ask for transparent huge pages for its large arrays.

    NumPy advises huge pages (``madvise(MADV_HUGEPAGE)``) for every array from 4 MiB on,
    so each first touch zeroes 2 MiB at once. On a VM whose balloon reports freed pages to
    its host (virtio-balloon free page reporting), memory freed and allocated again in one
    run is then faulted back in huge pages at a high and erratic system-time cost:
    ``resample`` on 10M × 5 tags took 0.4–2.0 s of system time per run with the advice,
    0.4–0.5 s without it (10 rounds each, same minutes; median wall 3.08 s → 2.30 s). The
    previous setting is restored on exit; without NumPy's switch (a private function of
    NumPy's core) nothing changes.
    """
    try:
        from numpy._core import multiarray
    except ImportError:  # NumPy 1.x
        from numpy.core import multiarray  # type: ignore[no-redef]
    switch = getattr(multiarray, "_set_madvise_hugepage", None)
    if switch is None:
        yield
        return
    previous = switch(False)
    try:
        yield
    finally:
        switch(previous)
