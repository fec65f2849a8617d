"""The code sandbox's runner: one long-lived process per sandbox, one forked child per test.

Started by the host (:mod:`curate.rewards.runtime.bwrap`) inside bubblewrap, or directly when
the code is trusted and no sandbox can start. It speaks :mod:`.wire` frames on its stdin and
stdout: first ``["ready", pid]`` (or ``["failed", reason]`` when the lock-down does not work
here), then for each batch ``[[key, "run", job], ...]`` one answer per job, ``[key, "ok",
tests]`` or ``[key, "err", reason]`` (``timeout``, ``sandbox_error``). ``job`` holds
:data:`JOB_FIELDS` in that order; ``tests`` holds ``[digest, error]`` per test: the
:func:`digest` of the output and ``None``, or ``None`` and ``exit:N`` / ``signal:N`` /
``output_limit``. Expected outputs never enter the sandbox; the host compares digests.

Per test the runner forks a child (:mod:`.child`) with a pipe of its own for stdout and the
test's input in an anonymous file, reads at most :data:`OUTPUT_BYTES`, and waits for it no
later than the job's wall limit; CPU seconds are a budget for the whole job. The runner's
channel to the host is closed in every child. After each job (before its answer) the work
area is wiped, whatever the program left there, so no program sees another's files.
"""

from __future__ import annotations

import hashlib
import math
import os
import select
import signal
import stat
import sysconfig
import time
from typing import Any

from . import child, confine, seccomp, wire

JOB_FIELDS = ("code", "inputs", "mode", "fn_name", "cpu_seconds", "wall_seconds", "memory_mb", "audit")
OUTPUT_BYTES = 4 * 1024 * 1024
MAX_JOB_BYTES = 1 << 30
TIMEOUT = "timeout"
COMPILE_EXIT = 72  # a test's child could not compile the program (syntax, or past its limits while compiling)
_CPU_SIGNALS = (signal.SIGXCPU, signal.SIGKILL)


def normalize(text: str) -> str:
    """An output as compared: trailing spaces of each line and surrounding blank lines removed."""
    return "\n".join(line.rstrip() for line in str(text).strip("\n").splitlines()).strip()


def digest(text: str) -> str:
    """SHA-256 (hex) of :func:`normalize`'s ``text``: what the runner returns per test, what the host compares."""
    return hashlib.sha256(normalize(text).encode("utf-8", "replace")).hexdigest()


class _HostGone(Exception):
    """The host closed the channel (or wrote to it mid-job): stop at once."""


class Context:
    """What every child needs, prepared once: the filter, its installer, the audit hook's read roots."""

    def __init__(self, box: str, channel: int) -> None:
        self.box = box
        self.channel = channel
        self.filter = seccomp.program()
        self.installer = seccomp.Installer() if self.filter is not None else None
        paths = sysconfig.get_paths()
        self.roots = sorted({paths["stdlib"], paths["platstdlib"], os.path.dirname(os.__file__)}) + [
            "/dev/urandom", "/dev/null"]

    def self_check(self) -> str | None:
        """Why a child cannot be locked down here (None when it can): a child must not fork."""
        workdir = os.path.join(self.box, "w")
        os.mkdir(workdir, 0o700)
        try:
            pid = os.fork()
            if pid == 0:
                try:
                    child.lock_down(self, workdir, False, None, os.open(os.devnull, os.O_WRONLY), 5, 256, False)
                except BaseException:  # noqa: BLE001
                    os._exit(3)
                try:
                    if os.fork() == 0:
                        os._exit(0)
                except BaseException:  # noqa: BLE001 - refused, as it must be
                    os._exit(0)
                os._exit(4)
            status = os.waitpid(pid, 0)[1]
        finally:
            wipe(self.box)
        code = os.waitstatus_to_exitcode(status)
        return {0: None, 3: "a test's process could not be locked down (seccomp or resource limits)",
                4: "a test's process could still start new processes"}.get(code, f"self-check exit {code}")


