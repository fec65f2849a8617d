"""Multi-index hashing finds exactly the pairs a brute-force comparison finds; FAISS range search likewise."""

from __future__ import annotations

import numpy as np
import pytest

from curate.dedup.hashing import HASHES_PER_IMAGE, PHASH_BITS, popcount
from curate.dedup.search import build_index, load_index, probe_masks, search_block, semantic_pairs, smallest_per_pair


def _world(n: int, threshold: int, seed: int) -> np.ndarray:
    """``n`` images' hash sets, random, with a tenth of them planted near another's hash (0..threshold+2 bits)."""
    rng = np.random.default_rng(seed)
    codes = rng.integers(0, 1 << PHASH_BITS, size=(n, HASHES_PER_IMAGE), dtype=np.uint64)
    for i in range(0, n // 10):
        j = n - 1 - i
        value = int(codes[i, rng.integers(HASHES_PER_IMAGE)])
        for bit in rng.choice(PHASH_BITS, size=int(rng.integers(0, threshold + 3)), replace=False):
            value ^= 1 << int(bit)
        codes[j, 0] = value
    return codes


def _brute(codes: np.ndarray, threshold: int) -> set[tuple[int, int, int]]:
    """Every pair within ``threshold``: the whole hash of one against every hash of the other, both ways."""
    whole = codes[:, 0]
    d = popcount(whole[:, None, None] ^ codes[None, :, :]).min(axis=2).astype(np.int64)  # d[q, e]: q whole vs e any
    both = np.minimum(d, d.T)
    a, b = np.nonzero(np.triu(both <= threshold, k=1))
    return {(int(x), int(y), int(both[x, y])) for x, y in zip(a, b)}


@pytest.mark.parametrize("threshold", [2, 5, 8])
def test_search_finds_exactly_the_pairs_within_the_threshold(threshold: int, tmp_path) -> None:
    codes = _world(600, threshold, seed=threshold)
    build_index(codes.ravel(), np.repeat(np.arange(len(codes)), HASHES_PER_IMAGE), codes[:, 0].copy(), tmp_path)
    index = load_index(tmp_path)
    parts = [search_block(index, s, min(s + 250, len(codes)), threshold) for s in range(0, len(codes), 250)]
    a, b, d = smallest_per_pair(*[[p[k] for p in parts] for k in range(3)])
    found = set(zip(a.tolist(), b.tolist(), d.astype(int).tolist()))
    expected = _brute(codes, threshold)
    assert found == expected
    assert len(expected) >= 40  # the planted pairs within the threshold are there


def test_probe_masks_count() -> None:
    assert len(probe_masks(0)) == 1 and len(probe_masks(2)) == 1 + 21 + 210
    assert all(popcount(probe_masks(3)) <= 3)


def test_semantic_pairs_match_brute_force() -> None:
    rng = np.random.default_rng(3)
    x = rng.normal(size=(300, 24)).astype(np.float32)
    x[150:180] = x[:30] + 0.1 * rng.normal(size=(30, 24))
    x /= np.linalg.norm(x, axis=1, keepdims=True)
    i, j, cos = semantic_pairs(x, 0.95)
    sims = x @ x.T
    a, b = np.nonzero(np.triu(sims >= 0.95, k=1))
    assert list(zip(i.tolist(), j.tolist())) == sorted(zip(a.tolist(), b.tolist())) and len(a) >= 25
    np.testing.assert_allclose(cos, sims[i, j], atol=1e-5)
    q, r, _ = semantic_pairs(x[:100], 0.95, queries=x[150:200])
    assert set(zip(q.tolist(), r.tolist())) == {(k, k) for k in range(30)}
