"""``curate resample``: weights, seeded draws, MetaCLIP mode, accounting, records in their layout."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from PIL import Image

from curate.core.errors import UserError
from curate.core.records import read_records
from curate.balance.resample import draw, read_tags, record_weights, resample
from curate.balance.tag import TAGS_SCHEMA
from curate.balance.weights import TagArrays


def _all_tags(arrays: TagArrays) -> np.ndarray:
    """Every tag of the records in one flat array (the stored parts joined)."""
    return np.concatenate([part for _, part in arrays.parts()])


def _tags(path: Path, concepts: list[list[int]], ids: list[str] | None = None,
          sources: list[str] | None = None, row_group_size: int | None = None) -> Path:
    n = len(concepts)
    ids = ids or [f"r{i}" for i in range(n)]
    table = pa.table({"id": ids, "source": sources or ["s"] * n, "concepts": concepts,
                      "scores": [[1.0] * len(c) for c in concepts]}, schema=TAGS_SCHEMA)
    pq.write_table(table, path, row_group_size=row_group_size)
    return path


def _zipf_tags(path: Path, n: int = 2000, v: int = 200, k: int = 3, seed: int = 0) -> Path:
    rng = np.random.default_rng(seed)
    p = 1.0 / np.arange(1, v + 1) ** 1.2
    p /= p.sum()
    concepts = [rng.choice(v, size=k, replace=False, p=p).tolist() for _ in range(n)]
    return _tags(path, concepts)


def test_weights_follow_the_documented_formulas(tmp_path: Path) -> None:
    arrays = read_tags(_tags(tmp_path / "t.parquet", [[0, 1], [0], [0, 2], []]))
    counts = np.bincount(_all_tags(arrays), minlength=3)  # concept 0: 3 records, 1: 1, 2: 1
    assert counts.tolist() == [3, 1, 1]
    mean = record_weights(arrays, counts, weighting="mean")
    np.testing.assert_allclose(mean, [(1 / 3 + 1) / 2, 1 / 3, (1 / 3 + 1) / 2, 0.0])
    np.testing.assert_allclose(record_weights(arrays, counts, weighting="max"), [1.0, 1 / 3, 1.0, 0.0])
    np.testing.assert_allclose(record_weights(arrays, counts, weighting="sum"), [4 / 3, 1 / 3, 4 / 3, 0.0])
    half = record_weights(arrays, counts, weighting="mean", temperature=0.5)
    np.testing.assert_allclose(half, [(3 ** -0.5 + 1) / 2, 3 ** -0.5, (3 ** -0.5 + 1) / 2, 0.0])
    np.testing.assert_allclose(record_weights(arrays, counts, temperature=0.0), [1, 1, 1, 0])


def test_draw_is_proportional_to_weight() -> None:
    weights = np.array([1.0, 4.0, 0.0, 1.0])
    hits = np.zeros(4)
    for s in range(3000):
        hits += draw(weights, 1, np.random.default_rng(s))
    assert hits[2] == 0
    np.testing.assert_allclose(hits / hits.sum(), [1 / 6, 4 / 6, 0, 1 / 6], atol=0.03)


@pytest.mark.parametrize("zeros", [0, 37])
def test_exponentials_drawn_beforehand_give_the_same_draw(zeros: int) -> None:
    rng = np.random.default_rng(7)
    weights = rng.random(5000) + 0.01
    weights[rng.choice(5000, zeros, replace=False)] = 0.0  # a pool smaller than the records: a prefix is used
    plain = draw(weights, 900, np.random.default_rng([3, 1]))
    ahead = np.random.default_rng([3, 1]).standard_exponential(5000)
    copies = np.full(5000, 9, np.int32)  # a buffer given for the result is cleared first
    given = draw(weights, 900, np.random.default_rng([3, 1]), ahead, copies)
    np.testing.assert_array_equal(given, plain)
    assert given is copies and int(plain.sum()) == 900 and not plain[weights == 0].any()
    fewer = np.random.default_rng([3, 1]).standard_exponential(100)  # too few to use: drawn afresh
    np.testing.assert_array_equal(draw(weights, 900, np.random.default_rng([3, 1]), fewer), plain)


def test_same_seed_same_selection(tmp_path: Path) -> None:
    tags = _zipf_tags(tmp_path / "t.parquet")
    resample(tags, out=tmp_path / "a", fraction=0.25, seed=7, plot=False)
    resample(tags, out=tmp_path / "b", fraction=0.25, seed=7, plot=False)
    resample(tags, out=tmp_path / "c", fraction=0.25, seed=8, plot=False)
    a = (tmp_path / "a" / "selection.parquet").read_bytes()
    assert a == (tmp_path / "b" / "selection.parquet").read_bytes()
    assert a != (tmp_path / "c" / "selection.parquet").read_bytes()


def test_the_plot_is_drawn_and_the_same_bytes_again(tmp_path: Path) -> None:
    tags = _zipf_tags(tmp_path / "tags.parquet")
    first = resample(tags, out=tmp_path / "a", fraction=0.25, seed=7)
    again = resample(tags, out=tmp_path / "b", fraction=0.25, seed=7)
    png = (tmp_path / "a" / "balance.png").read_bytes()
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and len(png) > 10_000
    assert png == (tmp_path / "b" / "balance.png").read_bytes()
    assert first["outputs"]["plot"] == "balance.png" and first["timings"]["plot"] > 0
    with Image.open(tmp_path / "a" / "balance.png") as image:
        colours = set(image.convert("RGB").getdata())
    assert (0xC0, 0x39, 0x2B) in colours and (0x24, 0x71, 0xA3) in colours  # both curves (and legend samples)
    assert first["balance"] == again["balance"]


def test_without_replacement_below_the_pool(tmp_path: Path) -> None:
    tags = _zipf_tags(tmp_path / "t.parquet")
    result = resample(tags, out=tmp_path / "o", target=500, seed=1, plot=False)
    sel = pq.read_table(tmp_path / "o" / "selection.parquet")
    assert sel.num_rows == 500 and set(sel.column("copies").to_pylist()) == {1}
    assert len(set(sel.column("id").to_pylist())) == 500
    assert not result["with_replacement"] and result["records_selected"] == 500
    assert result["dropped"]["not_selected"] == 1500


def test_with_replacement_past_the_pool_records_copies(tmp_path: Path) -> None:
    tags = _zipf_tags(tmp_path / "t.parquet", n=300)
    result = resample(tags, out=tmp_path / "o", fraction=2.5, seed=1, plot=False)
    sel = pq.read_table(tmp_path / "o" / "selection.parquet")
    assert sum(sel.column("copies").to_pylist()) == 750 == result["copies_total"]
    assert result["with_replacement"] and result["max_copies"] > 1
    # Rare records get more copies than common ones on average.
    arrays = read_tags(tags)
    counts = np.bincount(_all_tags(arrays))
    w = record_weights(arrays, counts)
    copies = dict(zip(sel.column("id").to_pylist(), sel.column("copies").to_pylist()))
    got = np.array([copies.get(f"r{i}", 0) for i in range(300)])
    top, bottom = np.argsort(w)[-60:], np.argsort(w)[:60]
    assert got[top].mean() > 2 * got[bottom].mean()


def test_metaclip_mode_keeps_rare_records_and_thins_frequent_ones(tmp_path: Path) -> None:
    # 400 records of concept 0 only, 50 records of concept 1 only, 50 with both.
    concepts = [[0]] * 400 + [[1]] * 50 + [[0, 1]] * 50
    tags = _tags(tmp_path / "t.parquet", concepts)
    result = resample(tags, out=tmp_path / "o", mode="metaclip", t=100, seed=3, plot=False)
    sel = pq.read_table(tmp_path / "o" / "selection.parquet").to_pylist()
    chosen = {int(r["id"][1:]): r for r in sel}
    # p(0) = 100/450, p(1) = min(1, 100/100) = 1: every record holding concept 1 is kept.
    assert all(i in chosen for i in range(400, 500))
    kept_zero_only = sum(1 for i in range(400) if i in chosen)
    assert abs(kept_zero_only - 400 * 100 / 450) < 4 * np.sqrt(400 * (100 / 450) * (350 / 450))
    some_zero_only = next(i for i in range(400) if i in chosen)
    assert chosen[some_zero_only]["weight"] == pytest.approx(100 / 450)  # weight = keep probability
    assert chosen[450]["weight"] == pytest.approx(1.0)
    assert result["copies_total"] == len(sel)


def test_duplicates_and_untagged_records_are_accounted(tmp_path: Path) -> None:
    tags = _tags(tmp_path / "t.parquet", [[0], [1], [0], [], [2]], ids=["a", "b", "a", "c", "d"],
                 sources=["x", "y", "x", "y", "x"])
    result = resample(tags, out=tmp_path / "o", target=2, seed=0, plot=False)
    assert result["records_in"] == 5 and result["pool"] == 3
    assert result["dropped"] == {"no_concept": 1, "not_selected": 1}
    assert result["errored"] == {"duplicate_id": 1}
    assert result["per_source"]["x"]["records_in"] == 3 and result["per_source"]["y"]["records_in"] == 2
    rejects = pq.read_table(tmp_path / "o" / "rejects.parquet").to_pylist()
    assert {(r["id"], r["reason"]) for r in rejects} == {("a", "duplicate_id"), ("c", "no_concept")}


@pytest.mark.parametrize("kwargs, match", [
    ({}, "exactly one of"),
    ({"target": 5, "fraction": 0.5}, "exactly one of"),
    ({"target": 0}, "at least 1"),
    ({"fraction": -1.0}, "positive"),
    ({"mode": "metaclip", "target": 3}, "drop target/fraction"),  # a Python caller reads field names
    ({"mode": "nope"}, "inverse, metaclip or worldwide"),
    ({"mode": "metaclip", "tail_share": 0.1}, "mode worldwide"),
    ({"mode": "worldwide", "tail_share": 1.5}, "within"),
    ({"mode": "metaclip", "per": "pair"}, "record or text"),
])
def test_bad_arguments_are_user_errors(tmp_path: Path, kwargs: dict, match: str) -> None:
    tags = _tags(tmp_path / "t.parquet", [[0], [1]])
    with pytest.raises(UserError, match=match):
        resample(tags, out=tmp_path / "o", **kwargs)


def test_missing_tags_file_is_a_user_error(tmp_path: Path) -> None:
    with pytest.raises(UserError, match="no such file"):
        resample(tmp_path / "none.parquet", out=tmp_path / "o", target=1)


def test_selected_records_keep_their_layout_and_images(sample_data: Path, tmp_path: Path) -> None:
    inputs = [sample_data / "llava.jsonl", sample_data / "captions.jsonl", sample_data / "records.parquet"]
    records = [r for r in read_records(inputs) if isinstance(r, dict)]
    seen: set[str] = set()
    unique = [r for r in records if not (r["id"] in seen or seen.add(r["id"]))]
    tags = _tags(tmp_path / "t.parquet", [[i % 7] for i in range(len(unique))], ids=[r["id"] for r in unique],
                 sources=[r["source"] for r in unique])
    result = resample(tags, out=tmp_path / "o", fraction=1.5, seed=2, records=inputs, plot=False)
    copies = dict(zip(*[pq.read_table(tmp_path / "o" / "selection.parquet").column(c).to_pylist()
                        for c in ("id", "copies")]))
    out = tmp_path / "o" / "records"
    assert sorted(p.name for p in out.iterdir()) == ["captions.jsonl", "llava.jsonl", "records.parquet"]
    # Raw layouts are kept: LLaVA rows still have conversations, caption rows a caption.
    llava_rows = [json.loads(line) for line in (out / "llava.jsonl").read_text().splitlines()]
    assert llava_rows and all("conversations" in r for r in llava_rows)
    caption_rows = [json.loads(line) for line in (out / "captions.jsonl").read_text().splitlines()]
    assert caption_rows and all("caption" in r for r in caption_rows)
    assert set(pq.read_schema(out / "records.parquet").names) >= set(pq.read_schema(inputs[2]).names)
    # Every written record reads back, its images exist, and copies got unique ids.
    written = [r for r in read_records([out]) if isinstance(r, dict)]
    assert len(written) == sum(copies.values()) == result["records_written"]["records"]
    assert len({r["id"] for r in written}) == len(written)
    assert all(Path(p).is_file() for r in written for p in r["images"])
    base = {r["id"].split("#")[0] for r in written}
    assert base == set(copies)
    assert result["records_written"]["selected_not_found"] == 0


def test_an_output_inside_the_records_folder_is_not_read_back(sample_data: Path, tmp_path: Path) -> None:
    """``--records data/ --out data/balanced``: the selection written before the records are read is not
    taken for records (resample holds OUT's lock while it runs), and a second run finds the same records."""
    data = tmp_path / "data"
    data.mkdir()
    shutil.copy(sample_data / "captions.jsonl", data / "captions.jsonl")
    records = [r for r in read_records([data]) if isinstance(r, dict)]
    tags = _tags(tmp_path / "t.parquet", [[i % 5] for i in range(len(records))], ids=[r["id"] for r in records],
                 sources=[r["source"] for r in records])
    for _ in range(2):
        result = resample(tags, out=data / "balanced", fraction=0.5, seed=0, records=[data], plot=False)
        assert result["records_written"]["files"] == {"captions.jsonl": result["records_selected"]}
        assert result["records_written"]["selected_not_found"] == 0
        assert not (data / "balanced" / ".curate.lock").exists()  # released at the end


@pytest.mark.parametrize("kw", [{"fraction": 0.3}, {"fraction": 1.7, "weighting": "max"}, {"mode": "metaclip", "t": 5}])
def test_blocks_of_records_change_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, kw: dict) -> None:
    from curate.balance import weights

    concepts = [[i % 7, (i * 3) % 11] if i % 9 else [] for i in range(500)]
    tags = _tags(tmp_path / "t.parquet", concepts, ids=[f"r{i % 480}" for i in range(500)],
                 sources=["a" if i % 3 else "b" for i in range(500)])
    whole = resample(tags, out=tmp_path / "whole", seed=2, plot=False, **kw)
    monkeypatch.setattr(weights, "BLOCK", 37)  # per-tag temporaries in many small blocks
    blocks = resample(tags, out=tmp_path / "blocks", seed=2, plot=False, **kw)
    assert pq.read_table(tmp_path / "whole" / "selection.parquet").equals(
        pq.read_table(tmp_path / "blocks" / "selection.parquet"))
    assert whole["balance"] == blocks["balance"] and whole["per_source"] == blocks["per_source"]
    assert whole["errored"]["duplicate_id"] == 20 and whole["dropped"]["no_concept"] > 0


