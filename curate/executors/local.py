"""The local executor: this process, or a pool of worker processes on this machine."""

from __future__ import annotations

import contextlib
import gc
import multiprocessing as mp
import os
import sys
import threading
import time
from collections.abc import Iterator, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from pathlib import Path
from typing import Any

from curate.executors import Executor
from curate.core.progress import StageProgress
from curate.core.shards import Shard, ShardTask, execute_shard
from curate.core.threads import available_cpus, cap_threads, task_threads, thread_env, torch_threads, worker_cpus

_WORKER_TASK: ShardTask | None = None


@contextlib.contextmanager
def _frozen_heap(ctx: Any) -> Iterator[None]:
    """With fork, keep the driver's objects out of the workers' garbage collections (``gc.freeze``).

    A forked worker starts with every object of the driver (a loaded processor: torch,
    transformers, millions of objects). Each full collection in the worker would walk them
    all, and touching them copies the pages the two processes share. Frozen, they are
    never walked; the driver's collector gets them back once the pool is done.
    """
    if ctx.get_start_method() != "fork":
        yield
        return
    gc.freeze()  # (no collection first: it would walk the whole heap; garbage frozen here is collected once unfrozen)
    try:
        yield
    finally:
        gc.unfreeze()


def _init_worker(task: ShardTask) -> None:
    global _WORKER_TASK
    _WORKER_TASK = task
    cap_threads(task_threads(task))  # before setup(): torch/OpenMP use what this worker was given
    parent = os.getppid()
    threading.Thread(target=_exit_with_parent, args=(parent,), name="exit-with-parent", daemon=True).start()


def _exit_with_parent(parent: int, every: float = 1.0) -> None:
    """End this worker once its driver is gone (killed, however): a pool worker would otherwise wait for
    work forever, holding its memory, after a ``kill -9`` of the run."""
    while os.getppid() == parent:
        time.sleep(every)
    os._exit(1)


def _run_in_worker(shard: Shard, out: str, seed: int) -> dict[str, Any]:
    assert _WORKER_TASK is not None, "worker not initialised"
    _WORKER_TASK.setup()  # here, not in the initializer: a UserError then reaches the driver as itself
    return execute_shard(_WORKER_TASK, shard, Path(out), seed)


class LocalExecutor(Executor):
    """Run shards here: sequentially in-process for one worker, else in worker processes.

    Worker processes are started with ``spawn`` (safe with torch and threads)
    and call ``task.setup()`` once each, after capping their torch/OpenMP threads
    to the task's ``threads`` (1 for CPU tasks; see :mod:`curate.core.threads`).
    """

    name = "local"

    def __init__(self, workers: int = 1) -> None:
        if workers < 1:
            from curate.core.errors import UserError
            raise UserError(f"--workers must be at least 1, got {workers}")
        self.workers = workers

    @property
    def in_process(self) -> bool:
        """One worker: shards run here, one after the other."""
        return self.workers == 1

    def run(self, task: ShardTask, shards: Sequence[Shard], out: Path, seed: int,
            desc: str) -> list[dict[str, Any]]:
        """Run the shards here, or in worker processes; return their markers."""
        total = sum(task.shard_items(s) for s in shards)
        if self.workers > 1 and len(shards) > 1:
            return self._pool(task, shards, out, seed, StageProgress(desc, total, unit=task.unit))
        markers = []
        with StageProgress(desc, total, unit=task.unit) as bar:
            with torch_threads(task_threads(task)):
                task.setup()
                for shard in shards:
                    before = bar.done
                    markers.append(execute_shard(task, shard, out, seed, progress=bar.advance))
                    bar.advance(max(task.shard_items(shard) - (bar.done - before), 0))
        return markers

    def _pool(self, task: ShardTask, todo: Sequence[Shard], out: Path, seed: int,
              progress: StageProgress) -> list[dict[str, Any]]:
        results = []
        method = getattr(task, "start_method", "spawn")  # spawn unless a task is safe to fork
        ctx = mp.get_context(method if method != "fork" or sys.platform == "linux" else "spawn")  # fork: Linux only
        size = min(self.workers, len(todo))
        with thread_env(task_threads(task)), worker_cpus(available_cpus() // size), _frozen_heap(ctx), \
                ProcessPoolExecutor(max_workers=size, mp_context=ctx, initializer=_init_worker,
                                    initargs=(task,)) as pool:
            # Every shard is queued, and with fork every worker started, before the progress bar starts its
            # refresh thread: a forked worker never inherits a lock that thread held (e.g. on stderr).
            futures: dict[Future, Shard] = {pool.submit(_run_in_worker, s, str(out), seed): s for s in todo}
            remaining = set(futures)
            with progress as bar:
                try:
                    while remaining:
                        finished, remaining = wait(remaining, return_when=FIRST_COMPLETED)
                        for fut in finished:
                            results.append(fut.result())
                            bar.advance(task.shard_items(futures[fut]))
                except BaseException:
                    pool.shutdown(wait=True, cancel_futures=True)  # stop at the first error: queued shards never start
                    raise
        return results
