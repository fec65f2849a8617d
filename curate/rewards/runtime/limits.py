"""Time limits that work off the main thread and under any executor.

Verifiers split their work in two tiers:

- **Inline** work (extraction, string and number rules, IoU, Jaccard, Levenshtein) runs in
  the caller. It is bounded by construction: inputs are capped and every step is linear
  in the input, so it cannot hang; the fuzz test checks that no call outlives its limit.
- **Isolated** work (math-verify/sympy, SVG rendering, pycocotools) is returned as a
  :class:`~curate.rewards.verdict.Deferred` and runs in a :class:`WorkerPool` of long-lived
  worker processes. A call that outlives its limit gets its worker killed (SIGKILL) and
  scores 0 with ``error="timeout"`` at once; the replacement worker is forked in the
  background. A worker that dies scores ``verifier_crashed``. Nothing relies on signals in the caller, so this works from any
  thread, inside a FastAPI server and inside Ray workers.

The workers themselves (forked by a zygote, so a replacement takes milliseconds) live in
:mod:`curate.rewards.runtime.workers`. A batch is spread over the idle workers and streamed back
item by item, each item with its own deadline. Each worker has an address-space limit
(``CURATE_REWARD_WORKER_MEMORY_MB``, default 4096 MB above its start size).

The pool size is ``CURATE_REWARD_WORKERS`` (default and most: the cores this process was given, see
:func:`default_size`) or :func:`configure`. Model-written programs run on a second pool of the same
kind and size whose workers are OS sandboxes (:mod:`curate.rewards.runtime.sandbox`). Successful
results are cached by :class:`curate.rewards.runtime.cache.ResultCache`.
"""

from __future__ import annotations

import atexit
import math
import os
import threading
import time
from collections import deque
from dataclasses import dataclass
from multiprocessing.connection import wait as mp_wait
from typing import Callable, Sequence

from curate.rewards.runtime.workers import START_TIMEOUT, Worker, spawn

MAX_CHUNK = 32


@dataclass(frozen=True, slots=True)
class Task:
    """One isolated call: ``"module:function"``, its arguments and its time limit (seconds)."""

    fn: str
    args: tuple
    limit: float


@dataclass(frozen=True, slots=True)
class Outcome:
    """A finished task: ``value`` (float) or ``error`` (reason string), plus ``message`` for record errors."""

    value: float | None
    error: str | None = None
    message: str | None = None


