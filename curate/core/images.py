"""Safe image access: header probes without decoding, and robust decoding.

Bad images never crash a stage: every failure is an :class:`ImageError` with a
short, stable ``reason`` that stages count and record:

``missing_image``, ``empty_file``, ``not_an_image``, ``truncated``,
``decompression_bomb``, ``unreadable_image``.

Handled (decoded correctly, not errors): CMYK and palette images (converted to
RGB), 16-bit and 32-bit greyscale (scaled to 8 bits), images with alpha
(composited on white), EXIF-rotated images (sizes and pixels follow the
displayed orientation).
"""

from __future__ import annotations

import contextlib
import io
import os
import warnings
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from PIL import Image, ImageOps, UnidentifiedImageError

from curate.core.formats.refs import ImageAt
from curate.core.image_headers import Header, header_of_bytes, header_of_parts, read_header
from curate.core.io import is_url, open_input

#: Images with more pixels than this are refused as decompression bombs
#: (Pillow's own error threshold; raise it with ``--max-image-pixels``).
DEFAULT_MAX_PIXELS = 2 * 89_478_485

# EXIF orientations that swap width and height when displayed.
_TRANSPOSING = {5, 6, 7, 8}
_EXIF_ORIENTATION = 0x0112


class ImageError(Exception):
    """An image that cannot be used; ``reason`` is a stable short name."""

    def __init__(self, reason: str, detail: str = "") -> None:
        super().__init__(f"{reason}: {detail}" if detail else reason)
        self.reason = reason
        self.detail = detail


@dataclass(frozen=True)
class ImageInfo:
    """What the header says about an image, in displayed orientation."""

    width: int
    height: int
    format: str
    mode: str
    orientation: int
    nbytes: int


#: A path or URL, the bytes, or an image in a tar or Parquet file known by its head (pack's length step).
ImageSource = str | os.PathLike[str] | bytes | ImageAt


#: Reasons that mean "these bytes are not a usable image"; for images carried as bytes they are ``bad_image``.
_BAD_BYTES = frozenset({"not_an_image", "unreadable_image", "empty_file"})


def _bytes_reason(exc: ImageError) -> ImageError:
    return ImageError("bad_image", f"{exc.reason}: {exc.detail}") if exc.reason in _BAD_BYTES else exc


def image_label(src: ImageSource, index: int = 0) -> str:
    """How an image is named in messages: its path, or ``image <index> (<n> bytes)``."""
    return f"image {index} ({len(src)} bytes)" if isinstance(src, (bytes, ImageAt)) else str(src)


def read_bytes(src: ImageSource) -> bytes:
    """Read an image file's bytes (a local path or an fsspec URL), mapping failures to :class:`ImageError`."""
    if isinstance(src, bytes):
        return src
    if isinstance(src, ImageAt):
        try:
            return src.read()
        except (OSError, ValueError) as exc:
            raise ImageError("image_vanished", f"{src.file}: {exc}") from None
    if is_url(src):
        try:
            with open_input(src) as fh:
                return fh.read()
        except FileNotFoundError:
            raise ImageError("missing_image", str(src)) from None
        except Exception as exc:  # fsspec back ends raise their own types
            raise ImageError("unreadable_image", f"{src}: {exc}") from None
    with file_errors(src):
        with open(src, "rb") as fh:
            return fh.read()


@contextlib.contextmanager
def file_errors(src: ImageSource, unreadable: type[OSError] = OSError) -> Iterator[None]:
    """Map the file-system failures of reading ``src`` to :class:`ImageError` reasons.

    A missing file or a folder is ``missing_image``; ``unreadable`` errors (by default
    every other ``OSError``) are ``unreadable_image``.
    """
    try:
        yield
    except FileNotFoundError:
        raise ImageError("missing_image", str(src)) from None
    except IsADirectoryError:
        raise ImageError("missing_image", f"{src} is a directory") from None
    except unreadable as exc:
        raise ImageError("unreadable_image", f"{src}: {exc.strerror or exc}") from None


def _open(data: bytes, max_pixels: int, label: str) -> Image.Image:
    if not data:
        raise ImageError("empty_file", label)
    return _pil_open(io.BytesIO(data), max_pixels, label)


