"""A place that may be in a bucket: paths and URLs, reading and writing at them, staging folders and locks.

* Files written atomically (a temporary name in the same folder, renamed into place) and deterministic
  serialisation (:func:`write_json`, :func:`write_parquet`), so every output appears complete or not at all.
* Paths that may be fsspec URLs (``s3://``, ``gs://``, ``file://``): :func:`as_path` for the readers,
  :func:`open_input`, :func:`path_exists`, :func:`read_text_at` / :func:`write_text_at`.
* :class:`Location`: a config's path-valued setting, local or remote, resolved where data is read or
  written (:mod:`curate.core.remote`), never before; :func:`locations` converts a config's fields.
* Staging folders: the local folder that stands for an output URL on this machine (:func:`staging_folder`,
  :func:`url_of`); the transfers themselves are :mod:`curate.core.remote`'s.
* One run per output folder: a lock file in ``OUT`` with the holder's pid and host (:func:`out_lock`).
"""

from __future__ import annotations

import atexit
import contextlib
import fcntl
import hashlib
import json
import os
import socket
import sys
import tempfile
import time
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, fields
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

from curate.core.errors import UserError

if TYPE_CHECKING:  # pyarrow is imported where a table is written: `curate --help` loads none of it
    import pyarrow as pa

_UMASK = os.umask(0)
os.umask(_UMASK)
#: fsync every output before it is renamed into place. Off by default: a killed process loses nothing
#: that reached the page cache, and resuming relies on that; set CURATE_FSYNC=1 to also survive power loss.
_FSYNC = os.environ.get("CURATE_FSYNC", "0") not in ("", "0", "false", "no")


def curate_cache(name: str) -> Path:
    """The folder (or file) ``name`` of curate's caches across runs: under ``$CURATE_CACHE``, default
    ``~/.cache/curate``."""
    base = os.environ.get("CURATE_CACHE")
    return (Path(base) if base else Path.home() / ".cache" / "curate") / name


@contextlib.contextmanager
def atomic_path(path: str | os.PathLike[str]) -> Iterator[Path]:
    """A temporary path next to ``path`` for a writer to create; renamed to ``path`` on success.

    On an exception the temporary file is removed and ``path`` is untouched.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    os.close(fd)
    try:
        yield Path(tmp)
        if _FSYNC:
            with open(tmp, "rb+") as fh:
                os.fsync(fh.fileno())
        os.chmod(tmp, 0o666 & ~_UMASK)  # mkstemp makes 0600 files; outputs get the usual permissions
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise


@contextlib.contextmanager
def atomic_open(path: str | os.PathLike[str], mode: str = "wb") -> Iterator[IO[Any]]:
    """Open a temporary file next to ``path``; rename it to ``path`` on success (see :func:`atomic_path`)."""
    with atomic_path(path) as tmp:
        with open(tmp, mode, **({} if "b" in mode else {"encoding": "utf-8"})) as fh:
            yield fh


def dumps_json(obj: Any, *, indent: int | None = 2) -> str:
    """Deterministic JSON text: sorted keys, UTF-8 kept, trailing newline when indented."""
    text = json.dumps(obj, sort_keys=True, ensure_ascii=False, indent=indent, default=_json_default)
    return text + "\n" if indent is not None else text


def _json_default(obj: Any) -> Any:
    if hasattr(obj, "tolist"):
        return obj.tolist()
    if isinstance(obj, Path) or isinstance(getattr(obj, "text", None), str):  # a Location: as given (its URL)
        return text_of(obj)
    if isinstance(obj, (set, frozenset)):
        return sorted(obj)
    raise TypeError(f"not JSON serialisable: {type(obj).__name__}")


def write_json(path: str | os.PathLike[str], obj: Any) -> None:
    """Write ``obj`` as deterministic, indented JSON, atomically."""
    with atomic_open(path, "w") as fh:
        fh.write(dumps_json(obj))


def read_json(path: str | os.PathLike[str]) -> Any:
    """Read a JSON file."""
    with open(path, encoding="utf-8") as fh:
        return json.load(fh)


def write_parquet(path: str | os.PathLike[str], table: pa.Table, **options: Any) -> None:
    """Write a table to Parquet atomically, with settings that give identical bytes for identical data.

    ``options`` (``pq.write_table`` keywords) replace the defaults: zstd, statistics, the Arrow schema stored.
    """
    import pyarrow.parquet as pq

    with atomic_path(path) as tmp:  # a path, not a Python file: Arrow writes natively, without the GIL
        pq.write_table(table, str(tmp), **{"compression": "zstd", "write_statistics": True, "store_schema": True,
                                           **options})


def file_sha256(path: str | os.PathLike[str]) -> str:
    """SHA-256 (hex) of a file's bytes, read in 1 MiB blocks."""
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


