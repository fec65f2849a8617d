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


def _hashes_by_definition(img: Image.Image) -> np.ndarray:
    """The perceptual hashes as the module docstring defines them: one pair of products per box, numpy's median."""
    from curate.dedup import hashing

    grey = img if img.mode == "L" else img.convert("L")
    x = np.asarray(grey.resize((128, 128), Image.Resampling.BOX, reducing_gap=1.0), np.float64)
    coeffs = np.stack([hashing._PROJECT[n] @ x[y0:y0 + n, x0:x0 + n] @ hashing._PROJECT[n].T  # noqa: SLF001
                       for x0, y0, n in hashing._BOXES]).reshape(len(hashing._BOXES), -1)[:, 1:]  # noqa: SLF001
    bits = coeffs > np.median(coeffs, axis=1, keepdims=True)
    return np.array([int("".join("1" if b else "0" for b in row), 2) for row in bits], np.uint64)


def test_perceptual_hashes_are_their_definition_bit_for_bit() -> None:
    """Five products for all six boxes give the very bits of two products per box, also where every coefficient
    but the constant one is rounding noise (flat and nearly flat thumbnails: a change in the order of the sums
    would flip their bits), on random, striped and real images of every size the reduced decode gives."""
    rng = np.random.default_rng(0)
    side = 128
    thumbs = [np.full((side, side), v) for v in (0, 7, 128, 255)]
    thumbs += [np.where(np.arange(side)[:, None] < cut, 7, v) * np.ones((1, side)) for cut, v in ((1, 8), (64, 200))]
    thumbs += [rng.integers(0, 256, (side, side)) for _ in range(40)]
    thumbs += [(rng.random((side, side)) < 0.01) * 255 for _ in range(20)]
    thumbs += [np.kron(rng.integers(0, 256, (16, 16)), np.ones((8, 8))) for _ in range(20)]
    images = [Image.fromarray(t.astype(np.uint8), "L") for t in thumbs]
    images += [Image.fromarray(rng.integers(0, 256, (h, w), dtype=np.uint8), "L")
               for w, h in ((154, 154), (271, 180), (320, 214), (129, 500), (1000, 130))]
    images += [decode(data) for _, data in distinct_images(8)]
    for i, img in enumerate(images):
        assert perceptual_hashes(img).tolist() == _hashes_by_definition(img).tolist(), i
