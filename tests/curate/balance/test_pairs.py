"""Records with several texts: MetaCLIP 2's pair selection (one matched text drawn per record, kept with its
probability) and the merge of a record's texts for --per record."""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from curate.balance.pairs import TextRows, draw_pairs, merge_texts
from curate.balance.weights import TagArrays


def _tags(rows: list[list[int]], text: list[int], ids: list[str]) -> TagArrays:
    offsets = np.zeros(len(rows) + 1, np.int64)
    np.cumsum([len(r) for r in rows], out=offsets[1:])
    flat = np.array([c for r in rows for c in r], np.int32)
    return TagArrays(pa.array(ids), np.arange(len(rows), dtype=np.int32) % 2, ["s0", "s1"], offsets, flat, None,
                     None, np.array(text, np.int32), np.array([0, 1] * (len(rows) // 2) + [0] * (len(rows) % 2),
                                                              np.int32), ["en", "zh"])


def test_merge_is_the_union_in_first_appearance_order() -> None:
    tags = _tags([[3, 1], [1, 4, 3], [], [7], [2, 2], [9]], [0, 1, 2, 0, 0, 1], ["a", "a", "a", "b", "c", "c"])
    rows = TextRows.of(tags)
    assert rows.starts.tolist() == [0, 3, 4] and rows.record.tolist() == [0, 0, 0, 1, 2, 2]
    merged = merge_texts(tags, rows)
    per_record = [merged.flat[merged.offsets[i]:merged.offsets[i + 1]].tolist() for i in range(3)] \
        if merged.offsets is not None else merged.flat.reshape(3, -1).tolist()
    assert per_record == [[3, 1, 4], [7], [2, 9]]
    assert merged.ids.to_pylist() == ["a", "b", "c"] and merged.codes.tolist() == [0, 1, 0]
    assert merged.lang.tolist() == [0, 1, 0] and merged.text is None  # the first text's language


def test_pair_draw_picks_a_matched_text_and_keeps_it_with_its_probability() -> None:
    n = 20000  # records of three texts: probabilities 0.1 and 0.7, the third without a match
    text = np.tile([0, 1, 2], n)
    rows = TextRows(np.arange(0, 3 * n, 3), np.repeat(np.arange(n), 3))
    eligible = np.tile([True, True, False], n)
    prob = np.tile([0.1, 0.7, 0.0], n)
    copies, weights, chosen, kept_rows = draw_pairs(rows, eligible, prob, np.random.default_rng(0))
    assert set(chosen.tolist()) == {0, 1} and np.allclose(weights, 0.4)  # the mean over the matched texts
    share_second = (chosen == 1).mean()
    assert abs(share_second - 0.5) < 5 * np.sqrt(0.25 / n)
    for pick, p in ((0, 0.1), (1, 0.7)):
        picked = chosen == pick
        rate = copies[picked].mean()
        assert abs(rate - p) < 5 * np.sqrt(p * (1 - p) / picked.sum())
    assert kept_rows.sum() == copies.sum() and not kept_rows[text == 2].any()
    assert np.array_equal(np.flatnonzero(kept_rows), (rows.starts + chosen)[copies == 1])
    none = draw_pairs(rows, np.zeros(3 * n, bool), prob, np.random.default_rng(0))
    assert not none[0].any() and (none[2] == -1).all() and not none[1].any()
