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


def _coefficients_by_definition(img: Image.Image) -> np.ndarray:
    """Each box's 8×8 low DCT coefficients as the module docstring defines them: the box's span of each side
    area-averaged into 32 bins, then the DCT; one pair of products per box, on the whole image as floats."""
    from curate.dedup import hashing

    x = hashing.luma_samples(img).astype(np.float64)  # a large image box-reduced first (part of the definition)
    h, w = x.shape

    def side(n: int, anchor: float | None) -> np.ndarray:
        keep = hashing.CROP_KEEP
        lo, hi = (0.0, n) if anchor is None else (anchor * n * (1 - keep), anchor * n * (1 - keep) + n * keep)
        bins = np.zeros((32, n))
        for b in range(32):  # sample j covers [j, j + 1); a bin takes the part of each sample inside it
            a, z = lo + b * (hi - lo) / 32, lo + (b + 1) * (hi - lo) / 32
            for j in range(int(a), min(n, int(np.ceil(z)))):
                bins[b, j] = max(0.0, min(z, j + 1) - max(a, j))
        bins /= bins.sum(axis=1, keepdims=True)
        return hashing._dct_matrix(32)[:8] @ bins  # noqa: SLF001

    boxes = [(None, None)] + list(hashing.ANCHORS)
    return np.stack([side(h, fy) @ x @ side(w, fx).T for fx, fy in boxes])


def test_perceptual_hashes_are_their_definition() -> None:
    """Two products for all six boxes (the rows in strips) give each box's coefficients as its own pair of products
    on the whole image does, up to rounding, and the same bits wherever no coefficient ties with the median; on
    random, striped and real images of the sizes the reduced decode gives, on a large one (box-reduced first) and
    on long ones projected in many strips."""
    from curate.dedup import hashing

    rng = np.random.default_rng(0)
    arrays = [rng.integers(0, 256, (h, w)) for h, w in ((64, 64), (120, 160), (107, 160), (150, 100), (500, 129))]
    arrays += [np.kron(rng.integers(0, 256, (16, 16)), np.ones((8, 8))) for _ in range(5)]
    arrays += [np.kron(rng.integers(0, 256, (30, 40)), np.ones((100, 100)))]  # 3000×4000: box-reduced first
    arrays += [np.kron(rng.integers(0, 256, (10, 400)), np.ones((10, 50))), rng.integers(0, 256, (127, 9000))]  # strips
    images = [Image.fromarray(a.astype(np.uint8), "L") for a in arrays]
    images += [decode(data) for _, data in distinct_images(6)]
    for i, img in enumerate(images):
        got = perceptual_hashes(img)
        want = _coefficients_by_definition(img).reshape(6, -1)
        mine = hashing.box_coefficients(hashing.luma_samples(img)).reshape(6, -1)
        assert np.allclose(mine, want, rtol=1e-9, atol=1e-6), i
        coeffs = want[:, 1:]
        median = np.median(coeffs, axis=1, keepdims=True)
        assert np.sort(np.abs(coeffs - median), axis=1)[:, 1].min() > 1e-6, i  # none ties with the median (itself one)
        bits = coeffs > median
        assert got.tolist() == [int("".join("1" if b else "0" for b in row), 2) for row in bits], i
    assert hashing.STRIP_SAMPLES * 8 * 4 < 262_144


def test_a_copy_at_half_and_double_size_hashes_alike_at_every_scale_a_jpeg_is_decoded() -> None:
    """The bins cover the same part of the picture at every size: a JPEG decoded at 1/2, 1/4 or 1/8 of its size
    (the reduced decode) hashes within a few bits of its full decode."""
    from curate.core.images import decode_small

    for _, data in distinct_images(4):
        full = perceptual_hashes(decode(data).convert("L"))
        for size in ((32, 32), (64, 64), (128, 128)):
            small, _, _ = decode_small(data, size=size, grey=True)
            assert distance(full[:1], perceptual_hashes(small)[:1]) <= 4, size
