"""Format verifier for the two prompt styles.

``think`` (chain of thought): 1.0 when the response has exactly one ``<think>`` and one
``</think>``, in that order, then an answer after ``</think>`` in ``<answer>…</answer>``
or ``\\boxed{…}``, and the answer (the last answer block with its tags, or the boxed
contents plus 9 characters per box as in the anchor) is at most 20 % of the response.

``normal`` (answer-only): 1.0 when the response has no ``<think>``/``</think>`` tag and
exactly one answer: one ``<answer>…</answer>`` block, or, without answer tags, exactly
one ``\\boxed{…}``.

Everything else scores 0.0. Linear in the response length.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from curate.rewards.extract import (
    ANSWER_CLOSE,
    ANSWER_OPEN,
    THINK_CLOSE,
    THINK_OPEN,
    answer_block_span,
    boxed_spans,
    last_boxed_span,
)
from curate.rewards.verdict import RecordError, where

MAX_ANSWER_RATIO = 0.2
PROMPT_TYPES = ("normal", "think")


def _think_score(text: str) -> float:
    if text.count(THINK_OPEN) != 1 or text.count(THINK_CLOSE) != 1:
        return 0.0
    open_at, close_at = text.find(THINK_OPEN), text.find(THINK_CLOSE)
    if close_at < open_at:
        return 0.0
    tail_start = close_at + len(THINK_CLOSE)
    span = answer_block_span(text)
    if span is not None:
        if span[0] < tail_start:
            return 0.0
        answer_len = span[1] - span[0]
    else:
        boxes = [b for b in boxed_spans(text) if b[0] >= tail_start]
        if not boxes:
            return 0.0
        answer_len = sum(close - content + 9 for _, content, close in boxes)
    return 1.0 if answer_len <= MAX_ANSWER_RATIO * len(text) else 0.0


def _normal_score(text: str) -> float:
    if THINK_OPEN in text or THINK_CLOSE in text:
        return 0.0
    n_open, n_close = text.count(ANSWER_OPEN), text.count(ANSWER_CLOSE)
    if n_open or n_close:
        return 1.0 if n_open == 1 and n_close == 1 and answer_block_span(text) is not None else 0.0
    if last_boxed_span(text) is None:
        return 0.0
    return 1.0 if len(boxed_spans(text)) == 1 else 0.0


def format_score(response: str, prompt_type: str = "normal") -> float:
    """1.0 when ``response`` follows the format of ``prompt_type`` (``normal`` or ``think``)."""
    if prompt_type == "think":
        return _think_score(response)
    return _normal_score(response)


# ---------------------------------------------------------------------------- the seeds' own format checks
# Each is read from the seed's code (cited) and written here without regular expressions that could backtrack:
# every check is a few linear scans of the response.

_WS = " \t\n\r\f\v"


def _after_ws(text: str, at: int) -> int:
    while at < len(text) and text[at].isspace():
        at += 1
    return at


def _think_then_answer(text: str, start: int) -> int | None:
    """The end of the first ``</think>`` at or after ``start`` that whitespace and ``<answer>`` follow: the index
    just past that ``<answer>``; None when there is none."""
    at = text.find(THINK_CLOSE, start)
    while at >= 0:
        nxt = _after_ws(text, at + len(THINK_CLOSE))
        if text.startswith(ANSWER_OPEN, nxt):
            return nxt + len(ANSWER_OPEN)
        at = text.find(THINK_CLOSE, at + 1)
    return None


def vlm_r1_format(text: str) -> float:
    """VLM-R1's ``format_reward`` (om-ai-lab/VLM-R1 ``grpo_jsonl.py`` lines 882-897): the whole response is
    ``<think>…</think>``, whitespace, ``<answer>…</answer>``."""
    if not (text.startswith(THINK_OPEN) and text.endswith(ANSWER_CLOSE)):
        return 0.0
    opened = _think_then_answer(text, len(THINK_OPEN))
    return 1.0 if opened is not None and opened <= len(text) - len(ANSWER_CLOSE) else 0.0


_QUAD_INT = __import__("re").compile(r"\[\d+,\s*\d+,\s*\d+,\s*\d+\]")


def vlm_r1_rec_format(text: str) -> float:
    """VLM-R1's ``format_reward_rec`` (``vlm_modules/qwen_module.py`` lines 88-105): somewhere a ``<think>…</think>``,
    whitespace, then an ``<answer>`` holding ``{``, a box of four integers ``[x1, y1, x2, y2]`` and ``}`` in that
    order before ``</answer>``."""
    start = text.find(THINK_OPEN)
    if start < 0:
        return 0.0
    opened = _think_then_answer(text, start + len(THINK_OPEN))
    if opened is None:
        return 0.0
    brace = text.find("{", opened)
    box = _QUAD_INT.search(text, brace + 1) if brace >= 0 else None
    close = text.find("}", box.end()) if box else -1
    return 1.0 if close >= 0 and text.find(ANSWER_CLOSE, close + 1) >= 0 else 0.0


def v_triune_math_format(text: str) -> float:
    """V-Triune's ``mathverify`` format (MiniMax-AI/One-RL-to-See-Them-All ``reward_server/verify.py`` lines
    112-131): 0.25 for each of ``<think>\\n``, ``\\n</think>\\n``, ``\\n<answer>\\n`` and ``\\n</answer>`` found
    exactly once."""
    tags = ("<think>\n", "\n</think>\n", "\n<answer>\n", "\n</answer>")
    return sum((0.25 for tag in tags if text.count(tag) == 1), 0.0)


def v_triune_boxes(text: str) -> list[dict] | None:
    """The boxes V-Triune reads from an answer (``reward_server/utils/det_helper.py`` ``extract_bbox``, lines 9-53):
    ``[[``/``]]`` made single, a cut list closed after its last whole ``}``, quotes made double and backslashes
    dropped, then JSON: the items with a ``bbox_2d`` of four ordered numbers and a text ``label``, a repeated box
    once; None when there are none."""
    import json

    if not text or not text.strip():
        return None
    text = text.replace("[[", "[").replace("]]", "]")
    if not text.endswith("]"):
        text = text.rsplit("},", 1)[0] + "}]"
    try:
        items = json.loads(text.replace("'", '"').replace("\\", ""))
    except (ValueError, RecursionError):
        return None
    if not isinstance(items, list):
        return None
    seen, out = set(), []
    for item in items:
        box = item.get("bbox_2d") if isinstance(item, dict) else None
        if (isinstance(box, list) and len(box) == 4 and isinstance(item.get("label"), str)
                and all(isinstance(c, (int, float)) and not isinstance(c, bool) for c in box)
                and box[0] <= box[2] and box[1] <= box[3] and tuple(box) not in seen):
            seen.add(tuple(box))
            out.append(item)
    return out or None


def v_triune_detection_format(text: str) -> float:
    """V-Triune's ``detection`` format (``verify.py`` lines 213-229): ``\\n<answer>\\n`` present, ``\\n</answer>``
    exactly once, and a box V-Triune reads (:func:`v_triune_boxes`) in the first answer, lower-cased."""
    if not (text.count("\n<answer>\n") and text.count("\n</answer>") == 1):
        return 0.0
    stripped = text.strip()
    at = stripped.find(ANSWER_OPEN)
    end = stripped.find(ANSWER_CLOSE, at + len(ANSWER_OPEN)) if at >= 0 else -1
    if at < 0 or end < 0:
        return 0.0
    return 1.0 if v_triune_boxes(stripped[at + len(ANSWER_OPEN):end].strip().lower()) else 0.0


_QUAD_NUM = __import__("re").compile(r"\[\s*-?\d+(?:\.\d+)?\s*,\s*-?\d+(?:\.\d+)?\s*,\s*-?\d+(?:\.\d+)?\s*,"
                                     r"\s*-?\d+(?:\.\d+)?\s*\]")


def verl_geo3k_format(text: str) -> float:
    """verl's geometry3k format (volcengine/verl ``verl/utils/reward_score/geo3k.py`` lines 19-22): ``<think>``,
    later ``</think>``, later ``\\boxed{`` and a later ``}``, from the first character of the response."""
    if not text.startswith(THINK_OPEN):
        return 0.0
    close = text.find(THINK_CLOSE, len(THINK_OPEN))
    if close < 0:
        return 0.0
    box = text.find("\\boxed{", close + len(THINK_CLOSE))
    return 1.0 if box >= 0 and text.rfind("}") >= box + len("\\boxed{") else 0.0


def box_in_think(text: str) -> float:
    """LLaVA-OneVision-1.5-RL's ``must_have_bbox_reward_fn`` (``reward/format.py`` lines 26-34): 1.0 when a
    ``<think>…</think>`` block holds a box ``[x1, y1, x2, y2]``."""
    at = text.find(THINK_OPEN)
    while at >= 0:
        end = text.find(THINK_CLOSE, at + len(THINK_OPEN))
        if end < 0:
            return 0.0
        if _QUAD_NUM.search(text, at + len(THINK_OPEN), end):
            return 1.0
        at = text.find(THINK_OPEN, end + len(THINK_CLOSE))
    return 0.0


#: Format checks by name, as a record's ``reward.format`` names them (the prompt styles' are ``normal`` and ``think``).
FORMAT_CHECKS = {"vlm-r1": vlm_r1_format, "vlm-r1-rec": vlm_r1_rec_format, "v-triune-math": v_triune_math_format,
                 "v-triune-detection": v_triune_detection_format, "verl-geo3k": verl_geo3k_format}
#: Bonus terms by name, as a record's ``reward.bonus`` names them with their weight.
BONUSES = {"box_in_think": box_in_think}


def format_check(response: str, rule: str) -> float:
    """The format score of ``response`` by ``rule``: a prompt style (``normal``, ``think``) or a seed's check."""
    check = FORMAT_CHECKS.get(rule)
    return check(response) if check is not None else format_score(response, rule)


