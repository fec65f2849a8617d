"""The rules of text matching: how a text and a vocabulary entry are prepared before one is searched in the other.

Both rule sets (``--rules curate``, the default, and ``--rules metaclip``) share MetaCLIP 2's spacing and
word-boundary rules, learned from MetaCLIP's public description and code (``metaclip/curation/substr_matching.py``):

* **Text spacing.** The text gets a space at both ends; ``, . ; : ? ! ``` are wrapped in spaces; tabs and
  line breaks become spaces. So "A cat, asleep." is searched as `` A cat ,  asleep . ``.
* **Word boundaries.** An entry must start after a space unless its first character belongs to a script
  written without spaces (CJK ideographs and radicals, Thai, Lao, Burmese, Khmer, Tibetan; see
  :func:`no_space_char`) or is punctuation (ASCII ``string.punctuation`` and the full-width forms of
  :data:`FULLWIDTH_PUNCT`), and likewise must end before a space unless its last character is one of those.
  "cat" matches " cat " but not "category"; "猫" matches inside "一只猫在睡觉"; "T恤" needs a space before
  "T" only; "C++" needs a space before "C" only.
* **Texts are stripped** (``str.strip``: a caption edged by a non-breaking space still matches at its edge).

Where they differ (:class:`MatchRules`):

=============  ===================================  ==========================================
               ``curate`` (default)                  ``metaclip`` (MetaCLIP 2 exactly)
=============  ===================================  ==========================================
case           folded (``str.lower``, both sides)    compared as written
entries        stripped of surrounding spaces        used as given (`` cat`` needs two spaces)
=============  ===================================  ==========================================

curate folds case by default because its bundled vocabulary (``vocab/500k.txt``) is lower-case while
captions start sentences with capitals; MetaCLIP's metadata is written in its own case ("New York",
"C++", "iPhone") and matched as written. ``case_sensitive`` on the curate rules compares as written
but still strips entries.
"""

from __future__ import annotations

import string
from dataclasses import dataclass

from curate.balance.config import RULES


_WRAP = ",.;:?!`"
_TO_SPACE = "\t\n\r"
_SPACING = str.maketrans({**{c: f" {c} " for c in _WRAP}, **{c: " " for c in _TO_SPACE}})
FULLWIDTH_PUNCT = frozenset("，。、；：？！“”‘’（）【】《》〈〉「」『』～—")
"""Punctuation outside ASCII that needs no space beside it (MetaCLIP 2's list)."""
NO_SPACE_RANGES = (
    (0x4E00, 0x9FFF), (0x3400, 0x4DBF), (0x20000, 0x2A6DF), (0x2A700, 0x2B73F), (0x2B740, 0x2B81F),
    (0x2B820, 0x2CEAF), (0x2CEB0, 0x2EBEF), (0xF900, 0xFAFF), (0x2E80, 0x2EFF), (0x2F00, 0x2FDF),
    (0x2FF0, 0x2FFF),  # CJK ideographs, extensions, compatibility ideographs, radicals, description characters
    (0x0E00, 0x0E7F), (0x0E80, 0x0EFF), (0x1000, 0x109F), (0x1780, 0x17FF), (0x0F00, 0x0FFF),
)  # Thai, Lao, Burmese, Khmer, Tibetan
"""Code point ranges of scripts written without spaces between words."""


def no_space_char(char: str) -> bool:
    """True when an entry may start or end at ``char`` without a space beside it.

    That is a character of a script written without spaces (:data:`NO_SPACE_RANGES`)
    or punctuation (ASCII or the full-width forms of :data:`FULLWIDTH_PUNCT`).
    """
    code = ord(char)
    if any(lo <= code <= hi for lo, hi in NO_SPACE_RANGES):
        return True
    return char in string.punctuation or char in FULLWIDTH_PUNCT


def spaced_text(text: str) -> str:
    """The text as searched: spaces at both ends, ``, . ; : ? ! ``` wrapped in spaces, tabs/newlines as spaces."""
    return f" {text.translate(_SPACING)} "


def spaced_entry(entry: str) -> str:
    """The pattern of an entry: a space before/after unless it starts/ends with a no-space character."""
    if not entry:
        return entry
    head = "" if no_space_char(entry[0]) else " "
    tail = "" if no_space_char(entry[-1]) else " "
    return f"{head}{entry}{tail}"


@dataclass(frozen=True)
class MatchRules:
    """How texts and entries are prepared (see the module docstring).

    Attributes:
        name: ``curate`` or ``metaclip`` (what ``stats.json`` records).
        fold_case: compare lower-cased texts and entries.
        strip_entries: strip the spaces around each entry.
    """

    name: str = "curate"
    fold_case: bool = True
    strip_entries: bool = True

    def pattern(self, entry: str) -> str:
        """The pattern searched for ``entry`` ("" for an entry that is empty once prepared: never matched)."""
        if self.strip_entries:
            entry = entry.strip()
        return spaced_entry(entry.lower() if self.fold_case else entry)

    def text(self, text: str) -> str:
        """The text as searched: stripped, folded if the rules fold case, then spaced (:func:`spaced_text`)."""
        text = text.strip()
        return spaced_text(text.lower() if self.fold_case else text)

    def settings(self) -> dict[str, object]:
        """What ``stats.json`` records of the rules."""
        return {"rules": self.name, "case_sensitive": not self.fold_case, "strip_entries": self.strip_entries}


def match_rules(name: str = "curate", *, case_sensitive: bool = False) -> MatchRules:
    """The rules of ``--rules NAME`` (``case_sensitive``: the curate rules without folding case).

    Raises:
        ValueError: an unknown name (configs check it first with a one-line error).
    """
    if name == "metaclip":
        return MatchRules("metaclip", fold_case=False, strip_entries=False)
    if name == "curate":
        return MatchRules("curate", fold_case=not case_sensitive, strip_entries=True)
    raise ValueError(f"unknown rules {name!r}; use one of {', '.join(RULES)}")
