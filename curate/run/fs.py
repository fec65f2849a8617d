"""The few file operations of a run folder, on a local path or an object-store URL (``s3://b/run``)."""

from __future__ import annotations

from pathlib import Path

from curate.core.io import RemotePath, as_path, atomic_open, is_url, url_fs


def exists(path: str | Path | RemotePath) -> bool:
    """Whether a file or folder (a prefix holding objects) exists."""
    if is_url(path):
        fs, inner = url_fs(str(path))
        fs.invalidate_cache()  # another process (the step's verb) may have written it since
        return bool(fs.exists(inner))
    return as_path(path).exists()  # type: ignore[union-attr]


def read_text(path: str | Path | RemotePath) -> str:
    """A text file's content."""
    if is_url(path):
        fs, inner = url_fs(str(path))
        return fs.cat_file(inner).decode("utf-8")
    return Path(path).read_text(encoding="utf-8")  # type: ignore[arg-type]


def write_text(path: str | Path | RemotePath, text: str) -> None:
    """Write a text file (atomically when local; one PUT when remote)."""
    if is_url(path):
        fs, inner = url_fs(str(path))
        fs.pipe_file(inner, text.encode("utf-8"))
        return
    with atomic_open(Path(path), "w") as fh:  # type: ignore[arg-type]
        fh.write(text)
