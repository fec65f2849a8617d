"""Tests of curate.balance.vocab.build: filters, sources, PMI bigrams, errors, the shipped vocabulary."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from curate.core.errors import UserError
from curate.balance.vocab.build import build_vocab, build_vocab_file, summarize
from curate.balance.vocab.files import default_stats_path, load_vocab
from curate.balance.vocab.filters import REASONS, entry_script, filter_reason, near_duplicate_key, normalize_entry
from curate.balance.vocab.pmi import caption_runs, mine_pmi_bigrams
from curate.balance.vocab.sources import read_wordfreq



def _write(path: Path, lines: list[str]) -> Path:
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


# --------------------------------------------------------------------------- scripts and filters


@pytest.mark.parametrize(
    ("text", "script"),
    [
        ("golden retriever", "latin"),
        ("café", "latin"),
        ("jack-o'-lantern", "latin"),
        ("猫", "cjk"),
        ("红色汽车", "cjk"),
        ("ねこ", "cjk"),
        ("コーヒー", "cjk"),  # the long-vowel mark is of the Common script
        ("고양이", "cjk"),
        ("кошка", "other"),
        ("αβ", "other"),
        ("t恤", "other"),  # mixed scripts
        ("", "other"),
        ("123", "other"),
    ],
)
def test_entry_script(text: str, script: str) -> None:
    assert entry_script(text) == script


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ("golden retriever", None),
        ("t-shirt", None),
        ("o'clock", None),
        ("café", None),
        ("猫", None),  # one Han character is a word
        ("达·芬奇", None),
        ("  Golden\t Retriever ", None),  # whitespace is normalised, not a reason to drop
        ("zero\u200bwidth", "control"),
        ("bell\x07", "control"),
        ("", "whitespace"),
        (" \t\u3000 ", "whitespace"),
        ("a" * 51, "too_long"),
        ("one two three four five six seven", "too_long"),
        ("1990", "number"),
        ("3d", "number"),
        ("covid-19", "number"),
        ("²", "number"),
        ("三十五", "number"),
        ("第一", "number"),
        ("c++", "punctuation"),
        ("u.s", "punctuation"),
        ("at&t", "punctuation"),
        ("-dash", "punctuation"),
        ("double--hyphen", "punctuation"),
        ("😂", "punctuation"),
        ("°", "punctuation"),
        ("a", "single_char"),
        ("é", "single_char"),
        ("e\u0301", "single_char"),  # one grapheme, two code points
        ("α", "single_char"),
        ("の", "single_char"),
    ],
)
def test_filter_reason(text: str, reason: str | None) -> None:
    assert filter_reason(text) == reason
    if reason is not None:
        assert reason in REASONS


def test_filter_limits_and_single_han_option() -> None:
    assert filter_reason("abcdefghij" * 5) is None
    assert filter_reason("abcdefghij" * 5 + "k") == "too_long"
    assert filter_reason("one two three four five six") is None
    assert filter_reason("abc", max_chars=2) == "too_long"
    assert filter_reason("big red car", max_words=2) == "too_long"
    assert filter_reason("猫", keep_single_han=False) == "single_char"
    assert filter_reason("猫咪", keep_single_han=False) is None


def test_normalize_entry() -> None:
    assert normalize_entry("  Golden\t\nRetriever ") == "Golden Retriever"
    assert normalize_entry("rock’n’roll") == "rock'n'roll"
    assert normalize_entry("ｇｏｌｆ") == "golf"  # full-width letters (NFKC)
    assert normalize_entry("e\u2011mail") == "e-mail"
    assert normalize_entry("达・芬奇") == "达·芬奇"


def test_near_duplicate_key() -> None:
    same = [
        ("Café", "cafe"),
        ("e-mail", "email"),
        ("e mail", "email"),
        ("O'Neill", "oneill"),
        ("Straße", "strasse"),
        ("貓", "猫"),
        ("達·芬奇", "达芬奇"),
    ]
    for a, b in same:
        assert near_duplicate_key(normalize_entry(a)) == near_duplicate_key(normalize_entry(b)), (a, b)
    different = [("glasses", "glass"), ("cats", "cat"), ("colour", "color"), ("が", "か"), ("news", "new")]
    for a, b in different:
        assert near_duplicate_key(a) != near_duplicate_key(b), (a, b)


# --------------------------------------------------------------------------- PMI bigrams


CAPTIONS = [
    "A golden retriever runs.",
    "A golden retriever sleeps.",
    "Golden retriever, a cat.",
    "a cat and a dog",
]
# Runs (punctuation ends a run; case is folded):
#   [a golden retriever runs] [a golden retriever sleeps] [golden retriever] [a cat] [a cat and a dog]
# N = 4 + 4 + 2 + 2 + 5 = 17 tokens; c(a) = 5, c(golden) = 3, c(retriever) = 3, c(cat) = 2,
# c(runs) = c(sleeps) = c(and) = c(dog) = 1.
# Bigrams: golden retriever 3, a golden 2, a cat 2, retriever runs 1, retriever sleeps 1,
#   cat and 1, and a 1, a dog 1 ("retriever a" spans a comma and is not one).
HAND_COUNTS = {
    "golden retriever": (3, "golden", "retriever"),
    "a golden": (2, "a", "golden"),
    "a cat": (2, "a", "cat"),
    "retriever runs": (1, "retriever", "runs"),
    "retriever sleeps": (1, "retriever", "sleeps"),
    "cat and": (1, "cat", "and"),
    "and a": (1, "and", "a"),
    "a dog": (1, "a", "dog"),
}
UNIGRAMS = {"a": 5, "golden": 3, "retriever": 3, "cat": 2, "runs": 1, "sleeps": 1, "and": 1, "dog": 1}
N_TOKENS = 17


def test_caption_runs() -> None:
    assert caption_runs("A golden retriever, a cat.") == [["a", "golden", "retriever"], ["a", "cat"]]
    assert caption_runs("Rock’n’roll in 3 T-shirts") == [["rock'n'roll", "in"], ["t-shirts"]]
    assert caption_runs("红色 汽车。") == [["红色", "汽车"]]


def test_pmi_values_match_hand_computation(tmp_path: Path) -> None:
    path = _write(tmp_path / "captions.txt", CAPTIONS)
    mined = mine_pmi_bigrams(path, pmi_threshold=-100.0, min_count=1)
    assert sum(UNIGRAMS.values()) == N_TOKENS
    assert mined.stats["tokens"] == N_TOKENS
    assert mined.stats["captions"] == 4
    assert mined.stats["distinct_bigrams"] == len(HAND_COUNTS)
    got = {g.text: g for g in mined.bigrams}
    assert set(got) == set(HAND_COUNTS)
    for text, (count, a, b) in HAND_COUNTS.items():
        assert got[text].count == count
        assert got[text].pmi == pytest.approx(math.log2(count * N_TOKENS / (UNIGRAMS[a] * UNIGRAMS[b])))
    # By hand: golden retriever log2(17/3) = 2.50, a cat log2(3.4) = 1.77, a golden log2(34/15) = 1.18.
    assert got["golden retriever"].pmi == pytest.approx(2.5025, abs=1e-4)
    assert got["a cat"].pmi == pytest.approx(1.7655, abs=1e-4)
    assert got["a golden"].pmi == pytest.approx(1.1806, abs=1e-4)

    kept = mine_pmi_bigrams(path, pmi_threshold=1.5, min_count=2)
    assert [g.text for g in kept.bigrams] == ["golden retriever", "a cat"]  # by count, then PMI
    assert kept.stats["bigrams_min_count"] == 3
    assert kept.stats["bigrams_passing"] == 2
    assert [g.text for g in mine_pmi_bigrams(path, pmi_threshold=2.0, min_count=2).bigrams] == ["golden retriever"]
    # cat and = log2(17/2) = 3.09 is the only bigram at or above 3 when singletons count.
    assert [g.text for g in mine_pmi_bigrams(path, pmi_threshold=3.0, min_count=1).bigrams] == ["cat and"]
    assert len(mine_pmi_bigrams(path, pmi_threshold=-100.0, min_count=1, max_bigrams=3).bigrams) == 3


def test_pmi_jsonl_chinese_and_bad_records(tmp_path: Path) -> None:
    rows = [json.dumps({"caption": "红色 汽车"}, ensure_ascii=False)] * 3
    rows += [json.dumps({"caption": "Red car"})] * 3
    rows += ["{not json", json.dumps({"text": "no caption field"}), json.dumps({"caption": 5}), ""]
    path = _write(tmp_path / "captions.jsonl", rows)
    mined = mine_pmi_bigrams(path, pmi_threshold=0.0, min_count=2)
    # N = 12 tokens; each word 3 times, each pair 3 times: PMI = log2(3 * 12 / (3 * 3)) = 2.
    assert mined.stats["tokens"] == 12
    assert mined.stats["bad_records"] == {"bad_json": 1, "no_caption": 2}
    got = {g.text: g.pmi for g in mined.bigrams}
    assert got == {"红色汽车": pytest.approx(2.0), "red car": pytest.approx(2.0)}


# --------------------------------------------------------------------------- building from user sources


def _user_sources(tmp_path: Path) -> dict:
    words = _write(
        tmp_path / "words.txt",
        ["Golden Retriever", "golden-retriever", "cat", "", "cat", "c++", "Café"],
    )
    metadata = tmp_path / "metadata.json"
    metadata.write_text(json.dumps(["cat", "dog", "3d", "cafe", "hot dog", "x"]), encoding="utf-8")
    captions = _write(tmp_path / "captions.txt", CAPTIONS)
    return {
        "word_lists": [words],
        "metaclip_metadata": metadata,
        "captions": captions,
        "pmi_threshold": 1.5,
        "min_bigram_count": 2,
        "wordfreq_languages": (),
        "filter_metadata": True,  # the metadata through the filters (by default it is kept as published)
    }


def test_user_sources_priority_filters_and_counts(tmp_path: Path) -> None:
    sources = _user_sources(tmp_path)
    result = build_vocab(size=6, **sources)
    # Word list first, then metadata, then bigrams (by count): "golden retriever" is a
    # near-duplicate of "Golden Retriever", "a cat" is new.
    assert result.entries == ["Golden Retriever", "cat", "Café", "dog", "hot dog", "a cat"]
    assert result.entry_sources == ["word_list:words.txt"] * 3 + ["metaclip_metadata"] * 2 + ["pmi_bigrams"]
    assert result.available == 6
    assert result.read == {"word_list:words.txt": 7, "metaclip_metadata": 6, "pmi_bigrams": 2}
    assert result.dropped == {
        "word_list:words.txt": {"punctuation": 1, "whitespace": 1, "duplicate": 1, "near_duplicate": 1},
        "metaclip_metadata": {"number": 1, "single_char": 1, "duplicate": 1, "near_duplicate": 1},
        "pmi_bigrams": {"near_duplicate": 1},
    }
    assert result.kept_per_script == {"latin": 6, "cjk": 0, "other": 0}
    assert result.bigram_stats["bigrams_passing"] == 2

    smaller = build_vocab(size=4, **sources)
    assert smaller.entries == result.entries[:4]
    assert smaller.stats()["cut_by_size"] == 2

    with pytest.raises(UserError, match=r"--size 7: the sources give only 6 entries"):
        build_vocab(size=7, **sources)


def test_exclude_list(tmp_path: Path) -> None:
    sources = _user_sources(tmp_path)
    stop = _write(tmp_path / "stop.txt", ["DOG", "A-Cat"])
    result = build_vocab(size=4, exclude=[stop], **sources)
    assert result.entries == ["Golden Retriever", "cat", "Café", "hot dog"]
    assert result.dropped["metaclip_metadata"]["excluded"] == 1
    assert result.dropped["pmi_bigrams"]["excluded"] == 1


def test_same_inputs_same_file(tmp_path: Path) -> None:
    sources = _user_sources(tmp_path)
    a = build_vocab_file(out=tmp_path / "a.txt", size=6, **sources)
    b = build_vocab_file(out=tmp_path / "b.txt", size=6, **sources)
    assert a.entries == b.entries
    assert (tmp_path / "a.txt").read_bytes() == (tmp_path / "b.txt").read_bytes()
    assert load_vocab(tmp_path / "a.txt") == a.entries
    stats = json.loads(default_stats_path(tmp_path / "a.txt").read_text(encoding="utf-8"))
    assert stats["size"] == 6 and stats["kept_per_source"]["pmi_bigrams"] == 1
    assert "6 entries" in summarize(a)


def test_duplicate_word_list_names_are_told_apart(tmp_path: Path) -> None:
    (tmp_path / "x").mkdir()
    (tmp_path / "y").mkdir()
    first = _write(tmp_path / "x" / "w.txt", ["apple"])
    second = _write(tmp_path / "y" / "w.txt", ["pear"])
    result = build_vocab(size=2, word_lists=[first, second], wordfreq_languages=())
    assert result.entry_sources == ["word_list[0]:w.txt", "word_list[1]:w.txt"]


# --------------------------------------------------------------------------- errors


def test_errors(tmp_path: Path) -> None:
    missing = tmp_path / "nope.txt"
    with pytest.raises(UserError, match=r"--word-list \S*nope.txt: no such file"):
        build_vocab(size=1, word_lists=[missing], wordfreq_languages=())
    with pytest.raises(UserError, match=r"--metaclip-metadata \S*: is a folder"):
        build_vocab(size=1, metaclip_metadata=tmp_path, wordfreq_languages=())
    with pytest.raises(UserError, match=r"--captions \S*nope.txt: no such file"):
        build_vocab(size=1, captions=missing, wordfreq_languages=())

    bad = tmp_path / "meta.json"
    bad.write_text(json.dumps("cat"), encoding="utf-8")
    with pytest.raises(UserError, match=r"the JSON is a str, not a list"):
        build_vocab(size=1, metaclip_metadata=bad, wordfreq_languages=())
    bad.write_text(json.dumps(["cat", 3]), encoding="utf-8")
    with pytest.raises(UserError, match=r"item 1 is 3 \(int\), not a string"):
        build_vocab(size=1, metaclip_metadata=bad, wordfreq_languages=())
    bad.write_text('["cat",\n "dog"', encoding="utf-8")
    with pytest.raises(UserError, match=r"meta.json:2: not valid JSON"):
        build_vocab(size=1, metaclip_metadata=bad, wordfreq_languages=())

    latin1 = tmp_path / "latin1.txt"
    latin1.write_bytes("cat\ncafé\n".encode("latin-1"))
    with pytest.raises(UserError, match=r"latin1.txt:2: not UTF-8"):
        build_vocab(size=1, word_lists=[latin1], wordfreq_languages=())

    empty = _write(tmp_path / "empty.jsonl", [json.dumps({"text": "no caption"})])
    with pytest.raises(UserError, match=r"no caption found"):
        build_vocab(size=1, captions=empty, wordfreq_languages=())

    as_json = _write(tmp_path / "captions.json", [json.dumps([{"caption": "a cat"}])])
    with pytest.raises(UserError, match=r"captions must be JSONL"):
        build_vocab(size=1, captions=as_json, wordfreq_languages=())

    words = _write(tmp_path / "w.txt", ["apple"])
    for kwargs, pattern in [
        ({"size": 0}, r"--size 0"),
        ({"size": 1, "wordfreq_languages": ("fr",)}, r"--wordfreq-lang fr: not supported"),
        ({"size": 1, "wordfreq_languages": ("en", "en")}, r"given twice"),
        ({"size": 1, "min_bigram_count": 0}, r"--min-bigram-count 0"),
        ({"size": 1, "pmi_threshold": math.nan}, r"--pmi-threshold"),
    ]:
        kwargs.setdefault("wordfreq_languages", ())
        with pytest.raises(UserError, match=pattern):
            build_vocab(word_lists=[words], **kwargs)
    with pytest.raises(UserError, match=r"only 1 entries"):
        build_vocab(size=2, word_lists=[words], wordfreq_languages=())


def test_user_error_is_one_line(tmp_path: Path) -> None:
    bad = tmp_path / "meta.json"
    bad.write_text("[1]", encoding="utf-8")
    with pytest.raises(UserError) as info:
        build_vocab(size=1, metaclip_metadata=bad, wordfreq_languages=())
    assert "\n" not in str(info.value)


def test_load_vocab_rejects_blank_and_repeated_lines(tmp_path: Path) -> None:
    with pytest.raises(UserError, match=r"v.txt:2: blank line"):
        load_vocab(_write(tmp_path / "v.txt", ["cat", "", "dog"]))
    with pytest.raises(UserError, match=r"v.txt:3: repeats line 1"):
        load_vocab(_write(tmp_path / "v.txt", ["cat", "dog", "cat"]))


# --------------------------------------------------------------------------- wordfreq and the shipped file


def test_read_wordfreq_orders_by_band() -> None:
    import wordfreq

    words = read_wordfreq("en")
    assert words[:3] == ["the", "to", "and"]
    freqs = [wordfreq.word_frequency(w, "en", wordlist="large") for w in words[:: len(words) // 200]]
    assert freqs == sorted(freqs, reverse=True)
    assert len(set(words)) == len(words)


# The shipped vocabulary and the default recipe: tests/curate/balance/vocab/test_recipe.py.


def test_vocab_build_options_are_the_config_fields() -> None:
    """``curate vocab build`` offers each setting of VocabBuildConfig as the option its field declares (flag, help,
    default), the repeatable ones with the field's help; no option repeats a field by hand."""
    import dataclasses

    from curate.balance.vocab.config import VocabBuildConfig
    from curate.cli.vocab import vocab_build_cmd
    from curate.core.settings import settings_of

    options = {p.name: p for p in vocab_build_cmd.params}
    settings = settings_of(VocabBuildConfig)
    assert {s.name for s in settings} <= set(options)
    for s in settings:
        assert s.flag in options[s.name].opts and options[s.name].help == s.help, s.name
        assert options[s.name].default == s.default, s.name
    declared = {f.name: f.metadata for f in dataclasses.fields(VocabBuildConfig)}
    assert set(options) <= set(declared)
    for name in ("word_lists", "exclude", "wordfreq_languages"):  # repeatable: made by hand, with the field's help
        assert options[name].help == declared[name]["help"] and declared[name]["flag"] in (None, *options[name].opts)
