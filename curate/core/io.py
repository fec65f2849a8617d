"""Atomic file writes and small deterministic serialisation helpers.

Every output file of a stage appears complete or not at all: it is written to
a temporary name in the same folder and renamed into place.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

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
    """A path, URL, :class:`RemotePath` or :class:`~curate.core.location.Location` as text."""
    if isinstance(path, str):
        return path
    if isinstance(path, RemotePath):
        return path.url
    text = getattr(path, "text", None)  # a Location (remote ones have no os.fspath)
    return text if isinstance(text, str) else os.fspath(path)


def is_url(path: str | os.PathLike[str]) -> bool:
    """Whether ``path`` is an fsspec URL (``scheme://...``) rather than a local path."""
    text = text_of(path)
    return "://" in text[:32] and not text.startswith("file://")


class RemotePath:
    """The few ``pathlib`` features the readers use, for an object-store URL (``s3://b/k.parquet``)."""

    def __init__(self, url: str) -> None:
        self.url = url.rstrip("/")

    def __str__(self) -> str:
        return self.url

    def __repr__(self) -> str:
        return f"RemotePath({self.url!r})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, RemotePath) and other.url == self.url

    def __hash__(self) -> int:
        return hash(self.url)

    def __lt__(self, other: RemotePath) -> bool:
        return self.url < other.url

    def __truediv__(self, name: str) -> RemotePath:
        return RemotePath(f"{self.url}/{name}")

    @property
    def name(self) -> str:
        """The last component."""
        return self.url.rsplit("/", 1)[-1]

    @property
    def suffix(self) -> str:
        """The last extension with its dot, or ''."""
        name = self.name
        return name[name.rfind("."):] if "." in name.lstrip(".") else ""

    @property
    def stem(self) -> str:
        """The name without its last extension."""
        return self.name[: len(self.name) - len(self.suffix)] if self.suffix else self.name

    @property
    def parent(self) -> RemotePath:
        """The containing "folder" (prefix)."""
        return RemotePath(self.url.rsplit("/", 1)[0])

    def resolve(self) -> RemotePath:
        """URLs are already absolute."""
        return self


def as_path(path: str | os.PathLike[str]) -> Path | RemotePath:
    """A :class:`~pathlib.Path` for a local path (``file://`` stripped), a :class:`RemotePath` for a URL."""
    if isinstance(path, RemotePath):
        return path
    text = text_of(path)
    if text.startswith("file://"):
        return Path(text[len("file://"):])
    return RemotePath(text) if is_url(text) else Path(text)


def url_fs(path: str | os.PathLike[str]) -> tuple[Any, str]:
    """The fsspec filesystem and in-filesystem path of a URL (credentials from the filesystem's usual env/config)."""
    import fsspec

    text = text_of(path)
    if text.startswith(("gs://", "gcs://")):
        _quiet_gcsfs()
    fs, inner = fsspec.core.url_to_fs(text)
    return fs, inner


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


def path_exists(path: str | Path | RemotePath) -> bool:
    """Whether a file or folder (a prefix holding objects) exists, on a local path or an object-store URL."""
    if is_url(path):
        fs, inner = url_fs(str(path))
        fs.invalidate_cache()  # another process (the step's verb) may have written it since
        return bool(fs.exists(inner))
    return as_path(path).exists()  # type: ignore[union-attr]


def read_text_at(path: str | Path | RemotePath) -> str:
    """A text file's content."""
    if is_url(path):
        fs, inner = url_fs(str(path))
        return fs.cat_file(inner).decode("utf-8")
    return Path(path).read_text(encoding="utf-8")  # type: ignore[arg-type]


def write_text_at(path: str | Path | RemotePath, text: str) -> None:
    """Write a text file (atomically when local; one PUT when remote)."""
    if is_url(path):
        fs, inner = url_fs(str(path))
        fs.pipe_file(inner, text.encode("utf-8"))
        return
    with atomic_open(Path(path), "w") as fh:  # type: ignore[arg-type]
        fh.write(text)
