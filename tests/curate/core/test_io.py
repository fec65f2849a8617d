"""Atomic writes: a finished file appears whole under its name, a failed one leaves nothing behind."""

from __future__ import annotations

import os
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from curate.core.io import atomic_open, atomic_path, write_json, write_parquet


def test_a_failed_write_leaves_the_old_file_and_no_temporary(tmp_path: Path) -> None:
    target = tmp_path / "out" / "a.json"
    write_json(target, {"v": 1})
    with pytest.raises(RuntimeError):
        with atomic_open(target, "w") as fh:
            fh.write('{"v": 2')
            raise RuntimeError("killed half way")
    assert target.read_text() == '{\n  "v": 1\n}\n'
    assert [p.name for p in target.parent.iterdir()] == ["a.json"]
    with pytest.raises(RuntimeError):
        with atomic_path(tmp_path / "b.parquet") as tmp:
            tmp.write_bytes(b"PAR1")
            raise RuntimeError("killed")
    assert not (tmp_path / "b.parquet").exists() and not list(tmp_path.glob(".b.parquet.*"))


def test_parquet_is_written_natively_and_renamed_with_the_usual_permissions(tmp_path: Path) -> None:
    table = pa.table({"id": ["a", "b"], "n": [1, 2]})
    path = tmp_path / "t.parquet"
    write_parquet(path, table, compression="snappy")
    assert pq.read_table(path).equals(table)
    assert pq.ParquetFile(path).metadata.row_group(0).column(0).compression == "SNAPPY"
    umask = os.umask(0)
    os.umask(umask)
    assert path.stat().st_mode & 0o777 == 0o666 & ~umask
    first = path.read_bytes()
    write_parquet(path, table, compression="snappy")  # the same table: the same bytes
    assert path.read_bytes() == first and [p.name for p in tmp_path.iterdir()] == ["t.parquet"]
