"""The audit hook of the code sandbox: a second layer inside the program's own process.

The operating system's sandbox (bubblewrap's namespaces, seccomp, resource limits) is what
holds; this hook refuses the obvious escapes early and by name: process creation, sockets,
ctypes, memory maps, writes outside the work folder, reads outside it and the standard
library, and the introspection calls (``gc`` referrers, tracing) that could reach the hook's
own state. Python-level hooks can be bypassed (``dir_fd`` arguments, for one, are not
checked), which is why it is not the only layer. Turned off with ``CURATE_CODE_AUDIT_HOOK=0``
(tests do, to show the OS layer holds alone).
"""

from __future__ import annotations

import os
import sys


def install(workdir: str, read_roots: list[str]) -> None:
    """Add the hook: writes only under ``workdir``, reads there and under ``read_roots``.

    It uses only functions captured here (C functions and exact ``str`` methods), never code
    the program could replace, and it refuses path arguments that are not plain
    ``str``/``bytes`` (a ``pathlib`` object or a ``str`` subclass could run the program's code
    inside the hook).
    """
    getcwd, lstat, readlink, s_islnk = os.getcwd, os.lstat, os.readlink, __import__("stat").S_ISLNK
    _type, _str, _bytes, _int, _len, _any = type, str, bytes, int, len, any
    write_flags = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_APPEND

    def resolve(path):
        if _type(path) is _bytes:
            path = path.decode("utf-8", "surrogateescape")
        if _type(path) is not _str or "\x00" in path:
            return None
        if not path.startswith("/"):
            path = getcwd() + "/" + path
        pending = path.split("/")
        pending.reverse()
        out = []
        hops = 0
        while pending:
            part = pending.pop()
            if part == "" or part == ".":
                continue
            if part == "..":
                if out:
                    out.pop()
                continue
            candidate = "/" + "/".join(out) + ("/" if out else "") + part
            try:
                mode = lstat(candidate).st_mode
            except OSError:
                out.append(part)
                continue
            if s_islnk(mode):
                hops += 1
                if hops > 40:
                    return None
                target = readlink(candidate)
                if target.startswith("/"):
                    out = []
                more = target.split("/")
                more.reverse()
                pending.extend(more)
            else:
                out.append(part)
        return "/" + "/".join(out) + "/"

    work = resolve(workdir)
    roots = tuple(resolve(r) for r in read_roots) + (work,)
    denied = frozenset((
        "os.fork", "os.forkpty", "os.posix_spawn", "os.spawn", "os.exec", "os.system", "os.kill",
        "os.killpg", "os.symlink", "os.link", "os.chown", "os.setxattr", "os.removexattr", "os.putenv",
        "os.unsetenv", "subprocess.Popen", "pty.spawn", "socket.__new__", "socket.connect", "socket.bind",
        "socket.sendto", "socket.sendmsg", "socket.getaddrinfo", "socket.gethostbyname",
        "socket.gethostbyname_ex", "socket.gethostbyaddr", "ctypes.dlopen", "ctypes.dlsym",
        "ctypes.dlsym/handle", "ctypes.cdata", "ctypes.cdata/buffer", "ctypes.call_function",
        "ctypes.addressof", "ctypes.string_at", "ctypes.wstring_at", "gc.get_objects",
        "gc.get_referrers", "gc.get_referents", "sys._current_frames", "sys.setprofile", "sys.settrace",
        "cpython._PySys_ClearAuditHooks", "mmap.__new__", "sys.addaudithook", "code.__new__",
        "function.__new__", "_posixsubprocess.fork_exec",
    ))
    modules = frozenset(("ctypes", "_ctypes", "_posixsubprocess", "socket", "_socket", "subprocess",
                         "multiprocessing", "_multiprocessing", "mmap", "pty", "ssl", "_ssl", "select",
                         "_xxsubinterpreters", "_xxinterpchannels"))
    path_events = frozenset(("os.remove", "os.rmdir", "os.mkdir", "os.chmod", "os.truncate", "os.utime",
                             "os.chdir", "os.rename", "shutil.rmtree", "shutil.move", "shutil.copyfile",
                             "shutil.copytree", "shutil.chown", "os.chflags", "os.mkfifo", "os.mknod"))
    list_events = frozenset(("os.listdir", "os.scandir", "glob.glob", "glob.glob/2"))

    def inside(path, prefixes):
        if _type(path) is _int:
            return True
        p = resolve(path)
        return p is not None and p.startswith(prefixes)

    def hook(event, args):
        if event == "open":
            path, mode, flags = (args + (None, None, None))[:3]
            if path is None or _type(path) is _int:
                return
            writing = (_type(mode) is _str and _any(c in mode for c in "wax+")) or (
                _type(flags) is _int and flags & write_flags)
            if not inside(path, (work,) if writing else roots):
                raise PermissionError("sandbox: file access outside the work folder refused")
        elif event in denied:
            raise PermissionError("sandbox: " + event + " refused")
        elif event == "import":
            name = args[0] if _len(args) else None
            if _type(name) is not _str or name.split(".")[0] in modules:
                raise ImportError("sandbox: import refused")
        elif event in path_events:
            for a in args[:2]:
                if _type(a) is _str or _type(a) is _bytes or not (a is None or _type(a) is _int):
                    if not inside(a, (work,)):
                        raise PermissionError("sandbox: " + event + " outside the work folder refused")
        elif event in list_events:
            if _len(args) and args[0] is not None and not inside(args[0], roots):
                raise PermissionError("sandbox: " + event + " outside the work folder refused")

    sys.addaudithook(hook)
