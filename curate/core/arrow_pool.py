"""Which Arrow memory pool curate's processes allocate from: jemalloc when pyarrow has it.

Reading Parquet a row group at a time frees and allocates buffers of the same sizes
over and over. pyarrow's default pool (mimalloc) hands freed pages back to the system
within milliseconds, so the next row group faults them in and the kernel zeroes them
again: on a 10M-record ``curate resample`` that was 0.9-1.4 s of system time against
0.4-0.5 s with jemalloc, which keeps them for reuse (``benchmarks/bench_resample.py``).
A pool chosen through ``ARROW_DEFAULT_MEMORY_POOL`` is left as it is.
"""

from __future__ import annotations

import os

import pyarrow as pa


def prefer_jemalloc() -> str:
    """Make jemalloc Arrow's default pool unless ``ARROW_DEFAULT_MEMORY_POOL`` chose one; returns the pool in use."""
    if not os.environ.get("ARROW_DEFAULT_MEMORY_POOL") and pa.default_memory_pool().backend_name != "jemalloc":
        try:
            pa.set_memory_pool(pa.jemalloc_memory_pool())
        except NotImplementedError:  # a pyarrow built without jemalloc: keep its default
            pass
    return pa.default_memory_pool().backend_name
