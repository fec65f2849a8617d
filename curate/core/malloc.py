"""NumPy's transparent-huge-page advice turned off for a block of column work (``resample``).

NumPy advises huge pages (``madvise(MADV_HUGEPAGE)``) for every array from 4 MiB on, so
each first touch zeroes 2 MiB at once. With the kernel's THP defrag set to ``madvise``
(this VM) such a fault may compact memory first, and memory freed and allocated again in
one run is faulted back in that way at a high and erratic system-time cost. Kept because
it measured ≥ 10% at 10M records (issue 38, ``benchmarks/bench_process_tuning.py``, 10M
records × 5 tags, whole ``python -m curate resample`` processes, rounds in rotated order on
2 shared cores at load 7–14, 2026-12-03): without it / with it, median of the per-round
ratios, 1.22× wall and 1.16× CPU over 6 rounds (22.5 → 17.6 s, 6.5 → 5.7 s of CPU); in two
earlier sets 0.96× wall and 1.18× CPU (5 rounds), 1.25× wall and 1.21× CPU (4 rounds); peak
memory the same (0.95 GiB).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def small_numpy_pages() -> Iterator[None]:
    """Within the block, NumPy does not ask for transparent huge pages for its large arrays; the previous
    setting is restored on exit. Without NumPy's switch (a private function of its core) nothing changes."""
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
