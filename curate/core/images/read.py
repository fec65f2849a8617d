"""Bounded reads of an image's bytes: a local file, an fsspec URL, bytes, or a cell or tar member.

A path must name a regular file (a FIFO, a device such as ``/dev/zero``, a socket or a folder is
``not_a_file``, found without blocking on it) no larger than the byte limit (``too_large``, checked
before anything is read), so one record never costs more than the limit in time or memory.
"""

from __future__ import annotations

import contextlib
import errno
import os
import stat
from collections.abc import Iterator

from curate.core.formats.refs import ImageAt
from curate.core.images.errors import DEFAULT_LIMITS, ImageError, ImageLimits
from curate.core.io import is_url, url_fs

#: A path or URL, the bytes, or an image in a tar or Parquet file known by its head (pack's length step).
ImageSource = str | os.PathLike[str] | bytes | ImageAt

_PATH_ERRORS = {errno.ELOOP: "a symlink loop", errno.ENAMETOOLONG: "the path is too long"}


def image_label(src: ImageSource, index: int = 0) -> str:
    """How an image is named in messages: its path, or ``image <index> (<n> bytes)``."""
    if isinstance(src, (bytes, ImageAt)):
        return f"image {index} ({len(src)} bytes)"
    text = os.fsdecode(src) if isinstance(src, (str, bytes, os.PathLike)) else str(src)
    return text if len(text) <= 300 else text[:200] + f"... ({len(text)} characters)"


@contextlib.contextmanager
def file_errors(src: ImageSource, unreadable: type[OSError] = OSError) -> Iterator[None]:
    """Map the file-system failures of opening or reading ``src`` to :class:`ImageError` reasons.

    A missing file is ``missing_image``; a folder ``not_a_file``; a NUL in the path, a symlink loop or
    a path too long ``invalid_path``; ``unreadable`` errors (by default every other ``OSError``)
    ``unreadable_image``.
    """
    label = image_label(src)
    try:
        yield
    except FileNotFoundError:
        raise ImageError("missing_image", label) from None
    except IsADirectoryError:
        raise ImageError("not_a_file", f"{label} is a folder") from None
    except ValueError as exc:  # "embedded null byte"
        raise ImageError("invalid_path", f"{label}: {exc}") from None
    except OSError as exc:
        if exc.errno in _PATH_ERRORS:
            raise ImageError("invalid_path", f"{label}: {_PATH_ERRORS[exc.errno]}") from None
        if isinstance(exc, unreadable):
            raise ImageError("unreadable_image", f"{label}: {exc.strerror or exc}") from None
        raise


def _check_size(size: int, limits: ImageLimits, label: str) -> None:
    if size > limits.max_bytes:
        raise ImageError("too_large", f"{label}: {size:,} bytes, more than the limit of {limits.max_bytes:,} "
                                      "(raise --max-image-bytes to accept it)")


def read_bytes(src: ImageSource, limits: ImageLimits = DEFAULT_LIMITS) -> bytes | memoryview:
    """An image's bytes, read within ``limits`` (a Parquet cell still held comes as a view, not copied).

    Raises:
        ImageError: ``missing_image``, ``not_a_file``, ``invalid_path``, ``too_large``,
            ``unreadable_image`` or ``image_vanished`` (a tar member that changed since it was listed).
    """
    label = image_label(src)
    if isinstance(src, bytes):
        _check_size(len(src), limits, label)
        return src
    if isinstance(src, ImageAt):
        _check_size(len(src), limits, label)
        if src.held is not None:
            return src.held
        try:
            return src.read()
        except (OSError, ValueError) as exc:
            raise ImageError("image_vanished", f"{src.file}: {exc}") from None
    if is_url(src):
        return _read_url(os.fspath(src), limits, label)
    with file_errors(src):
        fd = os.open(src, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
        try:
            st = os.fstat(fd)
            if not stat.S_ISREG(st.st_mode):
                kind = ("a FIFO" if stat.S_ISFIFO(st.st_mode) else "a device" if stat.S_ISCHR(st.st_mode)
                        or stat.S_ISBLK(st.st_mode) else "a socket" if stat.S_ISSOCK(st.st_mode) else "a folder"
                        if stat.S_ISDIR(st.st_mode) else "not a regular file")
                raise ImageError("not_a_file", f"{label} is {kind}")
            _check_size(st.st_size, limits, label)
            return _read_fd(fd, st.st_size, limits, label)
        finally:
            os.close(fd)


def _read_fd(fd: int, size: int, limits: ImageLimits, label: str) -> bytes:
    """The file's bytes; a file that grew past the limit while read is ``too_large``."""
    chunks, total = [], 0
    want = size + 1  # one byte more: a file that grew since fstat is noticed
    while True:
        chunk = os.read(fd, max(want - total, 1 << 16))
        if not chunk:
            break
        chunks.append(chunk)
        total += len(chunk)
        if total > limits.max_bytes:
            _check_size(total, limits, label)
    return chunks[0] if len(chunks) == 1 else b"".join(chunks)


def _read_url(url: str, limits: ImageLimits, label: str) -> bytes:
    try:
        fs, inner = url_fs(url)
        size = fs.size(inner)
        if size is not None:
            _check_size(int(size), limits, label)
        with fs.open(inner, "rb") as fh:
            data = fh.read(limits.max_bytes + 1)
    except FileNotFoundError:
        raise ImageError("missing_image", label) from None
    except ImageError:
        raise
    except Exception as exc:  # fsspec back ends raise their own types
        raise ImageError("unreadable_image", f"{label}: {exc}") from None
    _check_size(len(data), limits, label)
    return data
