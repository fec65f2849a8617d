"""The image hashes: pixel digests see through encodings, perceptual hashes through edits, not across photos."""

from __future__ import annotations

import io
import itertools

import numpy as np
from PIL import Image

from curate.core.images import decode
from curate.dedup.hashing import bytes_digest, distance, perceptual_hashes, pixel_digest, popcount
from curate.fixtures.dupes import EDITS, distinct_images


def _png(img: Image.Image, **kw: object) -> bytes:
    buf = io.BytesIO()
    img.save(buf, "PNG", **kw)
    return buf.getvalue()


def test_popcount() -> None:
    values = np.random.default_rng(0).integers(0, 1 << 63, size=500, dtype=np.uint64)
    assert popcount(values).tolist() == [bin(int(v)).count("1") for v in values]


def test_pixel_digest_sees_the_same_pixels_in_another_container() -> None:
    img = decode(distinct_images(1)[0][1])
    a, b = _png(img, compress_level=1), _png(img, compress_level=9)
    assert a != b and bytes_digest(a) != bytes_digest(b)
    assert pixel_digest(decode(a)) == pixel_digest(decode(b)) == pixel_digest(img)
    changed = img.copy()
    changed.putpixel((0, 0), tuple(255 - c for c in img.getpixel((0, 0))))
    assert pixel_digest(changed) != pixel_digest(img)


def test_edits_stay_close_and_distinct_photos_stay_apart() -> None:
    images = distinct_images(6)
    rng = np.random.default_rng(0)
    hashes = [perceptual_hashes(decode(data)) for _, data in images]
    for (_, data), h in zip(images, hashes):
        for name in ("jpeg_q30", "half", "double", "png"):
            copy, _ = EDITS[name](data, rng)
            assert distance(h, perceptual_hashes(decode(copy))) <= 6, name
    assert min(distance(a, b) for a, b in itertools.combinations(hashes, 2)) > 12


def test_pixel_digest_of_an_image_held_in_several_blocks() -> None:
    """Past 16 MB of RGBX Pillow holds an image in several blocks, which its Arrow export refuses: the digest is
    the same hash of the same bytes, read in strips."""
    import hashlib

    rgb = np.random.default_rng(1).integers(0, 256, size=(2100, 2110, 3), dtype=np.uint8)
    rgbx = np.concatenate([rgb, np.full((*rgb.shape[:2], 1), 255, np.uint8)], axis=2)
    for height in (2100, 300):  # several blocks, and one
        expected = hashlib.sha256(f"RGB 2110x{height}\n".encode() + rgbx[:height].tobytes()).digest()[:16]
        assert pixel_digest(Image.fromarray(rgb[:height])) == expected, height
