"""A folder input reads its record files and skips the rest (issue 11: `curate pack data/sample/bad`)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import webdataset as wds
from click.testing import CliRunner

from curate.cli import cli
from curate.core.records import expand_inputs, read_records
from tests._fixtures.formats import Layouts


def _lines(path: Path) -> int:
    return sum(1 for line in path.read_bytes().splitlines() if line.strip())


def test_pack_the_bad_folder(sample_data: Path, tiny_processor_dir: Path, tmp_path: Path,
                             monkeypatch: pytest.MonkeyPatch) -> None:
    """`curate pack <folder>` skips EXPECTED.json with one line naming it and packs every record file."""
    bad = Path(shutil.copytree(sample_data / "bad", tmp_path / "bad"))  # a path no earlier test listed
    assert (bad / "EXPECTED.json").read_bytes().lstrip()[:1] == b"{"  # the file that used to stop the run
    monkeypatch.setenv("CURATE_CACHE", str(tmp_path / "cache"))
    out = tmp_path / "packed"
    result = CliRunner().invoke(cli, ["pack", str(bad), "--processor", str(tiny_processor_dir), "--ctx", "4096",
                                      "--out", str(out), "--plan-only"])
    assert result.exit_code == 0, result.output[-2000:]
    skipped = [line for line in result.stderr.splitlines() if "EXPECTED.json" in line]
    assert len(skipped) == 1 and skipped[0].startswith("skipped ") and "not records" in skipped[0]
    stats = json.loads((out / "stats.json").read_text())
    assert stats["records_in"] == _lines(bad / "records.jsonl") + _lines(bad / "empty.jsonl") > 0


def test_folder_skips_hidden_and_objects_but_reads_arrays(tmp_path: Path) -> None:
    (tmp_path / "sub").mkdir()
    (tmp_path / ".tmp").mkdir()
    (tmp_path / "a.jsonl").write_text('{"id": "a", "caption": "x"}\n')
    (tmp_path / "sub" / "b.json").write_text(' [{"id": "b", "caption": "y"}]')
    (tmp_path / "stats.json").write_text('{"records_in": 3}')
    (tmp_path / ".tmp" / "c.jsonl").write_text('{"id": "c", "caption": "z"}\n')
    assert [p.name for p in expand_inputs([tmp_path])] == ["a.jsonl", "b.json"]
    assert [p.name for p in expand_inputs([tmp_path / "stats.json"])] == ["stats.json"]  # named: read (and refused later)


def test_curate_output_folders_inside_an_input_folder_are_skipped(tmp_path: Path,
                                                                  capsys: pytest.CaptureFixture[str]) -> None:
    """A folder with a run's lock, shard markers or a stage's stats.json is an output, not records."""
    data = tmp_path / "data"
    for sub in ("running", "crashed", "done", "mine", "done/records"):
        (data / sub).mkdir(parents=True)
    (data / "a.jsonl").write_text('{"id": "a", "caption": "x"}\n')
    (data / "running" / ".curate.lock").write_text("{}")
    (data / "running" / "r.jsonl").write_text('{"id": "r", "caption": "x"}\n')
    (data / "crashed" / "_shards").mkdir()
    (data / "crashed" / "c.parquet").write_bytes(b"")
    (data / "done" / "stats.json").write_text(json.dumps({"stage": "resample", "records_in": 3}))
    (data / "done" / "selection.parquet").write_bytes(b"")
    (data / "done" / "records" / "d.jsonl").write_text('{"id": "d", "caption": "x"}\n')
    (data / "mine" / "stats.json").write_text(json.dumps({"records_in": 3}))  # not a stage's: a user's file
    (data / "mine" / "m.jsonl").write_text('{"id": "m", "caption": "x"}\n')
    assert [p.relative_to(data).as_posix() for p in expand_inputs([data])] == ["a.jsonl", "mine/m.jsonl"]
    lines = [line for line in capsys.readouterr().err.splitlines() if "curate output folder" in line]
    assert sorted(line.split()[1] for line in lines) == [f"{data}/crashed/:", f"{data}/done/:", f"{data}/running/:"]
    assert "stats.json of curate resample" in " ".join(lines) and "_shards/" in " ".join(lines)
    assert [p.name for p in expand_inputs([data / "done" / "records"])] == ["d.jsonl"]  # named: read
    assert [p.name for p in expand_inputs([data / "running"])] == ["r.jsonl"]


def test_rerun_with_the_output_inside_the_input_folder_resumes(sample_data: Path, tiny_processor_dir: Path,
                                                               tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`curate pack data/ --out data/packed` twice: the second run does not read the first one's output (it
    stopped with 'holds a lengths run with other settings') and finds the same records."""
    data = tmp_path / "data"
    data.mkdir()
    shutil.copy(sample_data / "records.jsonl", data / "records.jsonl")
    shutil.copytree(sample_data / "images", data / "images")
    monkeypatch.setenv("CURATE_CACHE", str(tmp_path / "cache"))
    args = ["pack", str(data), "--processor", str(tiny_processor_dir), "--ctx", "4096", "--out", str(data / "packed"),
            "--plan-only"]
    first = CliRunner().invoke(cli, args)
    assert first.exit_code == 0, first.output[-2000:]
    stats = json.loads((data / "packed" / "stats.json").read_text())
    second = CliRunner().invoke(cli, args)
    assert second.exit_code == 0, second.output[-2000:]
    assert json.loads((data / "packed" / "stats.json").read_text())["records_in"] == stats["records_in"] \
        == _lines(data / "records.jsonl")