# ---------------------------------------------------------------------------
# Paths that may be fsspec URLs (s3://, gs://, file://...)
# ---------------------------------------------------------------------------

def text_of(path: str | os.PathLike[str] | Any) -> str:
    """A path, URL or :class:`Location` as text."""
    if isinstance(path, str):
        return path
    text = getattr(path, "text", None)  # a Location (remote ones have no os.fspath)
    return text if isinstance(text, str) else os.fspath(path)


def is_url(path: str | os.PathLike[str]) -> bool:
    """Whether ``path`` is an fsspec URL (``scheme://...``) rather than a local path."""
    text = text_of(path)
    return "://" in text[:32] and not text.startswith("file://")


def as_path(path: str | os.PathLike[str] | Location) -> Path | Location:
    """A :class:`~pathlib.Path` for a local path (``file://`` stripped), a remote :class:`Location` for a URL."""
    if isinstance(path, Location) and path.is_remote:
        return path
    text = text_of(path)
    if text.startswith("file://"):
        return Path(text[len("file://"):])
    return Location(text) if is_url(text) else Path(text)


def url_fs(path: str | os.PathLike[str]) -> tuple[Any, str]:
    """The fsspec filesystem and in-filesystem path of a URL (credentials from the filesystem's usual env/config)."""
    import fsspec

    text = text_of(path)
    if text.startswith(("gs://", "gcs://")):
        _quiet_gcsfs()
    fs, inner = fsspec.core.url_to_fs(text)
    _share_api_models(fs)
    return fs, inner


#: The botocore data loader of this process (the S3 API's JSON models, parsed once): a process forked from this
#: one (a pack worker) inherits it parsed, so its own S3 client starts without parsing them again.
_BOTOCORE: dict[str, Any] = {}


def _share_api_models(fs: Any) -> None:
    """Give an S3 filesystem whose session is not made yet a session whose data loader is this process's (or the
    one its parent had parsed before forking it): about 0.2 s of CPU less for a forked worker's first request.
    Other filesystems, and an S3 filesystem already connected, are left as they are (the loader of the first one
    this process sees becomes its own)."""
    if type(fs).__name__ != "S3FileSystem":
        return
    if fs.session is not None:  # made already (by s3fs, or by the code that made this filesystem): its models serve
        if "loader" not in _BOTOCORE and hasattr(fs.session, "get_component"):
            _BOTOCORE["loader"] = fs.session.get_component("data_loader")
        return
    from aiobotocore.session import AioSession

    session = AioSession(**getattr(fs, "kwargs", {}))  # what s3fs itself would make (its profile, if any)
    loader = _BOTOCORE.get("loader")
    if loader is None:
        _BOTOCORE["loader"] = session.get_component("data_loader")
    else:
        session.register_component("data_loader", loader)
    fs.session = session


def _quiet_gcsfs() -> None:
    """gcsfs logs a traceback before raising when it gives up on a request; curate reports the error
    itself in one line, so that log stays off unless the user configured the ``gcsfs`` logger."""
    import logging

    logger = logging.getLogger("gcsfs")
    if logger.level == logging.NOTSET and not logger.handlers:
        logger.setLevel(logging.CRITICAL)


def open_input(path: str | os.PathLike[str], mode: str = "rb") -> IO[Any]:
    """Open a local file or an fsspec URL for reading."""
    if is_url(path):
        fs, inner = url_fs(path)
        return fs.open(inner, mode)
    return open(as_path(path), mode, **({} if "b" in mode else {"encoding": "utf-8"}))


