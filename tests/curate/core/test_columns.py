"""Column helpers against plain-Python references on seeded random data."""

from __future__ import annotations

from collections import Counter

import numpy as np
import pyarrow as pa
import pytest

from curate.core.columns import counts_by_source, first_occurrences, rows, source_codes
from curate.core.stats import StageStats


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_first_occurrences_matches_a_python_set(seed: int) -> None:
    rng = np.random.default_rng(seed)
    ids = [f"id-{k}" for k in rng.integers(0, 300, 1000)]
    seen: set[str] = set()
    expect = []
    for rid in ids:
        expect.append(rid not in seen)
        seen.add(rid)
    chunked = pa.chunked_array([pa.array(ids[:400]), pa.array(ids[400:])])
    assert first_occurrences(chunked).tolist() == expect
    assert first_occurrences(pa.array(ids[:1])).tolist() == [True]
    assert first_occurrences(pa.array([], pa.string())).tolist() == []


def test_source_codes_and_counts() -> None:
    sources = pa.array(["b", "a", None, "b", "b"])
    codes, names = source_codes(sources, 5)
    assert [names[c] for c in codes] == ["b", "a", "unknown", "b", "b"]
    assert counts_by_source(codes, names) == dict(Counter(["b", "a", "unknown", "b", "b"]))
    assert counts_by_source(codes, names, codes != codes[0]) == {"a": 1, "unknown": 1}
    codes, names = source_codes(None, 3)
    assert counts_by_source(codes, names) == {"unknown": 3}
    assert rows(pa.array(["x", "y", "z"]), np.array([2, 0])) == ["z", "x"]


def test_bulk_stats_equal_per_record_calls() -> None:
    one, bulk = StageStats(), StageStats()
    srcs = ["a", "b", "a", "c", "a"]
    for s in srcs:
        one.seen(s)
    bulk.seen_many(Counter(srcs))
    for rid, s in zip("vw", "ab"):
        one.drop(rid, s, "too_long", f"{rid} long")
    bulk.reject_many("dropped", "too_long", ["v", "w"], ["a", "b"], ["v long", "w long"])
    one.error("x", "c", "duplicate_id", "again")
    bulk.reject_many("errored", "duplicate_id", ["x"], ["c"], "again")
    for s in ("a", "a"):
        one.kept(s)
    bulk.kept_many({"a": 2, "b": 0})
    bulk.check()
    assert one.to_dict() == bulk.to_dict()
    assert one.rejects == bulk.rejects
    with pytest.raises(ValueError):
        bulk.reject_many("lost", "x", ["y"], ["a"])
