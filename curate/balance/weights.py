"""Concept tags as flat arrays, concept frequencies and per-record weights for ``curate resample``.

Everything here works on columns: a record's tags are ``flat[offsets[i]:offsets[i+1]]``
(the Arrow list layout; a ``(records, K)`` matrix when every record has K tags), sources
stay dictionary-encoded, and per-tag temporaries are made a block of records at a time
(:data:`BLOCK`), so a driver holding 10M records × 5 tags needs about the size of those
columns. Reading ``tags.parquet`` into :class:`TagArrays` is :mod:`curate.balance.tags_file`.
See :mod:`curate.balance.resample` for the weighting rules.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa

from curate.balance.config import WEIGHTINGS
from curate.core.columns import source_names
from curate.core.errors import UserError
from curate.core.threads import map_split

BLOCK = 1 << 20
"""Records per block of per-tag temporaries."""
LOOKUP_BLOCK = 1 << 16
"""Records per block of the weight lookups: their looked-up values stay in the CPU cache (2.5 MiB at K = 5)."""
COUNT_BLOCK = BLOCK // 4
"""Records per block of the concept counts: ``bincount`` copies its indices to int64, and a copy
under glibc's 32 MiB mmap limit is reused from the heap instead of being faulted in again."""


@dataclass
class TagArrays:
    """The tags of every record as flat arrays (record ``i`` has ``flat[offsets[i]:offsets[i+1]]``).

    Sources are dictionary codes (``codes`` into ``source_names``), and so are languages when the tags have
    them (``lang`` into ``lang_names``). When every record has
    exactly K tags (the usual output of ``curate tag``), ``width`` is K and ``offsets`` is None:
    the tags are a ``(records, K)`` matrix and the per-record reductions work on its columns.
    That matrix may be stored in parts of whole records (``flat`` a tuple: the row groups as
    read, not copied); :meth:`parts` and :meth:`blocks` walk them.
    """

    ids: pa.Array | pa.ChunkedArray
    codes: np.ndarray
    source_names: list[str]
    offsets: np.ndarray | None
    flat: np.ndarray | tuple[np.ndarray, ...]
    taggable: int | None
    width: int | None = None
    text: np.ndarray | None = None  # one row per text (match --per text): the text's index in its record
    lang: np.ndarray | None = None  # the language each row counts under: codes into lang_names
    lang_names: list[str] = field(default_factory=list)

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

    def parts(self) -> list[tuple[int, np.ndarray]]:
        """``(first record, flat tags)`` of each stored part (one part unless ``flat`` is a tuple)."""
        if isinstance(self.flat, np.ndarray):
            return [(0, self.flat)]
        found, first = [], 0
        for part in self.flat:
            found.append((first, part))
            first += part.size // int(self.width or 1)
        return found

    def max_tag(self) -> int:
        """The largest concept index of any tag, -1 without tags."""
        return max((int(part.max()) for _, part in self.parts() if part.size), default=-1)

    def blocks(self, size: int | None = None) -> Iterator[tuple[int, int, np.ndarray, np.ndarray]]:
        """``(first record, end record, flat tags, offsets from 0)`` for consecutive blocks of records
        (at most ``size`` records; a block never spans two parts)."""
        size = size or BLOCK
        if self.offsets is None:  # every record has k tags: one offsets array serves every block
            k = int(self.width or 0)
            steps = np.arange(0, min(size, len(self)) * k + 1, k, dtype=np.int64)
            for first, part in self.parts():
                records = part.size // k if k else 0
                for lo in range(0, records, size):
                    hi = min(records, lo + size)
                    yield first + lo, first + hi, part[lo * k:hi * k], steps[:hi - lo + 1]
            return
        for lo in range(0, len(self), size):
            hi = min(len(self), lo + size)
            start, end = int(self.offsets[lo]), int(self.offsets[hi])
            yield lo, hi, self.flat[start:end], self.offsets[lo:hi + 1] - start


