"""AReaL: reward functions in the shape of AReaL's RLVR workflows.

AReaL's ``RLVRWorkflow``/``VisionRLVRWorkflow`` take ``reward_fn`` as a dotted path and
call it (through ``AsyncRewardWrapper``, in a process pool with a time limit) as
``reward_fn(prompt, completions, prompt_ids, completion_ids, **row)`` where ``row`` is
the dataset row (``answer``, ``answer_type``, ``prompt_type``, ``reward``…) and
``completions`` the decoded response (end-of-turn tokens are dropped here)::

    workflow_kwargs = dict(reward_fn="curate.rewards.trainers.areal.reward_fn", gconfig=..., tokenizer=...)

``answer`` may be a bare gold (with an ``answer_type`` column) or a whole record label
(see :mod:`curate.rewards.trainers.common`). :func:`reward_fn` returns the record's
combined reward (accuracy alone unless the record's ``reward`` object weights the
format); :func:`accuracy_reward_fn` and :func:`format_reward_fn` return one part each
(the format part runs the format check alone, no verifier).
Curate's own time limits apply inside (the verifier work runs in curate's worker
processes), so AReaL's outer timeout only sees a finished score.
"""

from __future__ import annotations

from typing import Any

from curate.rewards.verdict import RewardResult
from curate.rewards.trainers.common import (
    fields_of,
    format_batch,
    record_from_label,
    score_batch,
    strip_end_tokens,
)


def score_row(completions: Any, answer: Any = None, **row: Any) -> RewardResult:
    """The :class:`~curate.rewards.verdict.RewardResult` of one AReaL completion against its dataset row."""
    gold = answer if answer is not None else row.get("solution")
    record = record_from_label(gold, fields_of(row, exclude=("answer",)))
    text = completions if isinstance(completions, str) else str(completions or "")
    return score_batch([record], [strip_end_tokens(text)])[0]


def reward_fn(prompt: Any = None, completions: Any = "", prompt_ids: Any = None, completion_ids: Any = None,
              answer: Any = None, **row: Any) -> float:
    """AReaL reward function: the record's combined reward (accuracy unless weighted)."""
    return score_row(completions, answer, **row).reward


def accuracy_reward_fn(prompt: Any = None, completions: Any = "", prompt_ids: Any = None,
                       completion_ids: Any = None, answer: Any = None, **row: Any) -> float:
    """AReaL reward function: the verifier's accuracy alone."""
    return score_row(completions, answer, **row).accuracy


def format_reward_fn(prompt: Any = None, completions: Any = "", prompt_ids: Any = None,
                     completion_ids: Any = None, answer: Any = None, **row: Any) -> float:
    """AReaL reward function: the format score alone (the format check only: no verifier runs)."""
    gold = answer if answer is not None else row.get("solution")
    defaults = fields_of(row, exclude=("answer",))
    record = record_from_label(gold, defaults) if gold is not None else defaults
    text = completions if isinstance(completions, str) else str(completions or "")
    return format_batch([record], [strip_end_tokens(text)])[0]