def _pil_open(fh: io.BufferedIOBase, max_pixels: int, label: str) -> Image.Image:
    """Open lazily (header only), mapping every failure and oversize to an :class:`ImageError`."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", Image.DecompressionBombWarning)
            img = Image.open(fh)
    except Image.DecompressionBombError as exc:
        raise ImageError("decompression_bomb", f"{label}: {exc}") from None
    except UnidentifiedImageError:
        raise ImageError("not_an_image", label) from None
    except (OSError, ValueError, SyntaxError) as exc:
        raise ImageError("unreadable_image", f"{label}: {exc}") from None
    w, h = img.size
    if w <= 0 or h <= 0:
        raise ImageError("unreadable_image", f"{label}: size {w}x{h}")
    if w * h > max_pixels:
        raise ImageError("decompression_bomb", f"{label}: {w}x{h} pixels exceeds {max_pixels}")
    return img


def _orientation(img: Image.Image, fh: io.BufferedIOBase | None = None) -> int:
    """EXIF orientation (1..8) without decoding pixels; 1 when absent or malformed."""
    try:
        if img.format == "PNG" and fh is not None:
            exif = Image.Exif()
            raw = img.info.get("exif") or _png_exif_chunk(fh)
            if not raw:
                return 1
            exif.load(raw)
        else:
            exif = img.getexif()
        value = int(exif.get(_EXIF_ORIENTATION, 1))
        return value if value in range(1, 9) else 1
    except Exception:  # malformed EXIF is not fatal: treat as upright
        return 1


def _png_exif_chunk(fh: io.BufferedIOBase) -> bytes | None:
    """The payload of a PNG's eXIf chunk, found by walking chunk headers (pixel data is skipped, not read).

    Pillow's own ``getexif`` on a PNG decodes the whole image to reach chunks
    after the pixel data; this reads 8 bytes per chunk instead.
    """
    fh.seek(8)
    for _ in range(100_000):
        header = fh.read(8)
        if len(header) < 8:
            return None
        length = int.from_bytes(header[:4], "big")
        kind = header[4:8]
        if kind == b"eXIf":
            return fh.read(length)
        if kind == b"IEND":
            return None
        fh.seek(length + 4, io.SEEK_CUR)
    return None


def _looks_complete(fmt: str, head: bytes, tail: bytes, size: int) -> bool:
    """Cheap end-marker checks for JPEG, PNG, GIF and WEBP (truncated downloads)."""
    if fmt == "JPEG":
        return b"\xff\xd9" in tail
    if fmt == "PNG":
        return b"IEND" in tail[-4096:]
    if fmt == "GIF":
        return tail.rstrip(b"\x00").endswith(b";")
    if fmt == "WEBP" and head[:4] == b"RIFF":
        return size >= int.from_bytes(head[4:8], "little") + 8
    return True


def probe(src: ImageSource, *, max_pixels: int = DEFAULT_MAX_PIXELS, label: str | None = None) -> ImageInfo:
    """Read an image's header (never its pixels) and return its displayed size.

    For a path only the header and the last 64 KiB (end-marker check) are read,
    so the cost does not grow with the file size.

    Raises:
        ImageError: missing, empty, not an image, truncated (end marker absent),
            or a decompression bomb.
    """
    label = label or image_label(src)
    if isinstance(src, ImageAt):
        fast = header_of_parts(src.head, src.tail) if len(src) else None
        if fast is None and bytes(src.head[:3]) == b"\xff\xd8\xff":
            try:
                longer = src.longer_head()  # the frame header may lie beyond a tar member's first 16 KiB
            except OSError:
                longer = None
            fast = header_of_parts(longer, src.tail) if longer is not None else None
        if fast is not None:
            try:
                return _from_header(fast, len(src), max_pixels, label)
            except ImageError as exc:
                raise _bytes_reason(exc) from None
        src = read_bytes(src)  # not a plain JPEG or PNG: Pillow reads the whole image
    if not isinstance(src, bytes) and is_url(src):
        src = read_bytes(src)
    if isinstance(src, bytes):
        try:
            fast = header_of_bytes(src) if src else None
            if fast is not None:
                return _from_header(fast, len(src), max_pixels, label)
            return _probe_file(io.BytesIO(src), len(src), max_pixels, label)
        except ImageError as exc:
            raise _bytes_reason(exc) from None
    with file_errors(src, unreadable=PermissionError), open(src, "rb") as fh:
        size = os.fstat(fh.fileno()).st_size
        fast = read_header(src, size, fh.fileno()) if size else None
        if fast is not None:
            return _from_header(fast, size, max_pixels, label)
        return _probe_file(fh, size, max_pixels, label)


def _from_header(h: Header, size: int, max_pixels: int, label: str) -> ImageInfo:
    """An :class:`ImageInfo` from the fast JPEG/PNG header reader, with the same checks as Pillow's path."""
    if h.width * h.height > max_pixels:
        raise ImageError("decompression_bomb", f"{label}: {h.width}x{h.height} pixels exceeds {max_pixels}")
    if not h.complete:
        raise ImageError("truncated", f"{label}: {h.format} end marker missing")
    w, h_ = (h.height, h.width) if h.orientation in _TRANSPOSING else (h.width, h.height)
    return ImageInfo(width=w, height=h_, format=h.format, mode=h.mode, orientation=h.orientation, nbytes=size)


