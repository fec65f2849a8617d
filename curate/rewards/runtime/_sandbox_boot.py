"""Bootstrap of the code sandbox: runs as ``python -I -S -c <this file's source>``.

Reads a JSON job on stdin, locks the process down, then runs the untrusted program on
each test input and writes one JSON line per test to fd 1. It never sees the expected
outputs: the parent compares. Lock-down, in order: resource limits (CPU seconds,
address space, file size, open files, no core files, no new processes), dropping root
to ``nobody``, and an audit hook that refuses process creation, sockets, ctypes,
writes outside the job's folder, reads outside it and the standard library, and the
introspection calls (``gc`` referrers, tracing) that could reach the hook's state.
Kept free of imports outside the standard library; not imported by ``curate``.
"""

import builtins
import io
import json
import os
import resource
import sys
import sysconfig


def _limits(job):
    def cap(kind, value):
        try:
            soft, hard = resource.getrlimit(kind)
            value = value if hard == resource.RLIM_INFINITY else min(value, hard)
            resource.setrlimit(kind, (value, value if kind != resource.RLIMIT_CPU else value + 1))
        except (ValueError, OSError):
            pass

    cap(resource.RLIMIT_CPU, int(job["cpu_seconds"]))
    cap(resource.RLIMIT_AS, int(job["memory_bytes"]))
    cap(resource.RLIMIT_FSIZE, int(job["file_bytes"]))
    cap(resource.RLIMIT_NOFILE, 64)
    cap(resource.RLIMIT_CORE, 0)
    cap(resource.RLIMIT_NPROC, 0)


def _drop_root(uid):
    if os.geteuid() != 0 or uid is None:
        return
    os.setgroups([])
    os.setgid(uid)
    os.setuid(uid)


def _install_hook(workdir, read_roots):
    """Add the audit hook. It uses only functions captured here (C functions and exact
    ``str`` methods), never code the program could replace, and it refuses path
    arguments that are not plain ``str``/``bytes`` (a ``pathlib`` object or a ``str``
    subclass could run the program's code inside the hook).
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


class _Capture(io.StringIO):
    """stdout for the program, truncated at ``cap`` characters."""

    def __init__(self, cap):
        super().__init__()
        self._cap = cap
        self._used = 0

    def write(self, s):
        s = str(s)
        room = self._cap - self._used
        if room <= 0:
            return len(s)
        self._used += min(len(s), room)
        return super().write(s[:room])


def _run(job):
    code = compile(job["code"], "<solution>", "exec")
    fn_name = job["fn_name"]
    out_fd = os.dup(1)
    real_write = os.write
    dumps = json.dumps
    for i, test_input in enumerate(job["inputs"]):
        capture = _Capture(job["output_chars"])
        sys.stdin = io.StringIO(test_input)
        sys.stdout = capture
        error = None
        result = None
        namespace = {"__name__": "__main__", "__builtins__": builtins}
        try:
            exec(code, namespace)
            if job["mode"] == "function":
                fn = namespace.get(fn_name)
                if not callable(fn):
                    raise NameError(f"{fn_name} is not defined")
                result = str(fn(test_input))[: job["output_chars"]]
        except SystemExit as exc:
            if exc.code not in (None, 0):
                error = "SystemExit"
        except BaseException as exc:  # the program's own failure
            error = type(exc).__name__
        finally:
            sys.stdout = sys.__stdout__
        output = result if job["mode"] == "function" else capture.getvalue()
        line = dumps({"i": i, "out": output, "err": error}) + "\n"
        real_write(out_fd, line.encode("utf-8", "replace"))


def main():
    job = json.loads(sys.stdin.read())
    sys.stdin = io.StringIO("")
    os.chdir(job["workdir"])
    stdlib = {sysconfig.get_paths()[k] for k in ("stdlib", "platstdlib")}
    stdlib |= {os.path.dirname(os.__file__), os.path.dirname(json.__file__)}
    _limits(job)
    _drop_root(job.get("drop_to_uid"))
    _install_hook(job["workdir"], sorted(stdlib) + ["/dev/urandom", "/dev/null"])
    _run(job)
    sys.stdout.flush()
    os._exit(0)


main()
