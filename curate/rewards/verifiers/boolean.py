"""Boolean verifier: yes/no/true/false as whole words.

The polarity of an answer is that of its leading word when it starts with one
(``"No, it is not true"`` is *no*); otherwise all polarity words must agree
(``"It is true"`` is *yes*, ``"yes or no"`` is no answer). Hedges (``"I don't know"``,
``"not sure"``, ``"cannot determine"`` …) are never answers, even when they contain
*no*-like words. Chinese 是/对/正确 and 否/不是/不对/错误 are accepted as whole answers.
"""

from __future__ import annotations

import re
from typing import Any, Mapping

from curate.rewards.extract import extract_answer, strip_latex_wrappers
from curate.rewards.verdict import Context, parse_golds, parsed_answer_in

MAX_ANSWER_CHARS = 2_000

_WORDS = re.compile(r"(?<![A-Za-z'])(yes|no|true|false)(?![A-Za-z'])", re.IGNORECASE)
_HEDGE = re.compile(
    r"\b(?:(?:do|does|did)\s*n[o']?t\s+know|don'?t\s+know|not\s+(?:sure|certain|clear|possible\s+to\s+(?:tell|say|determine))"
    r"|unsure|uncertain|unknown|unclear|can(?:not|'t|\s+not)\s+(?:be\s+)?(?:tell|say|determine|determined|decide|answer)"
    r"|impossible\s+to\s+(?:tell|say|determine)|no\s+idea|insufficient\s+information)\b",
    re.IGNORECASE,
)
_TRUE = {"yes", "true"}
_ZH_TRUE = {"是", "是的", "对", "正确", "真"}
_ZH_FALSE = {"否", "不是", "不对", "错误", "错", "假"}
_LEADING = re.compile(r"[\s\"'`*(\[]*(yes|no|true|false)(?![A-Za-z'])\s*([,.;:!\u2014\u2013-]|$)", re.IGNORECASE)


def parse_bool(text: str) -> bool | None:
    """``True``/``False`` for a yes/no answer, ``None`` for no answer or an ambiguous one."""
    s = strip_latex_wrappers(text).strip().strip(".。!！").strip()
    if not s:
        return None
    if s in _ZH_TRUE:
        return True
    if s in _ZH_FALSE:
        return False
    if _HEDGE.search(s):
        return None
    m = _LEADING.match(s)
    if m:
        return m.group(1).lower() in _TRUE
    found = {w.group(1).lower() in _TRUE for w in _WORDS.finditer(s)}
    return found.pop() if len(found) == 1 else None


def gold_bool(golds: list[str], record_id: Any = None) -> set[bool]:
    """Gold polarities; raise :class:`RecordError` for a gold that is not yes/no/true/false."""
    return parse_golds(golds, parse_bool, record_id, "boolean gold {gold} is not yes/no/true/false")


def verify(response: str, golds: list[str], params: Mapping[str, Any], ctx: Context) -> float:
    """1.0 when the extracted answer has the gold polarity, else 0.0."""
    gold = gold_bool(golds, ctx.record.get("id"))
    return parsed_answer_in(extract_answer(response), gold, parse_bool, MAX_ANSWER_CHARS)