class WorkerPool:
    """Worker processes that run :class:`Task` batches with per-task time limits.

    Thread-safe: concurrent callers share the idle workers. Args:
        size: Number of worker processes (started lazily).
        memory_mb: Address-space allowance per worker above its start size (0: none).
        spawn: What starts one worker (default: a verifier worker forked by the zygote); the code
            sandbox's pool passes its own (:mod:`curate.rewards.runtime.sandbox`).
        chunk: Most tasks sent to a worker at once (fewer round trips; 1 balances long tasks best).
    """

    def __init__(self, size: int, memory_mb: int = 4096, spawn: Callable[[], Worker] | None = None,
                 chunk: int = MAX_CHUNK) -> None:
        if size < 1:
            raise ValueError("a worker pool needs at least one worker")
        self.size = size
        self.memory_mb = memory_mb
        self.chunk = max(1, chunk)
        self._start = spawn
        self._cond = threading.Condition()
        self._idle: list[Worker] = []
        self._started = 0
        self._closed = False
        self.counts: dict[str, int] = {"tasks": 0, "timeouts": 0, "crashes": 0, "restarts": 0}

    # -- worker management
    def _spawn(self) -> Worker:
        return self._start() if self._start is not None else spawn(self.memory_mb)

    def _acquire(self, want: int) -> list[Worker]:
        """Up to ``want`` workers: idle ones first, then new ones while below ``size``."""
        want = max(1, want)
        with self._cond:
            while True:
                if self._closed:
                    raise RuntimeError("the reward worker pool is closed")
                take = self._idle[:want]
                del self._idle[: len(take)]
                fresh = min(want - len(take), self.size - self._started)
                self._started += fresh
                if take or fresh:
                    break
                self._cond.wait(0.5)
        for i in range(fresh):
            try:
                take.append(self._spawn())
            except BaseException:
                with self._cond:
                    self._started -= fresh - i
                    self._cond.notify_all()
                if take:
                    break
                raise
        return take

    def _release(self, workers: list[Worker]) -> None:
        with self._cond:
            if self._closed:
                for w in workers:
                    w.kill()
                return
            self._idle.extend(workers)
            self._cond.notify_all()

    def _retire(self, w: Worker, workers: list[Worker]) -> None:
        """Kill ``w``, drop it from ``workers`` and start its replacement in the background.

        The caller does not wait for the replacement: it joins the idle workers when forked.
        """
        w.kill()
        workers.remove(w)
        self.counts["restarts"] += 1

        def refill() -> None:
            try:
                fresh = self._spawn()
            except BaseException:  # noqa: BLE001 - let a later _acquire start (and report) one
                with self._cond:
                    self._started -= 1
                    self._cond.notify_all()
                return
            self._release([fresh])

        threading.Thread(target=refill, name="curate-reward-refill", daemon=True).start()

    def warm_up(self, wait: bool = False) -> None:
        """Start the workers not started yet (in the background unless ``wait``).

        Only never-started workers are spawned, and none is taken from the idle
        list, so concurrent warm-ups and scoring calls never wait on each other;
        a second warm-up has nothing to do.
        """

        def start() -> None:
            with self._cond:
                if self._closed:
                    return
                fresh = self.size - self._started
                self._started += fresh
            workers: list[Worker] = []
            try:
                for _ in range(fresh):
                    workers.append(self._spawn())
            except (RuntimeError, OSError):  # the factory closed meanwhile (e.g. at exit): give the slots back
                with self._cond:
                    self._started -= fresh - len(workers)
                    self._cond.notify_all()
            try:
                for w in workers:
                    if w.conn.poll(START_TIMEOUT):
                        msg = w.conn.recv()
                        w.ready = isinstance(msg, tuple) and msg[0] == "ready"
            except (EOFError, OSError):
                pass
            finally:
                self._release(workers)

        if wait:
            start()
        else:
            threading.Thread(target=start, name="curate-reward-warmup", daemon=True).start()

    # -- running
    def run(self, tasks: Sequence[Task], until: float | None = None) -> list[Outcome]:
        """Run ``tasks`` (spread over idle workers); one :class:`Outcome` per task, in order.

        ``until`` (``time.monotonic()`` clock): tasks unfinished then get the error ``deadline``.
        """
        cap = (lambda t: t) if until is None else (lambda t: min(t, until))
        n = len(tasks)
        results: list[Outcome | None] = [None] * n
        if n == 0:
            return []
        self.counts["tasks"] += n
        pending = deque(range(n))
        workers = self._acquire(min(self.size, n))
        inflight: dict[Worker, deque[int]] = {}
        deadline: dict[Worker, float] = {}
        starting: dict[Worker, float] = {}
        start_failures = 0
        try:
            while pending or inflight:
                if pending and not workers:
                    workers.extend(self._acquire(min(self.size, len(pending))))
                now = time.monotonic()
                for w in workers:
                    if not w.ready and w not in starting:
                        starting[w] = now + START_TIMEOUT
                free = [w for w in workers if w.ready and w not in inflight]
                coming = sum(1 for w in workers if not w.ready)  # workers still starting get their share too
                for w in free:
                    if not pending:
                        break
                    share = math.ceil(len(pending) / (len(free) + coming))
                    chunk = [pending.popleft() for _ in range(min(self.chunk, share, len(pending)))]
                    try:
                        w.conn.send([(i, tasks[i].fn, tasks[i].args) for i in chunk])
                    except (OSError, ValueError, EOFError):
                        pending.extendleft(reversed(chunk))
                        self._retire(w, workers)
                        continue
                    inflight[w] = deque(chunk)
                    deadline[w] = cap(time.monotonic() + tasks[chunk[0]].limit)
                if start_failures > 2 * self.size and not inflight:
                    for i in pending:
                        results[i] = Outcome(None, "worker_start_failed")
                    break
                watched = list(inflight) + list(starting)
                if not watched:
                    continue
                limit = min(list(deadline.values()) + list(starting.values()))
                ready = mp_wait([w.conn for w in watched], timeout=max(0.0, limit - time.monotonic()))
                by_conn = {w.conn: w for w in watched}
                for conn in ready:
                    w = by_conn[conn]
                    try:
                        msg = conn.recv()
                    except (EOFError, OSError, ValueError):
                        msg = None
                    if w in starting:
                        del starting[w]
                        if isinstance(msg, tuple) and msg[0] == "ready":
                            w.ready = True
                        else:
                            start_failures += 1
                            self._retire(w, workers)
                        continue
                    if msg is None:
                        self._fail(w, "verifier_crashed", results, pending, inflight, deadline, workers)
                        continue
                    queue = inflight[w]
                    try:
                        key, status, value = msg
                        if not queue or queue[0] != key:
                            raise ValueError("an answer out of turn")
                    except (TypeError, ValueError):  # a worker answers only its next task, or is done with
                        self._fail(w, "verifier_crashed", results, pending, inflight, deadline, workers)
                        continue
                    queue.popleft()
                    if status == "ok":
                        results[key] = Outcome(value)
                    elif status == "record_error":
                        results[key] = Outcome(None, "record_error", value)
                    else:  # a reason: a short name, whatever a worker sends
                        results[key] = Outcome(None, value if isinstance(value, str) and len(value) <= 64
                                               else "verifier_crashed")
                    if queue:
                        deadline[w] = cap(time.monotonic() + tasks[queue[0]].limit)
                    else:
                        del inflight[w], deadline[w]
                now = time.monotonic()
                if until is not None and now >= until:  # the caller's deadline: cut everything unfinished
                    cut = [i for w in list(inflight) for i in inflight[w]] + list(pending)
                    for w in list(inflight):
                        del inflight[w]
                        deadline.pop(w, None)
                        self._retire(w, workers)  # killed mid-task; its replacement forks in the background
                    for i in cut:
                        results[i] = Outcome(None, "deadline")
                    break
                for w in [w for w, t in deadline.items() if t <= now]:
                    self._fail(w, "timeout", results, pending, inflight, deadline, workers)
                for w in [w for w, t in starting.items() if t <= now]:
                    del starting[w]
                    start_failures += 1
                    self._retire(w, workers)
        except BaseException:
            for w in list(inflight) + list(starting):
                if w in workers:
                    self._retire(w, workers)
            raise
        finally:
            self._release(workers)
        return [r if r is not None else Outcome(None, "verifier_crashed") for r in results]

    def _fail(self, w: Worker, reason: str, results: list, pending: deque, inflight: dict,
              deadline: dict, workers: list) -> None:
        queue = inflight.pop(w)
        deadline.pop(w, None)
        if queue:
            results[queue.popleft()] = Outcome(None, reason)
        pending.extendleft(reversed(queue))
        self.counts["timeouts" if reason == "timeout" else "crashes"] += 1
        self._retire(w, workers)

    def close(self) -> None:
        """Kill every worker; later :meth:`run` calls raise."""
        with self._cond:
            self._closed = True
            idle, self._idle = self._idle, []
            self._cond.notify_all()
        for w in idle:
            w.kill()


