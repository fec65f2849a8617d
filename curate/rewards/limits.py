"""Time limits that work off the main thread and under any executor.

Verifiers split their work in two tiers:

- **Inline** work (extraction, string and number rules, IoU, Jaccard, Levenshtein) runs in
  the caller. It is bounded by construction: inputs are capped and every step is linear
  in the input, so it cannot hang; the fuzz test checks that no call outlives its limit.
- **Isolated** work (math-verify/sympy, SVG rendering, pycocotools) is returned as a
  :class:`~curate.rewards.result.Deferred` and runs in a :class:`WorkerPool` of long-lived
  worker processes. A call that outlives its limit gets its worker killed (SIGKILL) and
  scores 0 with ``error="timeout"`` at once; the replacement worker is forked in the
  background. A worker that dies scores ``verifier_crashed``. Nothing relies on signals in the caller, so this works from any
  thread, inside a FastAPI server and inside Ray workers.

Workers are forked by a *zygote* (:mod:`curate.rewards._zygote`, a single-threaded
helper process that has imported the heavy libraries once), so replacing a killed
worker takes milliseconds, and unlike multiprocessing's spawn/forkserver methods the
caller's ``__main__`` is never re-imported (safe in scripts, servers, Ray workers). A
batch is spread over the idle workers and streamed back item by item, each item with
its own deadline. Each worker has an address-space limit
(``CURATE_REWARD_WORKER_MEMORY_MB``, default 4096 MB above its start size), ignores
SIGINT, writes nothing to stdout, and exits when the parent process disappears.

The pool size is ``CURATE_REWARD_WORKERS`` (default: the number of CPUs, at most 4) or
:func:`configure`. Code execution is not pooled: the code verifier runs each program
in its own sandbox subprocess (:mod:`curate.rewards.code`).
"""

from __future__ import annotations

import atexit
import importlib
import math
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections import OrderedDict, deque
from dataclasses import dataclass
from multiprocessing.connection import Connection
from multiprocessing.connection import wait as mp_wait
from pathlib import Path
from typing import Any, Sequence

START_TIMEOUT = 120.0
MAX_CHUNK = 32
_ALLOWED_PREFIX = "curate.rewards."


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


# ---------------------------------------------------------------------------- worker side


def _resolve(fn: str) -> Any:
    module, _, name = fn.partition(":")
    if not module.startswith(_ALLOWED_PREFIX):
        raise ValueError(f"task outside curate.rewards: {fn}")
    return getattr(importlib.import_module(module), name)


def _watch_parent(parent_pid: int) -> None:
    while True:
        time.sleep(1.0)
        try:
            os.kill(parent_pid, 0)
        except ProcessLookupError:
            os._exit(0)
        except PermissionError:
            pass


def _worker_main(conn: Any, parent_pid: int, memory_mb: int) -> None:
    """Loop of one worker process: run task batches, stream back one result per task."""
    import logging
    import warnings

    signal.signal(signal.SIGINT, signal.SIG_IGN)
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, 1)
    logging.disable(logging.CRITICAL)
    warnings.simplefilter("ignore")
    if memory_mb > 0:
        try:
            import resource

            with open("/proc/self/statm") as f:
                current = int(f.read().split()[0]) * os.sysconf("SC_PAGE_SIZE")
            limit = current + memory_mb * 1024 * 1024
            resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
        except (OSError, ValueError, ImportError):
            pass
    threading.Thread(target=_watch_parent, args=(parent_pid,), daemon=True).start()
    from curate.rewards.result import RecordError

    conn.send(("ready", os.getpid()))
    while True:
        try:
            batch = conn.recv()
        except (EOFError, OSError):
            os._exit(0)
        for key, fn, args in batch:
            try:
                value = float(_resolve(fn)(*args))
                msg = (key, "ok", value)
            except RecordError as exc:
                msg = (key, "record_error", str(exc))
            except BaseException as exc:  # noqa: BLE001 - everything becomes a named reason
                msg = (key, "err", f"verifier_error:{type(exc).__name__}")
            try:
                conn.send(msg)
            except (EOFError, OSError):
                os._exit(0)


# ---------------------------------------------------------------------------- parent side


