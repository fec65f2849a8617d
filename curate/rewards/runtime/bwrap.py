"""Starting one code sandbox: bubblewrap's command line, the runner inside it, the host's handle.

The sandbox (``bwrap``, the Debian/Ubuntu/Fedora package ``bubblewrap``) gets new user, mount,
PID, network, IPC, UTS and cgroup namespaces, a new session, an empty environment, uid/gid 65534,
and a file system of its own: read-only binds of ``/usr`` (the ``/bin``, ``/lib*`` links beside
it), of the interpreter's installation folder and of the runner's code
(:mod:`curate.rewards.runtime.box`, at ``/sandbox/box``), a read-only ``/dev`` holding only
:data:`DEVICES`, and one writable folder, ``/box``: a tmpfs in memory that the runner mounts itself
with a size *and* an inode limit (:data:`BOX_BYTES`, :data:`BOX_INODES`; bubblewrap's ``--size``
cannot limit inodes). For that one mount the runner starts with ``CAP_SYS_ADMIN`` in its user
namespace (one namespace: ``--dev`` and ``--disable-userns`` would nest a second one that does not
own the mounts), then drops every capability for good before it answers ``ready``; new user
namespaces stay refused by the seccomp filters (``unshare``, ``setns``, and ``clone`` for a test).
The root is read-only, and there is no ``/proc``, ``/etc``, ``/tmp`` or home folder. Every process
in it runs under the seccomp filter of :func:`.box.seccomp.runner`, and from ``ready`` on under
:func:`.box.seccomp.sandbox` too. Nothing written inside reaches the host's disk, so it does not
matter that uid 65534 inside maps to the caller (root, on a machine where curate runs as root) outside.

Inside runs the runner (:mod:`.box.runner`), as ``python -I -S -B`` with the base interpreter
(no site-packages). Without bubblewrap and with ``--trust-code`` the same runner runs directly,
on a private temporary folder, with the same per-test limits and filter but no namespaces.

Every sandbox of a process is started by one launcher thread that never ends (:func:`_launcher`):
``--die-with-parent`` kills a sandbox when the *thread* that started it ends.
"""

from __future__ import annotations

import functools
import os
import queue
import shutil
import subprocess
import sys
import tempfile
import threading
from concurrent.futures import Future
from pathlib import Path
from typing import Any

from curate.rewards.runtime.box import seccomp, wire
from curate.rewards.runtime.workers import Worker

BOX = "/box"
BOX_BYTES = 64 * 1024 * 1024
#: Files, folders and links the work folder may hold at once (an inode costs kernel memory that no size limit counts).
BOX_INODES = 2048
#: The device nodes of the sandbox's ``/dev`` (bound from the host, read-only).
DEVICES = ("/dev/null", "/dev/zero", "/dev/full", "/dev/random", "/dev/urandom")
MAX_REPLY_BYTES = 16 * 1024 * 1024
REPLY_TIMEOUT = 30.0
_CODE = Path(__file__).resolve().parent / "box"
_SYSTEM = ("/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32")
_launch_lock = threading.Lock()
_launches: tuple[int, queue.SimpleQueue] | None = None  # (pid, queue of the launcher thread)


class Channel:
    """The host's end of a runner's stdin and stdout: :mod:`.box.wire` frames, read one at a time."""

    def __init__(self, reads: int, writes: int) -> None:
        self.reads = reads
        self.writes = writes

    def fileno(self) -> int:
        """The descriptor to wait on for the runner's next frame."""
        return self.reads

    def send(self, obj: Any) -> None:
        """Send one frame (lists of tuples go as JSON arrays)."""
        wire.write_frame(self.writes, obj)

    def recv(self) -> Any:
        """The next frame, lists as tuples (``("ready", pid)``, ``(key, status, value)``).

        Raises:
            EOFError: the runner closed its end or sent something that is not a whole, small frame.
        """
        value = wire.read_frame(self.reads, MAX_REPLY_BYTES, REPLY_TIMEOUT)
        return tuple(value) if isinstance(value, list) else value

    def poll(self, timeout: float = 0.0) -> bool:
        """Whether a frame (or the end) can be read within ``timeout`` seconds."""
        import select

        return bool(select.select([self.reads], [], [], timeout)[0])

    def close(self) -> None:
        """Close both ends (the runner then sees the end of its input and exits)."""
        for fd in (self.reads, self.writes):
            try:
                os.close(fd)
            except OSError:
                pass


