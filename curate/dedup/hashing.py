"""What ``curate dedup`` knows of an image: a hash of its bytes, of its pixels, and perceptual hashes.

* **bytes** (:func:`bytes_digest`): SHA-256 of the file's bytes, cut to 16 bytes.
* **pixels** (:func:`pixel_digest`): SHA-256 of the decoded upright RGB pixels and the size, cut to 16
  bytes; the same picture saved twice, or a JPEG wrapped in another container, has the same digest.
  (SHA-256 rather than BLAKE2: with the CPU's SHA instructions it hashed 3 MB in 5.7 ms here, BLAKE2b in 35 ms.)
* **perceptual** (:func:`perceptual_hashes`): a DCT hash (pHash) of 63 bits, computed here: the image's luma (the
  stage decodes a JPEG's luma alone at a reduced DCT scale, whose samples are the means of the full image's blocks)
  area-averaged down to 32×32 bins (fractional overlaps: the bins cover the same part of the picture at every
  size), its 2-D DCT, and one bit per coefficient of the 8×8 lowest frequencies (the constant one left out) telling
  whether it is above their median. The averaging and the DCT are one matrix on each side (:func:`_projection`), so
  the six hashes of an image are two matrix products (:func:`perceptual_hashes`), with no resized copy of the image.
  Re-encoding (JPEG quality 30), resizing (0.5×–2×) and small overlays move few bits; crops move many, because a DCT
  is not shift-invariant. So every image has :data:`HASHES_PER_IMAGE` hashes: the whole image's, then those of the
  crops keeping :data:`CROP_KEEP` of each side at the four corners and the centre (:data:`ANCHORS`). A copy
  cropped to ≥ 90% of the area then lies a few bits from one of the original's crop hashes; two images are
  compared by the whole hash of one against every hash of the other (:func:`curate.dedup.search`).
  (Version 4 of the hash; version 3 squashed the image to a 128×128 thumbnail with Pillow first, which cost more
  than the products.)

Images are decoded by the one image gate, :func:`curate.core.images.decode` (the stage calls it).
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from functools import lru_cache
from typing import Any

import numpy as np
from PIL import Image

#: Bits of a perceptual hash (the 8×8 lowest DCT frequencies less the constant one); stored in a uint64.
PHASH_BITS = 63
#: The side fraction the crop hypotheses keep (0.95² ≈ 90% of the area).
CROP_KEEP = 0.95
#: Where the crop hypotheses sit, as fractions of the free margin (x, y): four corners and the centre.
ANCHORS = ((0.0, 0.0), (1.0, 0.0), (0.0, 1.0), (1.0, 1.0), (0.5, 0.5))
#: Perceptual hashes per image: the whole image's, then one per anchor.
HASHES_PER_IMAGE = 1 + len(ANCHORS)
DIGEST_BYTES = 16
#: Pairs of images at most this many bits apart are candidates for the same pixels: their pixel digests are
#: computed (the same pixels, one a JPEG hashed at a reduced scale, differed by up to 4 bits in tests).
EXACT_CANDIDATE_BITS = 6

_SIDE = 32
_LOW = 8


def _dct_matrix(n: int) -> np.ndarray:
    """The orthonormal DCT-II matrix of size ``n`` (rows are frequencies)."""
    k = np.arange(n, dtype=np.float64)[:, None]
    i = np.arange(n, dtype=np.float64)[None, :]
    m = np.cos(np.pi * (2 * i + 1) * k / (2 * n)) * np.sqrt(2.0 / n)
    m[0] /= np.sqrt(2.0)
    return m


def _area_average(n: int, lo: float, hi: float, side: int) -> np.ndarray:
    """The ``side × n`` matrix averaging the span ``[lo, hi)`` of ``n`` samples (sample ``j`` covers ``[j, j+1)``)
    into ``side`` bins of equal width (fractional overlaps; zeros outside the span)."""
    edges = lo + np.arange(side + 1) * ((hi - lo) / side)
    first, last = edges[:-1, None], edges[1:, None]
    j = np.arange(n)[None, :]
    overlap = np.clip(np.minimum(last, j + 1) - np.maximum(first, j), 0, None)
    return overlap / overlap.sum(axis=1, keepdims=True)


_DCT_LOW = _dct_matrix(_SIDE)[:_LOW]
#: Where each box's span starts along a side, as a fraction of the margin it leaves: the whole side, then the
#: crops' distinct anchors.
_SPANS = (None,) + tuple(sorted({f for anchor in ANCHORS for f in anchor}))
#: Each box's span along the columns and along the rows (indices into :data:`_SPANS`): the whole image, then the crops.
_PICK_X = np.array([0] + [_SPANS.index(fx) for fx, _ in ANCHORS])
_PICK_Y = np.array([0] + [_SPANS.index(fy) for _, fy in ANCHORS])


def _projection(n: int, span: float | None) -> np.ndarray:
    """``8 × n``: a side of ``n`` samples (the whole, or the crop keeping :data:`CROP_KEEP` of it at ``span`` of its
    margin) area-averaged down to 32 bins, then its 8 lowest DCT frequencies."""
    lo, hi = (0.0, float(n)) if span is None else (span * n * (1 - CROP_KEEP), span * n * (1 - CROP_KEEP) + n * CROP_KEEP)
    return _DCT_LOW @ _area_average(n, lo, hi, _SIDE)


@lru_cache(maxsize=256)
def _stacked(n: int) -> np.ndarray:
    """``8S × n`` (S: :data:`_SPANS`): the projections of a side of ``n`` samples for every span, stacked."""
    out = np.concatenate([_projection(n, span) for span in _SPANS])
    out.setflags(write=False)
    return out


#: Samples per product of the first side's projection (its rows of the image taken a strip at a time): the image is
#: never held as floats whole, and each product stays under the size at which OpenBLAS starts threads (M·N·K <
#: 262,144), whose hand-offs cost more than they save on a loaded machine.
STRIP_SAMPLES = 262_144 // (_LOW * len(_SPANS)) - 1


#: An image whose shorter side has at least twice this many samples is first reduced (Pillow's box mean over whole
#: blocks of samples) to a shorter side of this to twice this: the products cost 32 multiplications a sample.
REDUCED_SIDE = 64

_WEIGHTS = (1 << np.arange(PHASH_BITS - 1, -1, -1, dtype=np.uint64)).astype(np.uint64)


def bytes_digest(data: bytes | memoryview) -> bytes:
    """SHA-256 of an image file's bytes, cut to :data:`DIGEST_BYTES`."""
    return hashlib.sha256(data).digest()[:DIGEST_BYTES]


