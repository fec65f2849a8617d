"""Worker factory of :mod:`curate.rewards.runtime.workers`: ``python -m curate.rewards.runtime._zygote FD PID``.

Imports the heavy verifier libraries once, then forks one worker per request. A request
is ``F`` plus the worker's memory allowance in MB (4 bytes) on the control socket ``FD``,
carrying (SCM_RIGHTS) the worker's end of a socket pair; the answer is the worker's pid
(8 bytes). The zygote stays single-threaded
so that forking is safe, reaps its children, ignores SIGINT, and exits when its stdin
or control socket closes or the parent process ``PID`` is gone. Unlike multiprocessing's
spawn and forkserver start methods it never re-imports the caller's ``__main__``.
"""

from __future__ import annotations

import os
import select
import signal
import socket
import sys

from curate.core.io import pid_alive


def _reap() -> None:
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return


def main(argv: list[str]) -> None:
    """Serve fork requests until the parent goes away."""
    ctrl_fd, parent_pid = int(argv[0]), int(argv[1])
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    ctrl = socket.socket(fileno=ctrl_fd)
    from multiprocessing.connection import Connection

    from curate.rewards.runtime import _preload

    try:
        _preload.warm()
    except Exception:  # noqa: BLE001 - warming is an optimisation only
        pass

    from curate.rewards.runtime.workers import worker_main

    try:
        ctrl.sendall(b"R")
    except OSError:  # the parent is already gone
        os._exit(0)
    stdin = sys.stdin.fileno()
    while True:
        readable, _, _ = select.select([ctrl, stdin], [], [], 1.0)
        _reap()
        if not readable:
            if not pid_alive(parent_pid):
                break
            continue
        if stdin in readable and not os.read(stdin, 1):
            break
        if ctrl not in readable:
            continue
        msg, fds, _, _ = socket.recv_fds(ctrl, 5, 1)
        if not msg or not fds:
            break
        memory_mb = int.from_bytes(msg[1:5], "little") if len(msg) >= 5 else 0
        pid = os.fork()
        if pid == 0:
            try:
                ctrl.close()
                os.close(stdin)
                signal.signal(signal.SIGCHLD, signal.SIG_DFL)
                worker_main(Connection(fds[0]), parent_pid, memory_mb)
            finally:
                os._exit(0)
        os.close(fds[0])
        try:
            ctrl.sendall(pid.to_bytes(8, "little"))
        except OSError:
            break
    os._exit(0)


if __name__ == "__main__":
    main(sys.argv[1:])
