"""Image headers read fast (a claim of format and size, not a proof) and :class:`ImageAt`, an image known by
its header bytes and its address in a tar or a Parquet file.

Fast image-header reading for the common formats (JPEG, PNG), without Pillow.

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

Images known by their place in an input, for steps that keep an address instead of the bytes.

Pack's length step needs each image proven and sized, and where to find it again; it
reads records with ``heads=True`` (:func:`curate.core.records.read_part`), and images inside a
tar or a Parquet file come as :class:`ImageAt` instead of bytes:

* a tar member: read whole as the tar is walked (the image gate proves it decodes), then
  :meth:`ImageAt.detach` keeps only its address; :meth:`ImageAt.read` reads the member again;
* a Parquet cell: a view on the Arrow buffer of its row group (no copy); :meth:`ImageAt.read`
  copies it out.

Every other step reads records without ``heads`` and gets the image bytes themselves.
"""

from __future__ import annotations

import os
import struct
from dataclasses import dataclass
from typing import IO, Any

# Fast image-header reading for the common formats (JPEG, PNG), without Pillow.
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


#: Deflate's largest expansion (a 258-byte match costs at least 2 bits): the most raw bytes one byte of a PNG's
#: image data can stand for.
DEFLATE_MAX_RATIO = 1032
#: Pixels one byte of a sequential Huffman-coded JPEG can stand for: every 8×8 luma block costs at least 2 bits
#: (a DC code and an end-of-block code of 1 bit each), so at most 4 blocks of 64 pixels a byte.
JPEG_PIXELS_PER_BYTE = 256


def claim_too_large(data: bytes | memoryview) -> str | None:
    """Why a PNG's or a sequential JPEG's header claims more pixels than its bytes can hold, or None.

    Checked before a decoder allocates the image (Pillow allocates the whole image first): a PNG's image data
    (its ``IDAT`` chunks) inflates to at most :data:`DEFLATE_MAX_RATIO` times its size; a baseline or extended
    sequential JPEG (SOF0, SOF1) holds at most :data:`JPEG_PIXELS_PER_BYTE` pixels per byte. Other formats and
    codings (progressive, arithmetic: end-of-band runs and arithmetic codes go below a bit a block) are left to
    the pixel limit.
    """
    view = memoryview(data)
    if bytes(view[:8]) == b"\x89PNG\r\n\x1a\n" and len(view) >= 33 and bytes(view[12:16]) == b"IHDR":
        width, height, depth, color = struct.unpack_from(">IIBB", view, 16)
        channels = {0: 1, 2: 3, 3: 1, 4: 2, 6: 4}.get(color, 1)
        need = (width * height * depth * channels + 7) // 8
        held, pos = 0, 8
        while pos + 8 <= len(view):
            length = struct.unpack_from(">I", view, pos)[0]
            kind = bytes(view[pos + 4:pos + 8])
            if kind == b"IDAT":
                held += min(length, len(view) - pos - 8)
            elif kind == b"IEND":
                break
            pos += 12 + length
        if need > DEFLATE_MAX_RATIO * (held + 1):
            return (f"a {width}x{height} PNG needs {need:,} bytes of pixels, which its {held:,} bytes of image data "
                    f"cannot hold (at most {DEFLATE_MAX_RATIO}:1)")
        return None
    if bytes(view[:3]) != b"\xff\xd8\xff":
        return None
    pos = 2
    while pos + 4 <= len(view):
        if view[pos] != 0xFF:
            return None
        marker = view[pos + 1]
        if marker == 0xFF:
            pos += 1
            continue
        if marker in _NO_LENGTH:
            pos += 2
            continue
        if marker in _SOF:
            if marker not in (0xC0, 0xC1) or pos + 9 > len(view):
                return None
            height, width = struct.unpack_from(">HH", view, pos + 5)
            if width * height > JPEG_PIXELS_PER_BYTE * len(view):
                return (f"a {width}x{height} JPEG needs more than its {len(view):,} bytes (a sequential JPEG holds "
                        f"at most {JPEG_PIXELS_PER_BYTE} pixels a byte)")
            return None
        if marker == 0xDA:
            return None
        pos += 2 + struct.unpack_from(">H", view, pos + 2)[0]
    return None


# Images known by their place in an input, for steps that keep an address instead of the bytes.
def read_member(fh: IO[bytes], offset: int, size: int) -> bytes:
    """``size`` bytes of an open tar at ``offset`` (a member's data); OSError when it is shorter now."""
    fh.seek(offset)
    data = fh.read(size)
    if len(data) != size:
        raise OSError(f"member at offset {offset} is cut short ({len(data)} of {size} bytes)")
    return data


class ImageAt:
    """An image in a tar (``span`` ``[offset, size]``) or a Parquet file (``[row, column, item, size]``).

    ``head`` and ``tail`` are its first 64 KiB and last 4 KiB; ``len()`` is its size in bytes.
    """

    __slots__ = ("file", "where", "size", "head", "tail", "_data")

    def __init__(self, file: str, where: list[int], size: int, head: Any, tail: bytes, data: Any = None) -> None:
        self.file, self.where, self.size = file, where, size
        self.head, self.tail, self._data = head, tail, data

    @classmethod
    def member(cls, fh: IO[bytes], tar: str, offset: int, size: int) -> ImageAt:
        """A tar member at ``offset``, read whole from the open tar (in order: the tar is read front to back
        once); the image gate proves it decodes, and :meth:`detach` keeps only its address afterwards."""
        data = read_member(fh, offset, size)
        return cls(tar, [offset, size], size, memoryview(data)[:HEAD], data[-TAIL:], data)

    @classmethod
    def cell(cls, view: memoryview, file: str, row: int, field: int, item: int) -> ImageAt:
        """A Parquet cell: ``view`` on the Arrow buffer (kept, not copied)."""
        size = len(view)
        return cls(file, [row, field, item, size], size, view[:HEAD], bytes(view[-TAIL:]), view)

    def __len__(self) -> int:
        return self.size

    def __repr__(self) -> str:
        return f"ImageAt({self.file!r}, {self.where})"

    def span(self) -> list[int]:
        """Where the shard writer finds it again (see :mod:`packer.count`)."""
        return list(self.where)

    @property
    def held(self) -> bytes | memoryview | None:
        """The whole image when it is held (a tar member just read, a Parquet cell not yet detached), else None."""
        return self._data

    @property
    def view(self) -> memoryview | None:
        """The whole image as a view on the Arrow buffer (a Parquet cell not yet detached), else None."""
        return self._data if isinstance(self._data, memoryview) else None

    def read(self) -> bytes:
        """The image bytes (read again from the tar, or copied from the Arrow buffer).

        Raises:
            OSError: the tar is gone or shorter now; ValueError: the view was released by :meth:`detach`.
        """
        if self._data is not None:
            return bytes(self._data)
        if len(self.where) != 2:
            raise ValueError(f"{self.file} row {self.where[0]}: image no longer held (detached)")
        from curate.core.io import open_input

        with open_input(self.file) as fh:
            return read_member(fh, self.where[0], self.size)

    def detach(self) -> ImageAt:
        """The same address without the bytes held (head, tail, view): what is kept once the header is read."""
        return ImageAt(self.file, self.where, self.size, b"", b"")
