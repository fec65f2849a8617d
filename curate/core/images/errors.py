"""The image gate's reasons and limits: what can be wrong with an image, named the same in every stage.

Every failure of reading or decoding an image is an :class:`ImageError` whose ``reason`` is one of
:data:`REASONS`. :func:`reason_of` turns whatever a decoder raised into one of them, so a file gets
the same reason whichever stage met it (``pack``, ``embed``, ``recaption``, ``verify``, the loader).
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass
from typing import Any

#: Images with more pixels than this are refused as decompression bombs (Pillow's own error threshold).
DEFAULT_MAX_PIXELS = 2 * 89_478_485
#: Image files larger than this are refused before they are read (the largest real photos are tens of MB).
DEFAULT_MAX_BYTES = 256 * 1024 * 1024
#: The longer side over the shorter one beyond which the Qwen2-VL family's processor refuses an image.
MAX_ASPECT = 200.0

#: Every reason an image can be refused for, and what it means (docs/images.md's table is checked against this one).
REASONS: dict[str, str] = {
    "missing_image": "the record names an image that is not there (no such file, a null cell), or its layout "
                     "implies an image it does not carry (a caption without an image, a URL never downloaded)",
    "not_a_file": "the path is a FIFO, a device, a socket or a folder, not a regular file",
    "invalid_path": "the path cannot be opened as written (a NUL character, too long, a symlink loop)",
    "too_large": "the file has more bytes than the image byte limit",
    "empty_file": "the file or the cell holds 0 bytes",
    "not_an_image": "no decoder recognises the bytes as an image",
    "unsupported_format": "a known format this installation cannot decode (EPS without Ghostscript, WMF, "
                          "DDS/FTEX variants Pillow does not implement, ...)",
    "truncated": "the image data ends before the image does (an interrupted download)",
    "unreadable_image": "the image data is corrupt, or the file cannot be read",
    "decompression_bomb": "more pixels than the pixel limit",
    "extreme_aspect_ratio": f"the longer side is more than {MAX_ASPECT:g} times the shorter "
                            "(the Qwen2-VL processor refuses it)",
    "image_vanished": "the image changed or was deleted between two steps of a run",
}


class ImageError(Exception):
    """An image that cannot be used; ``reason`` is one of :data:`REASONS`."""

    def __init__(self, reason: str, detail: str = "") -> None:
        super().__init__(f"{reason}: {detail}" if detail else reason)
        self.reason = reason
        self.detail = detail


@dataclass(frozen=True)
class ImageLimits:
    """The bounds every image is held to: bytes read, pixels decoded, aspect ratio.

    One image then costs at most a known amount of reading and memory in every stage.
    """

    max_bytes: int = DEFAULT_MAX_BYTES
    max_pixels: int = DEFAULT_MAX_PIXELS
    max_aspect: float = MAX_ASPECT

    def settings(self) -> dict[str, Any]:
        """The limits as recorded in a stage's settings (they change which images are accepted)."""
        return asdict(self)


DEFAULT_LIMITS = ImageLimits()

#: What a decoder's message says it found, checked in this order (the first match decides, so one message has one
#: reason): a format or variant this installation cannot decode, then data that ends early. Any other failure of a
#: recognised file is corrupt data (``unreadable_image``). Whether data ended early is then checked against the
#: bytes for formats with an end marker (:func:`curate.core.images.opening.ends_early`).
MESSAGES: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("unsupported_format", ("not configured", "ghostscript", "cannot find loader", "unknown pixel mode",
                            "cannot handle", "unknown raw mode", "unrecognized mode", "unknown data organization",
                            "not supported", "unsupported", "not implemented")),
    ("truncated", ("truncated", "premature end", "not enough image data", "not enough data", "expected to read",
                   "end of file", "no more data", "unexpected end", "buffer overrun", "requires a buffer of at least")),
)


def message_reason(text: str) -> str:
    """The reason a decoder's message names (:data:`MESSAGES`; ``unreadable_image`` when none matches)."""
    low = text.lower()
    for reason, words in MESSAGES:
        if any(word in low for word in words):
            return reason
    return "unreadable_image"


def reason_of(exc: BaseException) -> str:
    """The gate's reason for an exception a decoder raised (the same text gives the same reason everywhere)."""
    from PIL import Image, UnidentifiedImageError

    if isinstance(exc, ImageError):
        return exc.reason
    if isinstance(exc, Image.DecompressionBombError):
        return "decompression_bomb"
    if isinstance(exc, UnidentifiedImageError):
        return "not_an_image"
    if isinstance(exc, NotImplementedError):
        return "unsupported_format"
    return message_reason(str(exc))


_ADDRESS = re.compile(r"<[^<>]* at 0x[0-9a-fA-F]+>")


def as_image_error(exc: BaseException, label: str) -> ImageError:
    """An :class:`ImageError` naming ``label`` for whatever a decoder raised (its text without object addresses,
    which would make the same file's detail differ from run to run)."""
    if isinstance(exc, ImageError):
        return exc
    text = _ADDRESS.sub("", str(exc).strip().splitlines()[0]).strip() if str(exc).strip() else ""
    return ImageError(reason_of(exc), f"{label}: {type(exc).__name__}{': ' + text[:200] if text else ''}")
