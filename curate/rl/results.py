"""Typed results of ``curate rl-filter`` and ``curate score`` (see :mod:`curate.core.results`)."""

from __future__ import annotations

from dataclasses import dataclass, field

from curate.core.results import Counts


@dataclass(frozen=True)
class RewardSummary:
    """Mean reward, pass@1, pass@N and truncation over prompts (or responses)."""

    mean_reward: float | None = None
    mean_pass_at_1: float | None = None
    mean_pass_at_n: float | None = None
    truncation_rate: float | None = None


@dataclass(frozen=True)
class RlFilterResult(Counts):
    """``curate rl-filter``: prompts kept, and the reward figures over all prompts."""

    kept: int = 0
    overall: RewardSummary = field(default_factory=RewardSummary)


@dataclass(frozen=True)
class ScoreResult:
    """``curate score``: responses scored, errored by reason, the mean reward."""

    responses_in: int = 0
    scored: int = 0
    errored: dict[str, int] = field(default_factory=dict)
    overall: RewardSummary = field(default_factory=RewardSummary)