def wipe(box: str) -> None:
    """Remove everything under ``box``: any depth (subfolders are moved up first), any permissions."""
    os.chmod(box, 0o700)
    top = os.open(box, os.O_RDONLY | os.O_DIRECTORY)
    try:
        queue, serial = os.listdir(top), 0
        while queue:
            name = queue.pop()
            try:
                mode = os.stat(name, dir_fd=top, follow_symlinks=False).st_mode
            except FileNotFoundError:
                continue
            if not stat.S_ISDIR(mode):
                os.unlink(name, dir_fd=top)
                continue
            os.chmod(name, 0o700, dir_fd=top)
            fd = os.open(name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=top)
            try:
                for entry in os.listdir(fd):
                    if not stat.S_ISDIR(os.stat(entry, dir_fd=fd, follow_symlinks=False).st_mode):
                        os.unlink(entry, dir_fd=fd)
                        continue
                    while True:  # a subfolder moves to the top under a name nothing there has, handled in its turn
                        serial += 1
                        try:
                            os.stat(f".wipe{serial}", dir_fd=top, follow_symlinks=False)
                        except FileNotFoundError:
                            break
                    os.chmod(entry, 0o700, dir_fd=fd)  # moving a folder writes its "..": it must be writable
                    os.rename(entry, f".wipe{serial}", src_dir_fd=fd, dst_dir_fd=top)
                    queue.append(f".wipe{serial}")
            finally:
                os.close(fd)
            os.rmdir(name, dir_fd=top)
        if os.listdir(top):
            raise OSError("the sandbox's work area could not be emptied")
    finally:
        os.close(top)


def _wait(pid: int, out_r: int, until: float, channel: int) -> tuple[bytearray, int | None, Any, str | None]:
    """Read the child's output and reap it: ``(output, wait status, rusage, cut)``; cut is timeout or output_limit."""
    data = bytearray()
    cut = None
    reaped: tuple[int, Any] | None = None
    try:
        pidfd: int | None = os.pidfd_open(pid)
    except (AttributeError, OSError):
        pidfd = None
    eof = False
    try:
        while not (eof and reaped):
            left = until - time.monotonic()
            if left <= 0:
                cut = TIMEOUT
                break
            watch = [channel] + ([out_r] if not eof else []) + ([pidfd] if pidfd is not None and not reaped else [])
            ready = select.select(watch, [], [], left if pidfd is not None else min(left, 0.01))[0]
            if channel in ready:
                os.kill(pid, signal.SIGKILL)
                raise _HostGone
            if out_r in ready:
                chunk = os.read(out_r, 1 << 16)
                if not chunk:
                    eof = True
                elif len(data) + len(chunk) > OUTPUT_BYTES:
                    cut = "output_limit"
                    break
                else:
                    data += chunk
            if not reaped and (pidfd is None or pidfd in ready):
                done, status, usage = os.wait4(pid, os.WNOHANG)
                if done:
                    reaped = (status, usage)
    finally:
        if pidfd is not None:
            os.close(pidfd)
    if reaped is None:
        os.kill(pid, signal.SIGKILL)
        reaped = os.wait4(pid, 0)[1:]
    return data, reaped[0], reaped[1], cut


