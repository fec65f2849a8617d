"""The image gate against the trainer's own loader, on odd and broken files made here.

The truth is ``transformers.image_utils.load_image`` followed by the processor: the gate accepts
exactly what it accepts, with its displayed size and its pixels, and names a reason for the rest;
the proof (no full decode) and the full decode never disagree, for a file or its bytes.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from transformers import AutoProcessor
from transformers.image_utils import load_image

from curate.core.images import REASONS, ImageError, check, decode
from curate.fixtures.odd_images import trainer_view


def _outcome(fn, src) -> tuple[str, object]:  # noqa: ANN001
    try:
        result = fn(src)
    except ImageError as exc:
        assert exc.reason in REASONS and exc.detail, exc
        return "error", exc.reason
    return "ok", result.size if hasattr(result, "size") and not isinstance(result.size, int) else (
        result.width, result.height)


@pytest.fixture(scope="module")
def image_processor(tiny_processor_dir: Path):  # noqa: ANN201
    return AutoProcessor.from_pretrained(str(tiny_processor_dir)).image_processor


def test_the_gate_accepts_what_the_trainer_loads(odd_images: Path, image_processor) -> None:  # noqa: ANN001
    seen = {}
    for path in sorted(odd_images.iterdir()):
        truth = trainer_view(path, image_processor)
        checked, decoded = _outcome(check, path), _outcome(decode, path)
        assert checked == decoded, (path.name, checked, decoded)  # the proof and the full decode agree
        assert _outcome(check, path.read_bytes()) == checked, path.name  # bytes or file: the same answer
        if truth[0] == "ok":
            assert checked == ("ok", truth[1][:2]), (path.name, checked, truth)  # displayed as load_image shows it
            trainer = np.asarray(load_image(str(path)).convert("RGB"))
            if path.suffix in (".jpg", ".tif", ".webp") and "cmyk" not in path.name:  # no alpha, 8 bits: same pixels
                assert np.array_equal(np.asarray(decode(path)), trainer), path.name
        else:
            assert checked[0] == "error", (path.name, truth)
        seen[path.name] = checked
    expected = {"truncated.jpg": "truncated", "truncated.png": "truncated", "truncated.webp": "truncated",
                "bomb_40000x40000.png": "decompression_bomb", "dds_unsupported.dds": "unsupported_format",
                "identified_not_decodable.wmf": "unsupported_format", "not_an_image.jpg": "not_an_image",
                "empty.png": "empty_file", "extreme_aspect_1x300.png": "extreme_aspect_ratio"}
    assert {name: seen[name] for name in expected} == {name: ("error", r) for name, r in expected.items()}
    assert seen["png_bad_idat_crc.png"] == ("ok", (30, 20))  # a CRC the decoder ignores: the full decode decides
    assert seen["jpeg_orientation_6.jpg"] == seen["tiff_orientation_6.tif"] == ("ok", (60, 90))  # turned once


def test_the_proof_is_sound_on_damaged_copies() -> None:
    """Cut and flipped bytes of real JPEGs (every structure Pillow writes) and PNGs: whatever the proof accepts,
    the full decode accepts; flips land in the headers half of the time, where every libjpeg check lives."""
    import io

    from PIL import Image

    from curate.core.images import as_file
    from curate.core.images import prove

    rng = np.random.default_rng(11)
    photo = Image.fromarray(rng.integers(0, 255, (48, 64, 3), dtype=np.uint8))
    encodings = [("JPEG", photo, {}), ("JPEG", photo, {"progressive": True}), ("JPEG", photo, {"subsampling": 0}),
                 ("JPEG", photo.convert("L"), {}), ("JPEG", photo.convert("CMYK"), {}),
                 ("JPEG", photo, {"restart_marker_blocks": 2}), ("JPEG", photo, {"optimize": True}),
                 ("PNG", photo, {}), ("PNG", photo.convert("P"), {})]
    proven = 0
    for fmt, img, kw in encodings:
        buf = io.BytesIO()
        img.save(buf, fmt, **kw)
        data = buf.getvalue()
        scan = data.find(b"\xff\xda") if fmt == "JPEG" else 64
        variants = [data] + [data[:k] for k in rng.integers(20, len(data), 20).tolist()]
        for i in range(120):
            flipped = bytearray(data)
            top = scan + 16 if i % 2 else len(data)  # a header byte, or any byte
            for pos in rng.integers(2, top, 1 + i % 3).tolist():
                flipped[pos] = int(rng.integers(0, 256))
            variants.append(bytes(flipped))
        for blob in variants:
            try:
                ok = prove(Image.open(as_file(blob)), blob) is not None
            except Exception:  # noqa: BLE001 - not even opened: nothing proven
                ok = False
            if ok:
                proven += 1
                decode(blob)  # must not raise
    assert proven > 100  # the check above had something to check