def test_img2dataset_metadata_tables_beside_their_tars_are_skipped(tmp_path: Path, layouts: Layouts,
                                                                   capsys: pytest.CaptureFixture[str]) -> None:
    """img2dataset's WebDataset output: 00000.tar + 00000.parquet (one row per sample tried, caption, no image)
    + 00000_stats.json. The records come from the tar once, not a second time without images from the table."""
    out = tmp_path / "laion"
    out.mkdir()
    items = layouts.items[:2]
    with wds.TarWriter(str(out / "00000.tar")) as sink:
        for i, it in enumerate(items):
            sink.write({"__key__": f"00000000{i}", "jpg": it["bytes"], "txt": it["caption"],
                        "json": {"key": f"00000000{i}", "caption": it["caption"], "status": "success"}})
    meta = pa.table({"key": ["000000000", "000000001", "000000002"], "caption": [it["caption"] for it in items] + ["x"],
                     "url": ["u0", "u1", "u2"], "status": ["success", "success", "failed_to_download"]})
    pq.write_table(meta, out / "00000.parquet")
    (out / "00000_stats.json").write_text(json.dumps({"count": 3, "successes": 2}))
    pq.write_table(meta, out / "extra.parquet")  # a table of another stem is records as usual
    assert [p.name for p in expand_inputs([out])] == ["00000.tar", "extra.parquet"]
    err = capsys.readouterr().err
    assert "00000.parquet: the metadata table of 00000.tar" in err and "00000_stats.json: not records" in err
    recs = [r for r in read_records([out / "00000.tar"])]
    assert [r["id"] for r in recs] == ["000000000", "000000001"] and all(r["images"] for r in recs)
    assert [p.name for p in expand_inputs([out / "00000.parquet"])] == ["00000.parquet"]  # named: read


def test_many_skipped_files_of_a_folder_are_one_line_per_reason(tmp_path: Path, layouts: Layouts,
                                                                 capsys: pytest.CaptureFixture[str]) -> None:
    """img2dataset's 8,500 shards leave 8,500 tables and 8,500 _stats.json files: a line per reason, not per file."""
    out = tmp_path / "cc3m_wds"
    out.mkdir()
    it = layouts.items[0]
    meta = pa.table({"key": ["k"], "caption": [it["caption"]], "status": ["success"]})
    for s in range(6):
        with wds.TarWriter(str(out / f"{s:05d}.tar")) as sink:
            sink.write({"__key__": f"{s:05d}0000", "jpg": it["bytes"], "txt": it["caption"]})
        pq.write_table(meta, out / f"{s:05d}.parquet")
        (out / f"{s:05d}_stats.json").write_text(json.dumps({"count": 1, "successes": 1}))
    (tmp_path / "alone").mkdir()
    (tmp_path / "alone" / "EXPECTED.json").write_text("{}")
    (tmp_path / "alone" / "a.jsonl").write_text('{"id": "a", "caption": "x"}\n')
    assert len(expand_inputs([out, tmp_path / "alone"])) == 7
    lines = [line for line in capsys.readouterr().err.splitlines() if line.startswith("skipped")]
    assert len(lines) == 3, lines
    tables = next(line for line in lines if "metadata tables" in line)
    assert tables.startswith(f"skipped 6 files in {out}/ (00000.parquet, 00001.parquet, 00002.parquet, …, "
                             "00005.parquet): ")
    assert any(line.startswith("skipped 6 files") and "_stats.json" in line and "not records" in line for line in lines)
    assert any(line.startswith(f"skipped {tmp_path / 'alone' / 'EXPECTED.json'}: not records") for line in lines)