def pixel_digest(img: Image.Image) -> bytes:
    """SHA-256 of a decoded image's mode, size and pixels, cut to :data:`DIGEST_BYTES`.

    RGB pixels are hashed as Pillow stores them, 4 bytes each (red, green, blue, 255). An image Pillow holds in one
    block is read through its Arrow export without a copy (Pillow >= 11.2): 1.4 ms for 512×512 here, against 4.3 ms
    through ``tobytes`` (a copy, then the hash). Pillow keeps an image larger than its block size (16 MB, about
    4.2 megapixels of RGB) in several blocks, which the export refuses: those, and Pillow versions without the
    export, are hashed in strips of rows (:func:`_rgbx_strips`; the same digest, memory bounded by a strip).
    Other modes hash ``tobytes``.
    """
    h = hashlib.sha256(f"{img.mode} {img.width}x{img.height}\n".encode("ascii"))
    if img.mode != "RGB":
        h.update(img.tobytes())
        return h.digest()[:DIGEST_BYTES]
    whole = _rgbx_view(img)
    for part in ([whole] if whole is not None else _rgbx_strips(img)):
        h.update(part)
    return h.digest()[:DIGEST_BYTES]


#: Pixels per strip when an image is hashed in strips (16 MB of RGBX).
STRIP_PIXELS = 1 << 22


