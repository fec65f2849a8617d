"""Column helpers for driver-side steps: per-source counts and duplicate ids without a Python call per record.

At tens of millions of records a driver holds ids and sources as Arrow arrays and
works on them with numpy and pyarrow compute (dictionary encoding, ``bincount``),
so its memory stays near the size of the columns and its time near a read of them.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc


# Arrow ↔ numpy through the buffers, so that a driver's column work never imports pandas.
#
# pyarrow imports pandas the first time it converts a numpy array or a Python value
# (``pa.array``, ``pa.scalar``, a compute call given a Python value, ``to_numpy``), only to
# ask whether the object is a pandas one. That import costs about 0.3 s of CPU and holds
# the GIL all along: on two cores it stalled ``curate resample``'s reads and weighing by
# more than its own cost (10M records: 2.2–2.6 s instead of 2.9–3.8 s with it). These
# helpers build and read arrays from their buffers instead; the values are the same.
# ``tests/curate/core/test_columns.py`` checks both the values and that pandas stays out.
#
# Kept because it measured ≥ 10% at 10M records (issue 38, ``benchmarks/bench_process_tuning.py``:
# whole ``python -m curate resample`` processes on 10M records × 5 tags, pandas kept out against
# imported, medians of per-round ratios, rounds in rotated order on 2 shared cores): at load 3–4,
# 1.09× wall and 1.20× CPU (4 rounds); the code before issue 38's removals against the code
# without them and this module, 1.20× wall and 1.17× CPU (5 rounds, faster in each), most of it
# this; at load 6–15 the sets were noisier: 1.23×/1.30×, 0.85×/1.06×, 1.01×/1.02× (wall/CPU). The
# import alone: 0.42–0.44 s of CPU.
_BOOL = pa.bool_()


def to_numpy(array: pa.Array | pa.ChunkedArray, null: float | None = None) -> np.ndarray:
    """The values of a fixed-width numeric or boolean column as numpy (a view on the buffer for one numeric
    chunk without nulls; a copy when chunked, boolean or with nulls). Nulls become ``null``; without it
    they are an error."""
    if isinstance(array, pa.ChunkedArray):
        chunks = [to_numpy(chunk, null) for chunk in array.chunks]
        return np.concatenate(chunks) if chunks else np.zeros(0, array.type.to_pandas_dtype())
    if array.null_count:
        if null is None:
            raise ValueError(f"to_numpy: {array.null_count} null value(s) and no value to put in their place")
        values = to_numpy(pa.Array.from_buffers(array.type, len(array), [None, array.buffers()[1]], 0,
                                                array.offset)).copy()
        values[~to_numpy(array.is_valid())] = null
        return values
    n, offset = len(array), array.offset
    data = array.buffers()[1]
    if array.type == _BOOL:
        if not n:
            return np.zeros(0, bool)
        bits = np.frombuffer(data, np.uint8, count=(offset + n + 7) // 8)
        return np.unpackbits(bits, count=offset + n, bitorder="little")[offset:].view(bool)
    if not (pa.types.is_integer(array.type) or pa.types.is_floating(array.type)):
        raise TypeError(f"to_numpy: {array.type} is not a fixed-width number type")
    dtype = np.dtype(array.type.to_pandas_dtype())
    if not n:
        return np.zeros(0, dtype)
    return np.frombuffer(data, dtype, count=n, offset=offset * dtype.itemsize)


def from_numpy(values: np.ndarray, type: pa.DataType | None = None) -> pa.Array:  # noqa: A002 - pyarrow's name
    """A 1-D numeric or boolean numpy array as an Arrow array without nulls (no copy when contiguous and
    already of ``type``'s width), optionally of another ``type`` (cast by numpy first)."""
    values = np.asarray(values)
    if values.ndim != 1:
        raise ValueError(f"from_numpy: a 1-D array is needed, got {values.ndim} dimensions")
    if type is None:
        type = _BOOL if values.dtype == bool else pa.from_numpy_dtype(values.dtype)
    if type == _BOOL:
        packed = np.packbits(values.astype(bool, copy=False), bitorder="little")
        return pa.Array.from_buffers(_BOOL, len(values), [None, pa.py_buffer(packed)])
    if not (pa.types.is_integer(type) or pa.types.is_floating(type)):
        raise TypeError(f"from_numpy: {type} is not a fixed-width number type")
    values = np.ascontiguousarray(values, dtype=np.dtype(type.to_pandas_dtype()))
    return pa.Array.from_buffers(type, len(values), [None, pa.py_buffer(values)])


def strings(values: Sequence[str | None]) -> pa.Array:
    """A Python sequence of strings (None for a null) as an Arrow ``string`` array (other values: as
    ``pa.array(values, pa.string())`` takes them, which imports pandas)."""
    if not all(v is None or isinstance(v, str) for v in values):
        return pa.array(list(values), pa.string())
    n = len(values)
    encoded = [b"" if v is None else v.encode() for v in values]
    offsets = np.zeros(n + 1, np.int32)
    np.cumsum([len(b) for b in encoded], out=offsets[1:])
    if int(offsets[-1]) != sum(len(b) for b in encoded):  # past int32: the offsets wrapped around
        raise ValueError("strings: more than 2 GiB of text; use large_string")
    nulls = np.fromiter((v is None for v in values), bool, n)
    validity = pa.py_buffer(np.packbits(~nulls, bitorder="little")) if nulls.any() else None
    return pa.Array.from_buffers(pa.string(), n, [validity, pa.py_buffer(offsets), pa.py_buffer(b"".join(encoded))],
                                 null_count=int(nulls.sum()))


def false_filled(mask: pa.Array | pa.ChunkedArray) -> pa.Array | pa.ChunkedArray:
    """A boolean column with its nulls as False (``pc.fill_null(mask, False)`` without a Python scalar)."""
    import pyarrow.compute as pc

    return pc.and_kleene(mask, pc.is_valid(mask))  # null AND False is False; a valid value AND True is itself


FEW_CODES = 8
"""Up to this many codes, :func:`code_counts` compares instead of calling ``bincount``."""


def code_counts(codes: np.ndarray, size: int, where: np.ndarray | None = None) -> np.ndarray:
    """Rows per code ``0 … size - 1`` (``int64``), over the rows where ``where`` is True when given.

    With at most :data:`FEW_CODES` codes (sources, usually) one comparison per code: ``bincount``
    would first copy the codes to ``int64``, 80 MB of fresh memory at 10M rows.
    """
    picked = codes if where is None else codes[where]
    if size > FEW_CODES:
        return np.bincount(picked, minlength=size)
    return np.array([np.count_nonzero(picked == c) for c in range(size)], np.int64)


def as_array(column: pa.Array | pa.ChunkedArray) -> pa.Array:
    """One contiguous array (chunks combined)."""
    return column.combine_chunks() if isinstance(column, pa.ChunkedArray) else column


def source_codes(sources: pa.Array | pa.ChunkedArray | None, n: int) -> tuple[np.ndarray, list[str]]:
    """Dictionary-encode a source column: ``(code per row, source names)``; nulls and no column are ``unknown``.

    A column read dictionary-encoded (Parquet's ``read_dictionary``) keeps its codes:
    the chunks' dictionaries are unified, nothing is hashed again.

    Args:
        sources: the ``source`` column, or None when the table has none.
        n: number of rows (used when ``sources`` is None).
    """
    if sources is None:
        return np.zeros(n, np.int32), ["unknown"]
    if pa.types.is_dictionary(sources.type):
        return _dictionary_codes(sources)
    # Encoded here and coded like a column read dictionary-encoded; nulls get an entry of their own, in order of
    # first appearance (no fill value: a Python scalar would make pyarrow import pandas).
    return _dictionary_codes(as_array(sources).cast(pa.string()).dictionary_encode(null_encoding="encode"))


def _dictionary_codes(sources: pa.Array | pa.ChunkedArray) -> tuple[np.ndarray, list[str]]:
    """Codes of a dictionary-typed column (as Parquet gives it with ``read_dictionary``), chunk by chunk.

    Each chunk's (small) dictionary is mapped to one list of names; rows index
    it through numpy, so no string is made per row.
    """
    chunks = _chunks(sources)
    where: dict[str, int] = {}  # name -> code, in order of first appearance
    codes = np.empty(sum(len(c) for c in chunks), np.int32)
    at = 0
    for chunk in chunks:
        values = ["unknown" if v is None else v for v in chunk.dictionary.cast(pa.string()).to_pylist()]
        index = chunk.indices
        if index.null_count:
            values.append("unknown")
        lut = np.array([where.setdefault(v, len(where)) for v in values], np.int32)
        rows = to_numpy(index, null=len(values) - 1)
        if len(lut) and np.array_equal(lut, np.arange(len(lut))):
            codes[at:at + len(rows)] = rows  # the chunk's dictionary is the names so far, in order: codes as read
        elif len(lut):
            np.take(lut, rows, out=codes[at:at + len(rows)])
        else:
            codes[at:at + len(rows)] = 0
        at += len(rows)
    return codes, list(where) or ["unknown"]  # names no row uses count 0 and are left out of counts


def source_names(codes: np.ndarray, names: Sequence[str]) -> pa.Array:
    """The source name of every row as a string column (from :func:`source_codes`' codes and names)."""
    return pa.DictionaryArray.from_arrays(from_numpy(codes, pa.int32()), strings(list(names))).cast(pa.string())


def counts_by_source(codes: np.ndarray, names: Sequence[str], mask: np.ndarray | None = None) -> dict[str, int]:
    """``{source: rows}`` over the rows where ``mask`` holds (all rows without a mask); zero counts left out."""
    counts = code_counts(codes, len(names), mask)
    return {name: int(c) for name, c in zip(names, counts.tolist()) if c}


SORT_RUNS = 16
"""Ids whose neighbours descend (in byte order) at most once every this many rows are sorted to find
repeats: their long increasing runs make a stable sort cheap (≈0.8 s at 10M). Others are hashed first
(:func:`_first_by_hash`, ≈1 s at 10M): a sort of 10M ids in random order takes ≈6.5 s here."""

_MIX = np.array([0x9E3779B97F4A7C15, 0xC2B2AE3D27D4EB4F], np.uint64)
_LOW_BYTES = np.array([(1 << (8 * r)) - 1 for r in range(8)] + [(1 << 64) - 1], np.uint64)


def first_occurrences(ids: pa.Array | pa.ChunkedArray, block: int = 1 << 20) -> np.ndarray:
    """Boolean mask of the first occurrence of every id (later repeats are False; a null is never a repeat).

    Ids that increase strictly need nothing more: in byte order (zero-padded counters: ``00009 < 00010``)
    or in the order of (length, bytes) (counters without padding, alone or after a fixed prefix: ``r9 < r10``,
    ``shard:9 < shard:10``); one or two comparisons of neighbours, ≈0.1 s at 10M ids. Otherwise,
    with long increasing runs (at most one descent every :data:`SORT_RUNS` rows), a stable sort brings
    equal ids together in input order and a row is a repeat when the id sorted just before it is equal
    (compared ``block`` at a time, so only one block of them is ever copied); in any other order the
    ids are hashed and only those whose hash is shared are sorted (:func:`_first_by_hash`). Both are exact.
    """
    n = len(ids)
    if not any(check(ids.type) for check in (pa.types.is_string, pa.types.is_large_string, pa.types.is_binary,
                                             pa.types.is_large_binary)):
        ids = ids.cast(pa.string())  # e.g. integer ids: compared and hashed as their text
    less = _less_than_next(ids)
    descents = len(less) - int(pc.sum(less).as_py() or 0) if n > 1 else 0
    if descents > n // SORT_RUNS:  # no order to speak of (increasing lengths would not descend so often)
        return _first_by_hash(ids, block)
    if descents == 0 or _ordered_by_length(ids, less):
        return np.ones(n, dtype=bool)  # no id can repeat
    return _first_by_sort(as_array(ids), block)  # one copy: a take from chunks would join them on every block


def _first_by_sort(ids: pa.Array, block: int) -> np.ndarray:
    n = len(ids)
    keep = np.ones(n, dtype=bool)
    order = as_array(pc.sort_indices(ids))  # stable: equal ids keep their input order
    for lo in range(0, n - 1, block):
        ordered = ids.take(order.slice(lo, min(block, n - lo - 1) + 1))
        same = to_numpy(as_array(false_filled(pc.equal(ordered.slice(1), ordered.slice(0, len(ordered) - 1)))))
        if same.any():
            keep[to_numpy(order.slice(lo + 1, len(same)))[same]] = False
    return keep


def _first_by_hash(ids: pa.Array | pa.ChunkedArray, block: int) -> np.ndarray:
    """First occurrences of ids in no useful order: a 64-bit hash of every id, sorted (numbers sort several
    times faster than strings in random order); only the ids whose hash is not unique, equal ids among
    them, are then sorted exactly (:func:`_first_by_sort`), in input order. Memory: two numbers per id,
    never a table of the ids themselves."""
    n = len(ids)
    keep = np.ones(n, dtype=bool)
    hashes = np.concatenate([_hash64(chunk) for chunk in _chunks(ids)]) if n else np.zeros(0, np.uint64)
    ordered = np.sort(hashes)
    shared = ordered[1:][ordered[1:] == ordered[:-1]]
    del ordered
    if shared.size:
        rows = np.flatnonzero(np.isin(hashes, np.unique(shared)))
        keep[rows[~_first_by_sort(take_rows(ids, rows), block)]] = False
    return keep


def hash_strings(column: pa.Array | pa.ChunkedArray) -> np.ndarray:
    """A 64-bit hash (``uint64``) of every string of a column, the one :func:`first_occurrences` uses; equal
    strings have equal hashes, and a hash shared by different strings is rare but possible."""
    chunks = [_hash64(chunk) for chunk in _chunks(column) if len(chunk)]
    return np.concatenate(chunks) if chunks else np.zeros(0, np.uint64)


def _hash64(chunk: pa.Array) -> np.ndarray:
    """A 64-bit hash of every string of a chunk (all its bytes, and its length), 8 bytes of every string at a
    time through a view that reads 8 bytes from any byte offset of the data; the same for the same string in
    any chunk."""
    n = len(chunk)
    chunk = chunk.cast(pa.large_binary()) if not pa.types.is_large_binary(chunk.type) else chunk
    offsets = np.frombuffer(chunk.buffers()[1], np.int64)[chunk.offset:chunk.offset + n + 1]
    lo, hi = int(offsets[0]), int(offsets[-1])
    padded = np.zeros(hi - lo + 8, np.uint8)
    if hi > lo:
        padded[:hi - lo] = np.frombuffer(chunk.buffers()[2], np.uint8)[lo:hi]
    words = np.ndarray((hi - lo + 1,), np.dtype("<u8"), buffer=padded, strides=(1,))
    start, length = offsets[:-1] - lo, np.diff(offsets)
    hashed = length.astype(np.uint64) * _MIX[1]
    for at in range(0, int(length.max()) if n else 0, 8):
        word = words[np.minimum(start + at, hi - lo)] & _LOW_BYTES[np.clip(length - at, 0, 8)]
        live = length > at
        if live.all():
            _mix(hashed, word)
            continue
        # Only the strings that reach this far are mixed again: a string's hash never depends on the others.
        rows = np.flatnonzero(live)
        part = hashed[rows]
        _mix(part, word[rows])
        hashed[rows] = part
    return hashed


def _mix(hashed: np.ndarray, word: np.ndarray) -> None:
    """One step of the hash, in place: the next 8 bytes of each string folded in."""
    hashed ^= word
    hashed *= _MIX[0]
    hashed ^= hashed >> np.uint64(29)


def _chunks(column: pa.Array | pa.ChunkedArray) -> list[pa.Array]:
    return list(column.chunks) if isinstance(column, pa.ChunkedArray) else [column]


def _less_than_next(ids: pa.Array | pa.ChunkedArray) -> pa.Array | pa.ChunkedArray:
    """For each id but the last, whether it is less than the next one in byte order (False next to a null)."""
    n = len(ids)
    return false_filled(pc.less(ids.slice(0, max(n - 1, 0)), ids.slice(min(1, n))))


def _ordered_by_length(ids: pa.Array | pa.ChunkedArray, less: pa.Array | pa.ChunkedArray) -> bool:
    """Whether the ids increase strictly in the order of (length, bytes) (``less``: :func:`_less_than_next`);
    False with a null."""
    n = len(ids)
    if n < 2:
        return True
    before, after = ids.slice(0, n - 1), ids.slice(1)
    shorter, longer = pc.binary_length(before), pc.binary_length(after)
    ordered = pc.or_(pc.less(shorter, longer), pc.and_(pc.equal(shorter, longer), less))
    return bool(pc.all(ordered, skip_nulls=False).as_py())


def take_rows(column: pa.Array | pa.ChunkedArray, index: np.ndarray) -> pa.Array:
    """The rows ``index`` of a column as one array. A chunked column is taken from chunk by chunk:
    ``ChunkedArray.take`` joins every chunk into one copy first (≈0.25 s for 10M ids, on every take)."""
    index = np.asarray(index, np.int64)
    if not isinstance(column, pa.ChunkedArray):
        return column.take(from_numpy(index))
    if column.num_chunks == 1:
        return column.chunk(0).take(from_numpy(index))
    if not index.size:
        return column.chunk(0).slice(0, 0) if column.num_chunks else pa.array([], column.type)
    order = None if (index[1:] >= index[:-1]).all() else np.argsort(index, kind="stable")
    ordered = index if order is None else index[order]
    starts = np.cumsum([0] + [len(c) for c in column.chunks])
    cuts = np.searchsorted(ordered, starts)
    if ordered[0] < 0 or ordered[-1] >= starts[-1]:
        raise IndexError(f"row index out of bounds for a column of {starts[-1]} rows")
    taken = pa.concat_arrays([chunk.take(from_numpy(ordered[cuts[i]:cuts[i + 1]] - starts[i]))
                              for i, chunk in enumerate(column.chunks)])
    if order is None:
        return taken
    back = np.empty_like(order)
    back[order] = np.arange(order.size)
    return taken.take(from_numpy(back))


def rows(array: pa.Array | pa.ChunkedArray, index: np.ndarray) -> list:
    """Python values of the rows ``index`` (only for the few rows that are listed one by one, e.g. rejects)."""
    return take_rows(array, index).to_pylist() if len(index) else []