@pytest.mark.parametrize("kw", [{"fraction": 0.3}, {"fraction": 0.3, "use_k": 2}, {"fraction": 1.7, "weighting": "max"},
                                {"mode": "metaclip", "t": 5}])
def test_row_groups_kept_as_read_change_nothing(tmp_path: Path, kw: dict) -> None:
    """Uniform K tags in many row groups (kept as parts, not copied) select what one row group selects."""
    rng = np.random.default_rng(3)
    concepts = [rng.choice(40, size=3, replace=False).tolist() for _ in range(500)]
    ids = [f"r{i % 490}" for i in range(500)]  # repeats: the weights and the draw are made again without them
    sources = ["a" if i % 3 else "b" for i in range(500)]
    one = _tags(tmp_path / "one.parquet", concepts, ids=ids, sources=sources)
    many = _tags(tmp_path / "many.parquet", concepts, ids=ids, sources=sources, row_group_size=37)
    assert isinstance(read_tags(many).flat, tuple)  # the parts path is the one under test
    whole = resample(one, out=tmp_path / "one", seed=4, plot=False, **kw)
    parts = resample(many, out=tmp_path / "many", seed=4, plot=False, **kw)
    assert pq.read_table(tmp_path / "one" / "selection.parquet").equals(
        pq.read_table(tmp_path / "many" / "selection.parquet"))
    assert whole["balance"] == parts["balance"] and whole["per_source"] == parts["per_source"]
    assert whole["errored"]["duplicate_id"] == 10


