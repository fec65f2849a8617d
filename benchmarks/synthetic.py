"""Seeded synthetic sample lengths shared by the benchmarks.

The mixture imitates a vision-language corpus: every sample has a text part
whose token count is lognormal, plus 0 to 4 images (uniformly) of 64 to 3,000
tokens each (uniformly). It is a function of ``(n, seed)`` only, generated in
fixed-size chunks so that memory stays small and the result does not depend on
how it is called.
"""

from __future__ import annotations

import numpy as np

TEXT_MEDIAN = 200.0
"""Median text tokens of a sample (chat template included)."""
TEXT_SIGMA = 1.0
"""Sigma of the lognormal text length (natural log)."""
MAX_IMAGES = 4
IMAGE_MIN_TOKENS = 64
IMAGE_MAX_TOKENS = 3000

_CHUNK = 1 << 18


def synthetic_lengths(n: int, seed: int = 0) -> np.ndarray:
    """Token counts of ``n`` synthetic samples.

    Args:
        n: Number of samples.
        seed: Seed; the same ``(n, seed)`` always gives the same array, and the
            first ``m`` values for ``n > m`` equal ``synthetic_lengths(m, seed)``.

    Returns:
        An int64 array of length ``n``: text tokens (lognormal, median
        ``TEXT_MEDIAN``, sigma ``TEXT_SIGMA``, at least 1) plus, for 0 to
        ``MAX_IMAGES`` images, ``IMAGE_MIN_TOKENS``..``IMAGE_MAX_TOKENS`` each.
    """
    if n < 0:
        raise ValueError(f"n must be >= 0, got {n}")
    out = np.empty(n, dtype=np.int64)
    for chunk, start in enumerate(range(0, n, _CHUNK)):
        stop = min(n, start + _CHUNK)
        # A chunk is always drawn whole, so a prefix does not depend on n.
        rng = np.random.default_rng([seed, chunk])
        text = rng.lognormal(np.log(TEXT_MEDIAN), TEXT_SIGMA, _CHUNK)
        text = np.maximum(1, np.rint(text)).astype(np.int64)
        n_images = rng.integers(0, MAX_IMAGES + 1, _CHUNK)
        per_image = rng.integers(IMAGE_MIN_TOKENS, IMAGE_MAX_TOKENS + 1, (_CHUNK, MAX_IMAGES))
        mask = np.arange(MAX_IMAGES)[None, :] < n_images[:, None]
        out[start:stop] = (text + (per_image * mask).sum(axis=1))[: stop - start]
    return out
