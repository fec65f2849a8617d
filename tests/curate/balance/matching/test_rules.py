"""``--rules metaclip`` gives MetaCLIP 2's matches exactly; ``--rules curate`` differs only in case and entry spaces.

The reference below is this test's own statement of MetaCLIP 2's published rules (``curation/substr_matching.py``
and ``curation/curate.py``): the caption stripped, then a space at both ends, ``, . ; : ? ! ``` wrapped in spaces,
tabs and line breaks turned into spaces; each entry as given, with a space before it unless its first character
is a CJK/Thai/Lao/Burmese/Khmer/Tibetan character or punctuation, and after it likewise; case as written; a
caption matches the set of entries whose spaced form it contains. It is written for the test (plain ``in``
over every entry), not taken from MetaCLIP's code or from curate's.
"""

from __future__ import annotations

import re

import pytest

from curate.balance.matching.automaton import TextMatcher
from curate.balance.matching.rules import match_rules

# The scripts MetaCLIP 2 writes without spaces, by code point (first, last), and its punctuation.
GLUED_BLOCKS = [(0x4E00, 0x9FFF), (0x3400, 0x4DBF), (0x20000, 0x2A6DF), (0x2A700, 0x2B73F), (0x2B740, 0x2B81F),
                (0x2B820, 0x2CEAF), (0x2CEB0, 0x2EBEF), (0xF900, 0xFAFF), (0x2E80, 0x2EFF), (0x2F00, 0x2FDF),
                (0x2FF0, 0x2FFF), (0x0E00, 0x0E7F), (0x0E80, 0x0EFF), (0x1000, 0x109F), (0x1780, 0x17FF),
                (0x0F00, 0x0FFF)]
PUNCTUATION = set("!\"#$%&'()*+,-./:;<=>?@[\\]^_`{|}~") | set("，。、；：？！“”‘’（）【】《》〈〉「」『』～—")


def glued(char: str) -> bool:
    """May an entry start or end at ``char`` with no space beside it?"""
    return char in PUNCTUATION or any(a <= ord(char) <= b for a, b in GLUED_BLOCKS)


def reference_matches(caption: str, entries: list[str]) -> set[int]:
    """MetaCLIP 2's matched entry ids of one caption (see the module docstring)."""
    text = " " + caption.strip() + " "
    for mark in ",.;:?!`":
        text = text.replace(mark, " " + mark + " ")
    text = re.sub(r"[\t\n\r]", " ", text)
    found = set()
    for i, entry in enumerate(entries):
        pattern = ("" if glued(entry[0]) else " ") + entry + ("" if glued(entry[-1]) else " ")
        if pattern in text:
            found.add(i)
    return found


# A mixed-case vocabulary shaped like MetaCLIP's metadata: numbers, case variants, punctuation-edged entries,
# single characters, CJK, Thai, kana (not a glued script for MetaCLIP 2), an entry with a space at its end.
VOCAB = ([str(i) for i in range(100)] +
         ["cat", "Cat", "black cat", "dog", "Dog", "New York", "new york", "York", "C++", "C#", "U.S.", "U.S", "AT&T",
          "R&B", "Mr.", "Dr. Who", "e-mail", "T-shirt", "t-shirt", "iPhone", "iPhone 15", "Apple", "apple", "a", "A",
          "I", "x", "café", "cafe", "rock 'n' roll", "(band)", "50 Cent", "3D", "4K", "Vol", "Vol.", "vol",
          "Hogsmeade Station", "Guyana", "South America", "Board Game", "Wallet", "world map", "Leather",
          "猫", "黑猫", "狗", "沙发", "红色", "草地", "上海", "东京", "T恤", "iPhone手机", "两只", "一只",
          "แมว", "สุนัข", "ねこ", "カメラ", "hot dog ", " sofa", "Ünïcödé", "“quoted”", "【sale】"])

