"""LLaVA-OneVision-1.5-RL's accuracy rewards for its simple answer types, as its trainer computes them.

Read from EvolvingLMMs-Lab/LLaVA-OneVision-1.5-RL at 9f9ce7d (``reward/``) and written here. Every one reads the
last ``<answer>…</answer>`` of the response (``reward/utils.py`` lines 5-12; the function is named
``extract_boxed_content`` there). The reward system hands a one-item answer list over as its item
(``reward/reward_system.py`` lines 50-51); of these types only ``ocrtext`` takes several answers.

Parameters (``reward.parameters``):
    answer_type: ``number`` (``number.py``: the last run of digits and dots of the answer equals the gold, as text),
        ``boolean`` (``bool.py``: yes/true or no/false, first found, inside words too), ``multiple-choice``
        (``multiple_choice.py``: the answer's first character after ``.()`` are stripped, upper-cased, equals the
        gold), ``any`` (``string_matching.py``: equal ignoring case and outer spaces), ``ocrtext`` (``ocr.py``:
        1 - the smallest normalised edit distance to a gold, 0 below 0.5), ``bbox`` (``bbox.py``: IoU of the first
        bracketed list of numbers of the answer with the gold's, both four numbers).

The other answer types (math, code, HTML, SVG, critic) are curate's verifiers of the same names.
"""

from __future__ import annotations

import re
from typing import Any, Mapping

from curate.rewards.verdict import Context, RecordError, param, where
from curate.rewards.verifiers.vlm_r1 import blocks

TYPES = ("number", "boolean", "multiple-choice", "any", "ocrtext", "bbox")
_DIGITS = re.compile(r"([0-9\.]+)")
_NUM = re.compile(r"[-+]?\d*\.?\d+(?:[eE][-+]?\d+)?")


def last_answer(text: str) -> str:
    """The last ``<answer>`` block's content, or ``""`` (the seed's lazy pattern, in one linear scan)."""
    found = blocks(text, "<answer>", "</answer>")
    return found[-1] if found else ""


def number(given: str, gold: str) -> float:
    """``number_reward_fn`` (``number.py`` lines 6-23)."""
    runs = _DIGITS.findall(given)
    return float((runs[-1] if runs else "").strip() == gold.strip())


def _truth(text: str) -> bool | None:
    low = text.lower()
    if "yes" in low or "true" in low:
        return True
    if "no" in low or "false" in low:
        return False
    return None


def boolean(given: str, gold: str) -> float:
    """``bool_reward_fn`` (``bool.py`` lines 4-31)."""
    if given == "":
        return 0.0
    mine, right = _truth(given), _truth(gold)
    return float(mine is not None and right is not None and mine == right)


def multiple_choice(given: str, gold: str) -> float:
    """``multiplechoice_reward_fn`` (``multiple_choice.py`` lines 4-24)."""
    letter = given.strip().strip(".()")
    return float(bool(given) and (letter[0].upper() if letter else "") == gold.upper())


def any_text(given: str, gold: str) -> float:
    """``string_matching_reward_fn`` (``string_matching.py`` lines 4-20)."""
    return float(given != "" and given.strip().lower() == gold.strip().lower())


def ocr(given: str, golds: list[str]) -> float:
    """``ocr_reward_fn`` (``ocr.py`` lines 20-45): edit distance over the longer length (the gold's raw length)."""
    from rapidfuzz.distance import Levenshtein

    if given == "":
        return 0.0
    mine = " ".join(given.strip().lower().split())
    values = []
    for gold in golds:
        target = " ".join(gold.strip().lower().split())
        length = max(len(gold.upper()), len(mine.upper()))
        values.append(0.0 if length == 0 else Levenshtein.distance(target, mine) / length)
    reward = 1 - min(values)
    return 0.0 if reward < 0.5 else reward


def _numbers(text: str) -> list[float] | None:
    """The first ``[n, n, ...]`` of numbers (``bbox.py``'s ``extract_bbox`` pattern, lines 6-12), read without its
    nested repetition (which backtracks without end on a long run of digits): at each ``[`` in turn, numbers
    separated by commas up to ``]``."""
    at = text.find("[")
    while at >= 0:
        values, i = [], at + 1
        while True:
            while i < len(text) and text[i].isspace():
                i += 1
            m = _NUM.match(text, i)
            if not m:
                break
            values.append(float(m.group(0)))
            i = m.end()
            while i < len(text) and text[i].isspace():
                i += 1
            if i < len(text) and text[i] == "]":
                return values
            if i >= len(text) or text[i] != ",":
                break
            i += 1
        at = text.find("[", at + 1)
    return None


def bbox(given: str, gold: str) -> float:
    """``bbox_reward_fn`` (``bbox.py`` lines 15-43): IoU of two four-number lists (0 when either is not)."""
    p, g = _numbers(given), _numbers(gold)
    if p is None or g is None or len(p) != 4 or len(g) != 4:
        return 0.0
    inter = max(0.0, min(p[2], g[2]) - max(p[0], g[0])) * max(0.0, min(p[3], g[3]) - max(p[1], g[1]))
    union = (p[2] - p[0]) * (p[3] - p[1]) + (g[2] - g[0]) * (g[3] - g[1]) - inter
    try:
        return inter / float(union)
    except ZeroDivisionError:
        raise RecordError("a zero-area box pair (the seed divides by zero)") from None


def verify(response: str, golds: list[str], params: Mapping[str, Any], ctx: Context) -> float:
    """The seed's accuracy of ``response`` for ``parameters.answer_type`` (see the module docstring)."""
    rid = ctx.record.get("id")
    kind = str(param(params, "answer_type", ""))
    given = last_answer(response)
    if kind == "ocrtext":
        return ocr(given, golds)
    if kind not in TYPES:
        raise RecordError(f"{where(rid)}: answer_type {kind!r} is not one of {', '.join(TYPES)}")
    if len(golds) != 1:
        raise RecordError(f"{where(rid)}: LLaVA-OneVision-1.5-RL's {kind} reward takes one answer, got {len(golds)}")
    return {"number": number, "boolean": boolean, "multiple-choice": multiple_choice, "any": any_text,
            "bbox": bbox}[kind](given, golds[0])
