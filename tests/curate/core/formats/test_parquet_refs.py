"""Parquet image cells in every image column shape: the same values as pyarrow's, and (``heads``) their addresses."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from curate.core.image_headers import ImageAt
from curate.core.records import BadRecord, read_part, split_file

STRUCT = pa.struct([("bytes", pa.binary()), ("path", pa.string())])


def test_every_shape_keeps_bytes_and_address(tmp_path: Path, sample_data: Path) -> None:
    blobs = [p.read_bytes() for p in sorted((sample_data / "images").glob("*.jpg"))[:3]]
    lists = [[blobs[0], blobs[1]], None, [blobs[2]], [], [blobs[1], None, blobs[0]], [blobs[2], blobs[0]], [blobs[1]]]
    n = len(lists)
    table = pa.table({
        "id": [f"r{i}" for i in range(n)], "caption": [f"caption {i}" for i in range(n)],
        "images": pa.array([None if v is None else [None if b is None else {"bytes": b, "path": f"p{i}"} for b in v]
                            for i, v in enumerate(lists)], type=pa.list_(STRUCT)),
        "raw": pa.array([None if v is None else list(v) for v in lists], type=pa.list_(pa.large_binary())),
        "one": pa.array([None if i == 3 else {"bytes": blobs[i % 3], "path": "x.jpg"} for i in range(n)], type=STRUCT),
    })
    path = tmp_path / "shapes.parquet"
    pq.write_table(table, path, row_group_size=3)
    expected = table.to_pylist()
    got, heads, refs = [], [], []
    for part in split_file(path, 2):  # parts cut row groups: sliced Arrow arrays with offsets
        got.extend(raw for raw, _ in read_part(part, with_raw=True))
        heads.extend(raw for raw, _ in read_part(part, with_raw=True, heads=True))
    assert got == expected  # same values as to_pylist
    pf = pq.ParquetFile(path)
    names = pf.schema_arrow.names
    for row, raw in enumerate(heads):
        cells = [(raw["one"] or {}).get("bytes"), *[(s or {}).get("bytes") for s in raw["images"] or []],
                 *(raw["raw"] or [])]
        for data in cells:
            if data is None:
                continue
            r, field, item_at, size = data.span()
            assert isinstance(data, ImageAt) and data.file == str(path) and r == row and size == len(data)
            column = expected[row][names[field]]
            item = column if item_at < 0 else column[item_at]
            assert data.read() == (item["bytes"] if isinstance(item, dict) else item)
            refs.append(((r, field, item_at), data.read()))
    assert len(refs) == (n - 1) + 2 * sum(b is not None for v in lists if v for b in v)
    records = [r for part in split_file(path, 100) for r in read_part(part)]
    by_id = {r.id if isinstance(r, BadRecord) else r["id"]: r for r in records}
    assert isinstance(by_id["r4"], BadRecord) and by_id["r4"].reason == "missing_image"  # a null struct in the list
    assert by_id["r2"]["images"] == [blobs[2]] and type(by_id["r2"]["images"][0]) is bytes


def test_a_row_group_read_in_batches_gives_every_row_once(tmp_path: Path, sample_data: Path,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    """One row group of 100 rows read in batches of 16 (the smallest), by parts of 7 rows that cross the batches:
    the same rows, values and image addresses as a plain read."""
    from curate.core.formats import containers as parquet

    blobs = [p.read_bytes() for p in sorted((sample_data / "images").glob("*.jpg"))[:3]]
    n = 100
    table = pa.table({"id": [f"r{i}" for i in range(n)], "caption": [f"caption {i}" for i in range(n)],
                      "image": pa.array([{"bytes": blobs[i % 3], "path": f"{i}.jpg"} for i in range(n)], type=STRUCT)})
    path = tmp_path / "one_group.parquet"
    pq.write_table(table, path)  # one row group
    assert pq.ParquetFile(path).num_row_groups == 1
    monkeypatch.setattr(parquet, "PARQUET_BATCH_BYTES", 1)
    parts = split_file(path, 7)
    got = [raw for part in parts for raw, _ in read_part(part, with_raw=True)]
    assert got == table.to_pylist()
    heads = [raw for part in parts for raw, _ in read_part(part, with_raw=True, heads=True)]
    spans = [raw["image"]["bytes"].span()[0] for raw in heads]
    assert spans == list(range(n)) and all(raw["image"]["bytes"].read() == blobs[i % 3] for i, raw in enumerate(heads))
