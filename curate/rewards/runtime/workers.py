"""Reward worker processes: the worker loop, the worker factory client and the worker handle.

Workers are forked by a *zygote* (:mod:`curate.rewards.runtime._zygote`, a single-threaded
helper process that has imported the heavy libraries once), so replacing a killed
worker takes milliseconds, and unlike multiprocessing's spawn/forkserver methods the
caller's ``__main__`` is never re-imported (safe in scripts, servers, Ray workers).
Each worker has an address-space limit (``memory_mb`` above its start size), ignores
SIGINT, writes nothing to stdout, and exits when the parent process disappears.

A worker announces itself with ``("ready", pid)``, then receives batches of
``(key, "module:function", args)`` and answers each item with ``(key, status, value)``:
``("ok", float)``, ``("record_error", message)`` or ``("err", "verifier_error:<Name>")``.
The time limits and the scheduling live in :mod:`curate.rewards.runtime.limits`.
"""

from __future__ import annotations

import atexit
import importlib
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

START_TIMEOUT = 120.0
_ALLOWED_PREFIX = "curate.rewards."


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


def worker_main(conn: Any, parent_pid: int, memory_mb: int) -> None:
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
    from curate.rewards.verdict import RecordError

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
            [sys.executable, "-m", "curate.rewards.runtime._zygote", str(theirs.fileno()), str(os.getpid())],
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


class Worker:
    """Parent-side handle of one worker process: its pid, connection and ``ready`` flag."""

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
        """SIGKILL the worker (by pidfd when available) and close its connection."""
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


# ---------------------------------------------------------------------------- the shared factory

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


def spawn(memory_mb: int) -> Worker:
    """Fork a new worker from the process-wide factory (it sends ``("ready", pid)`` when up).

    Raises:
        RuntimeError: The factory failed to start or exited.
        OSError: The control socket failed.
    """
    pid, conn = _zygote().fork(memory_mb)
    return Worker(pid, conn)


atexit.register(_close_zygote)
