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
from typing import IO, Any

import pyarrow as pa
import pyarrow.parquet as pq

_UMASK = os.umask(0)
os.umask(_UMASK)
#: fsync every output before it is renamed into place. Off by default: a killed process loses nothing
#: that reached the page cache, and resuming relies on that; set CURATE_FSYNC=1 to also survive power loss.
_FSYNC = os.environ.get("CURATE_FSYNC", "0") not in ("", "0", "false", "no")


@contextlib.contextmanager
def atomic_open(path: str | os.PathLike[str], mode: str = "wb") -> Iterator[IO[Any]]:
    """Open a temporary file next to ``path``; rename it to ``path`` on success.

    On an exception the temporary file is removed and ``path`` is untouched.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, mode, **({} if "b" in mode else {"encoding": "utf-8"})) as fh:
            yield fh
            fh.flush()
            if _FSYNC:
                os.fsync(fh.fileno())
        os.chmod(tmp, 0o666 & ~_UMASK)  # mkstemp makes 0600 files; outputs get the usual permissions
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise


def dumps_json(obj: Any, *, indent: int | None = 2) -> str:
    """Deterministic JSON text: sorted keys, UTF-8 kept, trailing newline when indented."""
    text = json.dumps(obj, sort_keys=True, ensure_ascii=False, indent=indent, default=_json_default)
    return text + "\n" if indent is not None else text


def _json_default(obj: Any) -> Any:
    if hasattr(obj, "tolist"):
        return obj.tolist()
    if isinstance(obj, Path):
        return str(obj)
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


def write_parquet(path: str | os.PathLike[str], table: pa.Table) -> None:
    """Write a table to Parquet atomically, with settings that give identical bytes for identical data."""
    with atomic_open(path, "wb") as fh:
        pq.write_table(table, fh, compression="zstd", write_statistics=True, store_schema=True)


def file_sha256(path: str | os.PathLike[str]) -> str:
    """SHA-256 (hex) of a file's bytes, read in 1 MiB blocks."""
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()
