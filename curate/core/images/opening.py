"""Opening and converting images with Pillow, every failure an :class:`~curate.core.images.errors.ImageError`.

Decoders emit warnings for odd files (TIFF tags larger than the file, EXIF they skip, sizes near the
pixel limit); they are not errors and are not printed: the gate decides, and says why, per image.
"""

from __future__ import annotations

import io
import logging
import re
import warnings
from dataclasses import dataclass
from typing import Any

import numpy as np
from PIL import Image

from curate.core.image_headers import claim_too_large
from curate.core.images.errors import ImageError, as_image_error, message_reason

_ADDRESS = re.compile(r"<[^<>]* at 0x[0-9a-fA-F]+>")
warnings.filterwarnings("ignore", category=Image.DecompressionBombWarning)
warnings.filterwarnings("ignore", category=UserWarning, module=r"PIL\.")
logging.getLogger("PIL").addHandler(logging.NullHandler())  # Pillow's log of odd files: the gate's reason says it


@dataclass(frozen=True)
class ImageInfo:
    """What the gate knows of an accepted image: its displayed size, format, mode, orientation and bytes."""

    width: int
    height: int
    format: str
    mode: str
    orientation: int
    nbytes: int


class ViewFile(io.RawIOBase):
    """A read-only file over a memoryview (Pillow reads from it without the image being copied first)."""

    def __init__(self, view: memoryview | bytes) -> None:
        super().__init__()
        self._view, self._pos = memoryview(view), 0

    def readable(self) -> bool:
        """Always readable."""
        return True

    def seekable(self) -> bool:
        """Always seekable."""
        return True

    def __len__(self) -> int:
        return len(self._view)

    def read(self, n: int | None = -1) -> bytes:
        """Up to ``n`` bytes from the current position (all that is left by default)."""
        end = len(self._view) if n is None or n < 0 else min(len(self._view), self._pos + n)
        out = bytes(self._view[self._pos:end])
        self._pos = max(self._pos, end)
        return out

    def readinto(self, buf: Any) -> int:
        """Read into ``buf``; the number of bytes read."""
        data = self.read(len(buf))
        buf[:len(data)] = data
        return len(data)

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        """Move the position."""
        base = {io.SEEK_SET: 0, io.SEEK_CUR: self._pos, io.SEEK_END: len(self._view)}[whence]
        self._pos = max(0, base + offset)
        return self._pos

    def tell(self) -> int:
        """The position."""
        return self._pos

    def read_all(self) -> memoryview:
        """The whole view (without a copy)."""
        return self._view


def as_file(data: bytes | memoryview) -> io.BufferedIOBase | ViewFile:
    """A seekable file over image bytes (a view is not copied)."""
    return io.BytesIO(data) if isinstance(data, bytes) else ViewFile(data)


def ends_early(data: Any) -> bool | None:
    """Whether image bytes visibly end before their image does: True (cut short), False (whole), None (a format
    without an end marker, where only the decoder can tell).

    JPEG: whole when an end-of-image marker (``FF D9``) follows the last start-of-scan (``FF DA``) in the last
    64 KiB (an EXIF thumbnail's own end marker comes before the main scan, so it does not count); PNG: an ``IEND``
    chunk in the last 4 KiB; GIF: the trailer ``;``; WEBP: the RIFF size the header gives.
    """
    return _ends_early(bytes(data[:16]), bytes(data[-65536:]), len(data))


def _ends_early(head: bytes, tail: bytes, size: int) -> bool | None:
    if head[:3] == b"\xff\xd8\xff":
        end = tail.rfind(b"\xff\xd9")
        return end < 0 or end < tail.rfind(b"\xff\xda")
    if head[:8] == b"\x89PNG\r\n\x1a\n":
        return b"IEND" not in tail[-4096:]
    if head[:4] == b"GIF8":
        return not tail.rstrip(b"\x00").endswith(b";")
    if head[:4] == b"RIFF" and head[8:12] == b"WEBP":
        return size < int.from_bytes(head[4:8], "little") + 8
    return None


