"""Fast image-header reading for the common formats (JPEG, PNG), without Pillow.

:func:`read_header` reads at most the first 64 KiB and the last 4 KiB of a file
with two ``pread`` calls and returns the stored size, the EXIF orientation and
the end-marker check, or ``None`` when the file is not a plain JPEG or PNG it
can read this way (anything unusual falls back to Pillow in
:func:`curate.core.images.probe`). Counting the image tokens of millions of images
is then bound by the file system, not by the parser.

Formats:

* JPEG: the size comes from the first start-of-frame segment (SOF0–SOF15 but
  DHT/JPG/DAC); the orientation from the TIFF data of an ``Exif`` APP1 segment;
  complete when ``FF D9`` (end of image) is in the last 4 KiB.
* PNG: the size from IHDR; the orientation from an ``eXIf`` chunk before the
  image data, or in the last 4 KiB; complete when ``IEND`` is in the last 4 KiB.
"""

from __future__ import annotations

import os
import struct
from dataclasses import dataclass

HEAD = 65536
TAIL = 4096
_SOF = frozenset(range(0xC0, 0xD0)) - {0xC4, 0xC8, 0xCC}
_NO_LENGTH = frozenset(range(0xD0, 0xD8)) | {0x01, 0xD8}
_PNG_MODES = {(0, 1): "1", (0, 8): "L", (0, 16): "I;16", (2, 8): "RGB", (2, 16): "RGB", (3, 8): "P",
              (4, 8): "LA", (6, 8): "RGBA", (6, 16): "RGBA"}


@dataclass(frozen=True)
class Header:
    """What the header says: stored size (before EXIF rotation), format, mode, orientation, completeness."""

    width: int
    height: int
    format: str
    mode: str
    orientation: int
    complete: bool


def read_header(path: str | os.PathLike[str], size: int, fd: int) -> Header | None:
    """Parse the header of an open file ``fd`` of ``size`` bytes; None to let Pillow decide."""
    head = os.pread(fd, min(HEAD, size), 0)
    tail = head[-TAIL:] if size <= HEAD else os.pread(fd, TAIL, size - TAIL)
    if head[:3] == b"\xff\xd8\xff":
        return _jpeg(head, tail)
    if head[:8] == b"\x89PNG\r\n\x1a\n":
        return _png(head, tail)
    return None


def header_of_bytes(data: bytes) -> Header | None:
    """:func:`read_header` for an image held in memory (bytes from Parquet or a tar member).

    The head is a view (no copy of the first 64 KiB); only the last 4 KiB are copied.
    """
    return header_of_parts(memoryview(data)[:HEAD], bytes(data[-TAIL:]))


def header_of_parts(head: bytes | memoryview, tail: bytes) -> Header | None:
    """:func:`read_header` from an image's first 64 KiB and last 4 KiB (the whole image when shorter)."""
    if head[:3] == b"\xff\xd8\xff":
        return _jpeg(head, tail)
    if head[:8] == b"\x89PNG\r\n\x1a\n":
        return _png(head, tail)
    return None


def _exif_orientation(tiff: bytes) -> int:
    """Orientation tag (0x0112) of IFD0 of TIFF-structured EXIF data; 1 when absent or malformed."""
    if tiff[:6] == b"Exif\x00\x00":  # some writers keep the JPEG-style prefix in a PNG eXIf chunk
        tiff = tiff[6:]
    if len(tiff) < 8 or tiff[:2] not in (b"II", b"MM"):
        return 1
    order = "<" if tiff[:2] == b"II" else ">"
    ifd = struct.unpack_from(order + "I", tiff, 4)[0]
    if ifd + 2 > len(tiff):
        return 1
    count = struct.unpack_from(order + "H", tiff, ifd)[0]
    for k in range(count):
        at = ifd + 2 + 12 * k
        if at + 12 > len(tiff):
            return 1
        tag, kind = struct.unpack_from(order + "HH", tiff, at)
        if tag == 0x0112:
            value = struct.unpack_from(order + "H", tiff, at + 8)[0] if kind == 3 else 1
            return value if 1 <= value <= 8 else 1
    return 1


def _jpeg(head: bytes, tail: bytes) -> Header | None:
    pos, n = 2, len(head)
    orientation = 1
    while pos + 4 <= n:
        if head[pos] != 0xFF:
            return None  # not at a marker: let Pillow cope with it
        marker = head[pos + 1]
        if marker == 0xFF:  # fill byte
            pos += 1
            continue
        if marker in _NO_LENGTH:
            pos += 2
            continue
        length = struct.unpack_from(">H", head, pos + 2)[0]
        if length < 2:
            return None
        if marker == 0xE1 and head[pos + 4:pos + 10] == b"Exif\x00\x00":
            orientation = _exif_orientation(head[pos + 10:pos + 2 + length])
        elif marker in _SOF:
            if pos + 10 > n:
                return None
            height, width = struct.unpack_from(">HH", head, pos + 5)
            components = head[pos + 9]
            mode = {1: "L", 3: "RGB", 4: "CMYK"}.get(components)
            if mode is None or width == 0 or height == 0:
                return None
            return Header(width, height, "JPEG", mode, orientation, b"\xff\xd9" in tail)
        elif marker == 0xDA:  # start of scan before any frame header: malformed
            return None
        pos += 2 + length
    return None  # the frame header lies beyond the first 64 KiB: Pillow reads on


def _png(head: bytes, tail: bytes) -> Header | None:
    if len(head) < 33 or head[12:16] != b"IHDR":
        return None
    width, height, depth, color = struct.unpack_from(">IIBB", head, 16)
    mode = _PNG_MODES.get((color, depth))
    if mode is None or width == 0 or height == 0:
        return None
    orientation = 1
    pos = 8
    while pos + 8 <= len(head):
        length = struct.unpack_from(">I", head, pos)[0]
        kind = head[pos + 4:pos + 8]
        if kind == b"eXIf":
            orientation = _exif_orientation(head[pos + 8:pos + 8 + length])
            break
        if kind in (b"IDAT", b"IEND"):
            at = tail.find(b"eXIf")  # an eXIf chunk after the image data sits just before IEND
            if at >= 4:
                length = struct.unpack_from(">I", tail, at - 4)[0]
                orientation = _exif_orientation(tail[at + 4:at + 4 + length])
            break
        pos += 12 + length
    return Header(width, height, "PNG", mode, orientation, b"IEND" in tail)