class _Zygote:
    """Parent-side handle of the worker factory process."""

    def __init__(self) -> None:
        import curate

        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        env = dict(os.environ)
        root = str(Path(curate.__file__).resolve().parents[1])
        env["PYTHONPATH"] = root + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
        for var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
            env[var] = "1"
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "curate.rewards._zygote", str(theirs.fileno()), str(os.getpid())],
            pass_fds=(theirs.fileno(),), stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, env=env,
            start_new_session=True)
        theirs.close()
        self.ctrl = ours
        self.lock = threading.Lock()
        self.ready = False

    def alive(self) -> bool:
        return self.proc.poll() is None

    def fork(self, memory_mb: int) -> tuple[int, Connection]:
        """A new worker with ``memory_mb`` of address space to spare: ``(pid, connection)``.

        Blocks until the zygote has started.
        """
        with self.lock:
            ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
            try:
                self.ctrl.settimeout(START_TIMEOUT)
                if not self.ready:
                    if self.ctrl.recv(1) != b"R":
                        raise RuntimeError("the reward worker factory failed to start")
                    self.ready = True
                socket.send_fds(self.ctrl, [b"F" + max(0, memory_mb).to_bytes(4, "little")], [theirs.fileno()])
                data = b""
                while len(data) < 8:
                    chunk = self.ctrl.recv(8 - len(data))
                    if not chunk:
                        raise RuntimeError("the reward worker factory exited")
                    data += chunk
            except BaseException:
                ours.close()
                self.close()  # a desynchronised factory is not reused: the next call starts a new one
                raise
            finally:
                theirs.close()
        ours.setblocking(True)
        return int.from_bytes(data, "little"), Connection(ours.detach())

    def close(self) -> None:
        """Stop the factory (its workers stop when their parent or connection goes)."""
        try:
            self.ctrl.close()
            if self.proc.stdin:
                self.proc.stdin.close()
            self.proc.wait(timeout=5)
        except (OSError, subprocess.TimeoutExpired):
            self.proc.kill()
            self.proc.wait()


class _Worker:
    __slots__ = ("pid", "pidfd", "conn", "ready")

    def __init__(self, pid: int, conn: Connection) -> None:
        self.pid = pid
        self.conn = conn
        self.ready = False
        try:
            self.pidfd: int | None = os.pidfd_open(pid)
        except (AttributeError, OSError):
            self.pidfd = None

    def kill(self) -> None:
        try:
            if self.pidfd is not None:
                signal.pidfd_send_signal(self.pidfd, signal.SIGKILL)
            else:
                os.kill(self.pid, signal.SIGKILL)
        except OSError:
            pass
        try:
            self.conn.close()
        except OSError:
            pass
        if self.pidfd is not None:
            try:
                os.close(self.pidfd)
            except OSError:
                pass
            self.pidfd = None