def test_read_tags_matches_a_plain_read_across_row_groups(tmp_path: Path) -> None:
    from curate.balance.tags_file import read_tags

    rng = np.random.default_rng(5)
    # Uniform K = 3 for the first row groups, then ragged lists, empty lists and nulls.
    concepts = [rng.integers(0, 40, 3).tolist() for _ in range(30)]
    concepts += [rng.integers(0, 40, rng.integers(0, 6)).tolist() if i % 5 else None for i in range(40)]
    sources = [None if i % 11 == 0 else f"s{i % 4}" for i in range(len(concepts))]
    table = pa.table({"id": [f"r{i}" for i in range(len(concepts))], "source": sources, "concepts": concepts,
                      "scores": [[1.0] * len(c or []) for c in concepts]}, schema=TAGS_SCHEMA)
    for name, frame in (("ragged", table), ("uniform", table.slice(0, 30))):
        path = tmp_path / f"{name}.parquet"
        pq.write_table(frame, path, row_group_size=7)
        arrays = read_tags(path)
        rows = frame.to_pylist()
        lengths = arrays.lengths
        starts = np.concatenate([[0], np.cumsum(lengths)])
        assert [_all_tags(arrays)[starts[i]:starts[i + 1]].tolist() for i in range(len(rows))] == \
            [r["concepts"] or [] for r in rows]
        assert [arrays.source_names[c] for c in arrays.codes] == [r["source"] or "unknown" for r in rows]
        assert arrays.ids.to_pylist() == [r["id"] for r in rows]
        assert (arrays.width == 3) == (name == "uniform") and (arrays.offsets is None) == (name == "uniform")


