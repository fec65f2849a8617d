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
