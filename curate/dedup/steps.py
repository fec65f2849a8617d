"""The four removal steps of ``curate dedup`` in order, on the driver (the rules: :mod:`curate.dedup.decide`).

Nodes of the near-duplicate search are the hashed records with an image, then the references with one; a pair
``(a, b)`` of nodes comes from :mod:`curate.dedup.search`. Embeddings (``--embeddings``, ``--against-embeddings``:
``curate embed``'s output) are joined to rows by id.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from curate.core.embeddings import find_embeddings, read_ids
from curate.dedup.decide import (BENCHMARK, EXACT, NEAR, SEMANTIC, Decision, Hashed, closest_reference,
                                 exact_groups, greedy, keep_rank, verify_multi)


@dataclass
class Nodes:
    """The search's nodes: record rows with an image, then reference rows with one."""

    records: np.ndarray
    refs: np.ndarray

    @classmethod
    def of(cls, records: Hashed, refs: Hashed | None) -> Nodes:
        """Rows with at least one image."""
        return cls(np.flatnonzero(records.images > 0),
                   np.flatnonzero(refs.images > 0) if refs is not None else np.zeros(0, np.int64))

    def split(self, a: np.ndarray, b: np.ndarray, bits: np.ndarray) -> tuple[tuple[np.ndarray, ...], tuple[np.ndarray, ...]]:
        """Pairs of nodes as (record row, record row, bits) and (record row, reference row, bits)."""
        n = len(self.records)
        same = (a < n) & (b < n)
        cross = (a < n) & (b >= n)  # a < b: a reference pairs with a record only as b
        return ((self.records[a[same]], self.records[b[same]], bits[same]),
                (self.records[a[cross]], self.refs[b[cross] - n], bits[cross]))


def load_embeddings(folder: str | os.PathLike[str], ids: pa.Array) -> tuple[np.ndarray, np.ndarray]:
    """The embeddings of ``folder`` whose id is in ``ids``: ``(rows of ids, vectors)``, in the files' order."""
    rows, vectors = [], []
    for file in find_embeddings(folder):
        file_ids, _, _ = read_ids(file)
        at = pc.index_in(file_ids, value_set=ids).to_numpy(zero_copy_only=False)
        found = ~np.isnan(at.astype(np.float64))
        if found.any():
            rows.append(at[found].astype(np.int64))
            vectors.append(np.asarray(np.load(file.npy, mmap_mode="r")[np.flatnonzero(found)], np.float32))
    if not rows:
        return np.zeros(0, np.int64), np.zeros((0, 1), np.float32)
    return np.concatenate(rows), np.concatenate(vectors)


def decide(records: Hashed, alive: np.ndarray, *, prefer: tuple[str, ...], near_pairs: tuple | None,
           threshold: int, refs: Hashed | None = None, nodes: Nodes | None = None,
           embeddings: str | None = None, ref_embeddings: str | None = None, semantic_threshold: float = 1.0,
           seed: int = 0) -> tuple[Decision, dict[str, int]]:
    """Run the four steps over the ``alive`` record rows; returns the decision and pair counts.

    Args:
        records: the hashed records; ``alive``: rows that may be removed (hashed, first occurrence of their id).
        prefer: the ``--prefer`` source order.
        near_pairs: ``(a, b, bits)`` over ``nodes`` (None: no near-duplicate step).
        threshold: the near threshold in bits.
        refs: the hashed references (``--against``), or None.
        embeddings, ref_embeddings: ``curate embed`` folders (None: no semantic step / no semantic overlap).
        semantic_threshold: the cosine threshold.
    """
    from curate.dedup.search import semantic_pairs

    decision = Decision.empty(len(records))
    decision.step[~alive] = 127  # not a candidate: errored before, or no image
    rank = keep_rank(records.sources, records.pixels, records.ids, prefer)
    counts: dict[str, int] = {}
    pairs_rr = pairs_rx = None
    if near_pairs is not None and nodes is not None:
        pairs_rr, pairs_rx = nodes.split(*near_pairs)
    vec_rows = vectors = None
    if embeddings is not None:
        vec_rows, vectors = load_embeddings(embeddings, records.ids)
        counts["records_with_embedding"] = int(len(vec_rows))

    if refs is not None:  # 1. benchmark overlap: exact, near, semantic
        hit = pc.index_in(records.pixel_key, value_set=refs.pixel_key).to_numpy(zero_copy_only=False)
        rows = np.flatnonzero(~np.isnan(hit.astype(np.float64)) & decision.alive)
        ref_rows = hit[rows].astype(np.int64)
        decision.remove(rows, BENCHMARK, ref_rows, True, np.zeros(len(rows)), ["exact"] * len(rows))
        if pairs_rx is not None:
            a, b, bits = pairs_rx
            keep, bits = verify_multi(records, a, refs, b, bits, threshold)
            a, b, bits = a[keep], b[keep], bits[keep]
            ok = decision.alive[a]
            rec, ref, best = closest_reference(a[ok], b[ok], bits[ok].astype(np.float64), higher_better=False)
            decision.remove(rec, BENCHMARK, ref, True, best, [f"near ({int(d)} bits)" for d in best])
            counts["near_pairs_with_references"] = int(len(a))
        if vectors is not None and ref_embeddings is not None:
            ref_rows_v, ref_vectors = load_embeddings(ref_embeddings, refs.ids)
            q, r, cos = semantic_pairs(ref_vectors, semantic_threshold, queries=vectors, seed=seed)
            rec_rows, refs_at = vec_rows[q], ref_rows_v[r]
            ok = decision.alive[rec_rows]
            rec, ref, best = closest_reference(rec_rows[ok], refs_at[ok], cos[ok].astype(np.float64), higher_better=True)
            decision.remove(rec, BENCHMARK, ref, True, 1.0 - best, [f"semantic (cosine {c:.4f})" for c in best])
            counts["semantic_pairs_with_references"] = int(len(q))

    rows, kept = exact_groups(records.pixel_key, rank, np.flatnonzero(decision.alive))  # 2. exact
    same_bytes = _same(records.bytes_key, rows, kept)
    decision.remove(rows, EXACT, kept, False, np.zeros(len(rows)),
                    ["same bytes" if s else "same pixels, other encoding" for s in same_bytes])

    if pairs_rr is not None:  # 3. near
        a, b, bits = pairs_rr
        keep, bits = verify_multi(records, a, records, b, bits, threshold)
        counts["near_pairs"] = int(keep.sum())
        rows, kept, bits = greedy(a[keep], b[keep], bits[keep].astype(np.float64), rank, decision.alive)
        decision.remove(rows, NEAR, kept, False, bits, [f"{int(d)} bits" for d in bits])

    if vectors is not None:  # 4. semantic
        i, j, cos = semantic_pairs(vectors, semantic_threshold, seed=seed)
        counts["semantic_pairs"] = int(len(i))
        rows, kept, sims = greedy(vec_rows[i], vec_rows[j], cos.astype(np.float64), rank, decision.alive)
        decision.remove(rows, SEMANTIC, kept, False, 1.0 - sims, [f"cosine {s:.4f}" for s in sims])
    decision.resolve()
    decision.step[decision.step == 127] = -1
    return decision, counts


def _same(keys: pa.Array, rows: np.ndarray, kept: np.ndarray) -> list[bool]:
    """Whether each row's key equals its kept row's (null keys: not known to be the same)."""
    if not len(rows):
        return []
    a, b = keys.take(pa.array(rows)), keys.take(pa.array(kept))
    return pc.fill_null(pc.equal(a, b), False).to_pylist()
