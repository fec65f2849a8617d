"""Rule-based reward verifiers for RL data selection and RL training.

Public API::

    from curate.rewards import score, score_many, VERIFIERS, answer_types

    result = score({"answer": "B", "answer_type": "multiple-choice"}, "<answer>(B)</answer>")
    result.accuracy, result.format, result.reward, result.error, result.verifier

- :func:`score` / :func:`score_many` route a record to its verifier (``answer_type`` or
  ``reward.verifier``), compute accuracy and format, and combine them into ``reward``.
- :data:`VERIFIERS` maps verifier names to callables ``VERIFIERS[name](record, response)``.
- :func:`answer_types` lists the accepted ``answer_type`` values.
- An unknown ``answer_type`` raises :class:`UnknownAnswerType` (a
  :class:`curate.core.errors.UserError`); a malformed record raises :class:`RecordError`.
  Verifier errors and timeouts never raise: they score 0 with ``error`` set.
- :func:`configure` sets the worker pool used for time-limited work, :func:`warm_up`
  starts it ahead of the first call, :func:`shutdown` stops it and the code sandboxes;
  :func:`counters` reports calls and errors per reason. Model-written programs run in an
  OS sandbox (:mod:`curate.rewards.runtime.sandbox`), or not at all (``sandbox_unavailable``).

See :mod:`curate.rewards.registry` for the record fields and the weighting, each
verifier module for its rules, :mod:`curate.rewards.runtime.limits` for the time limits,
:mod:`curate.rl.score` for scoring files (``curate score``),
:mod:`curate.rl.serve` for the HTTP service (``curate serve-rewards``, also OpenRLHF's remote
reward protocol) and :mod:`curate.rewards.trainers` for the TRL, verl, OpenRLHF and AReaL adapters.
"""

from __future__ import annotations

from curate.rewards.boxes import dynamic_iou_threshold, smart_resize
from curate.rewards.format import format_score
from curate.rewards.runtime.limits import configure, warm_up
from curate.rewards.counters import counters
from curate.rewards.pool import shutdown
from curate.rewards.registry import (
    ANSWER_TYPES,
    VERIFIERS,
    Verifier,
    answer_types,
    plan,
    score,
    score_many,
)
from curate.rewards.verdict import RecordError, RewardResult, UnknownAnswerType, VerifierFailure

__all__ = [
    "ANSWER_TYPES",
    "VERIFIERS",
    "RecordError",
    "RewardResult",
    "UnknownAnswerType",
    "Verifier",
    "VerifierFailure",
    "answer_types",
    "configure",
    "counters",
    "dynamic_iou_threshold",
    "format_score",
    "plan",
    "score",
    "score_many",
    "shutdown",
    "smart_resize",
    "warm_up",
]