class SandboxWorker(Worker):
    """A running sandbox: its process, channel and, when it runs without bubblewrap, its folder."""

    __slots__ = ("proc", "folder")

    def __init__(self, proc: subprocess.Popen, channel: Channel, folder: str | None) -> None:
        super().__init__(proc.pid, channel)  # type: ignore[arg-type]  (a Channel acts as a Connection)
        self.proc = proc
        self.folder = folder

    def kill(self) -> None:
        """Kill the sandbox (bubblewrap takes everything inside with it), reap it, remove its folder."""
        super().kill()
        try:
            self.proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            pass
        if self.proc.stderr is not None:
            self.proc.stderr.close()
        if self.folder is not None:
            shutil.rmtree(self.folder, ignore_errors=True)


def interpreter() -> str:
    """The base interpreter (a virtual environment's ``python`` resolved to the one it was made from)."""
    return os.path.realpath(getattr(sys, "_base_executable", None) or sys.executable)


def _interpreter_folders() -> list[str]:
    """Folders the interpreter needs besides ``/usr``: its installation and standard library."""
    exe = interpreter()
    found = {os.path.realpath(p) for p in (sys.base_prefix, sys.base_exec_prefix)}
    found.add(os.path.dirname(os.path.dirname(exe)))
    keep = sorted(p for p in found if p not in ("/", "/usr") and not p.startswith("/usr/"))
    return [p for p in keep if not any(p != q and p.startswith(q + "/") for q in keep)]


def command(bwrap: str, seccomp_fd: int | None, strict: bool = True) -> list[str]:
    """The bubblewrap command line of one sandbox (``seccomp_fd``: the filter to read, if any)."""
    cmd = [bwrap, "--unshare-all", "--unshare-user", "--die-with-parent", "--new-session", "--cap-add", "CAP_SYS_ADMIN",
           "--clearenv", "--setenv", "PATH", "/usr/bin:/bin", "--setenv", "LANG", "C.UTF-8", "--setenv", "HOME", BOX,
           "--uid", "65534", "--gid", "65534", "--hostname", "sandbox", "--ro-bind", "/usr", "/usr"]
    for path in _SYSTEM:
        if os.path.islink(path):
            cmd += ["--symlink", os.readlink(path), path]
        elif os.path.isdir(path):
            cmd += ["--ro-bind", path, path]
    for folder in _interpreter_folders():
        cmd += ["--ro-bind", folder, folder]
    cmd += ["--ro-bind", str(_CODE), "/sandbox/box", "--tmpfs", "/dev"]
    for device in DEVICES:
        if os.path.exists(device):
            cmd += ["--dev-bind", device, device]
    cmd += ["--remount-ro", "/dev", "--size", str(64 * 1024), "--tmpfs", BOX, "--remount-ro", "/", "--chdir", BOX]
    if seccomp_fd is not None:
        cmd += ["--seccomp", str(seccomp_fd)]
    return cmd + _runner("/sandbox", BOX, strict, (BOX_BYTES, BOX_INODES))


def _runner(code_parent: str, box: str, strict: bool, mount: tuple[int, int] | None = None) -> list[str]:
    source = (f"import sys; sys.path.insert(0, {code_parent!r}); from box.runner import main; "
              f"main({box!r}, {strict!r}, {mount!r})")
    return [interpreter(), "-I", "-S", "-B", "-c", source]


