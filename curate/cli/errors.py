"""One line for an ``OSError`` that reaches the command line (an output that cannot be written)."""

from __future__ import annotations

import errno
import os
import re

_TMP = re.compile(r"^\.(?P<name>.+)\.[^.]+\.tmp$")  # curate.core.io.atomic_open's temporary names

_ADVICE = {
    errno.ENOSPC: "no space left on the device; free some space (or choose another --out) and rerun "
                  "(finished shards are kept)",
    errno.EDQUOT: "disk quota exceeded; free some space (or choose another --out) and rerun",
    errno.EFBIG: "file too large for this file system or the file size limit (ulimit -f)",
    errno.EACCES: "permission denied; choose a path you can write to",
    errno.EPERM: "operation not permitted; choose a path you can write to",
    errno.EROFS: "read-only file system; choose another path",
    errno.ENOTDIR: "a file is in the way where a folder is needed; remove it or choose another path",
    errno.EISDIR: "is a folder where a file is needed; choose a file path",
    errno.EEXIST: "exists already; remove it or choose another path",
    errno.ENOENT: "no such file or folder",
    errno.ENAMETOOLONG: "the name is too long",
}


def out_flag(args: list[str]) -> str | None:
    """The value of ``--out`` in a command line (None when absent)."""
    for i, arg in enumerate(args):
        if arg == "--out" and i + 1 < len(args):
            return args[i + 1]
        if arg.startswith("--out="):
            return arg.split("=", 1)[1]
    return None


def describe_os_error(exc: OSError, args: list[str]) -> str:
    """``PATH: what went wrong; what to do`` for ``exc`` (the path from the error, else ``--out``)."""
    paths = [p for p in (exc.filename2 or exc.filename,) if p is not None]
    if paths:
        path = os.fsdecode(paths[0]) if isinstance(paths[0], (str, bytes)) else str(paths[0])
        head, name = os.path.split(path)
        match = _TMP.match(name)
        paths = [os.path.join(head, match["name"]) if match else path]
    else:
        out = out_flag(args)
        paths = [f"{out} (--out)"] if out is not None else []
    where = paths[0] if paths else ""
    what = _ADVICE.get(exc.errno) if exc.errno is not None else None
    if what is None:
        what = exc.strerror or str(exc) or type(exc).__name__
    return f"{where}: {what}" if where else what