def _probe_file(fh: io.BufferedIOBase, size: int, max_pixels: int, label: str) -> ImageInfo:
    if size == 0:
        raise ImageError("empty_file", label)
    img = _pil_open(fh, max_pixels, label)
    w, h = img.size
    fmt = img.format or "unknown"
    orientation = _orientation(img, fh)
    mode = img.mode
    fh.seek(0)
    head = fh.read(8)
    fh.seek(max(0, size - (65536 if fmt == "JPEG" else 4096)))
    tail = fh.read()
    if not _looks_complete(fmt, head, tail, size):
        raise ImageError("truncated", f"{label}: {fmt} end marker missing")
    if orientation in _TRANSPOSING:
        w, h = h, w
    return ImageInfo(width=w, height=h, format=fmt, mode=mode, orientation=orientation, nbytes=size)


def _to_rgb(img: Image.Image) -> Image.Image:
    mode = img.mode
    if mode == "RGB":
        return img
    if mode in ("I;16", "I;16B", "I;16L", "I;16N", "I", "F"):
        arr = np.asarray(img, dtype=np.float64)
        lo, hi = float(arr.min()), float(arr.max())
        if mode.startswith("I;16"):
            lo, hi = 0.0, 65535.0
        scaled = np.zeros_like(arr) if hi <= lo else (arr - lo) * (255.0 / (hi - lo))
        return Image.fromarray(np.clip(scaled + 0.5, 0, 255).astype(np.uint8), "L").convert("RGB")
    if mode in ("RGBA", "LA", "PA") or (mode == "P" and "transparency" in img.info):
        rgba = img.convert("RGBA")
        background = Image.new("RGBA", rgba.size, (255, 255, 255, 255))
        return Image.alpha_composite(background, rgba).convert("RGB")
    return img.convert("RGB")


def decode(src: ImageSource, *, max_pixels: int = DEFAULT_MAX_PIXELS, label: str | None = None) -> Image.Image:
    """Decode an image fully to an upright 8-bit RGB PIL image.

    Raises:
        ImageError: as :func:`probe`, plus ``truncated`` when the pixel data ends early.
    """
    label = label or image_label(src)
    view = src.view if isinstance(src, ImageAt) else None
    data = _ViewFile(view) if view is not None else read_bytes(src)  # a Parquet cell decodes in place
    try:
        return _decode(data, max_pixels, label)
    except ImageError as exc:
        raise (_bytes_reason(exc) if isinstance(src, (bytes, ImageAt)) else exc) from None


class _ViewFile(io.RawIOBase):
    """A read-only file over a memoryview (Pillow reads from it without the image being copied first)."""

    def __init__(self, view: memoryview) -> None:
        super().__init__()
        self._view, self._pos = view, 0

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def __len__(self) -> int:
        return len(self._view)

    def read(self, n: int = -1) -> bytes:
        end = len(self._view) if n is None or n < 0 else min(len(self._view), self._pos + n)
        out = bytes(self._view[self._pos:end])
        self._pos = max(self._pos, end)
        return out

    def readinto(self, buf: Any) -> int:
        data = self.read(len(buf))
        buf[:len(data)] = data
        return len(data)

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        base = {io.SEEK_SET: 0, io.SEEK_CUR: self._pos, io.SEEK_END: len(self._view)}[whence]
        self._pos = max(0, base + offset)
        return self._pos

    def tell(self) -> int:
        return self._pos


def _decode(data: bytes | _ViewFile, max_pixels: int, label: str) -> Image.Image:
    img = _open(data, max_pixels, label) if isinstance(data, bytes) else _pil_open(data, max_pixels, label)
    try:
        img.load()
        ImageOps.exif_transpose(img, in_place=True)  # upright, without a copy of an image that already is
        return _to_rgb(img)
    except Image.DecompressionBombError as exc:
        raise ImageError("decompression_bomb", f"{label}: {exc}") from None
    except (OSError, ValueError, SyntaxError) as exc:
        text = str(exc)
        reason = "truncated" if "truncated" in text.lower() or "premature" in text.lower() else "unreadable_image"
        raise ImageError(reason, f"{label}: {text}") from None


def file_extension(info_format: str, path: str | bytes | None = None) -> str:
    """A file extension for an image format (used when storing original bytes)."""
    known = {"JPEG": "jpg", "PNG": "png", "WEBP": "webp", "GIF": "gif", "BMP": "bmp", "TIFF": "tif"}
    if info_format in known:
        return known[info_format]
    if path and isinstance(path, str):
        suffix = Path(path).suffix.lower().lstrip(".")
        if suffix.isalnum():
            return suffix
    return "img"
