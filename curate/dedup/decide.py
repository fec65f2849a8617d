"""The global step of ``curate dedup``: which records are removed, why, and which record (or reference) they copy.

The driver holds one row per hashed record (and per reference image of ``--against``) and decides, in order:

1. ``benchmark_overlap``: a record whose images are the same pixels as, within the near threshold of, or (with
   embeddings) semantically close to a reference's; ``duplicate_of`` is the closest reference (fewest bits, highest
   cosine, then the smaller row);
2. ``exact_duplicate``: records with the same pixel digest (identical bytes always have identical pixels; pixel
   digests are computed only for records within a few bits of another: the same pixels hash alike);
3. ``near_duplicate``: pairs within the threshold (:mod:`curate.dedup.search`);
4. ``semantic_duplicate``: pairs at or above the cosine threshold.

Each step sees only the records no earlier step removed. Within a step the **keep rule** orders records by
``--prefer`` (the rank of their source in it; sources not named come after, all alike), then the largest image
(the sum of the record's image areas), then the id (code-point order): the same order on every run and executor.
Exact duplicates form groups (same digest), one kept per group. Near and semantic pairs are taken greedily in
that order: the best record not yet removed removes every neighbour not yet removed, so every removed record is
within the threshold of the record it matched, never only linked to it through a chain of pairs. A record others
copied may still be removed by a later step (the kept one of an exact group can be a near duplicate of a better
record): its copies then name the record finally kept as ``duplicate_of`` and the one they matched in ``detail``
(:meth:`Decision.resolve`).

A record with several images is compared on all of them: near and semantic pairs are found by its first image
(or its embedding) and a near pair holds only when both records have as many images and every position is within
the threshold.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from curate.dedup.hashing import HASHES_PER_IMAGE, popcount

REASONS = ("benchmark_overlap", "exact_duplicate", "near_duplicate", "semantic_duplicate")
BENCHMARK, EXACT, NEAR, SEMANTIC = range(len(REASONS))


@dataclass
class Hashed:
    """The rows of ``hashes/*.parquet`` (records) or ``against/hashes/*.parquet`` (references) as arrays."""

    ids: pa.Array
    sources: pa.Array
    images: np.ndarray
    pixels: np.ndarray
    pixel_key: pa.Array
    bytes_key: pa.Array
    phash: list[np.ndarray | None]  #: per row: images × HASHES_PER_IMAGE hashes, None without image
    shards: list = field(default_factory=list)  #: the input shards hashed (the digest step reads them again)
    shard_of: np.ndarray | None = None  #: per row: its shard's position in ``shards``

    @classmethod
    def from_table(cls, table: pa.Table) -> Hashed:
        """Arrays of a hashes table."""
        flat = table.column("phash").combine_chunks()
        offsets = flat.offsets.to_numpy()
        values = flat.values.to_numpy(zero_copy_only=False).astype(np.uint64)
        valid = flat.is_valid().to_numpy(zero_copy_only=False)
        phash = [values[offsets[i]:offsets[i + 1]] if valid[i] else None for i in range(len(flat))]
        return cls(ids=table.column("id").combine_chunks(), sources=table.column("source").combine_chunks(),
                   images=table.column("images").to_numpy().astype(np.int64),
                   pixels=table.column("pixels").to_numpy().astype(np.int64),
                   pixel_key=table.column("pixel_key").combine_chunks(),
                   bytes_key=table.column("bytes_key").combine_chunks(), phash=phash)

    def __len__(self) -> int:
        return len(self.ids)

    def first_hashes(self, rows: np.ndarray) -> np.ndarray:
        """The first image's hashes of ``rows`` (``len × HASHES_PER_IMAGE``)."""
        return np.stack([self.phash[r][:HASHES_PER_IMAGE] for r in rows.tolist()]) if len(rows) else \
            np.zeros((0, HASHES_PER_IMAGE), np.uint64)


@dataclass
class Decision:
    """Per record row: the removal step (-1 kept), whom it copies (a record row, or a reference row), the distance."""

    step: np.ndarray
    of_row: np.ndarray
    of_ref: np.ndarray
    distance: np.ndarray
    how: list[str] = field(default_factory=list)  #: per row, for removed ones: what matched (a short text)
    via: np.ndarray | None = None  #: per row: the record it matched when that one was removed later, else -1

    @classmethod
    def empty(cls, n: int) -> Decision:
        """Every record kept."""
        return cls(np.full(n, -1, np.int8), np.full(n, -1, np.int64), np.zeros(n, bool), np.full(n, np.nan),
                   [""] * n)

    def remove(self, rows: np.ndarray, step: int, of: np.ndarray, ref: bool, distance: np.ndarray,
               how: list[str]) -> None:
        """Mark ``rows`` removed by ``step`` as copies of ``of``."""
        self.step[rows] = step
        self.of_row[rows] = of
        self.of_ref[rows] = ref
        self.distance[rows] = distance
        for r, text in zip(rows.tolist(), how):
            self.how[r] = text

    def resolve(self) -> None:
        """Point every removed record at the record finally kept: a record that others copy may be removed by a
        later step (a near duplicate of an exact copy's kept record); its copies then name the record that
        removed it (and so on), and :attr:`via` keeps the one they matched."""
        self.via = np.full(len(self.step), -1, np.int64)
        removed = (self.step >= 0) & (self.step < 127)
        for r in np.flatnonzero(removed & ~self.of_ref).tolist():
            target, seen = int(self.of_row[r]), 0
            while removed[target] and not self.of_ref[target] and seen < len(self.step):
                target, seen = int(self.of_row[target]), seen + 1
            if target != self.of_row[r]:
                self.via[r] = self.of_row[r]
                self.of_row[r] = target

    @property
    def alive(self) -> np.ndarray:
        """Rows not removed (yet)."""
        return self.step < 0


def keep_rank(sources: pa.Array, pixels: np.ndarray, ids: pa.Array, prefer: tuple[str, ...]) -> np.ndarray:
    """Each row's place in the keep order (0 first): ``--prefer`` rank, then most pixels, then the id."""
    n = len(ids)
    prefer_rank = np.full(n, len(prefer), np.int64)
    if prefer:
        found = pc.index_in(sources, value_set=pa.array(list(prefer), pa.string())).to_numpy(zero_copy_only=False)
        known = ~np.isnan(found.astype(np.float64))
        prefer_rank[known] = found[known].astype(np.int64)
    table = pa.table({"p": prefer_rank, "x": -pixels, "id": ids})
    order = pc.sort_indices(table, sort_keys=[("p", "ascending"), ("x", "ascending"), ("id", "ascending")]).to_numpy()
    rank = np.empty(n, np.int64)
    rank[order] = np.arange(n, dtype=np.int64)
    return rank


def positions_match(a: np.ndarray | None, b: np.ndarray | None, threshold: int) -> int | None:
    """The largest per-position distance of two records' hash lists when they have as many images, else None."""
    if a is None or b is None or len(a) != len(b):
        return None
    worst = 0
    for i in range(0, len(a), HASHES_PER_IMAGE):
        x, y = a[i:i + HASHES_PER_IMAGE], b[i:i + HASHES_PER_IMAGE]
        bits = int(min(popcount(x[0] ^ y).min(), popcount(y[0] ^ x).min()))
        if bits > threshold:
            return None
        worst = max(worst, bits)
    return worst


def verify_multi(left: Hashed, a: np.ndarray, right: Hashed, b: np.ndarray, bits: np.ndarray,
                 threshold: int) -> tuple[np.ndarray, np.ndarray]:
    """Keep the pairs whose records match on every image (pairs of one-image records pass as found)."""
    keep = np.ones(len(a), bool)
    bits = bits.astype(np.int64).copy()
    multi = np.flatnonzero((left.images[a] != 1) | (right.images[b] != 1))
    for k in multi.tolist():
        worst = positions_match(left.phash[a[k]], right.phash[b[k]], threshold)
        if worst is None:
            keep[k] = False
        else:
            bits[k] = worst
    return keep, bits


def exact_groups(keys: pa.Array, rank: np.ndarray, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Among ``rows``, those whose key another row with a better rank has: ``(removed rows, the kept row of each)``."""
    if not len(rows):
        return rows, rows
    sub = keys.take(pa.array(rows))
    codes = pc.dictionary_encode(sub).indices.to_numpy(zero_copy_only=False).astype(np.int64)
    order = np.lexsort((rank[rows], codes))
    sorted_codes = codes[order]
    first = np.ones(len(order), bool)
    first[1:] = sorted_codes[1:] != sorted_codes[:-1]
    group_start = np.maximum.accumulate(np.where(first, np.arange(len(order)), 0))
    kept_of = rows[order[group_start]]
    removed = ~first
    return rows[order[removed]], kept_of[removed]


def greedy(a: np.ndarray, b: np.ndarray, weight: np.ndarray, rank: np.ndarray, alive: np.ndarray,
           better_weight: str = "low") -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Greedy removal over pairs (see the module docstring): ``(removed rows, the row each copies, the pair's weight)``.

    Pairs with a row not ``alive`` are ignored. A row removed by several candidates is removed by the one first in
    the keep order.
    """
    ok = alive[a] & alive[b]
    a, b, weight = a[ok], b[ok], weight[ok]
    swap = rank[a] > rank[b]
    u, v = np.where(swap, b, a), np.where(swap, a, b)
    order = np.lexsort((rank[v], rank[u]))
    removed = np.zeros(len(alive), bool)
    out_v, out_u, out_w = [], [], []
    for uu, vv, k in zip(u[order].tolist(), v[order].tolist(), order.tolist()):
        if removed[uu] or removed[vv]:
            continue
        removed[vv] = True
        out_v.append(vv)
        out_u.append(uu)
        out_w.append(weight[k])
    return (np.array(out_v, np.int64), np.array(out_u, np.int64),
            np.array(out_w, np.float64) if out_w else np.zeros(0, np.float64))


def closest_reference(rec: np.ndarray, ref: np.ndarray, score: np.ndarray, higher_better: bool
                      ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """For each record in ``rec`` the reference with the best score (ties: the smaller reference row)."""
    if not len(rec):
        return rec, ref, score
    key = -score if higher_better else score
    order = np.lexsort((ref, key, rec))
    first = np.ones(len(order), bool)
    first[1:] = rec[order][1:] != rec[order][:-1]
    pick = order[first]
    return rec[pick], ref[pick], score[pick]
