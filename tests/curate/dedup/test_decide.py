"""The keep rule, exact groups, greedy removal without chains, and chains resolved to the record kept."""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from curate.dedup.decide import NEAR, EXACT, Decision, exact_groups, greedy, keep_rank


def test_keep_rank_orders_by_prefer_then_pixels_then_id() -> None:
    ids = pa.array(["b", "a", "c", "d", "e"])
    sources = pa.array(["laion", "coyo", "coyo", "other", "laion"])
    pixels = np.array([100, 100, 400, 900, 100])
    rank = keep_rank(sources, pixels, ids, ("coyo", "laion"))
    order = [ids[int(i)].as_py() for i in np.argsort(rank)]
    assert order == ["c", "a", "b", "e", "d"]
    rank = keep_rank(sources, pixels, ids, ())
    assert [ids[int(i)].as_py() for i in np.argsort(rank)] == ["d", "c", "a", "b", "e"]


def test_exact_groups_keep_the_best_rank() -> None:
    keys = pa.array([b"x", b"y", b"x", b"x", b"z"], pa.binary())
    rank = np.array([3, 0, 1, 2, 4])
    removed, kept = exact_groups(keys, rank, np.arange(5))
    assert dict(zip(removed.tolist(), kept.tolist())) == {0: 2, 3: 2}


def test_greedy_removes_neighbours_of_the_kept_only() -> None:
    # 0 ~ 1 ~ 2 but 0 !~ 2: 0 (best) removes 1; 2 stays, it is no copy of 0
    a, b, w = np.array([0, 1]), np.array([1, 2]), np.array([3.0, 4.0])
    rank = np.array([0, 1, 2])
    removed, by, weight = greedy(a, b, w, rank, np.ones(3, bool))
    assert removed.tolist() == [1] and by.tolist() == [0] and weight.tolist() == [3.0]
    # a pair with a record not alive is ignored
    removed, _, _ = greedy(a, b, w, rank, np.array([False, True, True]))
    assert removed.tolist() == [2]


def test_resolve_points_at_the_record_finally_kept() -> None:
    d = Decision.empty(3)
    d.remove(np.array([0]), EXACT, np.array([1]), False, np.zeros(1), ["same bytes"])
    d.remove(np.array([1]), NEAR, np.array([2]), False, np.array([4.0]), ["4 bits"])
    d.resolve()
    assert d.of_row.tolist()[:2] == [2, 2] and d.via.tolist() == [1, -1, -1]
