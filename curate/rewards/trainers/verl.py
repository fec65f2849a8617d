"""verl: a ``custom_reward_function`` module.

Point verl at this file (its path is ``python -c "import curate.rewards.trainers.verl as m; print(m.__file__)"``)::

    custom_reward_function.path=$(python -c "import curate.rewards.trainers.verl as m; print(m.__file__)")
    custom_reward_function.name=compute_score

verl's reward managers call ``compute_score(data_source=..., solution_str=...,
ground_truth=..., extra_info=...)`` once per response (the ``batch`` reward manager calls
:func:`compute_score_batch` with lists). ``ground_truth`` is the dataset's
``reward_model.ground_truth``: a record mapping (``{"answer": ..., "answer_type": ...,
"prompt_type": ..., "reward": {...}}``), its JSON string, or a bare gold whose
``answer_type`` then comes from ``extra_info`` or from
``custom_reward_function.reward_kwargs.answer_type``. ``extra_info`` may also carry
``prompt_type``, ``reward`` and the box fields. Parquet arrays (numpy) are accepted.

The result is ``{"score": reward, "acc": accuracy, "format": format}`` (verl takes
``score`` as the reward and logs the other keys), or the reward alone with
``reward_kwargs.return_dict=false``. The reward is the record's combined reward (its
``reward.accuracy_ratio``/``format_ratio``, accuracy alone by default).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from curate.rewards.verdict import RewardResult
from curate.rewards.trainers.common import fields_of, plain, record_from_label, score_batch, strip_end_tokens


def _record(ground_truth: Any, extra_info: Any, answer_type: str | None, prompt_type: str | None) -> dict[str, Any]:
    extra = plain(extra_info) if extra_info is not None else {}
    defaults = {"answer_type": answer_type, "prompt_type": prompt_type, **fields_of(extra, exclude=("answer",))}
    return record_from_label(ground_truth, defaults)


def _out(result: RewardResult, return_dict: bool) -> float | dict[str, float]:
    if not return_dict:
        return result.reward
    return {"score": result.reward, "acc": result.accuracy, "format": result.format}


def compute_score(data_source: Any = None, solution_str: str = "", ground_truth: Any = None,
                  extra_info: dict[str, Any] | None = None, *, answer_type: str | None = None,
                  prompt_type: str | None = None, progress: float | None = None, return_dict: bool = True,
                  **kwargs: Any) -> float | dict[str, float]:
    """Score one response for verl (see the module docstring).

    Args:
        data_source: The dataset's ``data_source`` (not used for routing: the record's
            ``answer_type`` decides the verifier).
        solution_str: The decoded response.
        ground_truth: The record (mapping or JSON string) or a bare gold.
        extra_info: The dataset's ``extra_info`` (may carry record fields).
        answer_type: Default ``answer_type`` (``reward_kwargs``) for bare golds.
        prompt_type: Default prompt style (``normal``/``think``).
        progress: Training progress for the dynamic IoU threshold.
        return_dict: Return ``{"score", "acc", "format"}`` (default) or the reward alone.
        **kwargs: Other keyword arguments verl may pass (ignored).
    """
    record = _record(ground_truth, extra_info, answer_type, prompt_type)
    result = score_batch([record], [strip_end_tokens(solution_str or "")], progress=progress)[0]
    return _out(result, return_dict)


def compute_score_batch(data_sources: Sequence[Any], solution_strs: Sequence[str], ground_truths: Sequence[Any],
                        extra_infos: Sequence[Any] | None = None, *, answer_type: str | None = None,
                        prompt_type: str | None = None, progress: float | None = None,
                        return_dict: bool = True, **kwargs: Any) -> list[float | dict[str, float]]:
    """Score a batch for verl's ``batch`` reward manager (one round trip to the verifier workers)."""
    infos = list(extra_infos) if extra_infos is not None else [None] * len(solution_strs)
    records = [_record(gt, info, answer_type, prompt_type) for gt, info in zip(ground_truths, infos)]
    results = score_batch(records, [strip_end_tokens(s or "") for s in solution_strs], progress=progress)
    return [_out(r, return_dict) for r in results]