def uniform_width(offsets: np.ndarray) -> int | None:
    """K when every record of the list offsets has exactly K > 0 tags, else None."""
    n = len(offsets) - 1
    if n <= 0 or offsets[-1] % n:
        return None
    k = int(offsets[-1] // n)
    if k == 0:
        return None
    return k if np.array_equal(offsets, np.arange(0, k * n + 1, k, dtype=np.int64)) else None


def keep_best(tags: TagArrays, use_k: int) -> TagArrays:
    """Keep only the ``use_k`` best tags of every record (lists are best first)."""
    if use_k < 1:
        raise UserError(f"--use-k must be at least 1, got {use_k}")
    lengths = tags.lengths
    if not lengths.size or lengths.max() <= use_k:
        return tags
    if tags.width is not None:
        kept = tuple(np.ascontiguousarray(part.reshape(-1, tags.width)[:, :use_k]).ravel() for _, part in tags.parts())
        return TagArrays(tags.ids, tags.codes, tags.source_names, None, kept[0] if len(kept) == 1 else kept,
                         tags.taggable, use_k, tags.text, tags.lang, tags.lang_names)
    position = np.arange(tags.flat.size, dtype=np.int64) - np.repeat(tags.offsets[:-1], lengths)
    new_lengths = np.minimum(lengths, use_k)
    offsets = np.zeros(len(lengths) + 1, np.int64)
    np.cumsum(new_lengths, out=offsets[1:])
    width = uniform_width(offsets)
    return TagArrays(tags.ids, tags.codes, tags.source_names, None if width else offsets, tags.flat[position < use_k],
                     tags.taggable, width, tags.text, tags.lang, tags.lang_names)


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
    everyone = per_record is None or (per_record.dtype == bool and bool(per_record.all()))
    ones = per_record is not None and per_record.dtype != bool and (not per_record.size or per_record.max() <= 1)

    def count(blocks: list[tuple[int, int, np.ndarray, np.ndarray]]) -> np.ndarray:
        counts = np.zeros(n, np.int64)
        for lo, hi, flat, offsets in blocks:
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

    # Integer counts: the sum over threads is exact whatever the split.
    return sum(map_split(count, list(tags.blocks(min(COUNT_BLOCK, BLOCK)))), np.zeros(n, np.int64))


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
            _reduce_columns(values.reshape(-1, k), ufunc, out[lo:hi], np.empty(hi - lo, np.float64))
            continue
        nonempty = np.diff(offsets) > 0
        out[lo:hi][nonempty] = ufunc.reduceat(values, offsets[:-1][nonempty])
    return out


def _reduce_columns(matrix: np.ndarray, ufunc: np.ufunc, out: np.ndarray, rest: np.ndarray) -> None:
    """``out`` = ``ufunc`` over the columns of ``matrix`` in the order of ``ufunc.reduceat``: the first column,
    then the others accumulated left to right in ``rest`` (a buffer of ``len(matrix)``)."""
    k = matrix.shape[1]
    if k == 1:
        out[:] = matrix[:, 0]
        return
    if k == 2:
        ufunc(matrix[:, 0], matrix[:, 1], out=out)
        return
    ufunc(matrix[:, 1], matrix[:, 2], out=rest)
    for j in range(3, k):
        ufunc(rest, matrix[:, j], out=rest)
    ufunc(matrix[:, 0], rest, out=out)


def _lookup_per_record(tags: TagArrays, table: np.ndarray, ufunc: np.ufunc,
                       out: np.ndarray | None = None) -> np.ndarray:
    """``ufunc`` over ``table[tag]`` of each record, uniform width ≤ 8: one column of the matrix at a time.

    The same order as :func:`per_record` (first tag, then the rest left to right), so the same bits.
    Records go :data:`LOOKUP_BLOCK` at a time through two buffers that stay in the CPU cache. ``out``
    (``float64``, one per record) may be given, e.g. already faulted in by another thread.
    """
    k = int(tags.width or 0)
    out = np.empty(len(tags), np.float64) if out is None or out.shape != (len(tags),) else out
    size = min(LOOKUP_BLOCK, len(tags))
    blocks = [(first + lo, matrix[lo:lo + LOOKUP_BLOCK]) for first, part in tags.parts()
              for matrix in [part.reshape(-1, k)] for lo in range(0, len(matrix), LOOKUP_BLOCK)]

    def look_up(mine: list[tuple[int, np.ndarray]]) -> None:  # each thread its own buffers, its own records
        looked, rest = np.empty((size, k), np.float64), np.empty(size, np.float64)
        for lo, block in mine:
            m = len(block)
            np.take(table, block, out=looked[:m])
            _reduce_columns(looked[:m], ufunc, out[lo:lo + m], rest[:m])

    map_split(look_up, blocks)
    return out


def record_weights(tags: TagArrays, counts: np.ndarray, *, weighting: str = "mean",
                   temperature: float = 1.0, out: np.ndarray | None = None) -> np.ndarray:
    """Inverse-frequency weight of every record (0 for records without tags); see :mod:`curate.balance.resample`.

    ``out``: a buffer of one ``float64`` per record to write them into when every record has the same
    K ≤ 8 tags (otherwise a new array is returned).
    """
    if weighting not in WEIGHTINGS:
        raise UserError(f"--weighting {weighting}: use one of {', '.join(WEIGHTINGS)}")
    with np.errstate(divide="ignore"):
        per_concept = np.power(counts.astype(np.float64), -float(temperature))  # concepts never seen: unused

    def lookup(flat: np.ndarray, lo: int, hi: int) -> np.ndarray:
        return per_concept[flat]

    reduce = _lookup_per_record if tags.width is not None and tags.width <= 8 else None
    if weighting == "max":
        return reduce(tags, per_concept, np.maximum, out) if reduce else per_record(tags, lookup, np.maximum)
    total = reduce(tags, per_concept, np.add, out) if reduce else per_record(tags, lookup, np.add)
    if weighting == "sum":
        return total
    if tags.width is not None:
        total /= float(tags.width)
        return total
    lengths = tags.lengths
    return np.divide(total, lengths, out=np.zeros_like(total), where=lengths > 0)


def kth_smallest(values: np.ndarray, k: int) -> float:
    """The ``k``-th smallest of ``values`` (0-based), exactly, without partitioning all of them when many.

    A strided sample bounds it from above; when at least ``k + 1`` values lie under
    the bound, the answer is the ``k``-th smallest of those (a few times ``k`` values
    instead of all); otherwise (an unlucky bound) all values are partitioned.
    """
    n = values.size
    if n >= 1 << 20 and k < n // 2:
        stride = max(1, n // (1 << 16))
        sample = values[::stride]
        share = (k + 1) / n
        margin = 6 * np.sqrt(share * (1 - share) / sample.size) + 2 / sample.size
        j = min(sample.size - 1, int(np.ceil((share + margin) * sample.size)))
        bound = np.partition(sample, j)[j]
        under = values[values <= bound]
        if under.size > k:
            return float(np.partition(under, k)[k])
    return float(np.partition(values, k)[k])


#: The most copies of one record a selection holds (``selection.parquet``'s ``copies`` is a 32-bit integer).
MAX_COPIES = (1 << 31) - 1


def draw(weights: np.ndarray, target: int, rng: np.random.Generator,
         exponentials: np.ndarray | None = None, copies: np.ndarray | None = None) -> np.ndarray:
    """Copies per record: ``target`` records without replacement (∝ weight), or with replacement past the pool.

    Records of weight 0 are never drawn. Without replacement the chosen records
    are those of the ``target`` smallest keys ``E / w`` (found by one partition of
    the keys; equal keys at the boundary go to the earliest records).

    ``exponentials``: ``rng.standard_exponential(m)`` drawn beforehand (e.g. in another thread, from a
    generator in the same state as ``rng``), ``m`` ≥ the pool: the first ``pool`` of them are the
    same numbers ``rng`` would give, so the draw is the same; they are overwritten. ``copies``: an
    ``int32`` buffer of one per record for the result (e.g. faulted in by another thread).
    """
    if copies is None or copies.shape != weights.shape or copies.dtype != np.int32:
        copies = np.empty(len(weights), np.int32)
    copies.fill(0)
    positive = weights > 0
    everyone = bool(positive.all())
    pool = None if everyone else np.flatnonzero(positive)
    size = len(weights) if everyone else pool.size
    del positive
    if target <= 0 or size == 0:
        return copies
    w = weights if everyone else weights[pool]
    if target <= size:
        if exponentials is not None and exponentials.size >= size:
            keys = exponentials[:size]  # the first `size` numbers of the same stream
        else:
            keys = rng.standard_exponential(size, out=np.empty(size, np.float64))
        keys /= w
        del w  # a copy (when not everyone is in the pool) freed before the partition
        if target < size:
            kth = kth_smallest(keys, target - 1)
            chosen = np.flatnonzero(keys <= kth)
            if chosen.size > target:  # keys equal to the boundary: the earliest records take the places left
                keep = keys[chosen] < kth
                keep[np.flatnonzero(~keep)[:target - int(np.count_nonzero(keep))]] = True
                chosen = chosen[keep]
        else:
            chosen = np.arange(size)
        copies[chosen if everyone else pool[chosen]] = 1
    else:
        drawn = rng.multinomial(target, w / w.sum())  # 64-bit counts: checked before they are stored in 32 bits
        most = int(drawn.max())
        if most > MAX_COPIES:
            raise UserError(f"a target of {target:,} copies: a record would be drawn {most:,} times, more than the "
                            f"{MAX_COPIES:,} copies a selection holds per record; give a smaller --target or --fraction")
        copies[slice(None) if everyone else pool] = drawn
    return copies


TagProbabilities = Callable[[np.ndarray, int, int], np.ndarray]
"""``p(flat tags of a block, first record, end record)``: each tag's probability of passing."""


def concept_probabilities(counts: np.ndarray, t: int) -> TagProbabilities:
    """MetaCLIP's per-entry probability ``t / max(count, t)`` looked up for each tag."""
    if t < 1:
        raise UserError(f"--t must be at least 1, got {t}")
    p_concept = t / np.maximum(counts.astype(np.float64), float(t))
    return lambda flat, lo, hi: p_concept[flat]


def keep_probabilities(tags: TagArrays, p_tags: TagProbabilities) -> np.ndarray:
    """``1 - Π_c (1 - p(c))`` over each record's tags (0 for records without tags)."""
    def log_miss(flat: np.ndarray, lo: int, hi: int) -> np.ndarray:
        with np.errstate(divide="ignore"):
            return np.log1p(-p_tags(flat, lo, hi))  # -inf when p = 1

    miss = per_record(tags, log_miss, np.add)  # log Π (1 - p)
    return np.where(tags.has_tags(), -np.expm1(miss), 0.0)


def draw_metaclip(tags: TagArrays, counts: np.ndarray, t: int, rng: np.random.Generator,
                  eligible: np.ndarray, *, p_tags: TagProbabilities | None = None) -> tuple[np.ndarray, np.ndarray]:
    """MetaCLIP's rule: returns ``(copies 0/1, keep probability)`` per record.

    Each tag passes with ``p_tags`` (default :func:`concept_probabilities` of ``counts`` and ``t``); a record
    is kept when any of its tags passes. The per-tag draws come block by block from one stream (the same
    numbers as one draw of all).
    """
    p_tags = p_tags if p_tags is not None else concept_probabilities(counts, t)

    def passes(flat: np.ndarray, lo: int, hi: int) -> np.ndarray:
        return (rng.random(flat.size) < p_tags(flat, lo, hi)).astype(np.float64)

    keep = per_record(tags, passes, np.maximum) > 0
    prob = keep_probabilities(tags, p_tags)
    keep &= eligible
    return keep.astype(np.int32), np.where(eligible, prob, 0.0)
