"""Header-only image sizes: what a file says about itself, read without its pixels.

:func:`probe` reads an image's header (for a local file: its first 64 KiB and last 4 KiB) and
returns the displayed size the header claims. It proves nothing about the pixels: the gate of
every stage is :func:`curate.core.images.check` (header + proof of decodability) or
:func:`curate.core.images.decode`. ``probe`` remains for what only needs a claim (the benchmark's
header-only baseline, quick looks at a folder).
"""

from __future__ import annotations

import io
import os

from PIL import Image

from curate.core.formats.refs import ImageAt
from curate.core.image_headers import Header, header_of_bytes, header_of_parts, read_header
from curate.core.images.errors import DEFAULT_MAX_PIXELS, ImageError
from curate.core.images.opening import ImageInfo, looks_complete, pil_open
from curate.core.images.proof import TRANSPOSING
from curate.core.images.read import ImageSource, file_errors, image_label, read_bytes
from curate.core.io import is_url


def probe(src: ImageSource, *, max_pixels: int = DEFAULT_MAX_PIXELS, label: str | None = None) -> ImageInfo:
    """Read an image's header (never its pixels) and return the displayed size it claims.

    Raises:
        ImageError: missing, empty, not an image, truncated (end marker absent), or a decompression bomb.
    """
    label = label or image_label(src)
    if isinstance(src, ImageAt):
        fast = header_of_parts(src.head, src.tail) if len(src) else None
        if fast is not None:
            return _from_header(fast, len(src), max_pixels, label)
        src = bytes(read_bytes(src))
    if not isinstance(src, bytes) and is_url(src):
        src = bytes(read_bytes(src))
    if isinstance(src, bytes):
        fast = header_of_bytes(src) if src else None
        if fast is not None:
            return _from_header(fast, len(src), max_pixels, label)
        return _probe_file(io.BytesIO(src), len(src), max_pixels, label)
    with file_errors(src, unreadable=PermissionError), open(src, "rb") as fh:
        size = os.fstat(fh.fileno()).st_size
        fast = read_header(src, size, fh.fileno()) if size else None
        if fast is not None:
            return _from_header(fast, size, max_pixels, label)
        return _probe_file(fh, size, max_pixels, label)


def _from_header(h: Header, size: int, max_pixels: int, label: str) -> ImageInfo:
    if h.width * h.height > max_pixels:
        raise ImageError("decompression_bomb", f"{label}: {h.width}x{h.height} pixels exceeds {max_pixels}")
    if not h.complete:
        raise ImageError("truncated", f"{label}: {h.format} end marker missing")
    w, h_ = (h.height, h.width) if h.orientation in TRANSPOSING else (h.width, h.height)
    return ImageInfo(width=w, height=h_, format=h.format, mode=h.mode, orientation=h.orientation, nbytes=size)


def _probe_file(fh: io.BufferedIOBase, size: int, max_pixels: int, label: str) -> ImageInfo:
    if size == 0:
        raise ImageError("empty_file", label)
    img = pil_open(fh, max_pixels, label)
    w, h = img.size
    fmt = img.format or "unknown"
    try:  # TIFF reports the displayed size already (libtiff applies the orientation when it loads)
        orientation = 1 if fmt == "TIFF" else int(img.getexif().get(0x0112, 1))
    except Exception:  # noqa: BLE001 - malformed EXIF is not fatal here: treated as upright
        orientation = 1
    orientation = orientation if 1 <= orientation <= 8 else 1
    fh.seek(0)
    head = fh.read(8)
    fh.seek(max(0, size - (65536 if fmt == "JPEG" else 4096)))
    tail = fh.read()
    if not looks_complete(head, tail, size):
        raise ImageError("truncated", f"{label}: {fmt} end marker missing")
    if orientation in TRANSPOSING:
        w, h = h, w
    return ImageInfo(width=w, height=h, format=fmt, mode=img.mode, orientation=orientation, nbytes=size)
