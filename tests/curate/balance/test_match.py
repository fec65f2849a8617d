"""``curate match``: MetaCLIP's spacing and word-boundary rules, CJK without spaces, agreement with
a brute-force matcher, the tags.parquet layout read by resample, sharded runs."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest

from curate.balance.match import match
from curate.balance.matching.automaton import TextMatcher, brute_force_counts
from curate.balance.matching.rules import no_space_char, spaced_entry, spaced_text
from curate.balance.resample import resample
from curate.core.records import read_records
from curate.executors import get_executor

VOCAB = ["cat", "black cat", "sofa", "red", "猫", "睡觉", "t恤", "on", "c++", "Apple", "apple", "new york"]


def test_spacing_rules() -> None:
    assert spaced_text("A cat,asleep.\tThe\nend") == " A cat , asleep .  The end "
    assert spaced_entry("cat") == " cat "
    assert spaced_entry("猫") == "猫"
    assert spaced_entry("t恤") == " t恤"  # latin start needs a space, CJK end does not
    assert spaced_entry("c++") == " c++"  # punctuation end: no space needed
    assert no_space_char("ไ") and no_space_char("，") and not no_space_char("é")


def test_word_boundaries_cjk_and_counts() -> None:
    m = TextMatcher(VOCAB)
    found = {VOCAB[c]: n for c, n in m.counts("A black cat on a red sofa; the cat sleeps. Category: concatenate").items()}
    assert found == {"black cat": 1, "cat": 2, "on": 1, "red": 1, "sofa": 1}  # not inside category/concatenate
    cjk = {VOCAB[c]: n for c, n in m.counts("一只猫在沙发上睡觉，猫很可爱").items()}
    assert cjk == {"猫": 2, "睡觉": 1}  # no spaces in Chinese text
    assert {VOCAB[c] for c in m.counts("a T恤 shop")} == {"t恤"}
    folded = m.counts("APPLE pie")
    assert set(folded) == {VOCAB.index("Apple"), VOCAB.index("apple")}  # both entries fold to one pattern
    exact = TextMatcher(VOCAB, case_sensitive=True)
    assert set(exact.counts("Apple pie")) == {VOCAB.index("Apple")}  # MetaCLIP's comparison
    concepts, scores = m.match("the cat and the cat near a red sofa", top_k=2)
    assert concepts == [VOCAB.index("cat"), VOCAB.index("sofa")] and scores == [2.0, 1.0]


@pytest.mark.parametrize("case_sensitive", [False, True])
def test_agrees_with_brute_force(case_sensitive: bool, tmp_path: Path) -> None:
    rng = np.random.default_rng(0)
    words = ["cat", "Cat", "dog", "red", "sofa", "猫", "狗", "睡觉", "a", "on", "new", "york", ",", ".", "x++",
             "t恤", "ไทย", "ok!", "\n"]
    entries = sorted({" ".join(rng.choice(words, int(rng.integers(1, 3)))) for _ in range(80)}) + ["", "  "]
    texts = ["".join(str(w) + (" " if rng.random() < 0.6 else "") for w in rng.choice(words, 12)) for _ in range(300)]
    m = TextMatcher(entries, case_sensitive=case_sensitive)
    m.save(tmp_path / "a.bin")
    loaded = TextMatcher.load(tmp_path / "a.bin")
    for text in texts:
        expect = brute_force_counts(text, entries, case_sensitive=case_sensitive)
        assert m.counts(text) == expect
        assert loaded.counts(text) == expect


def _records(path: Path, n: int) -> Path:
    rng = np.random.default_rng(1)
    words = ["black cat", "sofa", "red", "猫", "a dog", "睡觉", "tree"]
    with open(path, "w") as fh:
        for i in range(n):
            caption = " ".join(rng.choice(words, 3))
            fh.write(json.dumps({"id": f"r{i}", "source": "s" if i % 2 else "t", "caption": caption,
                                 "alt": f"an apple {i}"}) + "\n")
        fh.write("{not json\n")
    return path


def test_match_text_writes_tags_that_resample_reads(tmp_path: Path) -> None:
    data = _records(tmp_path / "caps.jsonl", 60)
    vocab = tmp_path / "vocab.txt"
    vocab.write_text("\n".join(VOCAB) + "\n")
    one = match([data], vocab, out=tmp_path / "one", shard_size=25)
    two = match([data], vocab, out=tmp_path / "two", shard_size=25, executor=get_executor("local", workers=2))
    assert (tmp_path / "one" / "tags.parquet").read_bytes() == (tmp_path / "two" / "tags.parquet").read_bytes()
    assert one["records_in"] == 61 and one["records_tagged"] == 60 and one["errored"]
    tags = pq.read_table(tmp_path / "one" / "tags.parquet").to_pylist()
    m = TextMatcher(VOCAB)
    rows = [json.loads(line) for line in data.read_text().splitlines()[:60]]
    for row, tag in zip(rows, tags):
        assert tag["id"] == row["id"]
        assert dict(zip(tag["concepts"], tag["scores"])) == {c: float(n) for c, n in m.counts(row["caption"]).items()}
    field = match([data], vocab, out=tmp_path / "alt", text_field="alt", shard_size=25)
    assert field["matches"] == 120  # "an apple i": Apple and apple (case folded)
    r = resample(tmp_path / "one" / "tags.parquet", out=tmp_path / "rs", fraction=0.5, seed=0, plot=False)
    assert r["records_in"] == 60 and r["records_selected"] == 30


def test_cli_match_text(tmp_path: Path) -> None:
    data = _records(tmp_path / "caps.jsonl", 10)
    with open(data, "a", encoding="utf-8") as fh:  # LAION's caption column reads too; a row without text does not
        fh.write(json.dumps({"id": "laion", "TEXT": "a black cat"}) + "\n" + json.dumps({"id": "alt", "alt": "x"}) + "\n")
    vocab = tmp_path / "vocab.txt"
    vocab.write_text("\n".join(VOCAB) + "\n")
    run = [sys.executable, "-m", "curate", "match", str(data), "--vocab", str(vocab),
           "--out", str(tmp_path / "o"), "--top-k", "2"]
    done = subprocess.run(run, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert "matched 11 of 13 records" in done.stderr  # the summary says what was not matched, and why
    assert "errored {'malformed_json': 1, 'unknown_layout': 1}" in done.stderr and "rejects.parquet" in done.stderr
    assert max(len(c) for c in pq.read_table(tmp_path / "o" / "tags.parquet").column("concepts").to_pylist()) == 2
    bad = subprocess.run(run[:4] + ["--vocab", str(vocab), "--out", str(tmp_path / "p")], capture_output=True, text=True)
    assert bad.returncode == 2 and "RECORDS" in bad.stderr and "Traceback" not in bad.stderr
    old = subprocess.run(run[:3] + ["tag", "--match", "text", "--records", str(data), "--vocab", str(vocab), "--out",
                                    str(tmp_path / "q")], capture_output=True, text=True)
    assert old.returncode == 2 and "curate match" in old.stderr and "Traceback" not in old.stderr
    assert len(old.stderr.strip().splitlines()) == 1, old.stderr


def test_cli_balance_match_text_on_sample_data(tmp_path: Path) -> None:
    """``curate balance --match text``: no embeddings, tags and a selection, every record accounted for."""
    sample = Path(__file__).resolve().parents[3] / "data" / "sample"
    vocab = tmp_path / "vocab.txt"
    with open(Path(__file__).resolve().parents[3] / "vocab" / "500k.txt", encoding="utf-8") as fh:
        vocab.write_text("".join(line for _, line in zip(range(20000), fh)), encoding="utf-8")
    out = tmp_path / "bal"
    run = [sys.executable, "-m", "curate", "balance", str(sample / "records.jsonl"), str(sample / "bad" / "records.jsonl"),
           "--vocab", str(vocab), "--match", "text", "--fraction", "0.5", "--out", str(out)]
    done = subprocess.run(run, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert (out / "tags.parquet").exists() and (out / "selection.parquet").exists()
    assert not (out / "embeddings").exists() and not (out / "concepts.npy").exists()
    stats = json.loads((out / "stats.json").read_text())
    assert stats["settings"]["match"] == "text"
    dropped, errored = sum(stats["dropped"].values()), sum(stats["errored"].values())
    assert errored > 0 and stats["records_selected"] > 0
    assert stats["records_in"] == stats["records_selected"] + dropped + errored
    selection = pq.read_table(out / "selection.parquet")
    assert selection.num_rows == stats["records_selected"]
    tags = pq.read_table(out / "tags.parquet")
    assert set(selection.column("id").to_pylist()) <= set(tags.column("id").to_pylist())


def test_text_field_reads_rows_in_no_layout_through_resample(tmp_path: Path) -> None:
    """Rows with only ``url``, ``alt_text`` and an embedded image: not records by themselves, records read with
    ``--text-field alt_text`` (matched, selected and written back by ``resample --records``)."""
    import pyarrow as pa

    image = sorted((Path(__file__).resolve().parents[3] / "data" / "sample" / "images").glob("*.jpg"))[0].read_bytes()
    words = ["black cat", "sofa", "red", "猫", "tree"]
    alts = [f"{words[i % 5]} and a {words[(i * 3) % 5]}" for i in range(40)]
    folder = tmp_path / "webli"
    folder.mkdir()
    pq.write_table(pa.table({"url": [f"https://e.com/{i}.jpg" for i in range(40)], "alt_text": alts,
                             "image": [{"bytes": image, "path": f"{i}.jpg"} for i in range(40)]}),
                   folder / "train-00000-of-00001.parquet")
    vocab = tmp_path / "vocab.txt"
    vocab.write_text("\n".join(VOCAB) + "\n")
    plain = match([folder], vocab, out=tmp_path / "plain")
    assert plain["records_tagged"] == 0 and plain["errored"] == {"unknown_layout": 40}
    r = match([folder], vocab, out=tmp_path / "alt", text_field="alt_text", shard_size=15,
                   executor=get_executor("local", workers=2))
    assert r["records_tagged"] == 40 and not r["errored"] and r["per_source"]["webli"]["records_out"] == 40
    tags = pq.read_table(tmp_path / "alt" / "tags.parquet").to_pylist()
    m = TextMatcher(VOCAB)
    assert [t["id"] for t in tags] == [f"webli/train-00000-of-00001:{i}" for i in range(40)]
    for alt, tag in zip(alts, tags):
        assert dict(zip(tag["concepts"], tag["scores"])) == {c: float(n) for c, n in m.counts(alt).items()}
    chosen = resample(tmp_path / "alt" / "tags.parquet", out=tmp_path / "rs", fraction=0.5, seed=0, plot=False,
                      records=[str(folder)])
    written = pq.read_table(tmp_path / "rs" / "records" / "webli" / "train-00000-of-00001.parquet")
    assert chosen["records_written"]["records"] == chosen["records_selected"] == written.num_rows == 20
    selected = set(pq.read_table(tmp_path / "rs" / "selection.parquet").column("id").to_pylist())
    assert set(written.column("id").to_pylist()) == selected  # the ids they were selected by
    assert set(written.column("source").to_pylist()) == {"webli"}  # not "records", their new folder's name
    again = list(read_records([tmp_path / "rs" / "records"]))  # read back (still no layout): the same ids and source
    assert {r.id for r in again} == selected and {r.source for r in again} == {"webli"}
    rows = [int(i.split(":")[1]) for i in written.column("id").to_pylist()]
    assert written.column("alt_text").to_pylist() == [alts[i] for i in rows]
    assert written.column("image").to_pylist()[0]["bytes"] == image  # the rows as they were, image included


# --------------------------------------------------------------------------- MetaCLIP's rules, per caption


def _caption_lists(path: Path) -> list[list[str]]:
    """COCO-CN-shaped records: 1-3 captions each, English and Chinese, written as ``caption`` lists."""
    from tests.curate.balance.matching.test_rules import CAPTIONS

    pool = [c for c in CAPTIONS if c.strip()]  # a record whose captions are all blank is not a record
    groups = [[pool[i % len(pool)], pool[(i * 7 + 3) % len(pool)], pool[(i * 5 + 1) % len(pool)]][:1 + i % 3]
              for i in range(45)]
    with open(path, "w", encoding="utf-8") as fh:
        for i, caps in enumerate(groups):
            fh.write(json.dumps({"id": f"img{i}", "caption": caps}, ensure_ascii=False) + "\n")
    return groups


def test_metaclip_rules_count_per_caption(tmp_path: Path) -> None:
    """--rules metaclip: a row per caption with MetaCLIP 2's matches, entry counts per caption (as MetaCLIP
    counts); --per record keeps one row per record (its captions joined), counted once."""
    from collections import Counter

    from tests.curate.balance.matching.test_rules import VOCAB as MIXED
    from tests.curate.balance.matching.test_rules import reference_matches

    data = tmp_path / "coco.jsonl"
    groups = _caption_lists(data)
    vocab = tmp_path / "vocab.txt"
    vocab.write_text("\n".join(MIXED) + "\n", encoding="utf-8")
    r = match([data], vocab, out=tmp_path / "t", rules="metaclip", shard_size=20)
    assert r["settings"]["rules"] == "metaclip" and r["settings"]["per"] == "text"
    assert r["records_tagged"] == 45 and r["texts"] == r["rows"] == sum(len(g) for g in groups)
    rows = pq.read_table(tmp_path / "t" / "tags.parquet").to_pylist()
    expected = [(f"img{i}", j, reference_matches(c, MIXED)) for i, caps in enumerate(groups) for j, c in enumerate(caps)]
    assert [(row["id"], row["text"], set(row["concepts"])) for row in rows] == expected
    per_caption = Counter(e for _, _, found in expected for e in found)
    assert Counter(c for row in rows for c in row["concepts"]) == per_caption

    joined = match([data], vocab, out=tmp_path / "j", rules="metaclip", per="record")
    record_rows = pq.read_table(tmp_path / "j" / "tags.parquet").to_pylist()
    assert [set(row["concepts"]) for row in record_rows] == [reference_matches("\n".join(g), MIXED) for g in groups]
    assert "text" not in pq.read_schema(tmp_path / "j" / "tags.parquet").names
    assert sum(len(row["concepts"]) for row in record_rows) < sum(per_caption.values())  # counted once per record

    chosen = resample(tmp_path / "t" / "tags.parquet", out=tmp_path / "rs", mode="metaclip", t=3, seed=0, plot=False)
    assert chosen["settings"]["per"] == "text" and chosen["texts"] == r["texts"]
    assert chosen["balance"]["tag_occurrences_before"] == sum(per_caption.values())
    selection = pq.read_table(tmp_path / "rs" / "selection.parquet").to_pylist()
    by_id = {f"img{i}": caps for i, caps in enumerate(groups)}
    assert selection and all(reference_matches(by_id[s["id"]][s["text"]], MIXED) for s in selection)
    merged = resample(tmp_path / "t" / "tags.parquet", out=tmp_path / "rm", mode="metaclip", t=3, per="record",
                      seed=0, plot=False)
    assert merged["settings"]["per"] == "record" and "texts" not in merged
    union = sum(len(set().union(*(reference_matches(c, MIXED) for c in g))) for g in groups)
    assert merged["balance"]["tag_occurrences_before"] == union


def test_languages_and_per_language_vocabularies(tmp_path: Path) -> None:
    """Each text matched against its language's vocabulary (py3langid, offline); a language without one uses
    ``other``; the concept ranges and languages are in the tags."""
    data = tmp_path / "mixed.jsonl"
    captions = ["A black cat sleeping on the red sofa in the living room", "一只黑猫在红色的沙发上睡觉",
                "Un chat noir dort sur le canapé rouge du salon", "Two dogs are playing on the green grass",
                "两只狗在绿色的草地上玩耍"]
    data.write_text("".join(json.dumps({"id": f"r{i}", "caption": c}, ensure_ascii=False) + "\n"
                            for i, c in enumerate(captions)), encoding="utf-8")
    (tmp_path / "en.txt").write_text("cat\nblack cat\nsofa\ndogs\ngrass\n", encoding="utf-8")
    (tmp_path / "zh.txt").write_text("猫\n沙发\n狗\n草地\n", encoding="utf-8")
    (tmp_path / "other.txt").write_text("chat\ncanapé\n", encoding="utf-8")
    vocabs = {"zh": str(tmp_path / "zh.txt"), "en": str(tmp_path / "en.txt"), "other": str(tmp_path / "other.txt")}
    r = match([data], vocabs, out=tmp_path / "t")
    assert r["settings"]["lang_id"].startswith("py3langid==") and r["texts_per_language"] == {"en": 2, "other": 1, "zh": 2}
    assert r["vocabularies"] == {"en": {"path": vocabs["en"], "entries": 5, "first_concept": 0},
                                 "other": {"path": vocabs["other"], "entries": 2, "first_concept": 5},
                                 "zh": {"path": vocabs["zh"], "entries": 4, "first_concept": 7}}
    rows = pq.read_table(tmp_path / "t" / "tags.parquet").to_pylist()
    assert [row["lang"] for row in rows] == ["en", "zh", "other", "en", "zh"]
    assert [sorted(row["concepts"]) for row in rows] == [[0, 1, 2], [7, 8], [5, 6], [3, 4], [9, 10]]
    shared = match([data], tmp_path / "en.txt", out=tmp_path / "s", lang_id=True)
    assert shared["texts_per_language"] == {"en": 2, "fr": 1, "zh": 2}  # one vocabulary: every language counts


def test_cli_balance_worldwide(tmp_path: Path) -> None:
    """``curate balance --match text --rules metaclip --vocab LANG=FILE --mode worldwide``: per-language t, kept
    shares in stats.json and printed; mistakes are one-line errors."""
    data = tmp_path / "mixed.jsonl"
    en = ["A black cat on the sofa", "A dog on the grass", "The cat and the dog", "A red sofa"]
    zh = ["沙发上的黑猫", "草地上的狗", "猫和狗在一起", "红色的沙发"]
    rows = [{"id": f"r{i}", "caption": [en[i % 4], zh[(i * 3) % 4]]} for i in range(40)]
    data.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), encoding="utf-8")
    (tmp_path / "en.txt").write_text("cat\nblack cat\nsofa\ndog\ngrass\nred\n", encoding="utf-8")
    (tmp_path / "zh.txt").write_text("猫\n黑猫\n沙发\n狗\n草地\n", encoding="utf-8")
    out = tmp_path / "bal"
    base = [sys.executable, "-m", "curate", "balance", str(data), "--match", "text", "--rules", "metaclip",
            "--vocab", f"en={tmp_path / 'en.txt'}", "--vocab", f"zh={tmp_path / 'zh.txt'}", "--out"]
    done = subprocess.run(base + [str(out), "--mode", "worldwide", "--t", "8"], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    stats = json.loads((out / "stats.json").read_text())
    assert stats["settings"]["rules"] == "metaclip" and stats["settings"]["per"] == "text"
    langs = stats["languages"]["per_language"]
    assert set(langs) == {"en", "zh"} and langs["en"]["t"] == 8 and langs["en"]["texts"] == langs["zh"]["texts"] == 40
    assert stats["languages"]["tail_share_from"] == "t of en" and "en: t=8" in done.stderr
    assert stats["records_in"] == 40 == stats["records_selected"] + sum(stats["dropped"].values())
    bad = subprocess.run(base + [str(tmp_path / "b"), "--mode", "worldwide", "--tail-share", "2"],
                         capture_output=True, text=True)
    assert bad.returncode == 2 and "--tail-share" in bad.stderr and "Traceback" not in bad.stderr
    mixed = subprocess.run(base[:-5] + ["--vocab", str(tmp_path / "en.txt"), "--vocab", f"zh={tmp_path / 'zh.txt'}",
                                        "--out", str(tmp_path / "c")], capture_output=True, text=True)
    assert mixed.returncode == 2 and "not both" in mixed.stderr
