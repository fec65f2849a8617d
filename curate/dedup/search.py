"""Candidate pairs without comparing all pairs: multi-index hashing over 63-bit hashes, FAISS for embeddings.

**Near duplicates.** Every image contributes :data:`~curate.dedup.hashing.HASHES_PER_IMAGE` hashes to the
index (its whole hash and its crop hashes) and its whole hash as a query; two images are a pair when a
query lies within ``threshold`` bits of an index entry of the other. The 63 bits are cut into
:data:`CHUNKS` chunks of 21 bits; two hashes within ``t`` bits agree within ``t // 3`` bits on at least one
chunk (pigeonhole), so probing, for each chunk of a query, every value within ``t // 3`` bits of it in a
direct-address table of the index's chunk values finds *every* pair within ``t`` (the search is exact, not
approximate). The cost grows with the probes (232 per chunk for ``t ≤ 8``, 1,562 for ``t ≤ 11``) times the
entries per table slot (index size / 2²¹).

The index is built once by the driver (:func:`build_index`, files in a folder) and searched block by block
of queries (:func:`search_block`), which the stage runs as shards on any executor.

**Semantic duplicates.** :func:`semantic_pairs`: FAISS range search over L2-normalised embeddings (inner
product = cosine), exact (``IndexFlatIP``) up to :data:`FLAT_LIMIT` vectors, IVF beyond.
"""

from __future__ import annotations

import os
from itertools import combinations
from pathlib import Path

import numpy as np

from curate.dedup.hashing import PHASH_BITS, popcount

CHUNKS = 3
CHUNK_BITS = PHASH_BITS // CHUNKS
_SLOTS = 1 << CHUNK_BITS
_CHUNK_MASK = np.uint64(_SLOTS - 1)
#: Embeddings searched exactly up to this many; IVF (approximate) beyond.
FLAT_LIMIT = 200_000
INDEX_FILES = ("codes.npy", "owners.npy", "queries.npy", "starts.npy")


def probe_masks(radius: int) -> np.ndarray:
    """Every 21-bit mask with at most ``radius`` bits set (``uint64``), the zero mask first."""
    masks = [0]
    for r in range(1, radius + 1):
        masks += [sum(1 << b for b in bits) for bits in combinations(range(CHUNK_BITS), r)]
    return np.array(masks, np.uint64)


def _chunk(codes: np.ndarray, c: int) -> np.ndarray:
    return ((codes >> np.uint64(c * CHUNK_BITS)) & _CHUNK_MASK).astype(np.int64)


def build_index(codes: np.ndarray, owners: np.ndarray, queries: np.ndarray, folder: str | os.PathLike[str]) -> None:
    """Write the index files of :func:`search_block` into ``folder``.

    Args:
        codes: every index entry's hash (``uint64``).
        owners: the node (image) each entry belongs to (``int64``, same length).
        (Each chunk's table holds the entries sorted by that chunk's value: a probe reads consecutive rows.)
        queries: each node's whole hash (``uint64``; node ``i`` is row ``i``).
        folder: where the files go (:data:`INDEX_FILES`).
    """
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    sorted_codes = np.empty((CHUNKS, len(codes)), np.uint64)
    sorted_owners = np.empty((CHUNKS, len(codes)), np.int64)
    starts = np.empty((CHUNKS, _SLOTS + 1), np.int64)
    for c in range(CHUNKS):  # each chunk's table: the entries sorted by their chunk value, and where each value starts
        key = _chunk(codes, c)
        order = np.argsort(key, kind="stable")
        sorted_codes[c], sorted_owners[c] = codes[order], owners[order]
        starts[c, 0] = 0
        np.cumsum(np.bincount(key, minlength=_SLOTS), out=starts[c, 1:])
    for name, arr in zip(INDEX_FILES, (sorted_codes, sorted_owners, queries.astype(np.uint64), starts)):
        np.save(folder / name, arr)


def load_index(folder: str | os.PathLike[str]) -> dict[str, np.ndarray]:
    """The index files, memory-mapped (workers share the pages)."""
    return {name[:-4]: np.load(Path(folder) / name, mmap_mode="r") for name in INDEX_FILES}