def input_size(path: str | os.PathLike[str]) -> int:
    """Size in bytes of a local file or an object."""
    if is_url(path):
        fs, inner = url_fs(path)
        return int(fs.size(inner))
    return os.path.getsize(as_path(path))


def input_stamp(path: str | os.PathLike[str]) -> str:
    """``size|version`` of a local file (mtime) or an object (ETag or modification time), for caches."""
    if is_url(path):
        fs, inner = url_fs(path)
        info = fs.info(inner)
        version = info.get("ETag") or info.get("etag") or info.get("LastModified") or info.get("mtime") or ""
        return f"{int(info.get('size') or 0)}|{version}"
    st = os.stat(as_path(path))
    return f"{st.st_size}|{st.st_mtime_ns}"


def path_exists(path: str | Path | Location) -> bool:
    """Whether a file or folder (a prefix holding objects) exists, on a local path or an object-store URL."""
    if is_url(path):
        fs, inner = url_fs(str(path))
        fs.invalidate_cache()  # another process (the step's verb) may have written it since
        return bool(fs.exists(inner))
    return as_path(path).exists()  # type: ignore[union-attr]


def read_text_at(path: str | Path | Location) -> str:
    """A text file's content."""
    if is_url(path):
        fs, inner = url_fs(str(path))
        return fs.cat_file(inner).decode("utf-8")
    return Path(path).read_text(encoding="utf-8")  # type: ignore[arg-type]


def write_text_at(path: str | Path | Location, text: str) -> None:
    """Write a text file (atomically when local; one PUT when remote)."""
    if is_url(path):
        fs, inner = url_fs(str(path))
        fs.pipe_file(inner, text.encode("utf-8"))
        return
    with atomic_open(Path(path), "w") as fh:  # type: ignore[arg-type]
        fh.write(text)


# ---------------------------------------------------------------------------
# Staging folders
# ---------------------------------------------------------------------------
# Staging folders: the local folder that stands for an output URL on this machine.
#
# A run writing ``--out s3://...`` works in ``$CURATE_CACHE/remote/<hash of the URL>/``
# (:mod:`curate.core.remote`); the folder names its URL in a hidden file, so every process of the
# machine (worker processes, Ray actors) knows where its files go, and a folder inside it stands for
# the same path under the URL.

#: The hidden file of a staging folder that names the URL it stands for.
URL_FILE = ".url"


def staging(url: str) -> Path:
    """The local folder that stands for ``url`` on this machine (``$CURATE_CACHE/remote/<hash>``)."""
    return curate_cache("remote") / hashlib.sha256(url.rstrip("/").encode()).hexdigest()[:16]


def staging_folder(url: str) -> Path:
    """:func:`staging` of ``url``, made, with its URL recorded in it (see :func:`url_of`)."""
    local = staging(url)
    local.mkdir(parents=True, exist_ok=True)
    mark = local / URL_FILE
    text = url.rstrip("/")
    if not mark.is_file() or mark.read_text(encoding="utf-8") != text:
        mark.write_text(text, encoding="utf-8")
    return local


def url_of(local: str | os.PathLike[str]) -> str | None:
    """The URL a staging folder (or a folder inside one) stands for, or None for an ordinary folder."""
    path = Path(local).absolute()
    try:
        rel = path.relative_to(curate_cache("remote").absolute())
    except ValueError:
        return None
    if not rel.parts:
        return None
    try:
        url = (path.parents[len(rel.parts) - 2] if len(rel.parts) > 1 else path) / URL_FILE
        text = url.read_text(encoding="utf-8").strip()
    except (OSError, ValueError):
        return None
    inner = "/".join(rel.parts[1:])
    return (f"{text}/{inner}" if inner else text) or None


