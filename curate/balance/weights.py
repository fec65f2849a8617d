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
from curate.core.columns import source_codes, source_names
from curate.core.errors import UserError

BLOCK = 1 << 20
"""Records per block of per-tag temporaries."""
COUNT_BLOCK = BLOCK // 4
"""Records per block of the concept counts: ``bincount`` copies its indices to int64, and a copy
under glibc's 32 MiB mmap limit is reused from the heap instead of being faulted in again."""


@dataclass
class TagArrays:
    """The tags of every record as flat arrays (record ``i`` has ``flat[offsets[i]:offsets[i+1]]``).

    Sources are dictionary codes (``codes`` into ``source_names``). When every record has
    exactly K tags (the usual output of ``curate tag``), ``width`` is K and ``offsets`` is None:
    the tags are a ``(records, K)`` matrix and the per-record reductions work on its columns.
    """

    ids: pa.Array | pa.ChunkedArray
    codes: np.ndarray
    source_names: list[str]
    offsets: np.ndarray | None
    flat: np.ndarray
    taggable: int | None
    width: int | None = None

    def __len__(self) -> int:
        return len(self.codes)

    @property
    def lengths(self) -> np.ndarray:
        """Number of tags of each record."""
        if self.offsets is None:
            return np.full(len(self), self.width, np.int64)
        return np.diff(self.offsets)

    def has_tags(self) -> np.ndarray:
        """Whether each record has at least one tag."""
        if self.offsets is None:
            return np.ones(len(self), bool)
        return self.offsets[1:] > self.offsets[:-1]

    def source_column(self, index: np.ndarray) -> pa.Array:
        """The source names of the records ``index`` as a string column."""
        return source_names(self.codes[index], self.source_names)

    def blocks(self, size: int | None = None) -> Iterator[tuple[int, int, np.ndarray, np.ndarray]]:
        """``(first record, end record, flat tags, offsets from 0)`` for consecutive blocks of records."""
        size = size or BLOCK
        k = int(self.width or 0)
        steps = np.arange(0, min(size, len(self)) * k + 1, k, dtype=np.int64) if self.offsets is None else None
        for lo in range(0, len(self), size):
            hi = min(len(self), lo + size)
            if steps is not None:  # every record has k tags: one offsets array serves every block
                yield lo, hi, self.flat[lo * k:hi * k], steps[:hi - lo + 1]
                continue
            start, end = int(self.offsets[lo]), int(self.offsets[hi])
            yield lo, hi, self.flat[start:end], self.offsets[lo:hi + 1] - start


