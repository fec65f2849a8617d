"""Decodability proven without a full decode: JPEG from its structure, PNG from its CRCs and zlib stream.

Proof that a JPEG decodes, from its structure: every segment libjpeg would refuse is checked, the
entropy-coded data is only walked for its markers.

libjpeg stops a decode (``error_exit``: what Pillow raises) only on what its headers say: lengths,
precision, sizes, sampling factors, component ids, quantisation and Huffman tables (indices, counts,
over-full codes, DC symbols over 15), scan parameters, tables used before they are defined, unknown
markers, a file that ends before its end marker. Damaged entropy-coded data is a warning to libjpeg:
the decode goes on (the pixels are wrong, as they would be for the trainer). So a file whose every
segment passes these checks and that reaches its end-of-image marker decodes, and checking it costs
a walk over the markers (C-speed search through the scans), not a Huffman decode of every
coefficient.

Only the plain structures are vouched for: baseline, extended sequential and progressive Huffman
JPEGs with 1, 3 or 4 components. Anything else (arithmetic coding, lossless, hierarchical, DNL,
12-bit, unusual scan parameters, fractional sampling) answers "don't know" and goes to the full
decode, which names the reason (:mod:`curate.core.image_proof`).

Proof that an image decodes, cheaper than decoding it, for the two formats of most of the web.

* **JPEG**: its structure checked as libjpeg checks it, the entropy-coded data walked for its markers
  to the end-of-image marker (:mod:`curate.core.image_proof`); a structure that walk does not
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

import re
import struct
import zlib
from dataclasses import dataclass

import numpy as np
from PIL import Image

# Proof that a JPEG decodes, from its structure: every segment libjpeg would refuse is checked, the entropy-coded data
# is only walked for its markers.
_MARKER = re.compile(rb"\xff[\x01-\xcf\xd8-\xfe]")  # a marker in entropy-coded data (not RSTn, stuffing or fill)
_SOF = (0xC0, 0xC1, 0xC2)  # baseline, extended sequential, progressive (Huffman)
_TABLES_AND_MISC = {0xC4, 0xDB, 0xDD, 0xFE} | set(range(0xE0, 0xF0))  # DHT, DQT, DRI, COM, APPn
_MAX_DIMENSION = 65500
_MAX_BLOCKS_IN_MCU = 10


class _Doubt(Exception):
    """The structure is not one this module vouches for."""


class _State:
    def __init__(self) -> None:
        self.frame: tuple[int, int, dict[int, tuple[int, int, int]]] | None = None  # height, width, id -> (h, v, tq)
        self.progressive = False
        self.quant: set[int] = set()
        self.huffman: set[tuple[int, int]] = set()  # (class 0 DC / 1 AC, index)
        self.scans = 0


def jpeg_decodes(view: memoryview | bytes) -> tuple[int, int] | None:
    """``(width, height)`` of a JPEG proven to decode (see the module docstring), else None."""
    data = bytes(view) if isinstance(view, memoryview) else view
    try:
        return _walk(data)
    except (_Doubt, struct.error, IndexError):
        return None


def _walk(data: bytes) -> tuple[int, int] | None:
    if data[:2] != b"\xff\xd8":
        raise _Doubt
    state, pos, size = _State(), 2, len(data)
    while True:
        while pos < size and data[pos] == 0xFF and pos + 1 < size and data[pos + 1] == 0xFF:
            pos += 1  # fill bytes before a marker
        if pos + 2 > size or data[pos] != 0xFF:
            raise _Doubt
        marker = data[pos + 1]
        if marker == 0xD9:  # end of image
            if state.frame is None or not state.scans:
                raise _Doubt
            height, width, _ = state.frame
            return width, height
        if pos + 4 > size:
            raise _Doubt
        length = struct.unpack_from(">H", data, pos + 2)[0]
        body = data[pos + 4:pos + 2 + length]
        if length < 2 or len(body) != length - 2:
            raise _Doubt
        pos += 2 + length
        if marker in _SOF:
            _frame(state, marker, body)
        elif marker == 0xDA:
            _scan(state, body)
            found = _MARKER.search(data, pos)  # the next marker after the entropy-coded data
            if found is None:
                raise _Doubt  # cut: the decoder would run out of data
            pos = found.start()
        elif marker == 0xC4:
            _huffman(state, body)
        elif marker == 0xDB:
            _quant(state, body)
        elif marker == 0xDD:
            if length != 4:
                raise _Doubt
        elif marker not in _TABLES_AND_MISC:
            raise _Doubt  # another frame type, DNL, DAC, a reserved marker...


def _frame(state: _State, marker: int, body: bytes) -> None:
    if state.frame is not None or state.scans:
        raise _Doubt
    precision, height, width, count = struct.unpack_from(">BHHB", body, 0)
    if precision != 8 or not (0 < height <= _MAX_DIMENSION and 0 < width <= _MAX_DIMENSION):
        raise _Doubt
    if count not in (1, 3, 4) or len(body) != 6 + 3 * count:
        raise _Doubt
    comps: dict[int, tuple[int, int, int]] = {}
    for k in range(count):
        cid, hv, tq = body[6 + 3 * k], body[7 + 3 * k], body[8 + 3 * k]
        h, v = hv >> 4, hv & 15
        if cid in comps or not (1 <= h <= 4 and 1 <= v <= 4) or tq > 3:
            raise _Doubt
        comps[cid] = (h, v, tq)
    max_h, max_v = max(c[0] for c in comps.values()), max(c[1] for c in comps.values())
    if any(max_h % h or max_v % v for h, v, _ in comps.values()):
        raise _Doubt  # fractional sampling: libjpeg refuses it
    if count > 1 and sum(h * v for h, v, _ in comps.values()) > _MAX_BLOCKS_IN_MCU:
        raise _Doubt
    state.frame, state.progressive = (height, width, comps), marker == 0xC2


def _scan(state: _State, body: bytes) -> None:
    if state.frame is None:
        raise _Doubt
    _, _, comps = state.frame
    n = body[0]
    if not 1 <= n <= 4 or len(body) != 4 + 2 * n:
        raise _Doubt
    ids = [body[1 + 2 * k] for k in range(n)]
    tables = [(body[2 + 2 * k] >> 4, body[2 + 2 * k] & 15) for k in range(n)]
    ss, se, ah, al = body[1 + 2 * n], body[2 + 2 * n], body[3 + 2 * n] >> 4, body[3 + 2 * n] & 15
    if len(set(ids)) != n or any(cid not in comps for cid in ids) or any(td > 3 or ta > 3 for td, ta in tables):
        raise _Doubt
    if n > 1 and sum(comps[cid][0] * comps[cid][1] for cid in ids) > _MAX_BLOCKS_IN_MCU:
        raise _Doubt
    if any(comps[cid][2] not in state.quant for cid in ids):
        raise _Doubt  # a quantisation table used before it is defined
    if not state.progressive:
        if (ss, se, ah, al) != (0, 63, 0, 0):
            raise _Doubt
        needed = [(0, td) for td, _ in tables] + [(1, ta) for _, ta in tables]
    elif ss == 0:  # a DC scan
        if se != 0 or al > 13 or (ah and ah != al + 1):
            raise _Doubt
        needed = [(0, td) for td, _ in tables] if ah == 0 else []
    else:  # an AC scan: one component
        if n != 1 or not ss <= se <= 63 or al > 13 or (ah and ah != al + 1):
            raise _Doubt
        needed = [(1, ta) for _, ta in tables]
    if any(t not in state.huffman for t in needed):
        raise _Doubt
    state.scans += 1


def _quant(state: _State, body: bytes) -> None:
    pos = 0
    while pos < len(body):
        pq, tq = body[pos] >> 4, body[pos] & 15
        if pq > 1 or tq > 3:
            raise _Doubt
        pos += 1 + (128 if pq else 64)
        if pos > len(body):
            raise _Doubt
        state.quant.add(tq)


def _huffman(state: _State, body: bytes) -> None:
    pos = 0
    while pos < len(body):
        tc, th = body[pos] >> 4, body[pos] & 15
        if tc > 1 or th > 3 or pos + 17 > len(body):
            raise _Doubt
        counts = body[pos + 1:pos + 17]
        total = sum(counts)
        symbols = body[pos + 17:pos + 17 + total]
        if total > 256 or len(symbols) != total or (tc == 0 and any(s > 15 for s in symbols)):
            raise _Doubt
        code = 0  # canonical codes: each length's codes must fit in that many bits, never all ones
        for bits, count in enumerate(counts, start=1):
            code += count
            if count and code >= 1 << bits:
                raise _Doubt
            code <<= 1
        state.huffman.add((tc, th))
        pos += 17 + total


# Proof that an image decodes, cheaper than decoding it, for the two formats of most of the web.
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
