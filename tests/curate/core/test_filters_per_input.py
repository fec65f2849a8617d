"""The kept-record writer per input file (:func:`curate.core.filters.write_kept` with ``inputs``): each input
file's kept records in its own container, copies as ``id#k``; worker processes write the same files as one."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import curate.core.filters
from curate.core.filters import SelectionIndex, write_kept


def _jsonl(path: Path, ids: list[str]) -> Path:
    path.write_text("".join(json.dumps({"id": i, "caption": f"caption of {i}", "k": n}) + "\n"
                            for n, i in enumerate(ids)))
    return path


def test_workers_write_the_same_files_and_a_repeated_id_once(tmp_path: Path) -> None:
    inputs = [_jsonl(tmp_path / f"part-{f}.jsonl", [f"r{f * 50 + i}" for i in range(50)]) for f in range(5)]
    _jsonl(tmp_path / "late.jsonl", ["r7", "r7", "r120", "new"])  # r7 and r120 were in earlier files
    pq.write_table(pa.table({"id": ["p1", "r7", "p2"], "caption": ["a", "b", "c"]}), tmp_path / "late2.parquet")
    inputs += [tmp_path / "late.jsonl", tmp_path / "late2.parquet"]
    chosen = [f"r{i}" for i in range(0, 250, 3)] + ["p2", "missing"]
    selection = pa.table({"id": chosen, "copies": pa.array([1 + (i % 3 == 0) for i in range(len(chosen))], pa.int32())})
    one = write_kept(tmp_path / "one", inputs=inputs, selection=selection, workers=1)
    two = write_kept(tmp_path / "two", inputs=inputs, selection=selection, workers=3)
    assert one == two
    for name in one["files"]:
        assert (tmp_path / "one" / name).read_bytes() == (tmp_path / "two" / name).read_bytes(), name
    copies = dict(zip(chosen, selection.column("copies").to_pylist()))
    assert one["records"] == sum(copies.values()) - copies["missing"] and one["selected_not_found"] == 1
    late = [json.loads(line)["id"] for line in (tmp_path / "one" / "late.jsonl").read_text().splitlines()]
    assert late == []  # r7 and r120 were written from the earlier files, at their first row
    assert f"{tmp_path.name}/part-0.jsonl" in one["files"]  # "part-0" names no dataset: its folder leads
    part0 = (tmp_path / "one" / tmp_path.name / "part-0.jsonl").read_text()
    first = [json.loads(line)["id"] for line in part0.splitlines()]
    assert first[:3] == ["r0", "r0#2", "r3"]
    assert pq.read_table(tmp_path / "one" / "late2.parquet").column("id").to_pylist() == \
        ["p2", "p2#2"][:copies["p2"]]


def test_the_index_confirms_every_hash_match(monkeypatch: pytest.MonkeyPatch) -> None:
    selection = pa.table({"id": ["a", "bb", "x" * 30], "copies": pa.array([1, 2, 3], pa.int32())})
    index = SelectionIndex(selection)
    found = index.lookup(["bb", "zz", "x" * 30, "a", "x" * 29])
    assert [int(index.copies[at]) if at >= 0 else 0 for at in found] == [2, 0, 3, 1, 0]
    # Every id shares one hash: only the ids themselves tell them apart.
    monkeypatch.setattr(curate.core.filters, "hash_strings", lambda column: np.full(len(column), 7, np.uint64))
    index = SelectionIndex(selection)
    found = index.lookup(["bb", "a", "nope", "x" * 30])
    assert [int(index.copies[at]) if at >= 0 else 0 for at in found] == [2, 1, 0, 3]


def test_rows_without_id_or_source_keep_the_ones_they_were_read_with(tmp_path: Path) -> None:
    """img2dataset tars come back as Parquet rows that name their dataset (not ``records``); a Parquet row
    without an id gets its ``<file>:<row>`` one; a row's own source stays."""
    import io
    import tarfile

    from curate.core.records import read_records

    folder = tmp_path / "cc3m_wds"
    folder.mkdir()
    for shard in range(2):
        with tarfile.open(folder / f"{shard:05d}.tar", "w") as tar:
            for i in range(3):
                for ext, data in (("jpg", b"\xff\xd8\xff not decoded here"), ("txt", f"caption {shard} {i}".encode())):
                    info = tarfile.TarInfo(f"{shard:05d}{i:04d}.{ext}")
                    info.size = len(data)
                    tar.addfile(info, io.BytesIO(data))
    pq.write_table(pa.table({"caption": ["a", "b"], "source": [None, "own"], "image": ["a.jpg", "b.jpg"]}),
                   folder / "extra.parquet")
    selection = pa.table({"id": ["000000001", "000010002", "cc3m_wds/extra:0", "extra:0", "extra:1"],
                          "copies": pa.array([1, 2, 1, 1, 1], pa.int32())})
    written = write_kept(tmp_path / "records", inputs=[folder], selection=selection, workers=1)
    assert written["records"] == 5 and written["selected_not_found"] == 1  # extra.parquet's stem names it: extra:N
    assert sorted(written["files"]) == ["cc3m_wds/00000.parquet", "cc3m_wds/00001.parquet", "extra.parquet"]
    rows = pq.read_table(tmp_path / "records" / "cc3m_wds" / "00001.parquet").to_pylist()
    assert [(r["id"], r["source"]) for r in rows] == [("000010002", "cc3m_wds"), ("000010002#2", "cc3m_wds")]
    extra = pq.read_table(tmp_path / "records" / "extra.parquet").to_pylist()
    assert [(r["id"], r["source"]) for r in extra] == [("extra:0", "extra"), ("extra:1", "own")]
    again = {r["id"]: r["source"] for r in read_records([tmp_path / "records"])}
    assert again == {"000000001": "cc3m_wds", "000010002": "cc3m_wds", "000010002#2": "cc3m_wds",
                     "extra:0": "extra", "extra:1": "own"}


def test_a_rerun_leaves_only_its_own_files(tmp_path: Path) -> None:
    """records/ of an earlier run into the same folder (other inputs, or older names) is not mixed in."""
    a = _jsonl(tmp_path / "a.jsonl", ["x1", "x2"])
    b = _jsonl(tmp_path / "b.jsonl", ["y1", "y2"])
    selection = pa.table({"id": ["x1", "y2"], "copies": pa.array([1, 1], pa.int32())})
    write_kept(tmp_path / "records", inputs=[a, b], selection=selection, workers=1)
    (tmp_path / "records" / "old" / "train-00000-of-00001.jsonl").parent.mkdir()
    (tmp_path / "records" / "old" / "train-00000-of-00001.jsonl").write_text("{}\n")
    again = write_kept(tmp_path / "records", inputs=[a], selection=selection, workers=1)
    assert sorted(p.relative_to(tmp_path / "records").as_posix() for p in (tmp_path / "records").rglob("*")) \
        == ["a.jsonl"] == sorted(again["files"])

