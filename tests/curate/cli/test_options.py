"""Shared verb output: the rejects line, and the cause of a whole input refused named on the terminal."""

from __future__ import annotations

from pathlib import Path

import pyarrow.parquet as pq

from curate.verbs import print_rejects
from curate.core.stats import Counts, StageStats


def test_a_reason_that_took_most_records_shows_one_example(tmp_path: Path, capsys) -> None:
    """img2dataset's input table (URLs, no bytes): the user reads 'download the images first' on the terminal."""
    stats = StageStats()
    detail = "the row has an image URL (http://x/1.jpg) but no image bytes: download the images first"
    for i in range(9):
        stats.seen("laion")
        stats.error(f"r{i}", "laion", "missing_image", detail)
    stats.seen("laion")
    stats.kept("laion")
    pq.write_table(stats.rejects_table(), tmp_path / "rejects.parquet")
    print_rejects(Counts(records_in=10, errored={"missing_image": 9}), str(tmp_path))
    seen = capsys.readouterr()
    out = seen.out + seen.err
    assert "9 of 10 records missing_image, e.g. r0:" in out and "download the images first" in out
    print_rejects(Counts(records_in=100, errored={"missing_image": 9}), str(tmp_path))  # a few: no example
    seen = capsys.readouterr()
    assert "e.g." not in seen.out + seen.err
