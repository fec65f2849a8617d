"""Image headers that claim more pixels than their bytes can hold are refused before a decoder allocates the image
(``truncated`` when the file ends early, ``unreadable_image`` when it is whole: its header lies); true files at the edge of what the bytes can hold (flat colours, 1-bit, an optimised grey JPEG) pass."""

from __future__ import annotations

import io
import struct
import zlib

import pytest
from PIL import Image

from curate.core.image_headers import JPEG_PIXELS_PER_BYTE, claim_too_large
from curate.core.images import ImageError, check, decode


def _save(img: Image.Image, fmt: str, **kw: object) -> bytes:
    buf = io.BytesIO()
    img.save(buf, fmt, **kw)
    return buf.getvalue()


def _png_claiming(width: int, height: int) -> bytes:
    data = bytearray(_save(Image.new("RGB", (64, 64), (1, 2, 3)), "PNG"))
    struct.pack_into(">II", data, 16, width, height)
    struct.pack_into(">I", data, 29, zlib.crc32(bytes(data[12:29])))  # a valid CRC: only the size lies
    return bytes(data)


def _jpeg_claiming(width: int, height: int, **kw: object) -> bytes:
    data = bytearray(_save(Image.new("RGB", (64, 64), (1, 2, 3)), "JPEG", **kw))
    sof = data.find(b"\xff\xc2" if kw.get("progressive") else b"\xff\xc0")
    struct.pack_into(">HH", data, sof + 5, height, width)
    return bytes(data)


@pytest.mark.parametrize("make, said", [(_png_claiming, "a 10000x10000 PNG needs 300,000,000 bytes of pixels"),
                                        (_jpeg_claiming, "a 10000x10000 JPEG needs more than its")])
def test_a_size_the_bytes_cannot_hold_is_refused_before_decoding(make, said) -> None:
    whole = make(10000, 10000)
    cut = whole[:-20]  # without its end marker
    for data, reason in ((whole, "unreadable_image"), (cut, "truncated")):
        for gate in (check, decode):
            with pytest.raises(ImageError) as err:
                gate(data)
            assert err.value.reason == reason and said in err.value.detail, err.value.detail


def test_true_files_at_the_edge_pass() -> None:
    flat = _save(Image.new("RGB", (3000, 3000), (200, 10, 10)), "PNG", compress_level=9)
    one_bit = _save(Image.new("1", (4000, 4000), 1), "PNG", optimize=True)
    grey = _save(Image.new("L", (2000, 2000), 128), "JPEG", quality=1, optimize=True)
    assert 3000 * 3000 * 3 / len(flat) > 500 and 2000 * 2000 / len(grey) > JPEG_PIXELS_PER_BYTE * 0.9
    for data in (flat, one_bit, grey):
        assert claim_too_large(data) is None
        assert check(data).width in (3000, 4000, 2000)
    progressive = _jpeg_claiming(10000, 10000, progressive=True)  # end-of-band runs: left to the pixel limit
    assert claim_too_large(progressive) is None