def _with_alpha(data: Any, n: int) -> memoryview | np.ndarray:
    """``n`` RGBX pixels as red, green, blue, 255 (a copy only when a fourth byte is not 255 already)."""
    view = np.frombuffer(data, np.uint8, count=4 * n)
    if not n or np.frombuffer(data, "<u4", count=n).min() >= 0xFF000000:  # every fourth byte is 255 (one SIMD pass)
        return memoryview(view)
    out = view.reshape(n, 4).copy()
    out[:, 3] = 255
    return out


def _rgbx_view(img: Image.Image) -> memoryview | np.ndarray | None:
    """An RGB image's pixels from its zero-copy Arrow export, or None where there is none (several blocks)."""
    if not hasattr(img, "__arrow_c_array__"):
        return None
    import pyarrow as pa

    try:
        data = pa.array(img).buffers()[-1]
    except ValueError:  # "Image rows are not contiguous in memory": Pillow holds it in several blocks
        return None
    n = img.width * img.height
    if data is None or data.size < 4 * n:
        return None
    return _with_alpha(data, n)


def _rgbx_strips(img: Image.Image) -> Iterator[memoryview | np.ndarray]:
    """An RGB image's pixels in strips of whole rows (about :data:`STRIP_PIXELS` each), top to bottom."""
    rows = max(1, STRIP_PIXELS // max(1, img.width))
    for top in range(0, img.height, rows):
        bottom = min(img.height, top + rows)
        strip = img if (top, bottom) == (0, img.height) else img.crop((0, top, img.width, bottom))
        yield _with_alpha(strip.tobytes("raw", "RGBX"), img.width * (bottom - top))


def combined_digest(digests: list[bytes]) -> bytes:
    """One digest for a record's images in order (the image's own digest when it has one)."""
    if len(digests) == 1:
        return digests[0]
    return hashlib.sha256(b"".join(digests)).digest()[:DIGEST_BYTES]


def perceptual_hashes(img: Image.Image) -> np.ndarray:
    """The :data:`HASHES_PER_IMAGE` perceptual hashes of a decoded image (``uint64``; see the module docstring)."""
    return hash_coefficients(box_coefficients(luma_samples(img)))


def luma_samples(img: Image.Image) -> np.ndarray:
    """The samples the perceptual hashes average (``uint8``, rows × columns): the image's luma, box-reduced first
    (Pillow's mean over whole blocks) when its shorter side holds at least twice :data:`REDUCED_SIDE` samples."""
    grey = img if img.mode == "L" else img.convert("L")
    factor = min(grey.size) // REDUCED_SIDE
    if factor > 1:  # a box mean of factor × factor samples: the bins average the same picture, from fewer samples
        grey = grey.reduce(factor)
    return np.asarray(grey)


def box_coefficients(samples: np.ndarray) -> np.ndarray:
    """Each box's 8×8 low DCT coefficients (``HASHES_PER_IMAGE × 8 × 8``): the rows projected for every span (in
    strips of :data:`STRIP_SAMPLES`), then the columns, in one product; each box's coefficients are a block of it."""
    height, width = samples.shape
    rows_of, cols_of = _stacked(height), _stacked(width)
    step = max(1, STRIP_SAMPLES // width)
    rows = np.zeros((rows_of.shape[0], width))
    for top in range(0, height, step):
        rows += rows_of[:, top:top + step] @ samples[top:top + step].astype(np.float64)
    every = (rows @ cols_of.T).reshape(len(_SPANS), _LOW, len(_SPANS), _LOW)
    return every[_PICK_Y, :, _PICK_X, :]


def hash_coefficients(coeffs: np.ndarray) -> np.ndarray:
    """Perceptual hashes of ``K×8×8`` low DCT frequencies: the bits of those above their median, the constant
    one left out (63 of them: the median is the middle one, found by a partition, as :func:`numpy.median` does)."""
    coeffs = coeffs.reshape(len(coeffs), -1)[:, 1:]
    middle = coeffs.shape[1] // 2
    if coeffs.shape[1] % 2:
        median = np.partition(coeffs, middle, axis=1)[:, middle:middle + 1]
    else:
        median = np.median(coeffs, axis=1, keepdims=True)
    bits = coeffs > median
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
