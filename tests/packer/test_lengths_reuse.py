"""Token counts are never stale (issue 11, item 1), through the CLI.

* ``pack B --lengths A/lengths.parquet``: only B's records are packed; A's records that are
  not in B are ignored and reported; B's counts equal a fresh count of B.
* an image replaced in place (the input file unchanged): a new ``--out`` that reuses the
  earlier run's counts automatically records the new image's tokens.
* a changed ``--max-pixels``: the image grids follow the new bound.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner
from PIL import Image

from curate.cli import cli


def _image(path: Path, h: int, w: int, seed: int) -> None:
    Image.fromarray(np.random.default_rng(seed).integers(0, 256, (h, w, 3), dtype=np.uint8)).save(path)


def _records(path: Path, ids: range) -> Path:
    rows = [{"id": f"r{i}", "source": "s", "images": [f"img{i % 3}.png"],
             "messages": [{"role": "user", "content": "<image>\nDescribe the picture."},
                          {"role": "assistant", "content": f"Picture number {i}, " + "with details " * i}]}
            for i in ids]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def _pack(args: list[str], cache: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[dict, str]:
    monkeypatch.setenv("CURATE_CACHE", str(cache))
    result = CliRunner().invoke(cli, ["pack", *args, "--ctx", "4096", "--plan-only", "--verify-sample", "2"])
    assert result.exit_code == 0, (result.output, result.exception)
    out = Path(args[args.index("--out") + 1])
    return json.loads((out / "stats.json").read_text()), result.stderr


def _counts(out: Path) -> dict[str, tuple]:
    rows = pq.read_table(out / "lengths.parquet").to_pylist()
    return {r["id"]: (r["tokens"], r["text_tokens"], r["image_tokens"], r["image_grids"]) for r in rows}


def test_counts_follow_inputs_images_and_flags(tiny_processor_dir: Path, tmp_path: Path,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    for k, (h, w) in enumerate([(60, 80), (120, 90), (40, 200)]):
        _image(tmp_path / f"img{k}.png", h, w, k)
    a, b = _records(tmp_path / "A.jsonl", range(0, 6)), _records(tmp_path / "B.jsonl", range(3, 8))
    proc = ["--processor", str(tiny_processor_dir)]
    cache = tmp_path / "cache"

    _pack([str(a), *proc, "--out", str(tmp_path / "A")], cache, monkeypatch)
    counted_a = _counts(tmp_path / "A")

    # B with A's counts: B's five records, A's r0-r2 ignored and reported, r3-r5 text counts reused
    stats, err = _pack([str(b), *proc, "--lengths", str(tmp_path / "A" / "lengths.parquet"),
                        "--out", str(tmp_path / "B")], cache, monkeypatch)
    assert stats["records_in"] == stats["records_packed"] == 5
    reuse = stats["lengths_reuse"]
    assert (reuse["ignored"], reuse["ignored_ids"], reuse["text_counts_reused"], reuse["counted"]) == (
        3, ["r0", "r1", "r2"], 3, 2)
    assert [line for line in err.splitlines() if "--lengths" in line and "ignored 3" in line]
    _pack([str(b), *proc, "--out", str(tmp_path / "B-fresh")], tmp_path / "empty-cache", monkeypatch)
    assert _counts(tmp_path / "B") == _counts(tmp_path / "B-fresh")
    assert set(_counts(tmp_path / "B")) == {f"r{i}" for i in range(3, 8)}

    # img1 replaced in place by a larger picture; A.jsonl (path, size, mtime) unchanged
    before = os.stat(a)
    _image(tmp_path / "img1.png", 400, 300, 9)
    assert os.stat(a).st_mtime_ns == before.st_mtime_ns
    _, err = _pack([str(a), *proc, "--out", str(tmp_path / "A2")], cache, monkeypatch)
    assert "token counts of an earlier run" in err  # found automatically: reused where still true
    _pack([str(a), *proc, "--out", str(tmp_path / "A2-fresh")], tmp_path / "empty-cache-2", monkeypatch)
    again, fresh = _counts(tmp_path / "A2"), _counts(tmp_path / "A2-fresh")
    assert again == fresh
    assert again["r1"][2] > counted_a["r1"][2] and again["r4"][2] > counted_a["r4"][2]  # the new, larger image
    assert again["r0"] == counted_a["r0"]

    # a smaller --max-pixels: new grids, image tokens within the new bound
    _pack([str(a), *proc, "--max-pixels", str(28 * 28 * 4), "--out", str(tmp_path / "A3")], cache, monkeypatch)
    _pack([str(a), *proc, "--max-pixels", str(28 * 28 * 4), "--out", str(tmp_path / "A3-fresh")],
          tmp_path / "empty-cache-3", monkeypatch)
    small = _counts(tmp_path / "A3")
    assert small == _counts(tmp_path / "A3-fresh")
    assert all(v[2] <= 4 for v in small.values()) and any(again[k][2] > 4 for k in small)
