"""Arrow ↔ numpy through the buffers, so that a driver's column work never imports pandas.

pyarrow imports pandas the first time it converts a numpy array or a Python value
(``pa.array``, ``pa.scalar``, a compute call given a Python value, ``to_numpy``), only to
ask whether the object is a pandas one. That import costs about 0.3 s of CPU and holds
the GIL all along: on two cores it stalled ``curate resample``'s reads and weighing by
more than its own cost (10M records: 2.2–2.6 s instead of 2.9–3.8 s with it). These
helpers build and read arrays from their buffers instead; the values are the same.
``tests/curate/core/test_arrow.py`` checks both the values and that pandas stays out.

Kept because it measured ≥ 10% at 10M records (issue 38, ``benchmarks/bench_process_tuning.py``:
whole ``python -m curate resample`` processes on 10M records × 5 tags, pandas kept out against
imported, medians of per-round ratios, rounds in rotated order on 2 shared cores): at load 3–4,
1.09× wall and 1.20× CPU (4 rounds); the code before issue 38's removals against the code
without them and this module, 1.20× wall and 1.17× CPU (5 rounds, faster in each), most of it
this; at load 6–15 the sets were noisier: 1.23×/1.30×, 0.85×/1.06×, 1.01×/1.02× (wall/CPU). The
import alone: 0.42–0.44 s of CPU.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pyarrow as pa

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
