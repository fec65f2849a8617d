"""Safe image probing and decoding on real files with each kind of defect."""

from __future__ import annotations

import io
import struct
import zlib
from pathlib import Path

import numpy as np
import pytest
from PIL import Image, ImageOps

from curate.core.images import ImageError, decode, probe


def jpeg_bytes(img: Image.Image, **kw) -> bytes:
    buf = io.BytesIO()
    img.save(buf, "JPEG", quality=90, **kw)
    return buf.getvalue()


def png_with_header_size(width: int, height: int) -> bytes:
    """A tiny PNG whose IHDR declares a huge size (a decompression bomb)."""
    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))
    ihdr = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr) + chunk(b"IDAT", zlib.compress(b"\x00" * 64)) + chunk(b"IEND", b"")


@pytest.fixture()
def photo() -> Image.Image:
    rng = np.random.default_rng(0)
    return Image.fromarray(rng.integers(0, 255, (60, 90, 3), dtype=np.uint8), "RGB")


def test_probe_reads_sizes_without_decoding(tmp_path: Path, photo: Image.Image) -> None:
    path = tmp_path / "a.jpg"
    path.write_bytes(jpeg_bytes(photo))
    info = probe(path)
    assert (info.width, info.height, info.format) == (90, 60, "JPEG")
    assert decode(path).size == (90, 60)


@pytest.mark.parametrize("orientation, displayed", [(1, (90, 60)), (3, (90, 60)), (6, (60, 90)), (8, (60, 90))])
def test_exif_orientation_gives_displayed_size(tmp_path: Path, photo: Image.Image, orientation: int,
                                               displayed: tuple[int, int]) -> None:
    exif = Image.Exif()
    exif[0x0112] = orientation
    path = tmp_path / "r.jpg"
    path.write_bytes(jpeg_bytes(photo, exif=exif.tobytes()))
    assert (probe(path).width, probe(path).height) == displayed
    assert decode(path).size == displayed
    with Image.open(path) as stored:  # the same pixels as Pillow's own upright copy
        assert np.array_equal(np.asarray(decode(path)), np.asarray(ImageOps.exif_transpose(stored).convert("RGB")))


def test_defects_have_stable_reasons(tmp_path: Path, photo: Image.Image) -> None:
    full = jpeg_bytes(photo)
    cases = {
        "truncated": full[: len(full) // 2],
        "empty_file": b"",
        "not_an_image": b"this is a text file, not a JPEG\n",
        "decompression_bomb": png_with_header_size(30000, 30000),
    }
    for reason, data in cases.items():
        path = tmp_path / f"{reason}.jpg"
        path.write_bytes(data)
        with pytest.raises(ImageError) as info:
            probe(path)
        assert info.value.reason == reason, (reason, info.value)
        with pytest.raises(ImageError) as info:
            decode(path)
        assert info.value.reason == reason
    with pytest.raises(ImageError) as info:
        probe(tmp_path / "nope.jpg")
    assert info.value.reason == "missing_image"
    # a stricter limit turns a large but valid image into a bomb
    ok = tmp_path / "ok.jpg"
    ok.write_bytes(full)
    with pytest.raises(ImageError, match="decompression_bomb"):
        probe(ok, max_pixels=100)


def test_cmyk_sixteen_bit_and_alpha_decode_to_rgb(tmp_path: Path, photo: Image.Image) -> None:
    cmyk = tmp_path / "cmyk.jpg"
    photo.convert("CMYK").save(cmyk, "JPEG")
    assert probe(cmyk).mode == "CMYK"
    assert decode(cmyk).mode == "RGB"
    ramp = (np.arange(64 * 32, dtype=np.uint16).reshape(32, 64) * 32).astype(np.uint16)
    deep = tmp_path / "deep.png"
    Image.fromarray(ramp).save(deep)
    assert probe(deep).mode.startswith("I")
    rgb = np.asarray(decode(deep))
    assert rgb.shape == (32, 64, 3)
    # scaled, not clipped: the ramp stays monotonic and spans more than a few grey levels
    assert rgb[..., 0].ravel()[-1] > rgb[..., 0].ravel()[0] and len(np.unique(rgb)) > 100
    rgba = tmp_path / "alpha.png"
    Image.new("RGBA", (8, 8), (255, 0, 0, 0)).save(rgba)
    assert decode(rgba).getpixel((0, 0)) == (255, 255, 255)


def test_png_exif_orientation_is_read_from_the_header(tmp_path: Path, photo: Image.Image) -> None:
    exif = Image.Exif()
    exif[0x0112] = 6
    path = tmp_path / "rot.png"
    photo.save(path, exif=exif.tobytes())
    info = probe(path)
    assert (info.width, info.height, info.orientation) == (60, 90, 6)
    assert decode(path).size == (60, 90)
