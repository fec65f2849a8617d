"""One run per output folder: a lock file in ``OUT`` with the holder's pid and host.

:func:`out_lock` (used by :func:`curate.executors.run_stage`, so every stage holds
it) creates ``OUT/.curate.lock``, takes an exclusive ``flock`` on it and writes the
holder's pid, host, start time and command into it. The operating system drops a
``flock`` when its process dies, however it dies, so:

* a second run into a folder whose lock is held stops at once with one line naming
  the holder (:class:`OutputLocked`, whatever its settings);
* a lock file left by a killed run is stale: the next run takes it over and says
  so on stderr, naming the dead holder.

The lock is re-entrant within a process. Library callers hold it for the scope of
each stage; the command line (:func:`held_for_command`) keeps it from the first stage
until the verb ends, so the driver's own steps between stages are covered too.
The file is removed when the lock is released. Paths with a URL scheme (object
storage) are not locked.
"""

from __future__ import annotations

import atexit
import fcntl
import json
import os
import socket
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from curate.core.errors import UserError
from curate.core.location import shown

LOCK_NAME = ".curate.lock"


class OutputLocked(UserError):
    """Another live run holds the output folder."""


@dataclass
class _Held:
    fd: int
    depth: int


_HELD: dict[Path, _Held] = {}
_KEEP = False


@contextmanager
def held_for_command() -> Iterator[None]:
    """Keep every lock taken inside the block until the block ends (the command line's mode).

    A verb then holds its ``--out`` from its first stage to its last line, including the
    driver's own steps between stages; nested use keeps the outer block's scope.
    """
    global _KEEP
    outer, _KEEP = _KEEP, True
    try:
        yield
    finally:
        _KEEP = outer
        if not outer:
            for key in [k for k, h in _HELD.items() if h.depth == 0]:
                _drop(key)


def pid_alive(pid: int) -> bool:
    """Whether process ``pid`` exists on this host (one we may not signal counts as alive)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _describe(info: dict) -> str:
    parts = [f"pid {info.get('pid', '?')} on host {info.get('host', '?')}"]
    if info.get("started"):
        parts.append(f"since {info['started']}")
    if info.get("command"):
        parts.append(f"command: {info['command']}")
    return ", ".join(parts)


def _read(fd: int) -> dict:
    os.lseek(fd, 0, os.SEEK_SET)
    raw = b""
    while chunk := os.read(fd, 65536):
        raw += chunk
    try:
        info = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, ValueError):
        return {}
    return info if isinstance(info, dict) else {}


def _open_locked(path: Path, out: Path) -> int:
    """An fd of ``path`` holding its exclusive flock; raises OutputLocked when a live process holds it."""
    for _ in range(10):
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            info = _read(fd)
            os.close(fd)
            raise OutputLocked(f"{shown(out)} is in use by another curate run ({_describe(info)}); wait for it to "
                               "finish, or use another --out") from None
        try:
            same = os.stat(path).st_ino == os.fstat(fd).st_ino
        except FileNotFoundError:
            same = False
        if same:
            return fd
        os.close(fd)  # the holder removed the file between our open and our flock: try the new one
    raise OutputLocked(f"{shown(out)}: could not take the lock {path}; another run keeps replacing it")


def acquire(out: str | os.PathLike[str]) -> None:
    """Take (or re-enter) the lock on ``out``, creating the folder; see the module docstring.

    Raises:
        OutputLocked: a live process (this host or another) holds the lock.
    """
    if "://" in str(out):
        return
    key = Path(out).resolve()
    held = _HELD.get(key)
    if held is not None:
        held.depth += 1
        return
    key.mkdir(parents=True, exist_ok=True)
    path = key / LOCK_NAME
    fd = _open_locked(path, Path(out))
    previous = _read(fd)
    if previous and previous.get("pid") != os.getpid():
        print(f"{shown(out)}: taking over the lock of a run that is no longer running ({_describe(previous)})",
              file=sys.stderr)
    info = {"pid": os.getpid(), "host": socket.gethostname(),
            "started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "command": " ".join(sys.argv)}
    data = json.dumps(info).encode()
    os.ftruncate(fd, 0)
    os.pwrite(fd, data, 0)
    _HELD[key] = _Held(fd, 1)


def release(out: str | os.PathLike[str]) -> None:
    """Leave one level of the lock on ``out``; the last level removes the file (unless kept until exit)."""
    if "://" in str(out):
        return
    key = Path(out).resolve()
    held = _HELD.get(key)
    if held is None:
        return
    held.depth = max(held.depth - 1, 0)
    if held.depth == 0 and not _KEEP:
        _drop(key)


def let_go(out: str | os.PathLike[str]) -> None:
    """Remove the lock on ``out`` now if no block of this process is inside it any more, even within
    :func:`held_for_command` (``curate run``: a finished step's folder is not left with a lock file when a
    later step is killed)."""
    if "://" in str(out):
        return
    key = Path(out).resolve()
    held_lock = _HELD.get(key)
    if held_lock is not None and held_lock.depth == 0:
        _drop(key)


def _drop(key: Path) -> None:
    held = _HELD.pop(key)
    path = key / LOCK_NAME
    try:
        if os.stat(path).st_ino == os.fstat(held.fd).st_ino:
            os.unlink(path)  # while we still hold the flock: nobody else can be inside
    except OSError:
        pass
    os.close(held.fd)


@atexit.register
def _release_all() -> None:
    for key in list(_HELD):
        _drop(key)


def _forget_in_child() -> None:
    """A forked child (e.g. a pack worker) holds none of its parent's locks: its copies of their fds are
    closed, so a lock ends with its holder even when a child outlives it (the flock stays the parent's)."""
    for held_lock in _HELD.values():
        try:
            os.close(held_lock.fd)
        except OSError:
            pass
    _HELD.clear()


os.register_at_fork(after_in_child=_forget_in_child)


def held(out: str | os.PathLike[str]) -> bool:
    """Whether this process holds the lock on ``out``."""
    return Path(out).resolve() in _HELD


@contextmanager
def out_lock(out: str | os.PathLike[str]) -> Iterator[None]:
    """Hold the lock on ``out`` for a ``with`` block (re-entrant)."""
    acquire(out)
    try:
        yield
    finally:
        release(out)
