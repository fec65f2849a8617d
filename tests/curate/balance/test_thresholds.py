"""MetaCLIP 2's worldwide balancing: per-language t from English's tail share, and the keep probabilities that
follow, against this test's own statement of MetaCLIP 2's rule (``curation/curate.py``: ``t_to_p``, ``p_to_t``,
``count_to_prob``, the per-pair ``1 - Π (1 - p)``), written here in plain Python."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from curate.balance.resample import resample
from curate.balance.thresholds import entry_probabilities, tail_share, threshold_for_share
from curate.core.errors import UserError


def ref_tail_share(counts: list[int], t: int) -> float:
    """Share of all matches on entries matched fewer than t times."""
    return sum(c for c in counts if c < t) / sum(counts)


def ref_threshold(counts: list[int], share: float) -> int:
    """Entries by count, ascending: the count where the running share of matches is closest to ``share``."""
    ordered, total, running, best = sorted(counts), sum(counts), 0, None
    for c in ordered:
        running += c
        gap = abs(running / total - share)
        if best is None or gap < best[0]:
            best = (gap, c)
    return best[1]


def ref_probability(count: int, t: int) -> float:
    """An entry matched ``count`` (> 0) times passes with t / max(count, t): 1 below t, 0 when t = 0."""
    return t / max(count, t)


def zipf_counts(rng: np.random.Generator, entries: int, draws: int) -> np.ndarray:
    return np.bincount(np.minimum(rng.zipf(1.3, draws) - 1, entries - 1), minlength=entries)


def test_threshold_rules_against_reference() -> None:
    rng = np.random.default_rng(5)
    for entries, draws, t in [(5000, 60000, 200), (800, 3000, 20), (50, 500, 10), (3, 7, 2)]:
        en, other = zipf_counts(rng, entries, draws), zipf_counts(rng, entries, draws // 3)
        share = ref_tail_share(en.tolist(), t)
        assert tail_share(en, t) == share
        assert threshold_for_share(other, share) == ref_threshold(other.tolist(), share)
        t_other = threshold_for_share(other, share)
        matched = other > 0  # an entry never matched is never looked up (MetaCLIP 2 divides 0 by 0 there when t = 0)
        assert np.array_equal(entry_probabilities(other, t_other)[matched],
                              [ref_probability(c, t_other) for c in other[matched].tolist()])
    assert threshold_for_share(np.zeros(4, np.int64), 0.5) == 0 and not entry_probabilities(np.array([3, 1]), 0).any()


def _worldwide_tags(path: Path, rng: np.random.Generator, per_text: bool = True) -> list[dict]:
    """Records of 1-2 texts, English twice as many as Chinese, each text 0-3 entries of one shared vocabulary."""
    rows = []
    for r in range(3000):
        for j in range(1 + (r % 2) if per_text else 1):
            lang = "zh" if rng.random() < 1 / 3 else "en"
            k = int(rng.integers(0, 4))
            concepts = sorted({int(c) for c in np.minimum(rng.zipf(1.4, k) - 1, 599)})
            rows.append({"id": f"r{r}", "source": "s", "concepts": concepts, "scores": [1.0] * len(concepts),
                         **({"text": j} if per_text else {}), "lang": lang})
    table = pa.Table.from_pylist(rows).replace_schema_metadata({"concept_rows": "600", "match": "text"})
    pq.write_table(table.cast(table.schema.set(table.schema.get_field_index("concepts"),
                                               pa.field("concepts", pa.list_(pa.int32())))), path)
    return rows


def _reference(rows: list[dict], t_en: int | None, share: float | None = None) -> tuple[dict, dict]:
    counts = {lang: [0] * 600 for lang in ("en", "zh")}
    for row in rows:
        for c in row["concepts"]:
            counts[row["lang"]][c] += 1
    if share is None:
        share = ref_tail_share(counts["en"], t_en)
    t = {lang: (t_en if lang == "en" and t_en is not None else ref_threshold(counts[lang], share)) for lang in counts}
    weights: dict[str, list[float]] = {}
    for row in rows:
        if row["concepts"]:
            miss = 1.0
            for c in row["concepts"]:
                miss *= 1 - ref_probability(counts[row["lang"]][c], t[row["lang"]])
            weights.setdefault(row["id"], []).append(1 - miss)
    return t, {rid: sum(w) / len(w) for rid, w in weights.items()}


@pytest.mark.parametrize("per_text", [True, False])
def test_worldwide_resample_matches_metaclip2(tmp_path: Path, per_text: bool) -> None:
    rows = _worldwide_tags(tmp_path / "tags.parquet", np.random.default_rng(1), per_text)
    r = resample(tmp_path / "tags.parquet", out=tmp_path / "o", mode="worldwide", t=40, seed=0, plot=False)
    t, weights = _reference(rows, 40)
    langs = r["languages"]["per_language"]
    assert {lang: langs[lang]["t"] for lang in langs} == t and t["zh"] != t["en"]
    assert r["languages"]["tail_share"] == pytest.approx(ref_tail_share(
        [sum(c == i for row in rows if row["lang"] == "en" for c in row["concepts"]) for i in range(600)], 40), abs=1e-6)
    selection = pq.read_table(tmp_path / "o" / "selection.parquet").to_pylist()
    assert len(selection) > 100 and r["records_selected"] == len(selection)
    assert max(abs(s["weight"] - weights[s["id"]]) for s in selection) < 1e-12
    assert r["settings"]["per"] == ("text" if per_text else "record")
    for lang, figures in langs.items():
        assert figures["kept"] <= figures["candidates"] <= figures["matched"] <= figures["texts"]
    expected = sum(weights.values())  # the keep probabilities add up to the expected selection
    assert abs(len(selection) - expected) < 5 * np.sqrt(expected)


def test_tail_share_given_and_no_english(tmp_path: Path) -> None:
    rows = _worldwide_tags(tmp_path / "tags.parquet", np.random.default_rng(2))
    r = resample(tmp_path / "tags.parquet", out=tmp_path / "o", mode="worldwide", tail_share=0.3, seed=0, plot=False)
    t, _ = _reference(rows, None, share=0.3)
    assert {k: v["t"] for k, v in r["languages"]["per_language"].items()} == t
    assert r["languages"]["tail_share_from"] == "--tail-share"
    zh_only = [row for row in rows if row["lang"] == "zh"]
    pq.write_table(pa.Table.from_pylist(zh_only), tmp_path / "zh.parquet")
    with pytest.raises(UserError, match="tail_share"):
        resample(tmp_path / "zh.parquet", out=tmp_path / "z", mode="worldwide", seed=0, plot=False)
    pq.write_table(pa.Table.from_pylist([{k: v for k, v in row.items() if k != "lang"} for row in rows]),
                   tmp_path / "nolang.parquet")
    with pytest.raises(UserError, match="curate match --lang-id"):
        resample(tmp_path / "nolang.parquet", out=tmp_path / "n", mode="worldwide", seed=0, plot=False)
    stats = json.loads((tmp_path / "o" / "stats.json").read_text())
    assert stats["settings"]["mode"] == "worldwide" and stats["settings"]["t"] == 170000
