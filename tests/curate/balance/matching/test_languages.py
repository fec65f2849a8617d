"""Language identification offline (py3langid's bundled model), the language a text counts under, and the
``--vocab`` forms that name one vocabulary or one per language."""

from __future__ import annotations

from pathlib import Path

import pytest

from curate.balance.matching.languages import OTHER, LanguageIdentifier, counting_language
from curate.balance.matching.vocabularies import parse_vocab_values, vocab_parts
from curate.core.errors import UserError


def test_identifies_caption_languages_offline() -> None:
    lid = LanguageIdentifier()
    assert lid.identify("A tabby cat asleep on a red sofa in the living room") == "en"
    assert lid.identify("一只虎斑猫在客厅的红色沙发上睡觉") == "zh"
    assert lid.identify("แมวลายเสือนอนหลับบนโซฟาสีแดง") == "th"
    assert lid.identify("赤いソファの上で眠っている猫の写真です") == "ja"
    assert lid.identify("") == "" and lid.identify("   ") == "" and lid.identify("猫") == ""  # no evidence


def test_counting_language() -> None:
    assert counting_language("fr", None) == "fr" and counting_language("", None) == OTHER
    assert counting_language("zh", {"en", "zh"}) == "zh"
    assert counting_language("fr", {"en", "zh", "other"}) == OTHER and counting_language("fr", {"en"}) == "fr"


def test_vocab_values(tmp_path: Path) -> None:
    one = tmp_path / "v.txt"
    one.write_text("cat\ndog\n")
    odd = tmp_path / "a=b.txt"  # a file whose name holds "=" is still a file
    odd.write_text("x\n")
    assert parse_vocab_values([str(one)]) == str(one) and parse_vocab_values([str(odd)]) == str(odd)
    assert parse_vocab_values([f"en={one}", f"zh={odd}"]) == {"en": str(one), "zh": str(odd)}
    assert parse_vocab_values([]) is None
    for values, message in [([str(one), f"zh={one}"], "not both"), ([f"en={one}", f"en={odd}"], "twice"),
                            ([str(one), str(odd)], "one vocabulary file")]:
        with pytest.raises(UserError, match=message):
            parse_vocab_values(values)
    parts, entries = vocab_parts({"zh": odd, "en": one})
    assert [(p.lang, p.offset, p.size) for p in parts] == [("en", 0, 2), ("zh", 2, 1)] and entries == [["cat", "dog"],
                                                                                                       ["x"]]
    with pytest.raises(UserError, match="no such file"):
        vocab_parts({"en": tmp_path / "none.txt"})
    with pytest.raises(UserError, match="not a language code"):
        vocab_parts({"e n": one})
