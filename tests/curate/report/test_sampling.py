"""A report on a large output reads a seeded choice of row groups, and still shows whole packed sequences."""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

import curate.report.site as site
from curate.report import write_report


def test_pack_report_on_sampled_row_groups(tmp_path: Path, monkeypatch) -> None:
    rng = np.random.default_rng(0)
    sizes = rng.integers(1, 9, 2000)  # samples per packed sequence
    bins = np.repeat(np.arange(len(sizes)), sizes)
    tokens = rng.integers(10, 500, len(bins))
    ids = [f"r{i}" for i in range(len(bins))]
    out = tmp_path / "pack"
    out.mkdir()
    pq.write_table(pa.table({"bin": bins.astype(np.int64), "id": ids, "tokens": tokens.astype(np.int32)}),
                   out / "plan.parquet", row_group_size=100)
    (out / "stats.json").write_text(json.dumps({"stage": "pack", "records_in": len(ids), "records_packed": len(ids),
                                                "dropped": {}, "errored": {}, "bins": len(sizes),
                                                "settings": {"ctx": 4096}}))
    monkeypatch.setattr(site, "FULL_READ_ROWS", 2500)
    write_report(out, samples=40, seed=1)
    page = (out / "report" / "stage.html").read_text()
    shown = re.findall(r"sequence (\d+): (\d+) samples, ([\d,]+) of", page)
    assert len(shown) == 40
    assert f"40 of {len(sizes):,} sequences" in page
    per_bin = {b: (int(n), int(t)) for b, n, t in
               zip(range(len(sizes)), sizes, np.bincount(bins, weights=tokens).astype(int))}
    for b, n, used in shown:  # every sequence shown is whole: all its samples and tokens
        assert per_bin[int(b)] == (int(n), int(used.replace(",", "")))
    # a second report with the same seed is the same page (the sample is seeded)
    first = page
    write_report(out, samples=40, seed=1)
    assert re.sub(r"written by curate report in [\d.]+s", "", (out / "report" / "stage.html").read_text()) == \
        re.sub(r"written by curate report in [\d.]+s", "", first)
