"""Proof that a JPEG decodes, from its structure: every segment libjpeg would refuse is checked, the
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
decode, which names the reason (:mod:`curate.core.images.proof`).
"""

from __future__ import annotations

import re
import struct

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