def start(bwrap: str | None) -> SandboxWorker:
    """Start one sandbox with ``bwrap`` (None: the runner alone, for trusted code); it says ``ready`` when up.

    The process is started by this process's launcher thread (:func:`_launcher`), whatever thread calls.

    Raises:
        OSError: the program cannot be started (for example bubblewrap is not installed).
    """
    future: Future[SandboxWorker] = Future()
    _launcher().put((functools.partial(_launch, bwrap), future))
    try:
        return future.result()
    except BaseException:  # interrupted while waiting: a sandbox started meanwhile is not left running
        future.add_done_callback(lambda f: f.exception() is None and f.result().kill())
        raise


def _launcher() -> queue.SimpleQueue:
    """The queue of this process's launcher thread (started on first use, and again in a forked child).

    ``bwrap --die-with-parent`` (which :meth:`SandboxWorker.kill` relies on: killing bubblewrap takes the
    runner and its test with it) is the kernel's parent-death signal, and to the kernel a process's parent
    is the *thread* that forked it: a sandbox started by a thread that then ends (a pool's refill or
    warm-up thread, a server's request thread retired when idle) is killed (SIGKILL) at that moment, with
    its job if it has one. Every sandbox is therefore started by one thread that never ends.
    """
    global _launches
    with _launch_lock:
        if _launches is None or _launches[0] != os.getpid():
            jobs: queue.SimpleQueue = queue.SimpleQueue()
            threading.Thread(target=_serve_launches, args=(jobs,), name="curate-sandbox-launcher", daemon=True).start()
            _launches = (os.getpid(), jobs)
        return _launches[1]


def _serve_launches(jobs: queue.SimpleQueue) -> None:
    while True:
        launch, future = jobs.get()
        if future.set_running_or_notify_cancel():
            try:
                future.set_result(launch())
            except BaseException as exc:  # noqa: BLE001 - the caller's to raise; this thread must go on
                future.set_exception(exc)


def _launch(bwrap: str | None) -> SandboxWorker:
    env = {"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8"}
    if bwrap is None:
        folder = tempfile.mkdtemp(prefix="curate-code-")
        env["HOME"] = folder
        cmd, fds, seccomp_fd = _runner(str(_CODE.parent), folder, False), (), None
    else:
        folder = None
        program = seccomp.runner()
        seccomp_fd = None
        if program is not None:
            seccomp_fd, w = os.pipe()
            os.write(w, program)  # a few hundred bytes: fits in the pipe
            os.close(w)
        cmd, fds = command(bwrap, seccomp_fd), tuple(fd for fd in (seccomp_fd,) if fd is not None)
    try:
        proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                cwd=folder or "/", env=env, pass_fds=fds, start_new_session=True)
    except BaseException:
        if folder is not None:
            shutil.rmtree(folder, ignore_errors=True)
        raise
    finally:
        if seccomp_fd is not None:
            os.close(seccomp_fd)
    assert proc.stdin is not None and proc.stdout is not None
    channel = Channel(os.dup(proc.stdout.fileno()), os.dup(proc.stdin.fileno()))
    proc.stdout.close()
    proc.stdin.close()
    proc.stdin = proc.stdout = None
    return SandboxWorker(proc, channel, folder)


def start_error(worker: SandboxWorker, timeout: float) -> str | None:
    """Wait for ``worker``'s first frame: None when it is ready, else why it did not start (one line)."""
    reason = "no answer"
    try:
        if worker.conn.poll(timeout):
            msg = worker.conn.recv()
            if isinstance(msg, tuple) and msg and msg[0] == "ready":
                worker.ready = True
                return None
            reason = str(msg[1]) if isinstance(msg, tuple) and len(msg) > 1 else "an unexpected first message"
    except (EOFError, OSError) as exc:
        reason = str(exc) or type(exc).__name__
    if worker.proc.poll() is not None or reason in ("channel closed", "no answer"):
        try:
            worker.proc.wait(timeout=2)
        except subprocess.TimeoutExpired:
            pass
        err = worker.proc.stderr.read(4096).decode("utf-8", "replace").strip() if worker.proc.stderr else ""
        if err:
            reason = err.splitlines()[-1]
    return reason