class WorkerPool:
    """Worker processes that run :class:`Task` batches with per-task time limits.

    Thread-safe: concurrent callers share the idle workers. Args:
        size: Number of worker processes (started lazily).
        memory_mb: Address-space allowance per worker above its start size (0: none).
    """

    def __init__(self, size: int, memory_mb: int = 4096) -> None:
        if size < 1:
            raise ValueError("a worker pool needs at least one worker")
        self.size = size
        self.memory_mb = memory_mb
        self._cond = threading.Condition()
        self._idle: list[_Worker] = []
        self._started = 0
        self._closed = False
        self.counts: dict[str, int] = {"tasks": 0, "timeouts": 0, "crashes": 0, "restarts": 0}

    # -- worker management
    def _spawn(self) -> _Worker:
        pid, conn = _zygote().fork(self.memory_mb)
        return _Worker(pid, conn)

    def _acquire(self, want: int) -> list[_Worker]:
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

    def _release(self, workers: list[_Worker]) -> None:
        with self._cond:
            if self._closed:
                for w in workers:
                    w.kill()
                return
            self._idle.extend(workers)
            self._cond.notify_all()

    def _retire(self, w: _Worker, workers: list[_Worker]) -> None:
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
            workers: list[_Worker] = []
            try:
                for _ in range(fresh):
                    workers.append(self._spawn())
            except (RuntimeError, OSError):  # the factory closed meanwhile (e.g. at exit): give the slots back
                with self._cond:
                    self._started -= fresh - len(workers)
                    self._cond.notify_all()
            try:
                for w in workers:
                    if not w.ready and w.conn.poll(START_TIMEOUT):
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
    def run(self, tasks: Sequence[Task]) -> list[Outcome]:
        """Run ``tasks`` (spread over idle workers); one :class:`Outcome` per task, in order."""
        n = len(tasks)
        results: list[Outcome | None] = [None] * n
        if n == 0:
            return []
        self.counts["tasks"] += n
        pending = deque(range(n))
        workers = self._acquire(min(self.size, n))
        inflight: dict[_Worker, deque[int]] = {}
        deadline: dict[_Worker, float] = {}
        starting: dict[_Worker, float] = {}
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
                for w in free:
                    if not pending:
                        break
                    share = math.ceil(len(pending) / len(free))
                    chunk = [pending.popleft() for _ in range(min(MAX_CHUNK, share, len(pending)))]
                    try:
                        w.conn.send([(i, tasks[i].fn, tasks[i].args) for i in chunk])
                    except (OSError, ValueError, EOFError):
                        pending.extendleft(reversed(chunk))
                        self._retire(w, workers)
                        continue
                    inflight[w] = deque(chunk)
                    deadline[w] = time.monotonic() + tasks[chunk[0]].limit
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
                    key, status, value = msg
                    queue = inflight[w]
                    if queue and queue[0] == key:
                        queue.popleft()
                    if status == "ok":
                        results[key] = Outcome(value)
                    elif status == "record_error":
                        results[key] = Outcome(None, "record_error", value)
                    else:
                        results[key] = Outcome(None, value)
                    if queue:
                        deadline[w] = time.monotonic() + tasks[queue[0]].limit
                    else:
                        del inflight[w], deadline[w]
                now = time.monotonic()
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

    def _fail(self, w: _Worker, reason: str, results: list, pending: deque, inflight: dict,
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

_zygote_lock = threading.Lock()
_zygote_handle: _Zygote | None = None
_zygote_pid: int | None = None


def _zygote() -> _Zygote:
    """The process-wide worker factory (started on first use, restarted if it died)."""
    global _zygote_handle, _zygote_pid
    with _zygote_lock:
        if _zygote_handle is None or _zygote_pid != os.getpid() or not _zygote_handle.alive():
            if _zygote_handle is not None and _zygote_pid == os.getpid():
                _zygote_handle.close()
            _zygote_handle = _Zygote()
            _zygote_pid = os.getpid()
        return _zygote_handle


def _close_zygote() -> None:
    global _zygote_handle
    with _zygote_lock:
        if _zygote_handle is not None and _zygote_pid == os.getpid():
            _zygote_handle.close()
        _zygote_handle = None

_lock = threading.Lock()
_pool: WorkerPool | None = None
_pool_pid: int | None = None
_settings: dict[str, int] = {}


def default_size() -> int:
    """Worker count: ``CURATE_REWARD_WORKERS``, else the CPU count capped at 4."""
    env = os.environ.get("CURATE_REWARD_WORKERS")
    if env:
        return max(1, int(env))
    return max(1, min(4, os.cpu_count() or 1))


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
            _pool = WorkerPool(_settings.get("workers", default_size()), memory)
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


atexit.register(_close_zygote)
atexit.register(shutdown)


class ResultCache:
    """Thread-safe LRU cache of deterministic task results (successes only)."""

    def __init__(self, capacity: int = 50_000, max_key_chars: int = 20_000) -> None:
        self.capacity = capacity
        self.max_key_chars = max_key_chars
        self._data: OrderedDict = OrderedDict()
        self._lock = threading.Lock()

    def key(self, task: Task) -> Any:
        """Cache key of ``task`` or ``None`` when it is too big or unhashable."""
        try:
            size = sum(len(a) if isinstance(a, (str, tuple)) else 1 for a in task.args)
            if size > self.max_key_chars:
                return None
            k = (task.fn, task.args)
            hash(k)
            return k
        except TypeError:
            return None

    def get(self, key: Any) -> float | None:
        """Cached value or ``None``."""
        if key is None:
            return None
        with self._lock:
            v = self._data.get(key)
            if v is not None:
                self._data.move_to_end(key)
            return v

    def put(self, key: Any, value: float) -> None:
        """Store a value (evicting the least recently used)."""
        if key is None:
            return
        with self._lock:
            self._data[key] = value
            self._data.move_to_end(key)
            while len(self._data) > self.capacity:
                self._data.popitem(last=False)