def _uniform_width(offsets: np.ndarray) -> int | None:
    n = len(offsets) - 1
    if n <= 0 or offsets[-1] % n:
        return None
    k = int(offsets[-1] // n)
    if k == 0:
        return None
    return k if np.array_equal(offsets, np.arange(0, k * n + 1, k, dtype=np.int64)) else None


def _concept_values(chunk: pa.Array) -> tuple[np.ndarray, np.ndarray]:
    """``(lengths, flat int32 values)`` of one list chunk; null lists count as empty."""
    if chunk.null_count:
        chunk = pc.if_else(pc.is_null(chunk), pa.scalar([], chunk.type), chunk)
    offsets = chunk.offsets.to_numpy()
    values = chunk.values.slice(int(offsets[0]), int(offsets[-1] - offsets[0]))
    values = values.to_numpy(zero_copy_only=False)
    return np.diff(offsets), values if values.dtype == np.int32 else values.astype(np.int32)


def _leaf_values(meta: pq.FileMetaData, column: str) -> int:
    """Upper bound of the list values of ``column`` (its leaf level count over all row groups)."""
    total = 0
    for g in range(meta.num_row_groups):
        group = meta.row_group(g)
        total += sum(group.column(j).num_values for j in range(group.num_columns)
                     if group.column(j).path_in_schema.split(".")[0] == column)
    return total


def open_tags(path: str | os.PathLike[str]) -> pq.ParquetFile:
    """Open ``tags.parquet`` (``source`` read dictionary-encoded) and check its columns.

    Raises:
        UserError: missing file or columns.
    """
    path = Path(path)
    if not path.is_file():
        raise UserError(f"--tags {path}: no such file; make it with curate tag")
    try:
        parquet = pq.ParquetFile(path, read_dictionary=["source"])
        names = parquet.schema_arrow.names
    except Exception as exc:  # noqa: BLE001 - pyarrow raises several types
        raise UserError(f"--tags {path}: not a readable Parquet file ({exc})") from None
    missing = {"id", "concepts"} - set(names)
    if missing:
        raise UserError(f"--tags {path}: missing column(s) {', '.join(sorted(missing))}; expected id, concepts")
    return parquet


def read_tags(path: str | os.PathLike[str]) -> TagArrays:
    """Read ``tags.parquet`` (``id``, ``source``, ``concepts``) into flat arrays, one row group at a time.

    :func:`read_tag_concepts` then :func:`read_tag_ids`; a caller may run the two
    in different threads (each with its own :func:`open_tags`).

    Raises:
        UserError: missing file or columns.
    """
    arrays = read_tag_concepts(open_tags(path), path)
    arrays.ids = read_tag_ids(open_tags(path))
    return arrays


def read_tag_ids(parquet: pq.ParquetFile) -> pa.Array:
    """The ``id`` column as one string array.

    One array rather than a chunk per row group: taking rows from a chunked
    string column concatenates its chunks first, on every take.
    """
    groups = range(parquet.num_row_groups)
    chunks = [c for g in groups for c in parquet.read_row_group(g, columns=["id"]).column(0).chunks]
    ids = pa.concat_arrays(chunks) if chunks else pa.array([], parquet.schema_arrow.field("id").type)
    del chunks
    return ids if pa.types.is_string(ids.type) else ids.cast(pa.string())


def read_tag_concepts(parquet: pq.ParquetFile, path: str | os.PathLike[str]) -> TagArrays:
    """Concepts and sources of every record, without the ids (``ids`` is an empty column: see :func:`read_tags`).

    The concept lists are copied straight into one flat ``int32`` array, one row
    group at a time, and sources are read dictionary-encoded, so the peak stays
    near the size of the columns.

    Raises:
        UserError: negative concept indices.
    """
    schema = parquet.schema_arrow
    groups = range(parquet.num_row_groups)
    cols = ["concepts"] + (["source"] if "source" in schema.names else [])
    n = parquet.metadata.num_rows
    flat = np.empty(_leaf_values(parquet.metadata, "concepts"), np.int32)  # untouched pages cost nothing
    width: int | None = None  # K while every record so far has K tags; offsets are made only when not
    offsets: np.ndarray | None = None
    sources, row, used = [], 0, 0
    for g in groups:
        group = parquet.read_row_group(g, columns=cols)
        if "source" in cols:
            sources.extend(group.column("source").chunks)
        for chunk in group.column("concepts").chunks:
            lengths, values = _concept_values(chunk)
            if used + values.size > flat.size:  # metadata undercounted: grow (not expected)
                flat = np.concatenate([flat[:used], np.empty(values.size, np.int32)])
            flat[used:used + values.size] = values
            if offsets is None and lengths.size:
                width = width or int(lengths[0]) or None
                if width is None or not (lengths == width).all():
                    offsets = np.zeros(n + 1, np.int64)
                    offsets[:row + 1] = np.arange(row + 1, dtype=np.int64) * (width or 0)
                    width = None
            if offsets is not None:
                np.cumsum(lengths, out=offsets[row + 1:row + 1 + len(lengths)])
                offsets[row + 1:row + 1 + len(lengths)] += used
            row, used = row + len(lengths), used + values.size
        del group  # the allocator keeps its pages for the next row group (releasing them costs page faults)
    flat = flat[:used]
    if flat.size and flat.min() < 0:
        raise UserError(f"--tags {path}: negative concept indices; concepts are vocabulary lines - 1")
    if width is None and offsets is None:  # no records
        offsets = np.zeros(n + 1, np.int64)
    codes, names = source_codes(pa.chunked_array(sources) if sources else None, n)
    meta = {k.decode(): v.decode() for k, v in (schema.metadata or {}).items()}
    taggable = int(meta["concepts_embedded"]) if "concepts_embedded" in meta else None
    return TagArrays(pa.array([], pa.string()), codes, names, offsets, flat, taggable, width)


def keep_best(tags: TagArrays, use_k: int) -> TagArrays:
    """Keep only the ``use_k`` best tags of every record (lists are best first)."""
    if use_k < 1:
        raise UserError(f"--use-k must be at least 1, got {use_k}")
    lengths = tags.lengths
    if not lengths.size or lengths.max() <= use_k:
        return tags
    if tags.width is not None:
        flat = np.ascontiguousarray(tags.flat.reshape(-1, tags.width)[:, :use_k]).ravel()
        return TagArrays(tags.ids, tags.codes, tags.source_names, None, flat, tags.taggable, use_k)
    position = np.arange(tags.flat.size, dtype=np.int64) - np.repeat(tags.offsets[:-1], lengths)
    new_lengths = np.minimum(lengths, use_k)
    offsets = np.zeros(len(lengths) + 1, np.int64)
    np.cumsum(new_lengths, out=offsets[1:])
    width = _uniform_width(offsets)
    return TagArrays(tags.ids, tags.codes, tags.source_names, None if width else offsets, tags.flat[position < use_k],
                     tags.taggable, width)


def _block_tags(tags: TagArrays, lo: int, hi: int, flat: np.ndarray, offsets: np.ndarray,
                rows: np.ndarray) -> np.ndarray:
    """The tags of the records ``rows`` (block positions, ascending) of one block, flat."""
    if tags.width is not None:
        return flat.reshape(-1, tags.width)[rows].ravel()
    mask = np.zeros(hi - lo, bool)
    mask[rows] = True
    return flat[np.repeat(mask, np.diff(offsets))]


def concept_counts(tags: TagArrays, n: int, per_record: np.ndarray | None = None) -> np.ndarray:
    """Occurrences of each concept over the records, each counted ``per_record`` times (default once).

    ``per_record`` may be a boolean mask (records counted or not) or counts (e.g. copies).
    """
    counts = np.zeros(n, np.int64)
    everyone = per_record is None or (per_record.dtype == bool and bool(per_record.all()))
    ones = per_record is not None and per_record.dtype != bool and (not per_record.size or per_record.max() <= 1)
    for lo, hi, flat, offsets in tags.blocks(min(COUNT_BLOCK, BLOCK)):
        if everyone:
            counts += np.bincount(flat, minlength=n)
            continue
        mult = per_record[lo:hi]
        rows = np.flatnonzero(mult)
        if mult.dtype == bool or ones:
            counts += np.bincount(_block_tags(tags, lo, hi, flat, offsets, rows), minlength=n)
        else:
            picked = _block_tags(tags, lo, hi, flat, offsets, rows)
            times = np.repeat(mult[rows].astype(np.float64), np.diff(offsets)[rows])
            counts += np.rint(np.bincount(picked, weights=times, minlength=n)).astype(np.int64)
    return counts


def per_record(tags: TagArrays, per_tag: Callable[[np.ndarray, int, int], np.ndarray], ufunc: np.ufunc,
               empty: float = 0.0) -> np.ndarray:
    """Reduce ``per_tag(flat tags of a block, first record, end record)`` per record with ``ufunc``.

    Records without tags get ``empty``. With a uniform width of at most 8 tags the
    reduction runs over the columns of a ``(records, K)`` view in the order of
    ``ufunc.reduceat`` (first tag, then the others accumulated left to right), so
    both paths give the same bits.
    """
    out = np.full(len(tags), empty, dtype=np.float64)
    k = tags.width
    for lo, hi, flat, offsets in tags.blocks():
        if not flat.size:
            continue
        values = per_tag(flat, lo, hi)
        if k is not None and k <= 8:
            matrix = values.reshape(-1, k)
            if k == 1:
                out[lo:hi] = matrix[:, 0]
                continue
            rest = matrix[:, 1].copy()
            for j in range(2, k):
                ufunc(rest, matrix[:, j], out=rest)
            ufunc(matrix[:, 0], rest, out=out[lo:hi])
            continue
        nonempty = np.diff(offsets) > 0
        out[lo:hi][nonempty] = ufunc.reduceat(values, offsets[:-1][nonempty])
    return out


def _lookup_per_record(tags: TagArrays, table: np.ndarray, ufunc: np.ufunc) -> np.ndarray:
    """``ufunc`` over ``table[tag]`` of each record, uniform width ≤ 8: one column of the matrix at a time.

    The same order as :func:`per_record` (first tag, then the rest left to right), so the same bits.
    """
    k = int(tags.width or 0)
    out = np.empty(len(tags), np.float64)
    matrix = tags.flat.reshape(-1, k)
    for lo in range(0, len(tags), BLOCK):
        block = matrix[lo:lo + BLOCK]
        if k == 1:
            np.take(table, block[:, 0], out=out[lo:lo + len(block)])
            continue
        rest = table[block[:, 1]]
        for j in range(2, k):
            ufunc(rest, table[block[:, j]], out=rest)
        ufunc(table[block[:, 0]], rest, out=out[lo:lo + len(block)])
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

    reduce = _lookup_per_record if tags.width is not None and tags.width <= 8 else None
    if weighting == "max":
        return reduce(tags, per_concept, np.maximum) if reduce else per_record(tags, lookup, np.maximum)
    total = reduce(tags, per_concept, np.add) if reduce else per_record(tags, lookup, np.add)
    if weighting == "sum":
        return total
    if tags.width is not None:
        total /= float(tags.width)
        return total
    lengths = tags.lengths
    return np.divide(total, lengths, out=np.zeros_like(total), where=lengths > 0)


def draw(weights: np.ndarray, target: int, rng: np.random.Generator) -> np.ndarray:
    """Copies per record: ``target`` records without replacement (∝ weight), or with replacement past the pool.

    Records of weight 0 are never drawn. Without replacement the chosen records
    are those of the ``target`` smallest keys ``E / w`` (found by one partition of
    the keys; equal keys at the boundary go to the earliest records).
    """
    copies = np.zeros(len(weights), np.int32)
    positive = weights > 0
    everyone = bool(positive.all())
    pool = None if everyone else np.flatnonzero(positive)
    size = len(weights) if everyone else pool.size
    del positive
    if target <= 0 or size == 0:
        return copies
    w = weights if everyone else weights[pool]
    if target <= size:
        keys = rng.standard_exponential(size)
        keys /= w
        del w  # a copy (when not everyone is in the pool) freed before the partition
        if target < size:
            kth = np.partition(keys, target - 1)[target - 1]
            chosen = np.flatnonzero(keys <= kth)
            if chosen.size > target:  # keys equal to the boundary: the earliest records take the places left
                keep = keys[chosen] < kth
                keep[np.flatnonzero(~keep)[:target - int(np.count_nonzero(keep))]] = True
                chosen = chosen[keep]
        else:
            chosen = np.arange(size)
        copies[chosen if everyone else pool[chosen]] = 1
    else:
        copies[slice(None) if everyone else pool] = rng.multinomial(target, w / w.sum()).astype(np.int32)
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
    prob = np.where(tags.has_tags(), -np.expm1(miss), 0.0)
    keep &= eligible
    return keep.astype(np.int32), np.where(eligible, prob, 0.0)
