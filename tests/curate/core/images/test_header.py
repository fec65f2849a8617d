"""The fast JPEG/PNG header reader agrees with Pillow on every variant, and falls back when it should."""

from __future__ import annotations

import io
import os
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from curate.core.image_headers import read_header
from curate.core.images import DEFAULT_MAX_PIXELS, ImageError, probe, _probe_file


def pillow_probe(path: Path) -> tuple:
    with open(path, "rb") as fh:
        try:
            info = _probe_file(fh, os.fstat(fh.fileno()).st_size, DEFAULT_MAX_PIXELS, str(path))
        except ImageError as exc:
            return ("error", exc.reason)
    return info.width, info.height, info.format, info.mode, info.orientation


def fast_probe(path: Path) -> tuple:
    try:
        info = probe(path)
    except ImageError as exc:
        return ("error", exc.reason)
    return info.width, info.height, info.format, info.mode, info.orientation


def exif_bytes(orientation: int) -> bytes:
    exif = Image.Exif()
    exif[0x0112] = orientation
    return exif.tobytes()


def variants(folder: Path) -> list[Path]:
    rng = np.random.default_rng(0)
    rgb = Image.fromarray(rng.integers(0, 255, (37, 91, 3), dtype=np.uint8))
    out = []

    def save(name: str, img: Image.Image, **kw) -> None:
        path = folder / name
        img.save(path, **kw)
        out.append(path)

    for o in range(1, 9):
        save(f"o{o}.jpg", rgb, exif=exif_bytes(o))
        save(f"o{o}.png", rgb, exif=exif_bytes(o))
    save("progressive.jpg", rgb, progressive=True)
    save("grey.jpg", rgb.convert("L"))
    save("cmyk.jpg", rgb.convert("CMYK"))
    save("big_icc.jpg", rgb, icc_profile=b"\0" * 200_000)  # frame header beyond 64 KiB: Pillow's path
    save("palette.png", rgb.convert("P"))
    save("rgba.png", rgb.convert("RGBA"))
    save("grey16.png", Image.fromarray((np.arange(37 * 91, dtype=np.uint16) * 17).reshape(37, 91)))
    save("grey.png", rgb.convert("L"))
    save("bilevel.png", rgb.convert("1"))
    save("image.gif", rgb.convert("P"))
    save("image.webp", rgb)
    # an eXIf chunk after the image data, just before IEND
    save("plain.png", rgb)
    png = (folder / "plain.png").read_bytes()
    data = exif_bytes(6)
    import struct
    import zlib
    chunk = struct.pack(">I", len(data)) + b"eXIf" + data + struct.pack(">I", zlib.crc32(b"eXIf" + data))
    iend = png.rfind(b"IEND") - 4
    late = folder / "late_exif.png"
    late.write_bytes(png[:iend] + chunk + png[iend:])
    out.append(late)
    full = (folder / "o1.jpg").read_bytes()
    (folder / "cut.jpg").write_bytes(full[: len(full) * 2 // 3])
    (folder / "cut.png").write_bytes(png[: len(png) * 2 // 3])
    out += [folder / "cut.jpg", folder / "cut.png"]
    return out


def test_fast_reader_agrees_with_pillow(tmp_path: Path) -> None:
    paths = variants(tmp_path)
    for path in paths:
        assert fast_probe(path) == pillow_probe(path), path.name
    # the EXIF orientation is really read: 5..8 swap the displayed size
    assert fast_probe(tmp_path / "o6.jpg")[:2] == (37, 91) and fast_probe(tmp_path / "o3.jpg")[:2] == (91, 37)
    assert fast_probe(tmp_path / "late_exif.png")[4] == 6
    assert fast_probe(tmp_path / "cut.jpg") == ("error", "truncated")


@pytest.mark.parametrize("name, handled", [("o1.jpg", True), ("o1.png", True), ("big_icc.jpg", False),
                                           ("image.gif", False), ("image.webp", False)])
def test_which_files_take_the_fast_path(tmp_path: Path, name: str, handled: bool) -> None:
    variants(tmp_path)
    path = tmp_path / name
    with open(path, "rb") as fh:
        assert (read_header(path, os.fstat(fh.fileno()).st_size, fh.fileno()) is not None) == handled
