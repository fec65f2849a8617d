"""The runner's own confinement, once at its start inside bubblewrap: its work folder, its capabilities, its signals.

Bubblewrap starts the runner with ``CAP_SYS_ADMIN`` in the sandbox's user namespace, for one
reason: :func:`mount_box` mounts the work folder as a tmpfs limited in size *and* in inodes
(``nr_inodes``; bubblewrap's ``--tmpfs --size`` limits bytes only, and every empty file or folder
costs kernel memory). :func:`drop_capabilities` then empties every capability set (effective,
permitted, inheritable, ambient and the bounding set) and checks that they are empty. After that
the runner adds :func:`.seccomp.sandbox`, which refuses ``mount`` for good.

:func:`ignore_signals` makes the runner deaf to the signals a program could still aim at it;
a test's child restores them (:func:`restore_signals`) and moves to a session of its own.
"""

from __future__ import annotations

import os
import signal

MS_NOSUID, MS_NODEV, MS_NOEXEC = 2, 4, 8
_PR_CAPBSET_DROP, _PR_CAP_AMBIENT, _PR_CAP_AMBIENT_CLEAR_ALL = 24, 47, 4
_CAP_VERSION_3 = 0x20080522
#: Signals the runner ignores (the ones that can be caught); SIGKILL and SIGSTOP are kept from it by the filters.
IGNORED = tuple(s for s in (signal.SIGHUP, signal.SIGINT, signal.SIGQUIT, signal.SIGTERM, signal.SIGUSR1,
                            signal.SIGUSR2, signal.SIGALRM, signal.SIGVTALRM, signal.SIGPROF, signal.SIGIO,
                            signal.SIGURG, signal.SIGTSTP, signal.SIGTTIN, signal.SIGTTOU, signal.SIGWINCH,
                            signal.SIGXFSZ)) + tuple(range(signal.SIGRTMIN, signal.SIGRTMAX + 1))


def _libc():  # noqa: ANN202 - a ctypes library, loaded only here and only in the runner
    import ctypes

    return ctypes, ctypes.CDLL(None, use_errno=True)


def mount_box(box: str, size: int, inodes: int) -> None:
    """Mount a fresh tmpfs over ``box``: at most ``size`` bytes and ``inodes`` files, no devices, setuid or exec.

    Raises:
        OSError: the kernel refused (no ``CAP_SYS_ADMIN`` in a namespace that owns the mounts).
    """
    ctypes, libc = _libc()
    options = f"size={int(size)},nr_inodes={int(inodes)},mode=0700".encode()
    if libc.mount(b"tmpfs", os.fsencode(box), b"tmpfs", ctypes.c_ulong(MS_NOSUID | MS_NODEV | MS_NOEXEC),
                  options) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"mounting the work folder: {os.strerror(err)}")
    os.chdir(box)


def drop_capabilities() -> None:
    """Empty every capability set of this process, for good.

    Raises:
        OSError: a set could not be emptied.
    """
    ctypes, libc = _libc()
    libc.prctl.argtypes = [ctypes.c_int, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong]
    libc.prctl(_PR_CAP_AMBIENT, _PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0)
    for cap in range(64):
        libc.prctl(_PR_CAPBSET_DROP, cap, 0, 0, 0)  # EINVAL past the last capability: nothing to drop

    class Header(ctypes.Structure):
        _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]

    class Data(ctypes.Structure):
        _fields_ = [("effective", ctypes.c_uint32), ("permitted", ctypes.c_uint32), ("inheritable", ctypes.c_uint32)]

    header, data = Header(_CAP_VERSION_3, 0), (Data * 2)()
    if libc.capset(ctypes.byref(header), data) != 0:
        raise OSError(ctypes.get_errno(), "dropping the runner's capabilities")
    header, left = Header(_CAP_VERSION_3, 0), (Data * 2)()
    if libc.capget(ctypes.byref(header), left) != 0 or any(
            d.effective or d.permitted or d.inheritable for d in left):
        raise OSError("the runner still holds capabilities")


def ignore_signals() -> None:
    """Ignore :data:`IGNORED` in this process (the runner)."""
    for sig in IGNORED:
        try:
            signal.signal(sig, signal.SIG_IGN)
        except (OSError, ValueError):
            pass


def restore_signals() -> None:
    """Put :data:`IGNORED` back to their defaults, and make this process the leader of a new session (a test)."""
    for sig in IGNORED:
        try:
            signal.signal(sig, signal.SIG_DFL)
        except (OSError, ValueError):
            pass
    os.setsid()