def _run_test(ctx: Context, code: Any, text: str, job: dict, workdir: str, until: float,
              cpu_left: float) -> tuple[list | str, float]:
    """One test: ``([digest, error], CPU seconds)``, or ``(TIMEOUT, CPU seconds)``."""
    if cpu_left <= 0 or time.monotonic() >= until:
        return TIMEOUT, 0.0
    function = job["mode"] == "function"
    text_fd = None
    if not function:
        text_fd = os.memfd_create("stdin")
        view = memoryview(str(text).encode("utf-8", "replace"))
        while view:
            view = view[os.write(text_fd, view):]
        os.lseek(text_fd, 0, os.SEEK_SET)
    out_r, out_w = os.pipe()
    pid = os.fork()
    if pid == 0:
        try:
            child.lock_down(ctx, workdir, function, text_fd, out_w, cpu_left, job["memory_mb"], bool(job["audit"]))
        except BaseException:  # noqa: BLE001 - not run unlocked: a failed test
            os._exit(71)
        try:  # compiled here, under the test's limits: a program that is slow or large to compile costs its own CPU
            compiled = compile(code, "<solution>", "exec", dont_inherit=True)
        except BaseException:  # noqa: BLE001
            os._exit(COMPILE_EXIT)
        child.execute(compiled, text, function, str(job["fn_name"]))
    os.close(out_w)
    if text_fd is not None:
        os.close(text_fd)
    try:
        data, status, usage, cut = _wait(pid, out_r, until, ctx.channel)
    finally:
        os.close(out_r)
    used = usage.ru_utime + usage.ru_stime
    if cut == TIMEOUT or (os.WIFSIGNALED(status) and os.WTERMSIG(status) in _CPU_SIGNALS and cut is None):
        return TIMEOUT, used
    if cut is not None:
        return [None, cut], used
    if os.WIFSIGNALED(status):
        return [None, f"signal:{os.WTERMSIG(status)}"], used
    code_ = os.WEXITSTATUS(status)
    if code_ == COMPILE_EXIT:
        return [None, "compile"], used
    return ([digest(data.decode("utf-8", "replace")), None] if code_ == 0 else [None, f"exit:{code_}"]), used


def run_job(ctx: Context, values: list) -> list:
    """``["ok", tests]`` or ``["err", reason]`` for one job (:data:`JOB_FIELDS` values, in order).

    The work area is left as the program left it: the caller wipes it.
    """
    job = dict(zip(JOB_FIELDS, values))
    inputs = list(job["inputs"])
    code = str(job["code"])  # compiled by each test's child, never by the runner (see _run_test)
    workdir = os.path.join(ctx.box, "w")
    os.mkdir(workdir, 0o700)
    until = time.monotonic() + float(job["wall_seconds"])
    cpu_left = float(job["cpu_seconds"])
    tests = []
    for text in inputs:
        verdict, used = _run_test(ctx, code, text, job, workdir, until, cpu_left)
        cpu_left -= used
        if verdict == TIMEOUT:
            return ["err", TIMEOUT]
        if verdict == [None, "compile"]:  # it does not compile: no test can pass
            return ["ok", [[None, "compile"]] * len(inputs)]
        tests.append(verdict)
    return ["ok", tests]


def main(box: str, strict: bool = True, mount: tuple[int, int] | None = None) -> None:
    """Serve jobs until the host closes the channel (``strict``: refuse to start unless the self-check passes).

    ``mount``: ``(bytes, inodes)`` of the tmpfs to mount over ``box`` (inside bubblewrap), after which every
    capability is dropped and :func:`.seccomp.sandbox` added (see :mod:`.confine`).
    """
    channel, reply = os.dup(0), os.dup(1)
    null = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(null, fd)
    os.close(null)
    confine.ignore_signals()
    ctx: Context | None = None
    try:
        if mount is not None:
            confine.mount_box(box, *mount)
            confine.drop_capabilities()
        wipe(box)
        ctx = Context(box, channel)
        if mount is not None and ctx.installer is not None and not ctx.installer.install(seccomp.sandbox() or b""):
            raise OSError("the sandbox's seccomp filter could not be added")
        problem = ctx.self_check()
    except Exception as exc:  # noqa: BLE001 - reported to the host, which names it
        problem = f"{type(exc).__name__}: {exc}"
    if ctx is None or (problem and strict):
        wire.write_frame(reply, ["failed", problem])
        os._exit(1)
    wire.write_frame(reply, ["ready", os.getpid()])
    while True:
        try:
            batch = wire.read_frame(channel, MAX_JOB_BYTES)
        except EOFError:
            os._exit(0)
        for key, _, values in batch:
            try:
                answer = run_job(ctx, values)
            except _HostGone:
                os._exit(0)
            except Exception:  # noqa: BLE001 - the job fails, the runner goes on
                answer = ["err", "sandbox_error"]
            try:
                wipe(box)
            except Exception:  # noqa: BLE001 - a work area that cannot be emptied is not reused: answer, then exit
                wire.write_frame(reply, [key, *answer])
                os._exit(1)
            wire.write_frame(reply, [key, *answer])
