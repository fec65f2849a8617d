"""Errors name a setting as the user gave it: its config field from Python, its flag on the command line (issue 49)."""

from __future__ import annotations

from pathlib import Path

import pytest

from curate.core.errors import UserError, command_line, python_names
from curate.core.settings import flag_fields
from curate.dedup.config import DedupConfig


def test_python_callers_read_field_names(tmp_path: Path) -> None:
    with pytest.raises(UserError) as info:
        DedupConfig(out=tmp_path / "o", near_threshold=99)
    assert str(info.value).startswith("near_threshold must be at most") and "--" not in str(info.value)


def test_the_command_line_keeps_flags(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from curate.cli import main

    records = tmp_path / "r.jsonl"
    records.write_text('{"id": "a", "caption": "x"}\n', encoding="utf-8")
    with pytest.raises(SystemExit):
        main(["dedup", str(records), "--out", str(tmp_path / "o"), "--near-threshold", "99"])
    assert capsys.readouterr().err.startswith("error: --near-threshold must be at most")
    with command_line():  # worker threads and processes of a command see the same
        assert str(UserError("--top-k must be >= 1")) == "--top-k must be >= 1"
    assert str(UserError("--top-k must be >= 1")) == "top_k must be >= 1"


def test_one_table_from_the_settings() -> None:
    table = flag_fields()
    assert table["--near-threshold"] == "near_threshold" and table["--max-new-tokens"] == "max_new_tokens"
    assert table["--max-images-per-record"] == "max_images"  # a flag that is not its field's name
    # flags of no config (run's --from) and a command a message suggests keep their spelling
    assert python_names("--from x; rerun with --top-k 3") == "--from x; rerun with top_k 3"
    assert python_names("--vocab v.txt: empty; make one with curate vocab build --size 10 --out v.txt") == \
        "vocab v.txt: empty; make one with curate vocab build --size 10 --out v.txt"
