"""Column helpers against plain-Python references on seeded random data."""

from __future__ import annotations

import subprocess
import sys
from collections import Counter

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pytest

from curate.core.columns import (
    FEW_CODES, code_counts, counts_by_source, first_occurrences, hash_strings, rows, source_codes, take_rows,
    false_filled, from_numpy, strings, to_numpy,
)
from curate.core.stats import StageStats


@pytest.mark.parametrize("path", ["sort", "hash"])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_first_occurrences_matches_a_python_set(seed: int, path: str, monkeypatch: pytest.MonkeyPatch) -> None:
    # every input through either way of finding repeats: a stable sort, or a hash table
    monkeypatch.setattr("curate.core.columns.SORT_RUNS", 1 if path == "sort" else 1 << 40)
    rng = np.random.default_rng(seed)
    ids = [f"id-{k}" for k in rng.integers(0, 300, 1000)]
    ids[17] = ids[400] = ids[401] = None  # nulls are never repeats
    seen: set[str] = set()
    expect = []
    for rid in ids:
        expect.append(rid is None or rid not in seen)
        seen.add(rid)
    chunked = pa.chunked_array([pa.array(ids[:400]), pa.array(ids[400:])])
    assert first_occurrences(chunked).tolist() == expect
    assert first_occurrences(chunked, block=7).tolist() == expect  # sorted ids compared in blocks
    ordered = sorted(set(ids) - {None})
    assert first_occurrences(pa.array(ordered)).all()  # increasing: no sort needed
    assert first_occurrences(pa.array(ordered + ordered[-1:])).tolist() == [True] * len(ordered) + [False]
    assert first_occurrences(pa.array(["a", None, "a"])).tolist() == [True, True, False]  # a null is no proof
    assert first_occurrences(pa.array(ids[:1])).tolist() == [True]
    assert first_occurrences(pa.array([None, None, "b", "b"])).tolist() == [True, True, True, False]
    assert first_occurrences(pa.array([10, 9, 10, 2] * 20)).tolist() == [True, True, False, True] + [False] * 76  # ints
    assert first_occurrences(pa.array([], pa.string())).tolist() == []


@pytest.mark.parametrize("kind", [pa.string(), pa.large_string()])
def test_hashed_ids_of_any_length_find_exactly_the_repeats(kind: pa.DataType) -> None:
    # ids in random order go through the hash path: long ids that differ only after a long shared prefix
    # or in their last byte, empty ids, non-ASCII ids, and chunks that start inside a buffer (slices)
    rng = np.random.default_rng(5)
    pool = [f"https://example.org/{'a' * (k % 40)}/images/{k:07d}/photo.jpg" for k in range(400)]
    pool += ["", "x", "é" * 9, "éé", "image-1", "image-2", "image-10"]
    ids = [pool[k] for k in rng.integers(0, len(pool), 3000)]
    seen: set[str] = set()
    expect = []
    for rid in ids:
        expect.append(rid not in seen)
        seen.add(rid)
    whole = pa.array(["skip"] * 5 + ids, kind).slice(5)
    chunked = pa.chunked_array([whole.slice(0, 1000), whole.slice(1000, 1), whole.slice(1001)])
    assert first_occurrences(whole).tolist() == expect
    assert first_occurrences(chunked).tolist() == expect
    distinct = list(dict.fromkeys(ids))
    order = np.random.default_rng(6).permutation(len(distinct))
    assert first_occurrences(pa.array([distinct[k] for k in order], kind)).all()


def test_counter_ids_prove_themselves_unique_without_a_sort(monkeypatch: pytest.MonkeyPatch) -> None:
    counters = [f"r{k}" for k in range(1200)]  # no zero padding: "r9" < "r10" by length, not by bytes
    padded = [f"{k:05d}" for k in range(1200)]
    per_file = [f"part-1:{k}" for k in range(50)] + [f"part-2:{k}" for k in range(50)]  # prefix order breaks once
    def proven(values: list) -> bool:  # all first occurrences, found without sorting or hashing any id
        with monkeypatch.context() as patched:
            patched.setattr("curate.core.columns.pc.sort_indices", lambda *a, **k: pytest.fail("sorted"))
            patched.setattr("curate.core.columns._hash64", lambda *a, **k: pytest.fail("hashed"))
            try:
                return bool(first_occurrences(pa.array(values)).all())
            except pytest.fail.Exception:
                return False

    assert proven(counters) and proven(padded)
    with monkeypatch.context() as patched:
        patched.setattr("curate.core.columns.pc.sort_indices", lambda *a, **k: pytest.fail("sorted"))
        assert first_occurrences(pa.chunked_array([pa.array(counters[:500]), pa.array(counters[500:])])).all()
    assert not proven(per_file)
    assert not proven(counters[:20] + ["r9"])  # a repeat further on
    assert not proven(["r1", "r2", "r2"])  # equal neighbours
    assert not proven(["r1", None, "r3"])
    assert proven(["r10", "r9"])  # increasing bytes, whatever the lengths
    assert not proven(["r9", "r10", "r2"])  # neither order holds throughout
    assert not proven(["b1", "a2"])  # same length, bytes decrease
    sorted_sizes: list[int] = []
    sort_indices = pc.sort_indices
    with monkeypatch.context() as patched:  # ids in random order are hashed; only those sharing a hash are sorted
        patched.setattr("curate.core.columns.pc.sort_indices",
                        lambda values, *a, **k: sorted_sizes.append(len(values)) or sort_indices(values, *a, **k))
        shuffled = [counters[k] for k in np.random.default_rng(0).permutation(len(counters))]
        assert first_occurrences(pa.array(shuffled + shuffled[:3])).tolist() == [True] * 1200 + [False] * 3
    assert sorted_sizes and max(sorted_sizes) <= 12  # the 3 pairs, and at most a few rows sharing buckets
    repeated = counters[:30] + ["r7"] + counters[30:40] + ["r35"]
    assert first_occurrences(pa.array(repeated)).tolist() == [True] * 30 + [False] + [True] * 10 + [False]
    assert first_occurrences(pa.array(per_file)).all()


