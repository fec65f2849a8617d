"""Typed results of ``curate recaption`` (see :mod:`curate.core.results`)."""

from __future__ import annotations

from dataclasses import dataclass, field

from curate.core.results import Counts, from_stats


@dataclass(frozen=True)
class CaptionCounts:
    """Captions asked, kept, retried and failed by reason (one language, or all)."""

    images: int = 0
    kept: int = 0
    retried: int = 0
    failed: dict[str, int] = field(default_factory=dict)
    mean_chars: float | None = None


@dataclass(frozen=True)
class RecaptionResult(Counts):
    """``curate recaption``: records out, captions overall and per language."""

    records_out: int = 0
    captions: CaptionCounts = field(default_factory=CaptionCounts)
    per_lang: dict[str, CaptionCounts] = field(default_factory=dict)

    def __post_init__(self) -> None:
        langs = {k: v if isinstance(v, CaptionCounts) else from_stats(CaptionCounts, v) for k, v in self.per_lang.items()}
        object.__setattr__(self, "per_lang", langs)
