"""The config checks: local paths are checked at once, URLs when they are read."""

from __future__ import annotations

from pathlib import Path

import pytest

from curate.core import validate as v
from curate.core.errors import UserError
from curate.rl.config import ScoreConfig, score_records
from packer.config import PackConfig


def test_urls_are_left_to_the_readers(tmp_path: Path) -> None:
    c = ScoreConfig(responses="s3://bucket/answers.jsonl", out="s3://bucket/out")
    records = score_records(["s3://bucket/rl.jsonl"])
    assert [str(r) for r in records] == ["s3://bucket/rl.jsonl"] and c.out.is_remote  # kept as locations
    PackConfig(out="gs://bucket/packed", processor="PROC", lengths="s3://bucket/lengths.parquet")
    with pytest.raises(UserError, match="responses .*: no such file"):
        ScoreConfig(responses=str(tmp_path / "missing.jsonl"), out=str(tmp_path / "o"))


def test_configure_applies_settings_over_a_config(tmp_path: Path) -> None:
    base = PackConfig(out=tmp_path / "a", processor="P")
    assert v.configure(PackConfig, base, ctx=4096, out=None) == PackConfig(out=tmp_path / "a", processor="P", ctx=4096)
    assert v.configure(PackConfig, None, out=tmp_path, processor="P").ctx == 8192
    with pytest.raises(UserError, match="ctx"):
        v.configure(PackConfig, base, ctx=0)
    with pytest.raises(TypeError, match="no setting"):
        v.configure(PackConfig, base, context=1)


def test_outputs_in_the_way(tmp_path: Path) -> None:
    (tmp_path / "f").write_text("x")
    with pytest.raises(UserError, match="exists and is not a folder"):
        v.out_dir("--out", tmp_path / "f")
    with pytest.raises(UserError, match="is a file, not a folder"):
        v.out_dir("--out", tmp_path / "f" / "sub" / "deeper")
    with pytest.raises(UserError, match="is a folder"):
        v.out_file("--out", tmp_path)
    v.out_dir("--out", tmp_path / "new" / "deeper")  # made later, by the stage
    assert not (tmp_path / "new").exists()
    with pytest.raises(UserError, match=r"temperature must be a finite number, got nan"):
        v.finite("--temperature", float("nan"))
    with pytest.raises(UserError, match=r"mode x: use inverse or metaclip"):
        v.one_of("--mode", "x", ("inverse", "metaclip"))


def test_integer_is_the_one_integer_check() -> None:
    import numpy as np

    from curate.core.validate import integer
    from packer.plan import check_int
    from packer.config import PackConfig
    from packer.compute_balance import CostModel
    from packer.compute_balance import check_dp

    assert integer("--n", None, 1) is None and integer("--n", np.int32(3), 1) == 3 and integer("--n", 0) == 0
    for bad, match in [(2.5, "must be an integer"), (True, "must be an integer"), ("3", "must be an integer"),
                       (np.float64(2.0), "must be an integer"), (0, "must be >= 1")]:
        with pytest.raises(UserError, match=f"n {match}"):
            integer("--n", bad, 1)
        # the packer's checks say the same thing in the same words
        with pytest.raises(UserError, match=f"ctx {match}"):
            check_int("ctx", bad, 1)
        with pytest.raises(UserError, match=f"dp {match}"):
            check_dp(bad, 1)
        with pytest.raises(UserError, match=f"ctx {match}"):
            PackConfig(out="o", ctx=bad)
        with pytest.raises(UserError, match=f"cost model: lm_layers {match}"):
            CostModel(lm_layers=bad)
