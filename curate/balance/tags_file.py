"""Reading ``tags.parquet`` (``id``, ``source``, ``concepts``) into :class:`~curate.balance.weights.TagArrays`.

One row group at a time: while every record has K tags the concept values stay in the
buffers Arrow decoded them into (no copy, no offsets); ragged lists are copied into one
flat ``int32`` array with offsets. Sources are read dictionary-encoded, and the ids come
as one string column, read on their own so that a caller can read them (and look for
repeats) in another thread.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from curate.balance.weights import TagArrays
from curate.core.columns import source_codes, strings, to_numpy
from curate.core.errors import UserError


def _concept_values(chunk: pa.Array) -> tuple[np.ndarray, np.ndarray]:
    """``(lengths, flat int32 values)`` of one list chunk; null lists count as empty."""
    if chunk.null_count:
        chunk = pc.if_else(pc.is_null(chunk), pa.scalar([], chunk.type), chunk)
    offsets = to_numpy(chunk.offsets)
    values = to_numpy(chunk.values.slice(int(offsets[0]), int(offsets[-1] - offsets[0])))
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
        if "lang" in names:  # curate match with languages: read dictionary-encoded too
            parquet = pq.ParquetFile(path, read_dictionary=["source", "lang"])
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


def read_tag_ids(parquet: pq.ParquetFile) -> pa.ChunkedArray:
    """The ``id`` column as strings, a chunk per row group as read (joining them would copy every id;
    take rows with :func:`curate.core.columns.take_rows`)."""
    groups = range(parquet.num_row_groups)
    chunks = [c for g in groups for c in parquet.read_row_group(g, columns=["id"]).column(0).chunks]
    ids = pa.chunked_array(chunks, parquet.schema_arrow.field("id").type)
    return ids if pa.types.is_string(ids.type) else ids.cast(pa.string())


def read_tag_concepts(parquet: pq.ParquetFile, path: str | os.PathLike[str]) -> TagArrays:
    """Concepts and sources of every record, without the ids (``ids`` is an empty column: see :func:`read_tags`).

    While every record has the same number K of tags (what ``curate tag`` writes), the
    concept values of each row group are kept as read, not copied (``TagArrays.flat`` is
    then a tuple of parts). At the first record with another count the values so far are
    copied into one flat ``int32`` array and the rest follow there, with list offsets.
    Sources are read dictionary-encoded, so the peak stays near the size of the columns.

    Raises:
        UserError: negative concept indices.
    """
    schema = parquet.schema_arrow
    cols = ["concepts"] + [c for c in ("source", "text", "lang") if c in schema.names]
    n = parquet.metadata.num_rows
    parts: list[np.ndarray] = []  # K tags per record so far: the values as read
    flat: np.ndarray | None = None  # from the first other count on: every value copied here
    offsets: np.ndarray | None = None
    width: int | None = None
    sources, row, used = [], 0, 0
    extra: dict[str, list[pa.Array]] = {"text": [], "lang": []}  # curate match: texts and languages
    for g in range(parquet.num_row_groups):
        group = parquet.read_row_group(g, columns=cols)
        if "source" in cols:
            sources.extend(group.column("source").chunks)
        for name, chunks in extra.items():
            if name in cols:
                chunks.extend(group.column(name).chunks)
        for chunk in group.column("concepts").chunks:
            lengths, values = _concept_values(chunk)
            if not lengths.size:
                continue
            if flat is None:
                width = int(lengths[0]) if width is None else width
                if width and (lengths == width).all():
                    parts.append(values)
                    row, used = row + len(lengths), used + values.size
                    continue
                flat, offsets = _copy_parts(parts, _leaf_values(parquet.metadata, "concepts"), n, row, width)
                parts, width = [], None
            if used + values.size > flat.size:  # metadata undercounted: grow (not expected)
                flat = np.concatenate([flat[:used], np.empty(values.size, np.int32)])
            flat[used:used + values.size] = values
            np.cumsum(lengths, out=offsets[row + 1:row + 1 + len(lengths)])
            offsets[row + 1:row + 1 + len(lengths)] += used
            row, used = row + len(lengths), used + values.size
        del group
    if flat is None and not parts:  # no records
        flat, offsets, width = np.zeros(0, np.int32), np.zeros(n + 1, np.int64), None
    stored: np.ndarray | tuple[np.ndarray, ...] = flat[:used] if flat is not None else \
        parts[0] if len(parts) == 1 else tuple(parts)
    if any(part.size and part.min() < 0 for part in ([stored] if isinstance(stored, np.ndarray) else stored)):
        raise UserError(f"--tags {path}: negative concept indices; concepts are vocabulary lines - 1")
    codes, names = source_codes(pa.chunked_array(sources) if sources else None, n)
    meta = {k.decode(): v.decode() for k, v in (schema.metadata or {}).items()}
    taggable = int(meta["concepts_embedded"]) if "concepts_embedded" in meta else None
    text = (np.concatenate([to_numpy(c, 0) for c in extra["text"]]).astype(np.int32, copy=False)
            if extra["text"] else np.zeros(0, np.int32)) if "text" in cols else None
    lang, lang_names = source_codes(pa.chunked_array(extra["lang"]) if extra["lang"] else None, n) \
        if "lang" in cols else (None, [])
    return TagArrays(strings([]), codes, names, offsets, stored, taggable, width, text, lang, lang_names)


def _copy_parts(parts: list[np.ndarray], size: int, n: int, row: int,
                width: int | None) -> tuple[np.ndarray, np.ndarray]:
    """One flat array (room for ``size`` values) holding ``parts``, and list offsets with the first ``row``
    records at ``width`` tags each."""
    flat = np.empty(size, np.int32)
    at = 0
    for part in parts:
        flat[at:at + part.size] = part
        at += part.size
    offsets = np.zeros(n + 1, np.int64)
    offsets[:row + 1] = np.arange(row + 1, dtype=np.int64) * (width or 0)
    return flat, offsets