@pytest.mark.parametrize("weighting", ["mean", "max", "sum"])
def test_matrix_and_list_layouts_give_the_same_bits(weighting: str, monkeypatch: pytest.MonkeyPatch) -> None:
    from curate.balance import weights
    from curate.balance.weights import TagArrays, concept_counts

    monkeypatch.setattr(weights, "LOOKUP_BLOCK", 64)  # the matrix lookups in several blocks, the last one short
    rng = np.random.default_rng(9)
    for k in (1, 2, 3, 5, 9):
        flat = rng.integers(0, 50, 300 * k).astype(np.int32)
        n = 300
        common = (pa.chunked_array([pa.array([f"r{i}" for i in range(n)])]), np.zeros(n, np.int32), ["s"])
        matrix = TagArrays(*common, None, flat, None, k)
        lists = TagArrays(*common, np.arange(0, n * k + 1, k, dtype=np.int64), flat, None, None)
        counts = concept_counts(lists, 50)
        assert np.array_equal(concept_counts(matrix, 50), counts)
        mask = rng.random(n) < 0.4
        copies = rng.integers(0, 3, n).astype(np.int32)
        assert np.array_equal(concept_counts(matrix, 50, mask), concept_counts(lists, 50, mask))
        assert np.array_equal(concept_counts(matrix, 50, copies), concept_counts(lists, 50, copies))
        a = record_weights(matrix, counts, weighting=weighting, temperature=0.7)
        b = record_weights(lists, counts, weighting=weighting, temperature=0.7)
        assert a.tobytes() == b.tobytes()


