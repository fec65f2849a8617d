"""Multiple-choice verifier: the chosen option letter equals the gold letter.

Accepted answer forms (after removing ``$``, ``\\boxed{}``, ``\\text{}`` and markdown bold):
``B``, ``(B)``, ``(B).``, ``[B]``, ``B)``, ``B:``, ``B. cat``, ``(B) cat``, ``B - cat``, and
phrases such as ``The answer is B`` / ``Answer: (B)`` / ``the correct option is B``. A single
lowercase letter counts only when it is the whole answer (``b``, ``(b)``).

Never a match: several different letters (``Both A and B``, ``A or B``), the article
``a``/``A`` or the pronoun ``I`` in a sentence, and words that merely contain a letter
(``Bird``). The gold may be written ``B``, ``(B)``, ``B.`` or ``B. cat``.
"""

from __future__ import annotations

import re
from typing import Any, Mapping

from curate.rewards.extract import extract_answer, strip_latex_wrappers
from curate.rewards.verdict import Context, parse_golds, parsed_answer_in

MAX_ANSWER_CHARS = 2_000

_WHOLE = re.compile(r"[(\[]?\s*([A-Za-z])\s*[)\]]?\s*[.:)]?")
_LEAD = re.compile(r"(?:\(([A-Z])\)|\[([A-Z])\]|([A-Z])\s*[.):\-\u2013\u2014])\s+\S")
_PHRASE = re.compile(
    r"(?:answer|option|choice)\s*(?:is|would\s+be|should\s+be|=|:)?\s*:?\s*"
    r"(?:\(([A-Za-z])\)|\[([A-Za-z])\]|([A-Z])(?![A-Za-z]))",
    re.IGNORECASE,
)
_JOINED = re.compile(
    r"(?<![A-Za-z])[(\[]?([A-Z])[)\]]?\s*(?:,|/|&|\+|\band\b|\bor\b|\bnor\b)\s*[(\[]?([A-Z])[)\]]?(?![A-Za-z])"
)
_STANDALONE = re.compile(r"(?<![A-Za-z])([A-Z])(?![A-Za-z])")
_ARTICLE_OR_PRONOUN = re.compile(r"(?<![A-Za-z])([AI])\s+[a-z]")


def parse_letter(text: str) -> str | None:
    """The single option letter ``text`` chooses, or ``None`` (no choice or ambiguous)."""
    s = strip_latex_wrappers(text).strip().strip("'\"`").strip()
    if not s:
        return None
    m = _WHOLE.fullmatch(s)
    if m:
        return m.group(1).upper()
    if any(m.group(1) != m.group(2) for m in _JOINED.finditer(s)):
        return None  # "A and B", "A or B", "A, C": several letters chosen
    m = _LEAD.match(s)
    if m:
        return next(g for g in m.groups() if g)
    phrases = {next(g for g in m.groups() if g).upper() for m in _PHRASE.finditer(s)}
    if len(phrases) == 1:
        return phrases.pop()
    if len(phrases) > 1:
        return None
    skip = {m.start(1) for m in _ARTICLE_OR_PRONOUN.finditer(s)}
    letters = {m.group(1) for m in _STANDALONE.finditer(s) if m.start(1) not in skip}
    return letters.pop() if len(letters) == 1 else None


def gold_letters(golds: list[str], record_id: Any = None) -> set[str]:
    """Gold option letters; raise :class:`RecordError` when a gold is not a letter."""
    return parse_golds(golds, parse_letter, record_id,
                       "multiple-choice gold {gold} is not an option letter (write it as 'B' or '(B)')")


def verify(response: str, golds: list[str], params: Mapping[str, Any], ctx: Context) -> float:
    """1.0 when the extracted answer chooses a gold letter, else 0.0."""
    gold = gold_letters(golds, ctx.record.get("id"))
    return parsed_answer_in(extract_answer(response), gold, parse_letter, MAX_ANSWER_CHARS)
