"""Seccomp filters of the code sandbox, written as classic BPF (no library needed).

Two deny lists, each refused with ``EPERM`` (any other architecture than the table's is killed):

- :data:`SANDBOX`, for every process in the sandbox (bubblewrap loads it with ``--seccomp``):
  tracing and reading other processes (``ptrace``, ``process_vm_*``), sockets, System V and
  POSIX IPC, new namespaces and mounts, keys, BPF, perf events, ``userfaultfd``, ``io_uring``.
- :data:`PROGRAM`, added by each test's child process just before the untrusted program runs:
  the above plus new processes and threads (``fork``, ``clone``, ``execve``), signals to
  anything (``kill``, ``tgkill``, ``pidfd_*``), scheduling or limits of other processes
  (``prlimit64`` is allowed on the caller itself only), memory outside the address-space limit
  (``memfd_create``, ``memfd_secret``: a memfd's pages are not counted by ``RLIMIT_AS``), and
  choosing who gets a descriptor's I/O signal (``fcntl`` ``F_SETOWN``/``F_SETOWN_EX``/``F_SETSIG``,
  ``ioctl`` ``FIOSETOWN``/``SIOCSPGRP``, :data:`PROGRAM_ARGS`): with them a program could signal its runner.

Bubblewrap loads :data:`RUNNER` (:data:`SANDBOX` but ``mount``) before the runner starts: the runner
mounts its size- and inode-limited work folder, drops every capability, then adds :data:`SANDBOX` itself.

Numbers are per architecture (x86_64 and aarch64 here, from the kernel's ``unistd`` headers); on
any other machine :func:`program` returns ``None`` and the sandbox relies on its namespaces and
resource limits alone.
"""

from __future__ import annotations

import os
import struct

_X86_64 = {
    "ptrace": 101, "process_vm_readv": 310, "process_vm_writev": 311, "kcmp": 312, "socket": 41,
    "shmget": 29, "shmat": 30, "shmctl": 31, "shmdt": 67, "semget": 64, "semop": 65, "semctl": 66,
    "semtimedop": 220, "msgget": 68, "msgsnd": 69, "msgrcv": 70, "msgctl": 71, "mq_open": 240,
    "mq_unlink": 241, "unshare": 272, "setns": 308, "mount": 165, "umount2": 166, "pivot_root": 155,
    "chroot": 161, "open_tree": 428, "move_mount": 429, "fsopen": 430, "fsconfig": 431, "fsmount": 432,
    "fspick": 433, "mount_setattr": 442, "add_key": 248, "request_key": 249, "keyctl": 250, "bpf": 321,
    "perf_event_open": 298, "userfaultfd": 323, "io_uring_setup": 425, "io_uring_enter": 426,
    "io_uring_register": 427, "personality": 135, "name_to_handle_at": 303, "open_by_handle_at": 304,
    "process_madvise": 440, "pidfd_getfd": 438,
    "fork": 57, "vfork": 58, "clone": 56, "clone3": 435, "execve": 59, "execveat": 322, "kill": 62,
    "tkill": 200, "tgkill": 234, "rt_sigqueueinfo": 129, "rt_tgsigqueueinfo": 297, "pidfd_open": 434,
    "pidfd_send_signal": 424, "setpriority": 141, "sched_setaffinity": 203, "sched_setscheduler": 144,
    "sched_setparam": 142, "sched_setattr": 314, "ioprio_set": 251, "migrate_pages": 256, "move_pages": 279,
    "prlimit64": 302, "memfd_create": 319, "memfd_secret": 447, "fcntl": 72, "ioctl": 16,
}
_AARCH64 = {
    "ptrace": 117, "process_vm_readv": 270, "process_vm_writev": 271, "kcmp": 272, "socket": 198,
    "shmget": 194, "shmat": 196, "shmctl": 195, "shmdt": 197, "semget": 190, "semop": 193, "semctl": 191,
    "semtimedop": 192, "msgget": 186, "msgsnd": 189, "msgrcv": 188, "msgctl": 187, "mq_open": 180,
    "mq_unlink": 181, "unshare": 97, "setns": 268, "mount": 40, "umount2": 39, "pivot_root": 41,
    "chroot": 51, "open_tree": 428, "move_mount": 429, "fsopen": 430, "fsconfig": 431, "fsmount": 432,
    "fspick": 433, "mount_setattr": 442, "add_key": 217, "request_key": 218, "keyctl": 219, "bpf": 280,
    "perf_event_open": 241, "userfaultfd": 282, "io_uring_setup": 425, "io_uring_enter": 426,
    "io_uring_register": 427, "personality": 92, "name_to_handle_at": 264, "open_by_handle_at": 265,
    "process_madvise": 440, "pidfd_getfd": 438,
    "clone": 220, "clone3": 435, "execve": 221, "execveat": 281, "kill": 129, "tkill": 130, "tgkill": 131,
    "rt_sigqueueinfo": 138, "rt_tgsigqueueinfo": 240, "pidfd_open": 434, "pidfd_send_signal": 424,
    "setpriority": 140, "sched_setaffinity": 122, "sched_setscheduler": 119, "sched_setparam": 118,
    "sched_setattr": 274, "ioprio_set": 30, "migrate_pages": 238, "move_pages": 239, "prlimit64": 261,
    "memfd_create": 279, "memfd_secret": 447, "fcntl": 25, "ioctl": 29,
}
#: machine -> (AUDIT_ARCH value, syscall numbers, whether numbers with the x32 bit exist)
_ARCHES = {"x86_64": (0xC000003E, _X86_64, True), "aarch64": (0xC00000B7, _AARCH64, False)}

