"""What ``curate dedup`` knows of an image: a hash of its bytes, of its pixels, and perceptual hashes.

* **bytes** (:func:`bytes_digest`): SHA-256 of the file's bytes, cut to 16 bytes.
* **pixels** (:func:`pixel_digest`): SHA-256 of the decoded upright RGB pixels and the size, cut to 16
  bytes; the same picture saved twice, or a JPEG wrapped in another container, has the same digest.
  (SHA-256 rather than BLAKE2: with the CPU's SHA instructions it hashed 3 MB in 5.7 ms here, BLAKE2b in 35 ms.)
* **perceptual** (:func:`perceptual_hashes`): a DCT hash (pHash) of 63 bits, computed here: the image
  squashed to a 128×128 grey thumbnail, a region of it averaged down to 32×32, its 2-D DCT, and one bit per
  coefficient of the 8×8 lowest frequencies (the constant one left out) telling whether it is above their
  median. Re-encoding (JPEG quality 30), resizing (0.5×–2×) and small overlays move few bits; crops move
  many, because a DCT is not shift-invariant. So every image has :data:`HASHES_PER_IMAGE` hashes: its
  whole thumbnail's, then those of the crops keeping :data:`CROP_KEEP` of each side at the four corners and
  the centre (:data:`ANCHORS`). A copy cropped to ≥ 90% of the area then lies a few bits from one of the
  original's crop hashes; two images are compared by the whole hash of one against every hash of the
  other (:func:`curate.dedup.search`).

Images are decoded by the one image gate, :func:`curate.core.images.decode` (the stage calls it).
"""

from __future__ import annotations

import hashlib

import numpy as np
from PIL import Image

#: Bits of a perceptual hash (the 8×8 lowest DCT frequencies less the constant one); stored in a uint64.
PHASH_BITS = 63
#: The side fraction the crop hypotheses keep (0.95² ≈ 90% of the area).
CROP_KEEP = 0.95
#: Where the crop hypotheses sit, as fractions of the free margin (x, y): four corners and the centre.
ANCHORS = ((0.0, 0.0), (1.0, 0.0), (0.0, 1.0), (1.0, 1.0), (0.5, 0.5))
#: Perceptual hashes per image: the whole thumbnail's, then one per anchor.
HASHES_PER_IMAGE = 1 + len(ANCHORS)
DIGEST_BYTES = 16

_THUMB = 128
_SIDE = 32
_LOW = 8


def _dct_matrix(n: int) -> np.ndarray:
    """The orthonormal DCT-II matrix of size ``n`` (rows are frequencies)."""
    k = np.arange(n, dtype=np.float64)[:, None]
    i = np.arange(n, dtype=np.float64)[None, :]
    m = np.cos(np.pi * (2 * i + 1) * k / (2 * n)) * np.sqrt(2.0 / n)
    m[0] /= np.sqrt(2.0)
    return m


_DCT = _dct_matrix(_SIDE)[:_LOW]  # only the lowest frequencies are kept
_WEIGHTS = (1 << np.arange(PHASH_BITS - 1, -1, -1, dtype=np.uint64)).astype(np.uint64)
_CROP = round(_THUMB * CROP_KEEP)
_BOXES = [(0, 0, _THUMB, _THUMB)] + [
    (round((_THUMB - _CROP) * fx), round((_THUMB - _CROP) * fy),
     round((_THUMB - _CROP) * fx) + _CROP, round((_THUMB - _CROP) * fy) + _CROP) for fx, fy in ANCHORS]


def bytes_digest(data: bytes | memoryview) -> bytes:
    """SHA-256 of an image file's bytes, cut to :data:`DIGEST_BYTES`."""
    return hashlib.sha256(data).digest()[:DIGEST_BYTES]


def pixel_digest(img: Image.Image) -> bytes:
    """SHA-256 of a decoded RGB image's size and pixels, cut to :data:`DIGEST_BYTES`."""
    h = hashlib.sha256(f"{img.mode} {img.width}x{img.height}\n".encode("ascii"))
    h.update(img.tobytes())
    return h.digest()[:DIGEST_BYTES]


def combined_digest(digests: list[bytes]) -> bytes:
    """One digest for a record's images in order (the image's own digest when it has one)."""
    if len(digests) == 1:
        return digests[0]
    return hashlib.sha256(b"".join(digests)).digest()[:DIGEST_BYTES]


def perceptual_hashes(img: Image.Image) -> np.ndarray:
    """The :data:`HASHES_PER_IMAGE` perceptual hashes of a decoded image (``uint64``; see the module docstring)."""
    thumb = img.resize((_THUMB, _THUMB), Image.Resampling.BOX).convert("L")
    grids = np.stack([np.asarray(thumb.resize((_SIDE, _SIDE), Image.Resampling.BOX, box=box), np.float64)
                      for box in _BOXES])
    return hash_grids(grids)


def hash_grids(grids: np.ndarray) -> np.ndarray:
    """Perceptual hashes of ``K×32×32`` grey grids: the bits of the low DCT frequencies above their median."""
    coeffs = np.einsum("fi,kij,gj->kfg", _DCT, grids, _DCT, optimize=True).reshape(len(grids), -1)[:, 1:]
    bits = coeffs > np.median(coeffs, axis=1, keepdims=True)
    return (bits.astype(np.uint64) * _WEIGHTS).sum(axis=1, dtype=np.uint64)


def popcount(values: np.ndarray) -> np.ndarray:
    """Bits set in each ``uint64``."""
    if hasattr(np, "bitwise_count"):  # numpy >= 2
        return np.bitwise_count(values)
    as_bytes = values.view(np.uint8).reshape(*values.shape, 8)
    return _BYTE_BITS[as_bytes].sum(axis=-1, dtype=np.uint8)


_BYTE_BITS = np.array([bin(i).count("1") for i in range(256)], np.uint8)


def distance(a: np.ndarray, b: np.ndarray) -> int:
    """The distance of two images' hash sets: the whole hash of either against every hash of the other."""
    forward = popcount(a[0] ^ b)
    backward = popcount(b[0] ^ a)
    return int(min(forward.min(), backward.min()))
