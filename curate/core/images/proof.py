"""Proof that an image decodes, cheaper than decoding it, for the two formats of most of the web.

* **JPEG**: its structure checked as libjpeg checks it, the entropy-coded data walked for its markers
  to the end-of-image marker (:mod:`curate.core.images.proof_jpeg`); a structure that walk does not
  vouch for is decoded at 1/8 scale (Pillow's draft mode: libjpeg still reads and Huffman-decodes the
  whole entropy-coded stream, so a broken stream fails as it would at full size).
* **PNG**: Pillow reads the chunks before the image data (as it does when it opens a file:
  their CRCs and contents checked); then every image-data chunk's CRC is checked and its zlib stream
  inflated without keeping the pixels: it must end exactly at the size the header implies, with a
  valid filter byte at the start of every row.

A proof answers "decodes" or "don't know" (None), never "broken": whatever the proof cannot vouch
for (another format, an interlaced or animated PNG, an orientation given in XMP, a failed check)
goes to the full decode, which then names the reason. So an image the proof accepts is one the
full decode accepts, and a file gets the same reason whichever path it took.
"""

from __future__ import annotations

import struct
import zlib
from dataclasses import dataclass

import numpy as np
from PIL import Image

from curate.core.images.proof_jpeg import jpeg_decodes

#: Formats a proof exists for (every other format is decoded fully).
PROVEN_FORMATS = ("JPEG", "MPO", "PNG")
#: EXIF orientations whose display swaps width and height (what ``ImageOps.exif_transpose`` does).
TRANSPOSING = (5, 6, 7, 8)
_PNG_CHANNELS = {0: 1, 2: 3, 3: 1, 4: 2, 6: 4}
_PNG_DEPTHS = {0: (1, 2, 4, 8, 16), 2: (8, 16), 3: (1, 2, 4, 8), 4: (8, 16), 6: (8, 16)}
_PNG_TEXT = (b"tEXt", b"zTXt", b"iTXt")
#: ``info`` keys from which Pillow may read an orientation other than the EXIF block's (XMP, ImageMagick).
_OTHER_ORIENTATION = ("Raw profile type exif", "XML:com.adobe.xmp", "xmp")
_EXIF_TEXT = (b"Raw profile type exif", b"XML:com.adobe.xmp")
_ANIMATION = (b"acTL", b"fcTL", b"fdAT")
_INFLATE_STEP = 1 << 20


@dataclass(frozen=True)
class Proven:
    """An image proven to decode: its stored size and the orientation its display applies."""

    width: int
    height: int
    orientation: int

    def displayed(self) -> tuple[int, int]:
        """``(width, height)`` as displayed (after the EXIF orientation)."""
        return (self.height, self.width) if self.orientation in TRANSPOSING else (self.width, self.height)


def _orientation(value: object) -> int:
    """Pillow's orientation value as ``exif_transpose`` reads it (anything but 2..8 is upright)."""
    return value if isinstance(value, int) and 1 <= value <= 8 else 1


def prove(img: Image.Image, data: bytes | memoryview) -> Proven | None:
    """Prove that ``img`` (just opened by Pillow from ``data``) decodes; None when this cannot be shown cheaply.

    ``img`` is used up (a JPEG's is loaded at reduced scale): decode again from ``data`` for pixels.
    """
    try:
        if img.format in ("JPEG", "MPO"):
            return _prove_jpeg(img, data)
        if img.format == "PNG":
            return _prove_png(img, data)
    except Exception:  # noqa: BLE001 - any doubt is for the full decode to settle, with its reason
        return None
    return None


def _prove_jpeg(img: Image.Image, data: bytes | memoryview) -> Proven | None:
    width, height = img.size
    orientation = _orientation(img.getexif().get(0x0112, 1))  # what exif_transpose reads (EXIF, then XMP)
    if jpeg_decodes(data) != (width, height):  # not a structure the walk vouches for: decode at 1/8 scale
        img.draft(None, (1, 1))  # the smallest scale libjpeg offers: every coefficient still decoded
        img.load()
    return Proven(width, height, orientation)


def _prove_png(img: Image.Image, data: bytes | memoryview) -> Proven | None:
    if img.info.get("interlace") or getattr(img, "is_animated", False):
        return None
    if any(key in img.info for key in _OTHER_ORIENTATION):
        return None
    view = memoryview(data)
    if len(view) < 33 or bytes(view[12:16]) != b"IHDR":
        return None
    width, height, depth, color, _, _, _ = struct.unpack_from(">IIBBBBB", view, 16)
    if depth not in _PNG_DEPTHS.get(color, ()):
        return None
    stride = (width * _PNG_CHANNELS[color] * depth + 7) // 8 + 1  # a filter byte, then the row
    if not _image_data_decodes(view, stride, height):
        return None
    raw = img.info.get("exif")
    orientation = 1
    if raw is not None:
        exif = Image.Exif()
        exif.load(raw)
        orientation = _orientation(exif.get(0x0112, 1))
    return Proven(width, height, orientation)


def _image_data_decodes(view: memoryview, stride: int, rows: int) -> bool:
    """Walk every chunk after the signature; inflate the image data without keeping it.

    True when the IDAT chunks are consecutive, their CRCs hold, their zlib stream ends exactly after
    ``rows * stride`` bytes with nothing after it, every row starts with a filter type 0..4, IEND is
    reached, and no chunk after the image data could change the orientation Pillow would apply.
    """
    pos, size = 8, len(view)
    inflater = zlib.decompressobj()
    produced = 0
    expected = rows * stride
    state = "before"  # before, in, after the image data
    while pos + 8 <= size:
        length, kind = struct.unpack_from(">I", view, pos)[0], bytes(view[pos + 4:pos + 8])
        end = pos + 12 + length
        if length > 0x7FFFFFFF or end > size:
            return False  # cut short: for the decoder to judge
        if kind in _ANIMATION:
            return False
        if kind == b"IDAT":
            if state == "after":
                return False
            state = "in"
            body = view[pos + 8:pos + 8 + length]
            if zlib.crc32(body, zlib.crc32(b"IDAT")) != struct.unpack_from(">I", view, pos + 8 + length)[0]:
                return False
            produced = _inflate(inflater, body, produced, stride, expected)
            if produced < 0:
                return False
        elif state == "in":
            state = "after"
        if kind == b"IEND":
            return state == "after" and produced == expected and inflater.eof and not inflater.unused_data
        if state == "after" and (kind == b"eXIf" or (kind in _PNG_TEXT and _exif_keyword(view, pos, length))):
            return False  # read by Pillow only once the pixels are loaded: let the full decode see it
        pos = end
    return False


def _exif_keyword(view: memoryview, pos: int, length: int) -> bool:
    head = bytes(view[pos + 8:pos + 8 + min(length, 80)])
    return head.split(b"\0", 1)[0] in _EXIF_TEXT


def _inflate(inflater: zlib._Decompress, body: memoryview, produced: int, stride: int, expected: int) -> int:
    """Feed one IDAT chunk; return the bytes produced so far, or -1 on a bad stream, filter byte or size."""
    pending = bytes(body)
    while pending and not inflater.eof:
        try:
            out = inflater.decompress(pending, _INFLATE_STEP)
        except zlib.error:
            return -1
        pending = inflater.unconsumed_tail
        if produced + len(out) > expected:
            return -1
        first = (-produced) % stride  # the first row start within this piece
        if first < len(out):
            filters = np.frombuffer(out, np.uint8)[first::stride]
            if filters.size and int(filters.max()) > 4:
                return -1
        produced += len(out)
    if pending or inflater.unused_data:
        return -1  # data after the end of the stream
    return produced
