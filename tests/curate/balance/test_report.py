"""The long-tail report's figures (curate.balance.report)."""

from __future__ import annotations

import numpy as np
import pytest

from curate.balance.report import compare, top_concepts


@pytest.mark.parametrize("seed", range(4))
def test_top_concepts_are_the_most_frequent_with_ties_by_index(seed: int) -> None:
    rng = np.random.default_rng(seed)
    counts = rng.integers(0, 4, 5000)  # many ties at every count
    counts[rng.choice(5000, 7, replace=False)] = rng.integers(5, 9, 7)
    names = [f"c{i}" for i in range(5000)]
    order = np.lexsort((np.arange(5000), -counts))  # every concept sorted: the reference
    for n in (1, 3, 10, 40):
        rows = top_concepts(counts, n, names)
        assert [r["concept"] for r in rows] == order[:n].tolist()
        assert [r["count"] for r in rows] == counts[order[:n]].tolist()
        assert [r["name"] for r in rows] == [f"c{c}" for c in order[:n].tolist()]


def test_top_concepts_stop_at_concepts_never_seen() -> None:
    counts = np.zeros(1000, np.int64)
    counts[[5, 900]] = [2, 3]
    assert top_concepts(counts, 10) == [{"concept": 900, "count": 3}, {"concept": 5, "count": 2}]
    assert top_concepts(np.zeros(10, np.int64), 3) == []


def test_compare_reports_the_head_share_and_coverage() -> None:
    before = np.array([90, 5, 3, 2] + [0] * 96)
    after = np.array([10, 5, 3, 2] + [0] * 96)
    report = compare(before, after, 100)
    assert report["concepts_covered_before"] == report["concepts_covered_after"] == 4
    assert report["head_share_before"] == 0.9 and report["head_share_after"] == 0.5
    assert report["normalized_entropy_after"] > report["normalized_entropy_before"]