# ---------------------------------------------------------------------------
# Locations
# ---------------------------------------------------------------------------
# Locations: where data is read or written, a local path or an object-store URL, as one value.
#
# A config holds every path-valued setting as a :class:`Location` (``PackConfig.out``,
# ``TagConfig``'s inputs, ``--image-root``...): it knows whether it is local or remote and is
# resolved where the data is read or written, never before:
#
# * an output folder through :func:`curate.core.remote.writing` (the folder itself, or a staging
#   folder on this machine whose shards stream to the bucket as they finish);
# * an input file through :func:`curate.core.remote.local_file` (the file itself, or a copy kept
#   in the cache), an input folder through :func:`curate.core.remote.reading`;
# * records (JSONL, Parquet, tars, images) are read where they are, local or remote, by the readers.
#
# A remote location has no local path: ``os.fspath`` of one raises ``TypeError``, so code that
# forgets to resolve it fails at once instead of writing into a folder named ``s3:``.
# :func:`locations` converts a config's fields on construction and refuses a URL, in one line
# naming the flag, for settings that must stay on this machine (a cache folder).


class Location:
    """A local path or an object-store URL (``s3://bucket/prefix``, ``gs://...``), as the user gave it.

    The one type of a place that may be in a bucket: configs hold their paths as locations, and the readers
    hold an object of a bucket as one (:func:`as_path`), with the few ``pathlib`` features they use.

    Args:
        value: a path, a URL (``file://`` URLs are local paths) or another location.
    """

    __slots__ = ("text",)

    def __init__(self, value: str | os.PathLike[str] | Location) -> None:
        if isinstance(value, Location):
            text = value.text
        else:
            text = os.fspath(value)
        if text.startswith("file://"):
            text = text[len("file://"):]
        self.text = text.rstrip("/") if is_url(text) else text

    @property
    def is_remote(self) -> bool:
        """Whether the data lives in object storage."""
        return is_url(self.text)

    @property
    def url(self) -> str:
        """The URL of a remote location (no trailing slash).

        Raises:
            ValueError: the location is local.
        """
        if not self.is_remote:
            raise ValueError(f"{self.text} is a local path, not a URL")
        return self.text

    @property
    def path(self) -> Path:
        """The path of a local location.

        Raises:
            ValueError: the location is remote (resolve it with :mod:`curate.core.remote`).
        """
        if self.is_remote:
            raise ValueError(f"{self.text} is in object storage: resolve it where it is read or written")
        return Path(self.text)

    def __fspath__(self) -> str:
        if self.is_remote:
            raise TypeError(f"{self.text} is in object storage and has no local path: resolve it where it is read "
                            "or written (curate.core.remote)")
        return self.text

    def __str__(self) -> str:
        return self.text

    def __repr__(self) -> str:
        return f"Location({self.text!r})"

    def __eq__(self, other: object) -> bool:
        if isinstance(other, (Location, str, os.PathLike)):
            return Location(other).text == self.text
        return NotImplemented

    def __hash__(self) -> int:
        return hash(self.text)

    def __lt__(self, other: Location) -> bool:
        return self.text < other.text

    def __reduce__(self) -> tuple[Any, tuple[str]]:
        return Location, (self.text,)

    def __truediv__(self, name: str) -> Location:
        return Location(f"{self.text}/{name}" if self.is_remote else os.path.join(self.text, name))

    @property
    def name(self) -> str:
        """The last component."""
        return self.text.rsplit("/", 1)[-1] if self.is_remote else Path(self.text).name

    @property
    def parent(self) -> Location:
        """The containing folder (prefix)."""
        return Location(self.text.rsplit("/", 1)[0] if self.is_remote else str(Path(self.text).parent))

    @property
    def suffix(self) -> str:
        """The last extension with its dot, or ''."""
        name = self.name
        return name[name.rfind("."):] if "." in name.lstrip(".") else ""

    @property
    def stem(self) -> str:
        """The name without its last extension."""
        return self.name[: len(self.name) - len(self.suffix)] if self.suffix else self.name

    def resolve(self) -> Location:
        """A URL is absolute already; a local path made absolute."""
        return self if self.is_remote else Location(Path(self.text).resolve())


def as_location(value: str | os.PathLike[str] | Location | None) -> Location | None:
    """``value`` as a :class:`Location` (None stays None)."""
    return None if value is None else Location(value)