SANDBOX = ("ptrace", "process_vm_readv", "process_vm_writev", "kcmp", "socket", "shmget", "shmat", "shmctl", "shmdt",
           "semget", "semop", "semctl", "semtimedop", "msgget", "msgsnd", "msgrcv", "msgctl", "mq_open", "mq_unlink",
           "unshare", "setns", "mount", "umount2", "pivot_root", "chroot", "open_tree", "move_mount", "fsopen",
           "fsconfig", "fsmount", "fspick", "mount_setattr", "add_key", "request_key", "keyctl", "bpf",
           "perf_event_open", "userfaultfd", "io_uring_setup", "io_uring_enter", "io_uring_register", "personality",
           "name_to_handle_at", "open_by_handle_at", "process_madvise", "pidfd_getfd", "memfd_secret")
#: What the runner may still do when bubblewrap starts it: mount its work folder (then it adds :data:`SANDBOX`).
RUNNER = tuple(name for name in SANDBOX if name != "mount")
PROGRAM = SANDBOX + ("memfd_create", "fork", "vfork", "clone", "clone3", "execve", "execveat", "kill", "tkill",
                     "tgkill", "rt_sigqueueinfo", "rt_tgsigqueueinfo", "pidfd_open", "pidfd_send_signal", "setpriority",
                     "sched_setaffinity", "sched_setscheduler", "sched_setparam", "sched_setattr", "ioprio_set",
                     "migrate_pages", "move_pages")
#: Commands refused to a program (syscall, argument index, values): setting who gets a descriptor's I/O signal
#: (``F_SETOWN``, ``F_SETOWN_EX``, ``F_SETSIG``; ``FIOSETOWN``, ``SIOCSPGRP``) would let it signal the runner.
PROGRAM_ARGS = (("fcntl", 1, (8, 10, 15)), ("ioctl", 1, (0x8901, 0x8902)))

_LD_ABS, _JEQ, _JGE, _RET = 0x20, 0x15, 0x35, 0x06
_KILL_PROCESS, _ALLOW, _EPERM = 0x80000000, 0x7FFF0000, 0x00050000 | 1
_X32_BIT = 0x40000000


def _ins(code: int, k: int, jt: int = 0, jf: int = 0) -> bytes:
    return struct.pack("HBBI", code, jt, jf, k)


def build(names: tuple[str, ...], machine: str | None = None, self_only_prlimit: bool = False,
          args: tuple[tuple[str, int, tuple[int, ...]], ...] = ()) -> bytes | None:
    """The BPF program refusing ``names`` on ``machine`` (default: this one), or None for an unknown machine.

    ``self_only_prlimit``: refuse ``prlimit64`` unless its pid argument is 0 (the caller itself). ``args``:
    ``(syscall, index, values)`` refused when that argument's low 32 bits (an ``unsigned int`` command) is one of
    ``values``.
    """
    arch = _ARCHES.get(machine or os.uname().machine)
    if arch is None:
        return None
    audit_arch, numbers, x32 = arch
    out = [_ins(_LD_ABS, 4), _ins(_JEQ, audit_arch, 1, 0), _ins(_RET, _KILL_PROCESS), _ins(_LD_ABS, 0)]
    if x32:
        out += [_ins(_JGE, _X32_BIT, 0, 1), _ins(_RET, _EPERM)]
    for nr in sorted({numbers[n] for n in names if n in numbers}):
        out += [_ins(_JEQ, nr, 0, 1), _ins(_RET, _EPERM)]
    for name, index, values in args:
        body = [_ins(_LD_ABS, 16 + 8 * index)]
        for value in values:
            body += [_ins(_JEQ, value, 0, 1), _ins(_RET, _EPERM)]
        out += [_ins(_JEQ, numbers[name], 0, len(body))] + body + [_ins(_LD_ABS, 0)]
    if self_only_prlimit:  # pid (args[0], two 32-bit halves at offsets 16 and 20) must be 0
        out += [_ins(_JEQ, numbers["prlimit64"], 0, 5), _ins(_LD_ABS, 16), _ins(_JEQ, 0, 0, 2), _ins(_LD_ABS, 20),
                _ins(_JEQ, 0, 1, 0), _ins(_RET, _EPERM)]
    out.append(_ins(_RET, _ALLOW))
    return b"".join(out)


def sandbox() -> bytes | None:
    """The filter of every process in the sandbox (:data:`SANDBOX`)."""
    return build(SANDBOX)


def runner() -> bytes | None:
    """The filter bubblewrap loads before the runner starts (:data:`RUNNER`: it still mounts its work folder)."""
    return build(RUNNER)


def program() -> bytes | None:
    """The filter a test's child adds before the program runs (:data:`PROGRAM` and :data:`PROGRAM_ARGS`)."""
    return build(PROGRAM, self_only_prlimit=True, args=PROGRAM_ARGS)


class Installer:
    """Loads a filter into the calling process (``prctl``, through ctypes, loaded once before forking)."""

    def __init__(self) -> None:
        import ctypes

        self._ctypes = ctypes
        self._prctl = ctypes.CDLL(None, use_errno=True).prctl
        self._prctl.argtypes = [ctypes.c_int, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong]
        self._prctl.restype = ctypes.c_int

        class Program(ctypes.Structure):
            _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]

        self._program = Program

    def install(self, program: bytes) -> bool:
        """Set no-new-privileges and add ``program``; whether the kernel took it."""
        c = self._ctypes
        buf = c.create_string_buffer(program, len(program))
        prog = self._program(len(program) // 8, c.addressof(buf))
        if self._prctl(38, 1, 0, 0, 0) != 0:  # PR_SET_NO_NEW_PRIVS
            return False
        return self._prctl(22, 2, c.addressof(prog), 0, 0) == 0  # PR_SET_SECCOMP, SECCOMP_MODE_FILTER
