"""Critic verifier: the judgement in the answer equals the gold judgement.

A critic answer is a verdict (``correct``/``incorrect``, ``yes``/``no``, a score or a
step number). The comparison is the string verifier's normalised exact match,
extended with numeric equality when both sides are numbers (``3`` == ``3.0``) and
with yes/no polarity when both sides are boolean words. Unlike the anchor, which
compared case-sensitively, case is ignored.
"""

from __future__ import annotations

from typing import Any, Mapping

from curate.rewards.verifiers import boolean, number, string
from curate.rewards.extract import extract_answer
from curate.rewards.verdict import Context

MAX_ANSWER_CHARS = 100_000


def _equal(answer: str, gold: str) -> bool:
    a, g = string.normalize(answer), string.normalize(gold)
    if a and a == g:
        return True
    na, ng = number.plain_number(a), number.plain_number(g)
    if na is not None and ng is not None:
        return number.close(na, ng)
    if len(g.split()) != 1:
        return False
    bg = boolean.parse_bool(g)
    if bg is None:
        return False
    ba = boolean.parse_bool(a) if len(a) <= boolean.MAX_ANSWER_CHARS else None
    return ba is not None and ba == bg


def verify(response: str, golds: list[str], params: Mapping[str, Any], ctx: Context) -> float:
    """1.0 when the extracted verdict equals a gold verdict, else 0.0."""
    answer = extract_answer(response)
    if answer is None or len(answer) > MAX_ANSWER_CHARS:
        return 0.0
    return 1.0 if any(_equal(answer, g) for g in golds) else 0.0