@pytest.mark.parametrize("seed", [0, 1])
def test_take_rows_from_chunks_equals_a_plain_take(seed: int) -> None:
    rng = np.random.default_rng(seed)
    values = [f"v{k}" for k in range(1000)]
    sizes = [0, 300, 1, 0, 450, 249]  # empty chunks too
    bounds = np.cumsum([0] + sizes)
    chunked = pa.chunked_array([pa.array(values[a:b], pa.string()) for a, b in zip(bounds[:-1], bounds[1:])])
    for index in (np.sort(rng.choice(1000, 200, replace=False)), rng.integers(0, 1000, 300), np.array([999, 0, 0]),
                  np.array([], np.int64)):
        expect = [values[i] for i in index]
        assert take_rows(chunked, index).to_pylist() == expect
        assert take_rows(pa.array(values), index).to_pylist() == expect
        assert rows(chunked, index) == expect
    assert take_rows(pa.chunked_array([pa.array(values)]), np.array([5])).to_pylist() == ["v5"]
    with pytest.raises(IndexError):
        take_rows(chunked, np.array([3, 1000]))


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


def test_dictionary_source_codes_count_like_plain_strings() -> None:
    values = ["b", "a", None, "b", "unknown", "c", None, "a"]
    plain = pa.array(values, pa.string())
    chunked = pa.chunked_array([plain.slice(0, 3).dictionary_encode(), plain.slice(3).dictionary_encode()])
    codes, names = source_codes(chunked, len(values))
    assert [names[c] for c in codes] == ["unknown" if v is None else v for v in values]
    assert counts_by_source(codes, names) == counts_by_source(*source_codes(plain, len(values)))


def test_plain_source_codes_merge_nulls_with_a_literal_unknown() -> None:
    for values in (["x", None, "unknown", None, "x"], ["unknown", "y", None], [None, None], []):
        for column in (pa.array(values, pa.string()), pa.chunked_array([pa.array(values, pa.large_string())])):
            codes, names = source_codes(column, len(values))
            assert len(names) == len(set(names))
            assert codes.dtype == np.int32
            assert [names[c] for c in codes] == ["unknown" if v is None else v for v in values]


def test_reject_columns_equal_reject_many_and_keep_the_order() -> None:
    rows, cols = StageStats(), StageStats()
    for s in ("a", "b", "a", "c"):
        rows.seen(s)
        cols.seen(s)
    rows.reject_many("errored", "duplicate_id", ["x"], ["a"], "again")
    cols.reject_columns("errored", "duplicate_id", pa.array(["x"]), pa.array(["a"]), "again")
    rows.reject_many("dropped", "too_long", ["y", "z"], ["b", "a"], ["9 > 5", "8" * 600])
    cols.reject_columns("dropped", "too_long", pa.array(["y", "z"]), pa.array(["b", "a"]),
                        pa.array(["9 > 5", "8" * 600]))
    rows.kept("c")
    cols.kept("c")
    assert rows.to_dict() == cols.to_dict()
    assert rows.rejects_table().equals(cols.rejects_table())
    # rows listed before and after a columnar block stay in call order through then() and merge()
    first = StageStats(records_in=1, dropped=Counter(bad=1), rejects=[("w", "a", "dropped", "bad", "")],
                       per_source={"a": {"records_in": 1, "records_out": 0, "dropped": Counter(bad=1),
                                         "errored": Counter()}})
    nothing = StageStats()
    later = StageStats(rejects=[("v", "c", "dropped", "late", "")])
    joined = first.merge(nothing).merge(cols).merge(later)
    assert joined.rejects_table()["id"].to_pylist() == ["w", "x", "y", "z", "v"]
    assert cols.then(StageStats(records_in=1, records_out=1, per_source={
        "c": {"records_in": 1, "records_out": 1, "dropped": Counter(), "errored": Counter()}})
    ).rejects_table().equals(cols.rejects_table())