def search_block(index: dict[str, np.ndarray], start: int, stop: int, threshold: int,
                 progress: object = None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Pairs ``(a, b, bits)`` of nodes with ``a < b`` within ``threshold`` bits, for the queries ``start:stop``.

    A pair is listed once per block it is found in with its smallest distance (a pair may be found again by
    another block, from its other node: the caller keeps the smallest).
    """
    codes, owners, starts = index["codes"], index["owners"], index["starts"]
    block_nodes = np.arange(start, stop, dtype=np.int64)
    block_queries = np.asarray(index["queries"][start:stop])
    masks = probe_masks(threshold // CHUNKS)
    found_a, found_b, found_d = [], [], []
    for c in range(CHUNKS):
        # the queries in the order of their chunk value: each probe then reads the table's rows in an order that
        # rises (a mask flips the same bits of every key), not at random (pairs are sorted at the end anyway)
        key = _chunk(block_queries, c)
        order = np.argsort(key, kind="stable")
        qkey, queries, nodes = key[order], block_queries[order], block_nodes[order]
        c_codes, c_owners, c_starts = codes[c], owners[c], starts[c]
        for mask in masks:
            keys = qkey ^ mask.astype(np.int64)
            lo = c_starts[keys]
            n = c_starts[keys + 1] - lo
            hit = np.flatnonzero(n)
            if not len(hit):
                continue
            counts = n[hit]
            which = np.repeat(hit, counts)
            # each hit query's rows lo .. lo + count - 1, laid end to end: one repeat of (lo - where its run starts)
            entries = np.repeat(lo[hit] - (np.cumsum(counts) - counts), counts) + np.arange(len(which))
            bits = popcount(queries[which] ^ np.asarray(c_codes[entries]))
            ok = bits <= threshold
            if not ok.any():
                continue
            a, b = nodes[which[ok]], np.asarray(c_owners[entries[ok]])
            other = a != b
            found_a.append(np.minimum(a, b)[other])
            found_b.append(np.maximum(a, b)[other])
            found_d.append(bits[ok][other].astype(np.int8))
        if callable(progress):
            progress(0)
    return smallest_per_pair(found_a, found_b, found_d)


def smallest_per_pair(a: list[np.ndarray], b: list[np.ndarray], d: list[np.ndarray]
                      ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Concatenate pair lists and keep each pair once, with its smallest distance, sorted by (a, b)."""
    if not a:
        return np.zeros(0, np.int64), np.zeros(0, np.int64), np.zeros(0, np.int8)
    a_, b_, d_ = np.concatenate(a), np.concatenate(b), np.concatenate(d)
    order = np.lexsort((d_, b_, a_))
    a_, b_, d_ = a_[order], b_[order], d_[order]
    first = np.ones(len(a_), bool)
    first[1:] = (a_[1:] != a_[:-1]) | (b_[1:] != b_[:-1])
    return a_[first], b_[first], d_[first]


def semantic_pairs(vectors: np.ndarray, threshold: float, *, queries: np.ndarray | None = None,
                   nprobe: int = 16, seed: int = 0) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Pairs ``(i, j, cosine)`` with cosine ≥ ``threshold`` (FAISS range search).

    Without ``queries`` the rows of ``vectors`` are searched against themselves and each pair comes once
    with ``i < j``; with ``queries``, ``i`` is a query row and ``j`` a row of ``vectors``. Up to
    :data:`FLAT_LIMIT` vectors the search is exact; beyond, an IVF index (about 4·√N lists, trained on a
    seeded sample, ``nprobe`` lists searched per query) finds most pairs (approximate).
    """
    import faiss

    x = _normalised(vectors)
    q = x if queries is None else _normalised(queries)
    empty = (np.zeros(0, np.int64), np.zeros(0, np.int64), np.zeros(0, np.float32))
    if not len(x) or not len(q):
        return empty
    d = x.shape[1]
    if len(x) <= FLAT_LIMIT:
        index = faiss.IndexFlatIP(d)
    else:
        nlist = 1 << int(round(np.log2(4 * np.sqrt(len(x)))))
        index = faiss.IndexIVFFlat(faiss.IndexFlatIP(d), d, nlist, faiss.METRIC_INNER_PRODUCT)
        rng = np.random.default_rng([seed, 0x5E3])
        sample = x[np.sort(rng.choice(len(x), size=min(len(x), 64 * nlist), replace=False))]
        index.cp.seed = seed
        index.train(sample)
        index.nprobe = nprobe
    index.add(x)
    radius = float(np.nextafter(np.float32(threshold), np.float32(-np.inf)))
    lims, sims, ids = index.range_search(q, radius)
    rows = np.repeat(np.arange(len(q), dtype=np.int64), np.diff(lims.astype(np.int64)))
    cols = ids.astype(np.int64)
    keep = sims >= threshold
    if queries is None:
        keep &= rows < cols
    rows, cols, sims = rows[keep], cols[keep], sims[keep]
    order = np.lexsort((cols, rows))
    return rows[order], cols[order], sims[order].astype(np.float32)


def _normalised(vectors: np.ndarray) -> np.ndarray:
    x = np.ascontiguousarray(vectors, dtype=np.float32)
    norms = np.linalg.norm(x, axis=1, keepdims=True)
    return np.ascontiguousarray(x / np.maximum(norms, 1e-12), dtype=np.float32)
