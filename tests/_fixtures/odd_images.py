"""Odd and broken image files made here, and what the trainer's own loader makes of each.

``odd_images`` writes every kind of image the gate must handle (each EXIF/TIFF orientation, CMYK,
16-bit, palettes with transparency, an animated GIF, truncated JPEG/PNG/WEBP, a header claiming
40000x40000, an unsupported DDS, a WMF Pillow identifies but cannot decode, an extreme aspect ratio,
a PNG whose image-data CRC is wrong but whose stream is whole, ...). ``trainer_view`` is the truth
the gate is held to: ``transformers.image_utils.load_image`` and the image processor.
"""

from __future__ import annotations

import io
import struct
import zlib
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from PIL import Image


def _save(img: Image.Image, fmt: str, **kw: Any) -> bytes:
    buf = io.BytesIO()
    img.save(buf, fmt, **kw)
    return buf.getvalue()


def _exif(orientation: int) -> bytes:
    exif = Image.Exif()
    exif[0x0112] = orientation
    return exif.tobytes()


def _chunk(kind: bytes, data: bytes, crc: int | None = None) -> bytes:
    crc = zlib.crc32(kind + data) if crc is None else crc
    return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", crc)


def _png(width: int, height: int, raw: bytes, *, idat_crc: int | None = None, zdata: bytes | None = None) -> bytes:
    ihdr = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    body = zlib.compress(raw) if zdata is None else zdata
    return b"\x89PNG\r\n\x1a\n" + _chunk(b"IHDR", ihdr) + _chunk(b"IDAT", body, idat_crc) + _chunk(b"IEND", b"")


def odd_image_bytes() -> dict[str, bytes]:
    """File name -> bytes of every odd image (see the module docstring)."""
    rng = np.random.default_rng(7)
    photo = Image.fromarray(rng.integers(0, 255, (60, 90, 3), dtype=np.uint8), "RGB")
    out: dict[str, bytes] = {}
    for o in range(1, 9):
        out[f"jpeg_orientation_{o}.jpg"] = _save(photo, "JPEG", quality=90, exif=_exif(o))
        out[f"tiff_orientation_{o}.tif"] = _save(photo, "TIFF", tiffinfo={274: o}, compression="tiff_lzw")
    out["tiff_g4_orientation_6.tif"] = _save(photo.convert("1"), "TIFF", tiffinfo={274: 6}, compression="group4")
    out["png_orientation_6.png"] = _save(photo, "PNG", exif=_exif(6))
    out["webp_orientation_8.webp"] = _save(photo, "WEBP", exif=_exif(8))
    jpeg, png, webp = _save(photo, "JPEG", quality=90), _save(photo, "PNG"), _save(photo, "WEBP")
    out["truncated.jpg"] = jpeg[: len(jpeg) * 6 // 10]
    out["truncated.png"] = png[: len(png) * 6 // 10]
    out["truncated.webp"] = webp[: len(webp) * 6 // 10]
    out["cmyk.jpg"] = _save(photo.convert("CMYK"), "JPEG", quality=90)
    out["gray16.png"] = _save(Image.fromarray((np.arange(48 * 64).reshape(48, 64) * 20).astype(np.uint16)), "PNG")
    palette = photo.quantize(16)
    palette.info["transparency"] = 0
    out["palette_transparent.png"] = _save(palette, "PNG", transparency=0)
    out["gray_alpha.png"] = _save(photo.convert("LA"), "PNG")
    frames = [photo, photo.rotate(90, expand=False)]
    out["animated.gif"] = _save(frames[0], "GIF", save_all=True, append_images=frames[1:], duration=50)
    out["progressive.jpg"] = _save(photo, "JPEG", quality=80, progressive=True)
    out["interlaced.png"] = _interlaced_png(photo)
    out["bomb_40000x40000.png"] = _png(40000, 40000, b"\x00" * 64)
    out["extreme_aspect_1x300.png"] = _save(Image.new("RGB", (300, 1), (10, 20, 30)), "PNG")
    raw = b"".join(b"\x00" + bytes(range(30)) * 3 for _ in range(20))  # 30x20 RGB rows, filter 0
    out["png_bad_idat_crc.png"] = _png(30, 20, raw, idat_crc=0x12345678)  # the stream is whole: it decodes
    out["png_short_stream.png"] = _png(30, 20, raw, zdata=zlib.compress(raw)[:-9])  # valid CRCs, stream cut
    out["png_bad_filter.png"] = _png(30, 20, b"".join(b"\x07" + bytes(range(30)) * 3 for _ in range(20)))
    out["dds_unsupported.dds"] = (b"DDS " + struct.pack("<7I", 124, 0x1007, 64, 64, 0, 0, 0) + bytes(44)
                                  + struct.pack("<2I", 32, 0x4) + b"ABCD" + bytes(20)
                                  + struct.pack("<4I", 0x1000, 0, 0, 0) + bytes(8) + bytes(4096))
    out["identified_not_decodable.wmf"] = (b"\xd7\xcd\xc6\x9a\x00\x00" + struct.pack("<hhhhH", 0, 0, 900, 600, 1440)
                                           + bytes(6) + b"\x01\x00\x09\x00\x00\x03" + bytes(12))
    out["not_an_image.jpg"] = b"a text file with an image's name\n"
    out["empty.png"] = b""
    return out


def _interlaced_png(img: Image.Image) -> bytes:
    """An Adam7-interlaced PNG (Pillow writes none): the proof leaves it to the full decode."""
    arr = np.asarray(img.convert("RGB"))
    h, w, _ = arr.shape
    passes = ((0, 0, 8, 8), (0, 4, 8, 8), (4, 0, 8, 4), (0, 2, 4, 4), (2, 0, 4, 2), (0, 1, 2, 2), (1, 0, 2, 1))
    raw = b""
    for y0, x0, dy, dx in passes:
        sub = arr[y0::dy, x0::dx]
        if sub.size:
            raw += b"".join(b"\x00" + row.tobytes() for row in sub)
    ihdr = struct.pack(">IIBBBBB", w, h, 8, 2, 0, 0, 1)
    return b"\x89PNG\r\n\x1a\n" + _chunk(b"IHDR", ihdr) + _chunk(b"IDAT", zlib.compress(raw)) + _chunk(b"IEND", b"")


def trainer_view(path: Path, image_processor: Any) -> tuple[str, Any]:
    """What a trainer's own loading makes of a file: ``("ok", (width, height, grid))`` or ``("fail", error)``."""
    from transformers.image_utils import load_image

    try:
        img = load_image(str(path))
        grid = image_processor(images=[img], return_tensors="pt")["image_grid_thw"].tolist()[0]
    except Exception as exc:  # noqa: BLE001 - whatever the trainer would die of
        return "fail", type(exc).__name__
    return "ok", (img.width, img.height, grid)


@pytest.fixture(scope="session")
def odd_images(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A folder of the odd image files (see :func:`odd_image_bytes`)."""
    folder = tmp_path_factory.mktemp("odd-images")
    for name, data in odd_image_bytes().items():
        (folder / name).write_bytes(data)
    return folder