@pytest.mark.parametrize("size", [1, 3, FEW_CODES, FEW_CODES + 1, 40])
def test_code_counts_equal_bincount_with_few_and_many_codes(size: int) -> None:
    rng = np.random.default_rng(size)
    codes = rng.integers(0, size, 5_000).astype(np.int32)
    codes[:3] = size - 1  # the last code is present whatever the draw
    where = rng.random(5_000) < 0.3
    for mask in (None, where):
        picked = codes if mask is None else codes[mask]
        expected = np.bincount(picked, minlength=size)
        got = code_counts(codes, size, mask)
        assert got.dtype == np.int64 and got.tolist() == expected.tolist()
    assert code_counts(np.zeros(0, np.int32), size).tolist() == [0] * size


def test_a_string_hashes_the_same_in_any_array() -> None:
    """The hash of an id does not depend on the other ids of its array (lookups hash a batch at a time)."""
    ids = ["", "a", "r1", "abcdefgh", "abcdefghi", "x" * 40, "日本語のキャプション"]
    alone = np.array([hash_strings(pa.array([i]))[0] for i in ids], np.uint64)
    together = hash_strings(pa.chunked_array([pa.array(ids[:3]), pa.array(ids[3:])]))
    large = hash_strings(pa.array(ids[::-1], pa.large_string()))[::-1]
    assert together.tolist() == alone.tolist() == large.tolist() and len(set(alone.tolist())) == len(ids)


# Arrow ↔ numpy through the buffers (curate.core.columns): the values pyarrow's own conversions give, without pandas.
@pytest.mark.parametrize("dtype", [np.int8, np.int32, np.int64, np.uint16, np.uint64, np.float32, np.float64, bool])
def test_round_trips_equal_pyarrow_conversions(dtype: type) -> None:
    values = (np.random.default_rng(0).random(37) * 100).astype(dtype)
    ours = from_numpy(values)
    assert ours.equals(pa.array(values)) and ours.null_count == 0
    for part in (ours, ours.slice(5), ours.slice(3, 20), ours.slice(37)):  # offsets inside a bitmap byte too
        np.testing.assert_array_equal(to_numpy(part), part.to_numpy(zero_copy_only=False))
        assert to_numpy(part).dtype == part.to_numpy(zero_copy_only=False).dtype


def test_from_numpy_casts_to_the_type_asked_and_checks_its_input() -> None:
    assert from_numpy(np.arange(4), pa.int32()).equals(pa.array([0, 1, 2, 3], pa.int32()))
    assert from_numpy(np.arange(6)[::2]).to_pylist() == [0, 2, 4]  # a strided view is copied
    with pytest.raises(ValueError, match="1-D"):
        from_numpy(np.zeros((2, 2)))
    with pytest.raises(TypeError, match="not a fixed-width number type"):
        from_numpy(np.arange(3), pa.string())


def test_nulls_are_filled_only_when_asked() -> None:
    column = pa.array([1, None, 3, None, 5], pa.int16())
    with pytest.raises(ValueError, match="null value"):
        to_numpy(column)
    np.testing.assert_array_equal(to_numpy(column.slice(1), null=-1), [-1, 3, -1, 5])
    np.testing.assert_array_equal(to_numpy(pa.array([True, None, False]), null=True), [True, True, False])
    chunked = pa.chunked_array([pa.array([1.5, None]), pa.array([2.5])])
    np.testing.assert_array_equal(to_numpy(chunked, null=0.0), [1.5, 0.0, 2.5])
    with pytest.raises(TypeError, match="not a fixed-width number type"):
        to_numpy(pa.array(["a"]))


def test_strings_equal_pa_array() -> None:
    for values in (["a", None, "héllo", ""], [], [None], ["日本語", "x" * 1000]):
        assert strings(values).equals(pa.array(values, pa.string()))
    assert strings([b"raw"]).equals(pa.array([b"raw"], pa.string()))  # other values: pyarrow's own conversion


def test_false_filled_is_fill_null_false() -> None:
    mask = pc.less(strings(["a", None, "c", "a"]), strings(["b", "b", None, "a"]))
    assert false_filled(mask).to_pylist() == pc.fill_null(mask, False).to_pylist() == [True, False, False, False]


def test_the_helpers_never_import_pandas() -> None:
    code = ("import sys, numpy as np, pyarrow.compute as pc\n"
            "from curate.core.columns import false_filled, from_numpy, strings, to_numpy\n"
            "a = from_numpy(np.arange(10)); to_numpy(a.slice(2)); to_numpy(from_numpy(np.ones(9, bool)))\n"
            "s = strings(['a', None]); false_filled(pc.equal(s, s)); to_numpy(pc.is_valid(s))\n"
            "print('pandas' in sys.modules)")
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert run.stdout.strip() == "False"
