"""MetaCLIP's metadata as published: ``vocab build --metaclip-metadata`` keeps every entry, in order, as written
(numbers 0-99, punctuation, single characters, long titles, case and accent variants), in MetaCLIP's JSON list,
MetaCLIP 2's per-language object and a plain entry-per-line file; fills up only when asked."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from curate.balance.vocab.build import build_vocab, build_vocab_file
from curate.balance.vocab.files import load_vocab
from curate.balance.vocab.filters import near_duplicate_key, normalize_entry
from curate.balance.vocab.sources import read_metaclip_metadata
from curate.core.errors import UserError


def metaclip_style_metadata() -> list[str]:
    """About 200 entries shaped like MetaCLIP's metadata.json: its numbers 0-99 first (MetaCLIP adds them on
    purpose), then WordNet-like words, Wikipedia titles and bigrams in their own case, punctuation and all."""
    words = ["cat", "Cat", "CAT", "black cat", "dog", "hot dog", "apple", "Apple", "café", "cafe", "Café",
             "résumé", "resume", "naïve", "New York", "new york", "New York City", "C++", "C#", "U.S.", "AT&T",
             "Mr. Bean", "Dr. Who", "R&B", "rock 'n' roll", "O'Reilly", "e-mail", "email", "T-shirt", "t-shirt",
             "iPhone", "IPHONE", "a", "A", "I", "x", "猫", "狗", "熊猫", "黑猫", "沙发", "上海", "T恤", "iPhone 15",
             "Star Wars: Episode IV – A New Hope", "The Lord of the Rings: The Return of the King",
             "List of tallest buildings in the United States of America", "2001: A Space Odyssey", "1984",
             "COVID-19", "3D", "50 Cent", "Blink-182", "!!!", "?", "#", "...", "Ünïcödé", "ß", "straße",
             "Straße", "ångström", "Ångström", "東京", "东京", "สวัสดี", "แมว", "ไทย", "Ελλάδα", "Москва",
             "😀", "smile 😀", "foo_bar", "under_score", "x86-64", "ℕ", "½", "Ⅻ", "ﬁ", "ｆｕｌｌｗｉｄｔｈ",
             "New  York", "tab\tseparated", "naïve bayes", "Naive Bayes"]
    extra = [f"entry {i}" for i in range(20)] + [f"Title Case Number {i}" for i in range(13)]
    return [str(i) for i in range(100)] + words + extra


def test_metadata_survives_entry_for_entry(tmp_path: Path) -> None:
    entries = metaclip_style_metadata()
    meta = tmp_path / "metadata.json"
    meta.write_text(json.dumps(entries, ensure_ascii=False), encoding="utf-8")
    out = tmp_path / "vocab.txt"
    done = subprocess.run([sys.executable, "-m", "curate", "vocab", "build", "--metaclip-metadata", str(meta),
                           "--out", str(out)], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert load_vocab(out) == entries  # every entry, in order, as written
    stats = json.loads((tmp_path / "vocab.stats.json").read_text(encoding="utf-8"))
    assert stats["size"] == len(entries) and stats["kept_per_source"] == {"metaclip_metadata": len(entries)}
    assert stats["dropped_per_reason"] == {} and stats["params"]["wordfreq_languages"] == []
    # the curate filters on request drop most of them, as before
    filtered = build_vocab(size=None, metaclip_metadata=meta, wordfreq_languages=(), filter_metadata=True)
    assert len(filtered.entries) < len(entries) // 2
    assert {"number", "punctuation", "single_char", "near_duplicate"} <= set(filtered.stats()["dropped_per_reason"])


def test_metaclip2_object_and_plain_files(tmp_path: Path) -> None:
    entries = metaclip_style_metadata()
    per_lang = tmp_path / "zh.json"  # MetaCLIP 2's metadata_per_lang/LANG.json: {entry: source}
    per_lang.write_text(json.dumps({e: "wut"[i % 3] for i, e in enumerate(entries)}, ensure_ascii=False),
                        encoding="utf-8")
    assert read_metaclip_metadata(per_lang) == entries
    plain = tmp_path / "metadata.txt"
    plain.write_bytes(b"\xef\xbb\xbf" + "\r\n".join(entries).encode("utf-8") + b"\r\n")  # BOM and CRLF
    result = build_vocab_file(out=tmp_path / "v.txt", size=None, metaclip_metadata=plain, wordfreq_languages=())
    assert result.entries == entries and load_vocab(tmp_path / "v.txt") == entries


def test_fill_only_when_asked_and_never_with_a_near_duplicate(tmp_path: Path) -> None:
    entries = metaclip_style_metadata()
    meta = tmp_path / "metadata.json"
    meta.write_text(json.dumps(entries, ensure_ascii=False), encoding="utf-8")
    with pytest.raises(UserError, match=f"--size {len(entries) + 50}: the sources give only {len(entries)}"):
        build_vocab(size=len(entries) + 50, metaclip_metadata=meta, wordfreq_languages=())
    filled = build_vocab(size=len(entries) + 300, metaclip_metadata=meta, wordfreq_languages=("en",), cedict=False,
                         min_zipf=4.5)  # wordfreq's ~3,000 most frequent English words: enough, and fast
    assert filled.entries[:len(entries)] == entries
    added = filled.entries[len(entries):]
    keys = {near_duplicate_key(normalize_entry(e)) for e in entries}
    assert len(added) == 300 and not any(near_duplicate_key(a) in keys for a in added)  # no second "the", "apple"
    assert filled.kept_per_source["metaclip_metadata"] == len(entries)
    assert sum(filled.kept_per_source.values()) == len(entries) + 300
    assert set(filled.kept_per_source) == {"metaclip_metadata", "wordfreq:en"}
    cut = build_vocab(size=120, metaclip_metadata=meta, wordfreq_languages=())
    assert cut.entries == entries[:120]


@pytest.mark.parametrize("bad, message", [
    (["cat", "dog", "cat"], r"entry 2: 'cat' is there twice"),
    (["cat", "  "], r"entry 1: '  ' is blank"),
    (["cat", "two\nlines"], r"entry 1: 'two\\nlines' is blank or holds a line break"),
])
def test_metadata_a_vocabulary_cannot_hold(tmp_path: Path, bad: list[str], message: str) -> None:
    meta = tmp_path / "m.json"
    meta.write_text(json.dumps(bad), encoding="utf-8")
    with pytest.raises(UserError, match=message) as info:
        build_vocab(size=None, metaclip_metadata=meta, wordfreq_languages=())
    assert "\n" not in str(info.value) and "--filter-metadata" in str(info.value)