# ---------------------------------------------------------------------------- the shared pool

_lock = threading.Lock()
_pool: WorkerPool | None = None
_pool_pid: int | None = None
_settings: dict[str, int] = {}


def default_size() -> int:
    """Worker count: ``CURATE_REWARD_WORKERS`` (at most the cores given), else every core this process was given.

    An executor tells each worker process its share of the machine (``--workers N``
    on C cores: C // N each; a Ray actor: its reserved CPUs) through
    ``CURATE_WORKER_CPUS`` (:func:`curate.core.threads.available_cpus`); a process
    started by hand uses its CPU affinity. More workers than cores only add memory
    (40 workers took 3.8 GB on 2 cores), so the variable is capped at the cores.
    """
    from curate.core.threads import available_cpus

    env = os.environ.get("CURATE_REWARD_WORKERS")
    if env:
        return max(1, min(int(env), available_cpus()))
    return available_cpus()


def pool_size() -> int:
    """The size of the shared pools: what :func:`configure` set, else :func:`default_size`."""
    return _settings.get("workers") or default_size()


def configure(workers: int | None = None, memory_mb: int | None = None) -> None:
    """Set the shared pool's size and per-worker memory allowance (restarts the pool)."""
    global _pool
    with _lock:
        if workers is not None:
            _settings["workers"] = int(workers)
        if memory_mb is not None:
            _settings["memory_mb"] = int(memory_mb)
        old, _pool = _pool, None
    if old is not None and _pool_pid == os.getpid():
        old.close()


def get_pool() -> WorkerPool:
    """The process-wide pool (created on first use, and again in a forked child)."""
    global _pool, _pool_pid
    with _lock:
        if _pool is None or _pool_pid != os.getpid():
            memory = _settings.get("memory_mb", int(os.environ.get("CURATE_REWARD_WORKER_MEMORY_MB", "4096")))
            _pool = WorkerPool(pool_size(), memory)
            _pool_pid = os.getpid()
        return _pool


def warm_up(wait: bool = False) -> None:
    """Start the shared pool's workers now (background thread unless ``wait``)."""
    get_pool().warm_up(wait)


def shutdown() -> None:
    """Kill the shared pool's workers (a new pool starts on the next isolated call)."""
    global _pool
    with _lock:
        old, _pool = _pool, None
    if old is not None and _pool_pid == os.getpid():
        old.close()


atexit.register(shutdown)
