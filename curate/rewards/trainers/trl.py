"""TRL: reward functions for ``trl.GRPOTrainer`` (and the other TRL trainers that take
``reward_funcs``), and the dataset of ``curate rl-filter``'s ``kept.jsonl``.

::

    from trl import GRPOConfig, GRPOTrainer
    from curate.rewards.trainers.trl import accuracy_reward, format_reward, kept_dataset

    trainer = GRPOTrainer(model, reward_funcs=[accuracy_reward, format_reward],
                          train_dataset=kept_dataset("rl/kept.jsonl"), args=GRPOConfig(...))

TRL calls a reward function as ``f(prompts=..., completions=..., completion_ids=...,
**columns)`` where every other dataset column arrives as a list with one value per
completion. These functions read ``answer`` (or ``solution``), ``answer_type``,
``prompt_type`` and the optional ``reward`` object (a mapping or its JSON string), plus
the box fields (``image_size``…) when the dataset has them; ``answer`` may also be a
whole label (see :mod:`curate.rewards.trainers.common`). Completions may be plain
strings or conversational (``[{"role": "assistant", "content": ...}]``). The training
progress (``trainer_state.global_step / max_steps``) feeds the dynamic IoU threshold.

- :func:`accuracy_reward`: the verifier's accuracy in [0, 1].
- :func:`format_reward`: the format score of the record's prompt style in [0, 1] (the format
  check alone: no verifier runs, no gold is needed).
- :func:`curate_reward`: the record's combined reward (``reward.accuracy_ratio`` /
  ``format_ratio``), the value ``curate score`` and ``rl-filter`` report.

A record that cannot be scored scores 0 with a logged warning, never an exception.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from curate.core.errors import UserError
from curate.rewards.verdict import RewardResult
from curate.rewards.trainers.common import (
    RECORD_FIELDS,
    completion_text,
    format_batch,
    progress_of,
    record_from_label,
    score_batch,
)

def _records(n: int, columns: Mapping[str, Any], *, need_gold: bool = True) -> list[dict[str, Any]]:
    """One record per completion from TRL's per-completion column lists (``need_gold=False``: the
    ``answer`` column may be missing, as for the format reward)."""
    present = [k for k in RECORD_FIELDS if k != "answer" and isinstance(columns.get(k), (list, tuple))]
    gold = columns.get("answer", columns.get("solution"))
    if gold is None and not need_gold:
        return [{k: columns[k][i] for k in present if i < len(columns[k])} for i in range(n)]
    if not isinstance(gold, (list, tuple)) or len(gold) != n:
        raise UserError("curate reward functions need an 'answer' (or 'solution') column in the training "
                        f"dataset, one value per completion; got {type(gold).__name__}: add the gold answers")
    out = []
    for i in range(n):
        defaults = {k: columns[k][i] for k in present if i < len(columns[k])}
        out.append(record_from_label(gold[i], defaults))
    return out


def score_completions(prompts: Sequence[Any] | None, completions: Sequence[Any], **columns: Any) -> list[RewardResult]:
    """The :class:`~curate.rewards.verdict.RewardResult` of every completion (TRL's calling convention)."""
    records = _records(len(completions), columns)
    texts = [completion_text(c) for c in completions]
    return score_batch(records, texts, progress=progress_of(columns.get("trainer_state")))


def _log_errors(results: Sequence[RewardResult], log_extra: Any) -> None:
    if callable(log_extra):
        log_extra("curate_error", [r.error or "" for r in results])


def accuracy_reward(prompts: Sequence[Any] | None = None, completions: Sequence[Any] = (),
                    **columns: Any) -> list[float]:
    """GRPO reward function: the verifier's accuracy of each completion against its record."""
    results = score_completions(prompts, completions, **columns)
    _log_errors(results, columns.get("log_extra"))
    return [r.accuracy for r in results]


def format_reward(prompts: Sequence[Any] | None = None, completions: Sequence[Any] = (),
                  **columns: Any) -> list[float]:
    """GRPO reward function: the format score of each completion (``normal`` or ``think`` style).

    Only the format check runs (no verifier: a right format with a wrong answer scores 1.0).
    """
    records = _records(len(completions), columns, need_gold=False)
    return format_batch(records, [completion_text(c) for c in completions])


def curate_reward(prompts: Sequence[Any] | None = None, completions: Sequence[Any] = (),
                  **columns: Any) -> list[float]:
    """GRPO reward function: the record's combined reward (its accuracy and format weights)."""
    return [r.reward for r in score_completions(prompts, completions, **columns)]


def kept_dataset(path: str | os.PathLike[str], *, image_root: str | os.PathLike[str] | None = None,
                 templates: str | os.PathLike[str] | None = None, prompt_style: str | None = None,
                 skipped: list[tuple[str, str, str]] | None = None) -> Any:
    """``kept.jsonl`` of ``curate rl-filter`` as a ``datasets.Dataset`` for ``GRPOTrainer``.

    Columns: ``prompt`` (conversational: one user turn with the rl-filter prompt template
    applied, image parts where the problem had ``<image>``), ``images`` (the image bytes,
    only when some record has images), ``answer`` and ``reward`` (JSON values),
    ``answer_type``, ``prompt_type``, ``id``, ``source``, plus ``pass_at_1``.

    Args:
        path: The ``kept.jsonl`` file (or any RL-layout JSONL file).
        image_root: Folder that relative image paths are relative to (default: the folder of ``path``).
            rl-filter's ``kept.jsonl`` carries its image paths as rl-filter read them, so it needs none;
            give the rl-filter input's folder for a ``kept.jsonl`` written before it did, or for
            another RL file with relative paths.
        templates: The ``--templates`` file given to rl-filter, if any.
        prompt_style: The ``--prompt-style`` given to rl-filter, if any.
        skipped: When given, receives ``(id, reason, detail)`` for each row left out;
            otherwise they are summarised in a logged warning.

    Raises:
        UserError: ``path`` is missing, or ``trl``'s ``datasets`` is not installed.
    """
    from curate.rewards.trainers.kept import load_kept

    return load_kept(Path(path), image_root=image_root, templates=templates, prompt_style=prompt_style,
                     skipped=skipped)
