"""Concept tags as flat arrays, concept frequencies and per-record weights for ``curate resample``.

Everything here works on columns: a record's tags are ``flat[offsets[i]:offsets[i+1]]``
(the Arrow list layout, read without a copy), sources stay dictionary-encoded, and
per-tag temporaries are made a block of records at a time (:data:`BLOCK`), so a
driver holding 10M records × 5 tags needs about the size of those columns.
See :mod:`curate.balance.resample` for the weighting rules.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from curate.balance.config import WEIGHTINGS
from curate.core.errors import UserError

BLOCK = 1 << 20
"""Records per block of per-tag temporaries."""


@dataclass
class TagArrays:
    """The tags of every record as flat arrays (record ``i`` has ``flat[offsets[i]:offsets[i+1]]``).

    ``sources`` is dictionary-encoded (``codes`` into ``source_names``).
    """

    ids: pa.Array
    sources: pa.DictionaryArray
    offsets: np.ndarray
    flat: np.ndarray
    taggable: int | None

    def __len__(self) -> int:
        return len(self.offsets) - 1

    @property
    def lengths(self) -> np.ndarray:
        """Number of tags of each record."""
        return np.diff(self.offsets)

    @property
    def codes(self) -> np.ndarray:
        """Source code of each record (an index into :attr:`source_names`)."""
        return self.sources.indices.to_numpy(zero_copy_only=False)

    @property
    def source_names(self) -> list[str]:
        """The distinct sources."""
        return self.sources.dictionary.to_pylist()

    def blocks(self, size: int | None = None) -> Iterator[tuple[int, int, np.ndarray, np.ndarray]]:
        """``(first record, end record, flat tags, offsets from 0)`` for consecutive blocks of records."""
        size = size or BLOCK
        for lo in range(0, len(self), size):
            hi = min(len(self), lo + size)
            start, end = int(self.offsets[lo]), int(self.offsets[hi])
            yield lo, hi, self.flat[start:end], self.offsets[lo:hi + 1] - start


def _dictionary_sources(column: pa.ChunkedArray | None, n: int) -> pa.DictionaryArray:
    if column is None:
        return pa.DictionaryArray.from_arrays(pa.array(np.zeros(n, np.int32)), pa.array(["unknown"]))
    arr = column.combine_chunks() if isinstance(column, pa.ChunkedArray) else column
    if not pa.types.is_dictionary(arr.type):
        arr = arr.cast(pa.string()).dictionary_encode()
    if arr.null_count:
        arr = pc.fill_null(arr.cast(pa.string()), "unknown").dictionary_encode()
    return arr


def read_tags(path: str | os.PathLike[str]) -> TagArrays:
    """Read ``tags.parquet`` (``id``, ``source``, ``concepts``) into flat arrays.

    Raises:
        UserError: missing file or columns.
    """
    path = Path(path)
    if not path.is_file():
        raise UserError(f"--tags {path}: no such file; make it with curate tag")
    try:
        schema = pq.read_schema(path)
    except Exception as exc:  # noqa: BLE001 - pyarrow raises several types
        raise UserError(f"--tags {path}: not a readable Parquet file ({exc})") from None
    missing = {"id", "concepts"} - set(schema.names)
    if missing:
        raise UserError(f"--tags {path}: missing column(s) {', '.join(sorted(missing))}; expected id, concepts")
    cols = ["id", "concepts"] + (["source"] if "source" in schema.names else [])
    table = pq.read_table(path, columns=cols, read_dictionary=["source"] if "source" in cols else None)
    ids = table.column("id").combine_chunks().cast(pa.string())
    sources = _dictionary_sources(table.column("source") if "source" in cols else None, table.num_rows)
    concepts = table.column("concepts").combine_chunks()
    del table
    if concepts.null_count:
        concepts = pc.if_else(pc.is_null(concepts), pa.scalar([], concepts.type), concepts)
    offsets = concepts.offsets.to_numpy().astype(np.int64)
    flat = concepts.values.slice(int(offsets[0]), int(offsets[-1] - offsets[0]))
    offsets -= offsets[0]
    flat = flat.to_numpy(zero_copy_only=False).astype(np.int32, copy=False)
    if flat.size and flat.min() < 0:
        raise UserError(f"--tags {path}: negative concept indices")
    meta = {k.decode(): v.decode() for k, v in (schema.metadata or {}).items()}
    taggable = int(meta["concepts_embedded"]) if "concepts_embedded" in meta else None
    return TagArrays(ids, sources, offsets, flat, taggable)


def keep_best(tags: TagArrays, use_k: int) -> TagArrays:
    """Keep only the ``use_k`` best tags of every record (lists are best first)."""
    if use_k < 1:
        raise UserError(f"--use-k must be at least 1, got {use_k}")
    lengths = tags.lengths
    if not lengths.size or lengths.max() <= use_k:
        return tags
    position = np.arange(tags.flat.size, dtype=np.int64) - np.repeat(tags.offsets[:-1], lengths)
    new_lengths = np.minimum(lengths, use_k)
    offsets = np.zeros(len(lengths) + 1, np.int64)
    np.cumsum(new_lengths, out=offsets[1:])
    return TagArrays(tags.ids, tags.sources, offsets, tags.flat[position < use_k], tags.taggable)


def concept_counts(tags: TagArrays, n: int, per_record: np.ndarray | None = None) -> np.ndarray:
    """Occurrences of each concept over the records, each counted ``per_record`` times (default once).

    ``per_record`` may be a boolean mask (records counted or not) or counts (e.g. copies).
    """
    counts = np.zeros(n, np.int64)
    for lo, hi, flat, offsets in tags.blocks():
        if per_record is None:
            counts += np.bincount(flat, minlength=n)
            continue
        mult = per_record[lo:hi]
        if mult.dtype == bool:
            counts += np.bincount(flat[np.repeat(mult, np.diff(offsets))], minlength=n)
        else:
            counts += np.rint(np.bincount(flat, weights=np.repeat(mult.astype(np.float64), np.diff(offsets)),
                                          minlength=n)).astype(np.int64)
    return counts


def per_record(tags: TagArrays, per_tag: Callable[[np.ndarray, int, int], np.ndarray], ufunc: np.ufunc,
               empty: float = 0.0) -> np.ndarray:
    """Reduce ``per_tag(flat tags of a block, first record, end record)`` per record with ``ufunc``.

    Records without tags get ``empty``.
    """
    out = np.full(len(tags), empty, dtype=np.float64)
    for lo, hi, flat, offsets in tags.blocks():
        lengths = np.diff(offsets)
        nonempty = lengths > 0
        if flat.size:
            out[lo:hi][nonempty] = ufunc.reduceat(per_tag(flat, lo, hi), offsets[:-1][nonempty])
    return out


def record_weights(tags: TagArrays, counts: np.ndarray, *, weighting: str = "mean",
                   temperature: float = 1.0) -> np.ndarray:
    """Inverse-frequency weight of every record (0 for records without tags); see :mod:`curate.balance.resample`."""
    if weighting not in WEIGHTINGS:
        raise UserError(f"--weighting {weighting}: use one of {', '.join(WEIGHTINGS)}")
    with np.errstate(divide="ignore"):
        per_concept = np.power(counts.astype(np.float64), -float(temperature))  # concepts never seen: unused

    def lookup(flat: np.ndarray, lo: int, hi: int) -> np.ndarray:
        return per_concept[flat]

    if weighting == "max":
        return per_record(tags, lookup, np.maximum)
    total = per_record(tags, lookup, np.add)
    if weighting == "sum":
        return total
    lengths = tags.lengths
    return np.divide(total, lengths, out=np.zeros_like(total), where=lengths > 0)


def draw(weights: np.ndarray, target: int, rng: np.random.Generator) -> np.ndarray:
    """Copies per record: ``target`` records without replacement (∝ weight), or with replacement past the pool.

    Records of weight 0 are never drawn.
    """
    copies = np.zeros(len(weights), np.int32)
    pool = np.flatnonzero(weights > 0)
    if target <= 0 or pool.size == 0:
        return copies
    w = weights[pool]
    if target <= pool.size:
        keys = rng.standard_exponential(pool.size)
        keys /= w
        del w  # freed before the partition's index array
        chosen = np.argpartition(keys, target - 1)[:target] if target < pool.size else np.arange(pool.size)
        copies[pool[chosen]] = 1
    else:
        copies[pool] = rng.multinomial(target, w / w.sum()).astype(np.int32)
    return copies


def draw_metaclip(tags: TagArrays, counts: np.ndarray, t: int, rng: np.random.Generator,
                  eligible: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """MetaCLIP's rule: returns ``(copies 0/1, keep probability)`` per record.

    The per-tag draws come block by block from one stream (the same numbers as one draw of all).
    """
    if t < 1:
        raise UserError(f"--t must be at least 1, got {t}")
    p_concept = t / np.maximum(counts.astype(np.float64), float(t))

    def passes(flat: np.ndarray, lo: int, hi: int) -> np.ndarray:
        return (rng.random(flat.size) < p_concept[flat]).astype(np.float64)

    def log_miss(flat: np.ndarray, lo: int, hi: int) -> np.ndarray:
        with np.errstate(divide="ignore"):
            return np.log1p(-p_concept[flat])  # -inf when p = 1

    keep = per_record(tags, passes, np.maximum) > 0
    miss = per_record(tags, log_miss, np.add)  # log Π (1 - p)
    prob = np.where(tags.lengths > 0, -np.expm1(miss), 0.0)
    keep &= eligible
    return keep.astype(np.int32), np.where(eligible, prob, 0.0)