def bonus_terms(bonus: Any, rid: Any) -> tuple[tuple[str, float], ...]:
    """A record's ``reward.bonus`` (``{name: weight}``) checked: names of :data:`BONUSES`, finite weights >= 0.

    Raises:
        RecordError: another name, or a weight that is not such a number.
    """
    if bonus in (None, {}):
        return ()
    if not isinstance(bonus, Mapping):
        raise RecordError(f"{where(rid)}: reward.bonus must be an object of name: weight")
    out = []
    for name, weight in bonus.items():
        if name not in BONUSES:
            raise RecordError(f"{where(rid)}: reward.bonus {name!r} is not one of {', '.join(BONUSES)}")
        try:
            w = float(weight)
        except (TypeError, ValueError):
            raise RecordError(f"{where(rid)}: reward.bonus.{name} must be a number, got {weight!r}") from None
        if not 0 <= w < float("inf"):
            raise RecordError(f"{where(rid)}: reward.bonus.{name} must be a finite number >= 0, got {weight!r}")
        out.append((str(name), w))
    return tuple(out)


def format_and_bonus(text: str, rule: str, bonus: tuple[tuple[str, float], ...]) -> tuple[float, float]:
    """The format score of ``text`` by ``rule`` (:func:`format_check`) and the sum of its bonus terms."""
    return format_check(text, rule), sum(w * BONUSES[name](text) for name, w in bonus)