def shown(value: str | os.PathLike[str] | Location) -> str:
    """How a location is named to users: the URL for a remote one, the path as given otherwise.

    A staging folder of :mod:`curate.core.remote` is named by the URL it stands for.
    """
    if isinstance(value, Location):
        return value.text
    text = os.fspath(value)
    return url_of(text) or text


def _convert(value: Any) -> Any:
    if value is None or isinstance(value, Location):
        return value
    if isinstance(value, (list, tuple)):
        return tuple(Location(v) for v in value)
    if isinstance(value, Mapping):
        return {k: Location(v) for k, v in value.items()}
    return Location(value)


def _each(value: Any) -> Iterable[Location]:
    if value is None:
        return ()
    if isinstance(value, tuple):
        return value
    if isinstance(value, dict):
        return value.values()
    return (value,)


def locations(config: Any, remote: Mapping[str, str] = {}, local: Mapping[str, str] = {}) -> None:  # noqa: B006
    """Turn the path-valued fields of a (frozen) config dataclass into :class:`Location` values, in place.

    Args:
        config: the dataclass instance (called from its ``__post_init__``).
        remote: field name → flag, for settings that may be local or in a bucket.
        local: field name → flag, for settings that must be on this machine's disk (a cache).

    Raises:
        UserError: a URL given for a local-only setting, naming its flag.
    """
    names = {f.name for f in fields(config)}
    for name, flag in {**remote, **local}.items():
        assert name in names, f"{type(config).__name__} has no field {name}"
        value = _convert(getattr(config, name))
        object.__setattr__(config, name, value)
        if name in local:
            for loc in _each(value):
                if loc.is_remote:
                    raise UserError(f"{flag} {loc}: must be a folder on this machine's disk, not in object "
                                    "storage; give a local path")


# ---------------------------------------------------------------------------
# Locks
# ---------------------------------------------------------------------------
# One run per output folder: a lock file in ``OUT`` with the holder's pid and host.
#
# :func:`out_lock` (used by :func:`curate.executors.run_stage`, so every stage holds
# it) creates ``OUT/.curate.lock``, takes an exclusive ``flock`` on it and writes the
# holder's pid, host, start time and command into it. The operating system drops a
# ``flock`` when its process dies, however it dies, so:
#
# * a second run into a folder whose lock is held stops at once with one line naming
#   the holder (:class:`OutputLocked`, whatever its settings);
# * a lock file left by a killed run is stale: the next run takes it over and says
#   so on stderr, naming the dead holder.
#
# The lock is re-entrant within a process. Library callers hold it for the scope of
# each stage; the command line (:func:`held_for_command`) keeps it from the first stage
# until the verb ends, so the driver's own steps between stages are covered too.
# The file is removed when the lock is released. Paths with a URL scheme (object
# storage) are not locked.

LOCK_NAME = ".curate.lock"


class OutputLocked(UserError):
    """Another live run holds the output folder."""


@dataclass
class _Held:
    fd: int
    depth: int


_HELD: dict[Path, _Held] = {}
_KEEP = False


@contextlib.contextmanager
def held_for_command() -> Iterator[None]:
    """Keep every lock taken inside the block until the block ends (the command line's mode).

    A verb then holds its ``--out`` from its first stage to its last line, including the
    driver's own steps between stages; nested use keeps the outer block's scope.
    """
    global _KEEP
    outer, _KEEP = _KEEP, True
    try:
        yield
    finally:
        _KEEP = outer
        if not outer:
            for key in [k for k, h in _HELD.items() if h.depth == 0]:
                _drop(key)


