"""Parquet rows with their image cells cut straight from the Arrow buffers.

A Parquet row group is read once as Arrow; its columns become Python rows with
:meth:`pyarrow.Array.to_pylist`, except the columns that hold image bytes (raw ``binary``
columns such as img2dataset's ``jpg``, the ``datasets`` image struct ``{bytes, path}``, or a list
of either): their values are cut from the Arrow buffers, as plain ``bytes`` (one copy per image)
or, for pack's length step (``heads``), as :class:`~curate.core.formats.refs.ImageAt` views that
know their cell (row, column, list item) and copy nothing until the length step has read the
header; it then copies the bytes into pack's record store (see :mod:`packer.count`).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from curate.core.errors import UserError
from curate.core.formats.container import Container, Part, Row, even_parts
from curate.core.formats.refs import ImageAt
from curate.core.io import as_path, input_size, is_url, open_input, write_parquet


def _plain(view: memoryview, *_: int | str) -> bytes:
    return bytes(view)


def _is_binary(t: pa.DataType) -> bool:
    return pa.types.is_binary(t) or pa.types.is_large_binary(t)


def _image_kind(t: pa.DataType) -> str | None:
    """``binary``, ``struct``, ``list-binary`` or ``list-struct`` for a column that can hold image bytes."""
    if _is_binary(t):
        return "binary"
    if pa.types.is_struct(t):
        idx = t.get_field_index("bytes")
        return "struct" if idx >= 0 and _is_binary(t.field(idx).type) else None
    if pa.types.is_list(t) or pa.types.is_large_list(t):
        inner = _image_kind(t.value_type)
        return f"list-{inner}" if inner in ("binary", "struct") else None
    return None


def _binary_values(arr: pa.Array, make: Any) -> list[Any]:
    """The values of a binary array as ``make(memoryview slice, index)`` (None for nulls)."""
    n = len(arr)
    if n == 0:
        return []
    _, offsets_buf, data_buf = arr.buffers()[:3]
    dtype = np.int64 if pa.types.is_large_binary(arr.type) else np.int32
    offsets = np.frombuffer(offsets_buf, dtype=dtype)[arr.offset:arr.offset + n + 1].tolist()
    data = memoryview(data_buf).cast("B") if data_buf is not None else memoryview(b"")  # Arrow exports signed "b"
    valid = arr.is_valid().to_numpy(zero_copy_only=False).tolist() if arr.null_count else None
    return [make(data[offsets[i]:offsets[i + 1]], i) if valid is None or valid[i] else None for i in range(n)]


def _struct_values(arr: pa.Array, make: Any) -> list[Any]:
    """The values of an image-struct array as dicts, ``bytes`` cut by :func:`_binary_values`."""
    names = [arr.type.field(i).name for i in range(arr.type.num_fields)]
    children = arr.flatten()  # the struct's offset and nulls applied to each field
    cols = [_binary_values(c, make) if name == "bytes" else c.to_pylist() for name, c in zip(names, children)]
    valid = arr.is_valid().to_numpy(zero_copy_only=False).tolist() if arr.null_count else None
    return [dict(zip(names, values)) if valid is None or valid[i] else None
            for i, values in enumerate(zip(*cols))] if cols else [None] * len(arr)


def _column_values(col: pa.Array, kind: str, file: str, first_row: int, field: int, heads: bool) -> list[Any]:
    """Python values of an image column, image bytes as ``bytes`` (or :class:`ImageAt` with ``heads``)."""
    values_of = _binary_values if kind.endswith("binary") else _struct_values
    make = ImageAt.cell if heads else _plain
    if not kind.startswith("list"):
        return values_of(col, lambda mv, i: make(mv, file, first_row + i, field, -1))
    # a list column: cut the flat values, then regroup them by the list offsets
    offsets = col.offsets.to_numpy().tolist()
    base = offsets[0]
    flat = col.values.slice(base, offsets[-1] - base)
    row_of = np.repeat(np.arange(len(col)), np.diff(offsets)).tolist()
    values = values_of(flat, lambda mv, j: make(mv, file, first_row + row_of[j], field,
                                                base + j - offsets[row_of[j]]))
    valid = col.is_valid().to_numpy(zero_copy_only=False).tolist()
    return [values[offsets[r] - base:offsets[r + 1] - base] if valid[r] else None for r in range(len(col))]


def table_rows(table: pa.Table, file: str, first_row: int, schema: pa.Schema,
               heads: bool = False) -> list[dict[str, Any]]:
    """The rows of ``table`` (rows ``first_row...`` of ``file``) as dicts, image bytes cut from the buffers.

    ``schema`` is the file's schema (column positions are its field indices). With ``heads`` images
    are :class:`~curate.core.formats.refs.ImageAt` views on the Arrow buffers instead (no copy).
    """
    columns: dict[str, list[Any]] = {}
    for name in table.column_names:
        chunked = table.column(name)
        col = chunked.chunk(0) if chunked.num_chunks == 1 else chunked.combine_chunks()  # combining copies
        kind = _image_kind(col.type)
        if kind is None:
            columns[name] = col.to_pylist()
        else:
            columns[name] = _column_values(col, kind, file, first_row, schema.get_field_index(name), heads)
    names = list(columns)
    return [dict(zip(names, values)) for values in zip(*columns.values())] if names else []


#: Arrow bytes decoded at a time from a Parquet row group (a row group is streamed in batches of rows).
PARQUET_BATCH_BYTES = 64 << 20


def parquet_rows(pf: pq.ParquetFile, start: int, stop: int, file: str,
                 heads: bool = False) -> Iterator[tuple[int, dict[str, Any]]]:
    """``(row, row as a dict)`` for rows ``start`` to ``stop`` of a Parquet file (see :func:`table_rows`).

    Row groups are read in batches of about :data:`PARQUET_BATCH_BYTES`: a row group of images written whole
    (one group per file is common) would otherwise be held in memory at once, by every worker that reads a
    part of it (an 800 MB file in one group, 5,000 of its rows read: 2.8 GB peak that way, 1.2 GB now, most
    of it the file's mapped pages).
    """
    row = 0
    for rg in range(pf.num_row_groups):
        meta = pf.metadata.row_group(rg)
        n = meta.num_rows
        if row + n <= start:
            row += n
            continue
        if row >= stop:
            break
        size = max(16, min(1 << 16, PARQUET_BATCH_BYTES * n // max(meta.total_byte_size, 1)))
        at = row
        for batch in pf.iter_batches(batch_size=size, row_groups=[rg]):
            end = at + batch.num_rows
            lo, hi = max(start, at), min(stop, end)
            if lo < hi:
                table = pa.Table.from_batches([batch.slice(lo - at, hi - lo)])
                for i, item in enumerate(table_rows(table, file, lo, pf.schema_arrow, heads)):
                    yield lo + i, item
            at = end
            if at >= stop:
                break
        row += n


#: Values one byte of a column chunk can hold at most: a data page holds at most 2^31 - 1 values (its header's
#: ``num_values`` is an i32) and its header alone takes more than 16 bytes. Rows a footer claims beyond this, for
#: the bytes its column chunks take, cannot be in the file.
MAX_VALUES_PER_BYTE = 1 << 27
#: Rows per byte of a row group's smallest column chunk beyond which its row count is verified by reading that
#: column (real tables hold a few rows per byte; a group of millions of nulls is read in a moment).
DENSE_ROWS_PER_BYTE = 256


class FooterLie(UserError):
    """A Parquet footer's counts that the file's bytes cannot hold (one line naming the file)."""


def checked_num_rows(pf: pq.ParquetFile, path: str | Path, size: int) -> int:
    """The rows of a Parquet file, its footer's counts checked against the file's ``size`` in bytes first.

    The file's row count must be the sum of its row groups'; every column chunk must lie inside the file (before
    the footer) and hold at least its group's rows in values; a group cannot claim more rows than
    :data:`MAX_VALUES_PER_BYTE` times the bytes of its smallest column chunk, and a group claiming more than
    :data:`DENSE_ROWS_PER_BYTE` is verified by reading that column (bounded batches: the pages say what they hold).

    Raises:
        FooterLie: a claim the file cannot hold, naming the file, the group and the column.
    """
    meta = pf.metadata
    footer = meta.serialized_size + 8
    data_end = size - footer
    claimed = meta.num_rows
    total = 0
    for g in range(meta.num_row_groups):
        group = meta.row_group(g)
        rows = group.num_rows
        if rows < 0:
            raise FooterLie(f"{path}: not a readable Parquet file (row group {g} claims {rows:,} rows)")
        smallest = None
        for c in range(group.num_columns):
            col = group.column(c)
            known = not col.has_dictionary_page or bool(col.dictionary_page_offset)  # some writers leave it 0
            start = col.dictionary_page_offset if col.has_dictionary_page and col.dictionary_page_offset else \
                col.data_page_offset
            length = col.total_compressed_size
            if start is None or not 4 <= start <= data_end or not 0 <= length <= data_end - 4 \
                    or (known and start + length > data_end):
                raise FooterLie(f"{path}: not a readable Parquet file (row group {g}, column {col.path_in_schema!r} "
                                f"claims {length:,} bytes at offset {start:,}, past the {max(data_end, 0):,} bytes of "
                                "data the file holds; a corrupt or cut file)")
            if col.num_values < 0 or (rows and col.num_values < rows and col.max_repetition_level == 0):
                raise FooterLie(f"{path}: not a readable Parquet file (row group {g} claims {rows:,} rows but column "
                                f"{col.path_in_schema!r} {col.num_values:,} values)")
            if smallest is None or length < smallest[1]:
                smallest = (c, length)
        if smallest is not None and rows > MAX_VALUES_PER_BYTE * max(smallest[1], 1):
            raise FooterLie(f"{path}: not a readable Parquet file (row group {g} claims {rows:,} rows in "
                            f"{smallest[1]:,} bytes of column {group.column(smallest[0]).path_in_schema!r}, more "
                            "than any encoding holds)")
        if smallest is not None and rows > DENSE_ROWS_PER_BYTE * max(smallest[1], 1):
            held = _rows_held(pf, g, smallest[0], path)
            if held != rows:
                raise FooterLie(f"{path}: not a readable Parquet file (row group {g} claims {rows:,} rows; its column "
                                f"{group.column(smallest[0]).path_in_schema!r} holds {held:,})")
        total += rows
    if total != claimed:
        raise FooterLie(f"{path}: not a readable Parquet file (the footer claims {claimed:,} rows, its row groups "
                        f"hold {total:,})")
    return claimed


def _rows_held(pf: pq.ParquetFile, group: int, column: int, path: str | Path) -> int:
    """The rows one column of a row group really holds, read in batches (memory bounded by a batch)."""
    held = 0
    try:
        for batch in pf.iter_batches(batch_size=1 << 16, row_groups=[group], columns=[pf.schema_arrow.names[
                _top_level(pf, column)]]):
            held += batch.num_rows
    except Exception as exc:  # noqa: BLE001 - pyarrow raises several types for corrupt pages
        raise FooterLie(f"{path}: not a readable Parquet file (row group {group}: {exc})") from None
    return held


def _top_level(pf: pq.ParquetFile, leaf: int) -> int:
    """The index of the top-level field a leaf column belongs to."""
    name = pf.schema.column(leaf).path.split(".")[0]
    return pf.schema_arrow.get_field_index(name)


class ParquetRows(Container):
    """Parquet files (see the module docstring): parts of rows, read a row group in batches."""

    name = "parquet"
    suffixes = (".parquet", ".pq")

    def split(self, path: Path, rows_per_part: int) -> list[Part]:
        """Parts of the file's rows (from its footer, checked against the file's size: :func:`checked_num_rows`)."""
        try:
            with open_input(path) as fh:
                pf = pq.ParquetFile(fh)
                n = checked_num_rows(pf, path, input_size(path))
        except FooterLie:
            raise
        except Exception as exc:  # pyarrow raises several types for corrupt files
            raise UserError(f"{path}: not a readable Parquet file ({exc})") from None
        return even_parts(path, self.name, n, rows_per_part)

    def rows(self, part: Part, heads: bool, views: bool) -> Iterator[Row]:
        """The part's rows; image cells as views on the Arrow buffers with ``heads`` or ``views``."""
        if not is_url(part.path):  # native reads (memory-mapped) are much faster than through a Python file
            pf = pq.ParquetFile(as_path(part.path), memory_map=True)
            for row, item in parquet_rows(pf, part.start, part.stop, part.path, heads or views):
                yield row, item, None
            return
        with open_input(part.path) as fh:
            for row, item in parquet_rows(pq.ParquetFile(fh), part.start, part.stop, part.path, heads or views):
                yield row, item, None

    def write_back(self, dest: Path, rows: Sequence[dict[str, Any]], source: Path) -> int:
        """The source file's schema, with ``id`` and ``source`` added when rows gained them."""
        with open_input(source) as fh:  # a local file or an object in a bucket
            schema = pq.read_schema(fh)
        for name in ("id", "source"):
            if name not in schema.names and any(name in obj for obj in rows):
                schema = schema.append(pa.field(name, pa.string()))
        from curate.core.formats.writeback import with_hf_features

        write_parquet(dest, with_hf_features(pa.Table.from_pylist(list(rows), schema=schema)))
        return len(rows)
