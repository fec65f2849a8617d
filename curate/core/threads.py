"""Thread caps for worker processes and actors: each uses the threads it was given, not every core.

A worker pool of W processes on a C-core machine, each starting C torch/OpenMP
threads, oversubscribes the cores C-fold; the processor check of ``curate pack``
ran 3× slower that way. Executors cap every worker (1 thread by default for CPU
workers, or the task's ``threads``) before the task's ``setup()``; a task that
runs a model with more threads sets them itself in ``setup()``. :func:`environ` sets environment variables
(thread counts among them) for the length of a block, then puts them back.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator, Mapping, Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from typing import Any, TypeVar


@contextmanager
def environ(values: Mapping[str, str]) -> Iterator[None]:
    """Set ``values`` in ``os.environ`` for the block; on the way out restore each one, or remove it if it was unset."""
    saved = {k: os.environ.get(k) for k in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


THREAD_VARS = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS", "NUMEXPR_NUM_THREADS")
T = TypeVar("T")
CPUS_VAR = "CURATE_WORKER_CPUS"
"""The cores an executor gave this worker process (set by the executors; read by process pools inside it)."""


def available_cpus() -> int:
    """Cores this process may use: what its executor gave it (:data:`CPUS_VAR`), else its CPU affinity."""
    given = os.environ.get(CPUS_VAR, "").strip()
    if given.isdigit() and int(given) > 0:
        return int(given)
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # not on Linux
        return max(1, os.cpu_count() or 1)


@contextmanager
def worker_cpus(n: int) -> Iterator[None]:
    """Within the block, child processes are told they have ``n`` cores (:data:`CPUS_VAR`)."""
    with environ({CPUS_VAR: str(max(1, int(n)))}):
        yield


def task_threads(task: Any, default: int = 1) -> int | None:
    """Threads a worker running ``task`` gets.

    The task's ``threads`` attribute when set; ``None`` (leave the model's own
    choice) for a model task whose ``threads`` is unset; else ``default``, 1 for
    CPU workers. ``CURATE_WORKER_THREADS=N`` overrides it for every worker (0: no cap).
    """
    forced = os.environ.get("CURATE_WORKER_THREADS")
    if forced is not None and forced.strip().isdigit():
        return int(forced) or None  # a number for every worker; 0 leaves threads as the libraries start them
    if not hasattr(task, "threads"):
        return max(1, int(default))
    threads = getattr(task, "threads")
    return max(1, int(threads)) if threads else None


def cap_threads(n: int | None) -> None:
    """Use ``n`` threads in this process: OpenMP/BLAS variables (for libraries loaded later) and torch, if loaded.

    Sets the variables only where the user did not set them; torch is never imported here.
    ``None`` leaves everything as it is.
    """
    if n is None:
        return
    n = max(1, int(n))
    for var in THREAD_VARS:
        os.environ.setdefault(var, str(n))
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    torch = sys.modules.get("torch")
    if torch is not None:
        torch.set_num_threads(n)


@contextmanager
def thread_env(n: int | None) -> Iterator[None]:
    """Within the block, child processes start with ``n`` OpenMP/BLAS threads and no tokenizers thread pool
    (unless the user set them; a forked child then also keeps quiet about a pool its parent used)."""
    if n is None:
        yield
        return
    values = {var: str(max(1, int(n))) for var in THREAD_VARS if var not in os.environ}
    if "TOKENIZERS_PARALLELISM" not in os.environ:
        values["TOKENIZERS_PARALLELISM"] = "false"
    with environ(values):
        yield


@contextmanager
def torch_threads(n: int | None) -> Iterator[None]:
    """Within the block, torch (if loaded) uses ``n`` threads in this process; restored after (None: unchanged)."""
    torch = sys.modules.get("torch") if n is not None else None
    previous = torch.get_num_threads() if torch is not None else None
    if torch is not None:
        torch.set_num_threads(max(1, int(n)))
    try:
        yield
    finally:
        if torch is not None and previous is not None:
            torch.set_num_threads(previous)


def map_split(fn: Callable[[list[Any]], T], items: Sequence[Any], threads: int | None = None) -> list[T]:
    """``fn`` over ``items`` split into up to ``threads`` interleaved lists (default: the cores this process
    may use, at most 4), one thread each; returns each list's result. For numpy work that releases the GIL
    on large blocks; one list (``fn(items)``, no thread) when there is one core or one item."""
    n = min(threads or min(available_cpus(), 4), len(items))
    if n <= 1:
        return [fn(list(items))]
    with ThreadPoolExecutor(max_workers=n) as pool:
        return list(pool.map(fn, [list(items[i::n]) for i in range(n)]))


def plain_workers_context() -> Any:
    """The multiprocessing context for worker processes that run plain Python and file reads (walking tars,
    writing records back): ``fork`` on Linux, which shares the driver's arrays and imports nothing again,
    unless this process is connected to Ray (whose gRPC threads do not survive a fork); else ``spawn``."""
    import multiprocessing

    ray = sys.modules.get("ray")
    connected = bool(ray is not None and getattr(ray, "is_initialized", lambda: False)())
    return multiprocessing.get_context("fork" if sys.platform == "linux" and not connected else "spawn")