def looks_complete(head: bytes, tail: bytes, size: int) -> bool:
    """Whether a file known by its first bytes ``head`` and last bytes ``tail`` (64 KiB for a JPEG) is not visibly
    cut short (:func:`ends_early`; True for formats without an end marker)."""
    return _ends_early(head, tail, size) is not True


def truncation(error: ImageError, data: Any, upgrade: bool = True) -> ImageError:
    """``error`` settled by the bytes where they can tell: data that visibly ends early is ``truncated`` (with
    ``upgrade``: a failure while decoding the pixels, where a cut file often reads as a broken stream); a file that
    is whole is not ``truncated``, even when the decoder ran out of data (its structure is corrupt:
    ``unreadable_image``)."""
    if error.reason not in ("unreadable_image", "truncated"):
        return error
    early = ends_early(data)
    if early and upgrade and error.reason == "unreadable_image":
        return ImageError("truncated", f"{error.detail} (the file ends early)")
    if early is False and error.reason == "truncated":
        return ImageError("unreadable_image", f"{error.detail} (the file is whole: its data is corrupt)")
    return error


def pil_open(fh: Any, max_pixels: int, label: str) -> Image.Image:
    """Open lazily (header only), mapping every failure and oversize to an :class:`ImageError`.

    Bytes no decoder recognises are ``not_an_image``; bytes whose first bytes a decoder recognises but whose header
    it then refuses are what that decoder found (:func:`recognised_failure`).
    """
    try:
        img = Image.open(fh)
    except Exception as exc:  # noqa: BLE001 - a decoder may raise anything on a crafted file
        error = as_image_error(exc, label)
        held = fh.getbuffer() if hasattr(fh, "getbuffer") else fh.read_all() if hasattr(fh, "read_all") else None
        found = recognised_failure(fh, label) if error.reason == "not_an_image" else None
        if found is not None:  # refused in its header: the decoder's message says whether it ran out of data
            raise (truncation(found, held, upgrade=False) if held is not None else found) from None
        raise (truncation(error, held) if held is not None else error) from None
    w, h = img.size
    if w <= 0 or h <= 0:
        raise ImageError("unreadable_image", f"{label}: size {w}x{h}")
    if w * h > max_pixels:
        raise ImageError("decompression_bomb", f"{label}: {w}x{h} pixels exceeds {max_pixels:,} "
                                               "(raise --max-image-pixels to accept it)")
    return img


def recognised_failure(fh: Any, label: str) -> ImageError | None:
    """What the first decoder that recognises the file's first bytes found when it then refused the file (tried as
    ``Image.open`` tries them, whose own error only says that no decoder took it); None when none recognises them.
    """
    Image.init()
    try:
        fh.seek(0)
        prefix = fh.read(16)
    except (OSError, ValueError):
        return None
    for fmt in Image.ID:
        factory, accept = Image.OPEN[fmt]
        if accept is None:
            continue
        found = accept(prefix)
        if not found or isinstance(found, str):
            continue
        try:
            fh.seek(0)
            factory(fh, "")
        except Exception as exc:  # noqa: BLE001 - the decoder's own refusal is the answer
            text = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            text = _ADDRESS.sub("", text).strip()
            return ImageError(message_reason(text), f"{label}: {fmt}: {text[:200]}")
        return None
    return None


def open_image(data: bytes | memoryview, max_pixels: int, label: str) -> Image.Image:
    """:func:`pil_open` on image bytes, the header's size then checked against the bytes
    (:func:`curate.core.image_headers.claim_too_large`) before anything is decoded: a claim the data cannot
    hold is ``truncated`` (``unreadable_image`` when the file is whole: its header lies), found without allocating
    the image."""
    img = pil_open(as_file(data), max_pixels, label)
    too_large = claim_too_large(data)
    if too_large is not None:  # cut short, or (a whole file) a header that lies: corrupt
        raise truncation(ImageError("truncated", f"{label}: {too_large}"), data, upgrade=False)
    return img


_SIXTEEN = ("I;16", "I;16B", "I;16L", "I;16N", "I", "F")


def to_rgb(img: Image.Image) -> Image.Image:
    """8-bit RGB: CMYK and palettes converted, 16/32-bit greyscale scaled, alpha composited on white."""
    mode = img.mode
    if mode == "RGB":
        return img
    if mode in _SIXTEEN:
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