CAPTIONS = [  # LAION-shaped alt-texts, COCO-CN-shaped Chinese captions, Thai, Japanese, edge cases
    "Classical Masterpieces: Xerxes & More, Vol. 8 by Various Artists",
    "PU Leather Passport Holder Case Cover Travel Wallet -- Colorful World map design (L69)",
    "used Peugeot 108 PURETECH ALLURE in wirral-cheshire",
    "Hogsmeade Station",
    "Banded Dragonfly, Guyana, South America",
    "The Original CASHFLOW 101 Board Game with Exclusive Bonus Message",
    "New York City skyline at night; U.S. travel poster 4K",
    "new york style cheesecake recipe",
    "Black Cat T-shirt, cat lovers gift, t-shirt for women",
    "AT&T iPhone 15 Pro Max case - C++ programmer humor",
    "R&B and rock 'n' roll night at the café (band) 50 Cent",
    "Dr. Who 3D poster, 12 x 18 inches",
    "a cat and a dog. A Cat! I like it?",
    "Apple apple APPLE",
    "e-mail me: info@example.com",
    "\u00a0cat\u00a0",  # edged by non-breaking spaces: stripped, so " cat " matches
    "\tDog\n",
    "hot dog stand",
    "sofa and hot dog ",
    "一只黑猫在红色沙发上睡觉。",
    "两只狗在草地上玩耍，旁边有一只猫",
    "上海的夜景，东京的街道",
    "一件红色T恤和一部iPhone手机",
    "a red T恤 for sale",
    "【sale】“quoted”商品",
    "แมวนอนบนโซฟา สุนัขวิ่ง",
    "かわいいねこの写真、カメラで撮影",
    "ねこ カメラ",
    "Ünïcödé text, vol 2, Vol. 3, Vol 4",
    "100 years, 99 problems, 7-11",
    "",
    "   ",
]


@pytest.fixture(scope="module")
def metaclip() -> TextMatcher:
    return TextMatcher(VOCAB, rules=match_rules("metaclip"))


def test_every_caption_gets_metaclip2s_matches(metaclip: TextMatcher) -> None:
    agree = [set(metaclip.counts(c)) == reference_matches(c, VOCAB) for c in CAPTIONS]
    assert all(agree), [c for c, ok in zip(CAPTIONS, agree) if not ok]
    pairs = sum(len(reference_matches(c, VOCAB)) for c in CAPTIONS)
    assert pairs >= 60  # the set exercises the rules: numbers, punctuation, CJK and Thai all match somewhere
    found = {VOCAB[i] for c in CAPTIONS for i in metaclip.counts(c)}
    assert {"C++", "AT&T", "R&B", "Vol", "99", "猫", "黑猫", "T恤", "แมว", "【sale】", "“quoted”"} <= found
    # the caption's periods are spaced apart, so "U.S." and "Vol." never match; "T恤" needs a space before T
    assert not {"U.S.", "Vol.", "iPhone手机"} & found and "ねこ" in found and "カメラ" in found


def test_metaclip_rules_in_detail(metaclip: TextMatcher) -> None:
    def names(text: str) -> set[str]:
        return {VOCAB[i] for i in metaclip.counts(text)}

    assert names("Cat and cat") == {"Cat", "cat"} and "A" not in names("a cat")  # case as written
    assert names("\u00a0cat\u00a0") == {"cat"}  # the caption is stripped
    assert "hot dog " not in names("hot dog") and "hot dog " in names("hot dog  stand")  # entries as given
    assert " sofa" in names("the  sofa") and " sofa" not in names("the sofa")
    assert "ねこ" not in names("かわいいねこ")  # kana is not written without spaces for MetaCLIP 2


def test_curate_rules_fold_case_and_strip_entries() -> None:
    curate = TextMatcher(VOCAB)
    assert {VOCAB[i] for i in curate.counts("CAT")} == {"cat", "Cat"}
    assert "hot dog " in {VOCAB[i] for i in curate.counts("a hot dog stand")}  # stripped: "hot dog"
    same = sum(set(curate.counts(c)) == reference_matches(c, VOCAB) for c in CAPTIONS)
    assert same < len(CAPTIONS)  # folding case finds more than MetaCLIP on mixed-case text
    exact = TextMatcher(VOCAB, case_sensitive=True)  # case as written, entries still stripped
    assert {VOCAB[i] for i in exact.counts("CAT cat")} == {"cat"}


def test_saved_matcher_keeps_its_rules(tmp_path, metaclip: TextMatcher) -> None:
    metaclip.save(tmp_path / "a.bin")
    loaded = TextMatcher.load(tmp_path / "a.bin")
    assert loaded.rules == metaclip.rules
    assert all(loaded.counts(c) == metaclip.counts(c) for c in CAPTIONS)
    shifted = TextMatcher(VOCAB, rules=match_rules("metaclip"), offset=1000)
    assert {c - 1000 for c in shifted.counts(CAPTIONS[8])} == set(metaclip.counts(CAPTIONS[8]))
