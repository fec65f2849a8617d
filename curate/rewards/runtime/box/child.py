"""One test of one program, in a process the runner forks: lock it down, then run the program.

Lock-down, in order: file descriptors (stdin: the test's input, or ``/dev/null`` in function
mode; stdout: this test's own pipe to the runner, or ``/dev/null`` in function mode, where the
call's result goes to :data:`RESULT_FD` instead; stderr: ``/dev/null``; every other descriptor
closed, the runner's channel to the host included), the work folder, resource limits (CPU
seconds, address space, file size, open files, no core files, no new processes), the seccomp
filter of :func:`.seccomp.program`, then the audit hook of :mod:`.hook`. The exit status is
the verdict: 0 when the program (and, in function mode, the call) finished, 1 when it raised.
A program can write only to its own test's pipe: what it writes there is its output, so there
is nothing to forge.
"""

from __future__ import annotations

import builtins
import math
import os
import resource
import sys
from typing import Any, NoReturn

from . import confine, hook

RESULT_FD = 3
FILE_BYTES = 16 * 1024 * 1024
OPEN_FILES = 64


def _limit(kind: int, value: int, hard: int | None = None) -> None:
    _, ceiling = resource.getrlimit(kind)
    cap = (lambda v: v) if ceiling == resource.RLIM_INFINITY else (lambda v: min(v, ceiling))
    resource.setrlimit(kind, (cap(value), cap(value if hard is None else hard)))


def lock_down(ctx: Any, workdir: str, function: bool, text_fd: int | None, out_fd: int, cpu_seconds: float,
              memory_mb: int, audit: bool) -> None:
    """Make this (freshly forked) process a test's sandbox; raises when any step fails."""
    confine.restore_signals()  # and a session and process group of its own: nothing it signals is the runner's
    null = os.open(os.devnull, os.O_RDWR)
    os.dup2(null if text_fd is None else text_fd, 0)
    if function:
        os.dup2(out_fd, RESULT_FD)
    os.dup2(null if function else out_fd, 1)
    os.dup2(null, 2)
    os.closerange(RESULT_FD + 1 if function else 3, max(resource.getrlimit(resource.RLIMIT_NOFILE)[0], 1024))
    os.chdir(workdir)
    os.environ["HOME"] = os.environ["TMPDIR"] = workdir
    if ctx.filter is not None and not ctx.installer.install(ctx.filter):
        raise OSError("seccomp filter refused")
    ctx.installer = ctx.filter = None  # this process's copy: no frame above the program leads to ctypes
    cpu = max(1, math.ceil(cpu_seconds))
    _limit(resource.RLIMIT_CPU, cpu, cpu + 1)
    _limit(resource.RLIMIT_AS, int(memory_mb) * 1024 * 1024)
    _limit(resource.RLIMIT_FSIZE, FILE_BYTES)
    _limit(resource.RLIMIT_NOFILE, OPEN_FILES)
    _limit(resource.RLIMIT_CORE, 0)
    _limit(resource.RLIMIT_NPROC, 0)
    for name in [m for m in sys.modules if m == "ctypes" or m.startswith(("ctypes.", "_ctypes"))]:
        del sys.modules[name]
    if audit:
        hook.install(workdir, ctx.roots)


def execute(code: Any, text: str, function: bool, fn_name: str) -> NoReturn:
    """Run the compiled program (and in function mode ``fn_name(text)``), then exit with the verdict."""
    status = 0
    out = sys.stdout
    namespace = {"__name__": "__main__", "__builtins__": builtins}
    try:
        exec(code, namespace)
        if function:
            fn = namespace.get(fn_name)
            if not callable(fn):
                raise NameError(f"{fn_name} is not defined")
            view = memoryview(str(fn(text)).encode("utf-8", "replace"))
            while view:
                view = view[os.write(RESULT_FD, view):]
    except SystemExit as exc:
        status = 0 if exc.code in (None, 0) else 1
    except BaseException:  # noqa: BLE001 - the program's own failure
        status = 1
    try:
        out.flush()
    except BaseException:  # noqa: BLE001
        status = 1
    os._exit(status)