def test_kth_smallest_equals_a_full_partition() -> None:
    from curate.balance.weights import kth_smallest

    rng = np.random.default_rng(4)
    for values in (rng.standard_exponential(1_200_000) / (rng.random(1_200_000) + 0.01),
                   rng.integers(0, 3, 1_100_000).astype(np.float64), rng.random(50)):  # continuous, ties, small
        for k in {0, 7, len(values) // 10, len(values) // 3, len(values) - 1}:
            assert kth_smallest(values, k) == np.partition(values, k)[k]


def test_resample_runs_without_pandas_or_matplotlib(tmp_path: Path) -> None:
    """pyarrow imports pandas on its first conversion of a numpy array or Python value (0.4 s of CPU holding
    the GIL); resample converts through the buffers (curate.core.columns) and draws with Pillow."""
    tags = _zipf_tags(tmp_path / "t.parquet")
    rng = np.random.default_rng(1)
    concepts = [rng.choice(50, size=3, replace=False).tolist() for _ in range(300)] + [[]]
    ids = [f"x{i}" for i in rng.permutation(301)]
    ids[10] = ids[3]  # ids out of order, a repeat, an untagged record, two sources, row groups
    _tags(tmp_path / "mixed.parquet", concepts, ids, ["a", "b", "a"] * 100 + ["b"], row_group_size=64)
    code = ("import sys\nfrom curate.balance.resample import resample\n"
            "for name in sys.argv[1:]:\n    resample(name, out=name + '.out', fraction=0.3, seed=0)\n"
            "print(sorted(m for m in ('pandas', 'matplotlib') if m in sys.modules))")
    run = subprocess.run([sys.executable, "-c", code, str(tags), str(tmp_path / "mixed.parquet")],
                         capture_output=True, text=True, check=True)
    assert run.stdout.strip() == "[]"
    stats = json.loads((tmp_path / "mixed.parquet.out" / "stats.json").read_text())
    assert stats["errored"] == {"duplicate_id": 1} and stats["dropped"]["no_concept"] == 1
