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

from curate.rewards.extract import (
    ANSWER_CLOSE,
    ANSWER_OPEN,
    THINK_CLOSE,
    THINK_OPEN,
    answer_block_span,
    boxed_spans,
    last_boxed_span,
)

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
