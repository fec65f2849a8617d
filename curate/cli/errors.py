"""One line for an ``OSError`` that reaches the command line (an output that cannot be written)."""

from __future__ import annotations

import errno
import os
import re

from curate.core.errors import from_storage

_SHORT_WRITE = re.compile(r"\d+ requested and \d+ written")  # a short write with no errno: the device is full
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


def _mount_of(path: str) -> str:
    """The mount point holding ``path`` (its nearest existing folder's)."""
    p = os.path.abspath(path.split(" (")[0])
    while not os.path.exists(p) and p != os.path.dirname(p):
        p = os.path.dirname(p)
    while not os.path.ismount(p) and p != os.path.dirname(p):
        p = os.path.dirname(p)
    return p


def _cache_folder(path: str) -> tuple[str, str] | None:
    """``(folder, what it is)`` when ``path`` lies in curate's cache (``$CURATE_CACHE``): the staging folder of an
    output URL, or the cache itself; None elsewhere."""
    from curate.core.io import curate_cache, url_of

    root = os.path.abspath(curate_cache(""))
    here = os.path.abspath(path)
    if os.path.commonpath([root, here]) != root:
        return None
    url = url_of(here)
    if url is not None:
        parts = os.path.relpath(here, os.path.join(root, "remote")).split(os.sep)
        folder = os.path.join(root, "remote", parts[0])
        return folder, f"the staging folder of {url_of(folder) or url} on this machine"
    return root, "curate's cache on this machine"


def _staging_error(code: int | None, where: str, args: list[str]) -> str | None:
    """The line for a full disk or quota under ``$CURATE_CACHE`` (a bucket's staging folder, the cache of inputs):
    it names that folder and ``CURATE_CACHE``, which moves it, never ``--out`` (a bucket has room)."""
    if code not in (errno.ENOSPC, errno.EDQUOT):
        return None
    out = out_flag(args)
    place = _cache_folder(where) if where and "://" not in where else None
    if place is None and out and "://" in out:
        from curate.core.io import staging

        place = str(staging(out.rstrip("/"))), f"the staging folder of {out.rstrip('/')} on this machine"
    if place is None:
        return None
    folder, what = place
    full = "no space left on" if code == errno.ENOSPC else "disk quota exceeded on"
    return (f"{folder}: {full} the device of {_mount_of(folder)}, which holds {what}; free some space there or set "
            "CURATE_CACHE to a folder on a disk with room (it holds the shards in flight, not the run), then rerun "
            "(finished shards are kept)")


def describe_os_error(exc: OSError, args: list[str]) -> str:
    """``PATH: what went wrong; what to do`` for ``exc`` (the path from the error, else ``--out``; a full staging
    folder of a bucket's ``--out`` is named as such, with ``CURATE_CACHE``)."""
    paths = [p for p in (exc.filename2 or exc.filename,) if p is not None]
    if paths:
        path = os.fsdecode(paths[0]) if isinstance(paths[0], (str, bytes)) else str(paths[0])
        head, name = os.path.split(path)
        match = _TMP.match(name)
        paths = [os.path.join(head, match["name"]) if match else path]
    code = exc.errno
    if code is None and _SHORT_WRITE.search(str(exc)):  # numpy's fwrite: "N requested and M written", no errno
        code = errno.ENOSPC
    staged = _staging_error(code, paths[0] if paths else "", args)
    if staged is not None:
        return staged
    if not paths:
        out = out_flag(args)
        paths = [f"{out} (--out)"] if out is not None else []
    where = paths[0] if paths else ""
    what = _ADVICE.get(code) if code is not None else None
    if code in (errno.ENOSPC, errno.EDQUOT) and (where or out_flag(args)):
        what = what.replace("the device", f"the device of {_mount_of(paths[0] if paths else str(out_flag(args)))}")
    if what is None:
        what = exc.strerror or str(exc) or type(exc).__name__
    return f"{where}: {what}" if where else what


def storage_error(exc: BaseException, args: list[str]) -> str | None:
    """One line for a failure of object storage (a server that died or refuses us), found anywhere in the chain of
    ``exc``; None when ``exc`` is not one."""
    cause = from_storage(exc)
    if cause is None:
        return None
    text = " ".join(str(cause).split())[:240] or type(cause).__name__
    out = out_flag(args)
    where = f"{out} (--out)" if out and "://" in out else "object storage"
    return (f"{where}: the storage server failed ({type(cause).__name__}: {text}); finished shards are "
            "kept: rerun the same command once it answers")