def pid_alive(pid: int) -> bool:
    """Whether process ``pid`` exists on this host and has not ended (one we may not signal counts as alive; a zombie,
    ended but not yet reaped by its parent, does not)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass
    try:
        with open(f"/proc/{pid}/stat", encoding="utf-8", errors="replace") as fh:
            return fh.read().rsplit(")", 1)[-1].split()[0] != "Z"
    except (OSError, IndexError):
        return True  # no /proc (macOS): alive as far as we know


def _describe(info: dict) -> str:
    parts = [f"pid {info.get('pid', '?')} on host {info.get('host', '?')}"]
    if info.get("started"):
        parts.append(f"since {info['started']}")
    if info.get("command"):
        parts.append(f"command: {info['command']}")
    return ", ".join(parts)


def _read(fd: int) -> dict:
    os.lseek(fd, 0, os.SEEK_SET)
    raw = b""
    while chunk := os.read(fd, 65536):
        raw += chunk
    try:
        info = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, ValueError):
        return {}
    return info if isinstance(info, dict) else {}


def _open_locked(path: Path, out: Path) -> int:
    """An fd of ``path`` holding its exclusive flock; raises OutputLocked when a live process holds it."""
    for _ in range(10):
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            info = _read(fd)
            os.close(fd)
            raise OutputLocked(f"{shown(out)} is in use by another curate run ({_describe(info)}); wait for it to "
                               "finish, or use another --out") from None
        try:
            same = os.stat(path).st_ino == os.fstat(fd).st_ino
        except FileNotFoundError:
            same = False
        if same:
            return fd
        os.close(fd)  # the holder removed the file between our open and our flock: try the new one
    raise OutputLocked(f"{shown(out)}: could not take the lock {path}; another run keeps replacing it")


def acquire(out: str | os.PathLike[str]) -> None:
    """Take (or re-enter) the lock on ``out``, creating the folder; see the module docstring.

    Raises:
        OutputLocked: a live process (this host or another) holds the lock.
    """
    if "://" in str(out):
        return
    key = Path(out).resolve()
    held = _HELD.get(key)
    if held is not None:
        held.depth += 1
        return
    key.mkdir(parents=True, exist_ok=True)
    path = key / LOCK_NAME
    fd = _open_locked(path, Path(out))
    previous = _read(fd)
    if previous and previous.get("pid") != os.getpid():
        print(f"{shown(out)}: taking over the lock of a run that is no longer running ({_describe(previous)})",
              file=sys.stderr)
    info = {"pid": os.getpid(), "host": socket.gethostname(),
            "started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "command": " ".join(sys.argv)}
    data = json.dumps(info).encode()
    os.ftruncate(fd, 0)
    os.pwrite(fd, data, 0)
    _HELD[key] = _Held(fd, 1)


def release(out: str | os.PathLike[str]) -> None:
    """Leave one level of the lock on ``out``; the last level removes the file (unless kept until exit)."""
    if "://" in str(out):
        return
    key = Path(out).resolve()
    held = _HELD.get(key)
    if held is None:
        return
    held.depth = max(held.depth - 1, 0)
    if held.depth == 0 and not _KEEP:
        _drop(key)


def let_go(out: str | os.PathLike[str]) -> None:
    """Remove the lock on ``out`` now if no block of this process is inside it any more, even within
    :func:`held_for_command` (``curate run``: a finished step's folder is not left with a lock file when a
    later step is killed)."""
    if "://" in str(out):
        return
    key = Path(out).resolve()
    held_lock = _HELD.get(key)
    if held_lock is not None and held_lock.depth == 0:
        _drop(key)


def _drop(key: Path) -> None:
    held = _HELD.pop(key)
    path = key / LOCK_NAME
    try:
        if os.stat(path).st_ino == os.fstat(held.fd).st_ino:
            os.unlink(path)  # while we still hold the flock: nobody else can be inside
    except OSError:
        pass
    os.close(held.fd)


@atexit.register
def _release_all() -> None:
    for key in list(_HELD):
        _drop(key)


def _forget_in_child() -> None:
    """A forked child (e.g. a pack worker) holds none of its parent's locks: its copies of their fds are
    closed, so a lock ends with its holder even when a child outlives it (the flock stays the parent's)."""
    for held_lock in _HELD.values():
        try:
            os.close(held_lock.fd)
        except OSError:
            pass
    _HELD.clear()


os.register_at_fork(after_in_child=_forget_in_child)


def held(out: str | os.PathLike[str]) -> bool:
    """Whether this process holds the lock on ``out``."""
    return Path(out).resolve() in _HELD


@contextlib.contextmanager
def out_lock(out: str | os.PathLike[str]) -> Iterator[None]:
    """Hold the lock on ``out`` for a ``with`` block (re-entrant)."""
    acquire(out)
    try:
        yield
    finally:
        release(out)
