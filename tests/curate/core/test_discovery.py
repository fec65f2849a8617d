"""A folder input reads its record files and skips the rest (issue 11: `curate pack data/sample/bad`)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner

from curate.cli import cli
from curate.core.records import expand_inputs


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
