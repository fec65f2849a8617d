"""Lookups of earlier text counts and the reuse report, against plain-Python dicts and sets."""

from __future__ import annotations

import hashlib

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from curate.core.stats import StageStats
from packer.count import SHOWN_IDS, TextCounts, index_text_counts, reusable_text_counts, reuse_report


@pytest.mark.parametrize("mixed", [False, True])
def test_text_counts_answer_like_a_dict(tmp_path, mixed: bool) -> None:
    rng = np.random.default_rng(7)
    keys = [hashlib.sha256(str(k).encode()).hexdigest()[: (8 + k % 25 if mixed else 32)] for k in range(2000)]
    counts = rng.integers(0, 5000, len(keys)).tolist()
    keys[5], counts[9] = None, None  # rows without a key or a count are never reused
    path = tmp_path / "lengths.parquet"
    pq.write_table(pa.table({"id": [f"r{i}" for i in range(len(keys))], "text_key": pa.array(keys, pa.string()),
                             "text_tokens": pa.array(counts, pa.int32())}), path, row_group_size=700)
    reference = {k: n for k, n in zip(keys, counts) if k is not None and n is not None}
    found = reusable_text_counts(str(path))
    assert isinstance(found, TextCounts) and len(found) == len(reference)
    probes = list(reference) + [hashlib.md5(str(k).encode()).hexdigest() for k in range(200)] + ["", keys[9]]
    for key in probes:
        assert (key in found) == (key in reference)
        if key in reference:
            assert found[key] == reference[key]
    with pytest.raises(KeyError):
        found["not a key"]
    assert reusable_text_counts(None) == {}
    shared = reusable_text_counts(index_text_counts(path, tmp_path / "out"))  # what workers open: memory-mapped
    assert isinstance(shared._keys, np.memmap) and len(shared) == len(reference)
    assert all(shared[k] == n for k, n in reference.items()) and "not a key" not in shared


def test_reuse_report_matches_sets(tmp_path, capsys) -> None:
    old = [f"id{k}" for k in range(0, 40)] + ["id3"]
    pq.write_table(pa.table({"id": old}), tmp_path / "old.parquet")
    table = pa.table({"id": [f"id{k}" for k in range(20, 50)]})
    stats = StageStats(extra={"text_counts_reused": 12, "text_counts_made": 18})
    stats.reject_many("errored", "truncated", ["id1", "id7"], ["s", "s"])
    report = reuse_report(tmp_path / "old.parquet", table, stats, explicit=True)
    ignored = sorted(set(old) - set(table["id"].to_pylist()) - {"id1", "id7"})
    assert report == {"from": str(tmp_path / "old.parquet"), "records_in_lengths": len(set(old)),
                      "text_counts_reused": 12, "counted": 18, "ignored": len(ignored),
                      "ignored_ids": ignored[:SHOWN_IDS]}
    assert f"ignored {len(ignored):,}" in capsys.readouterr().err
    # records whose text was reused but that errored afterwards (an image refused) never make the count negative
    errored_after = StageStats(extra={"text_counts_reused": 40, "text_counts_made": 0})
    assert reuse_report(tmp_path / "old.parquet", pa.table({"id": ["id1"]}), errored_after, explicit=True)["counted"] == 0
