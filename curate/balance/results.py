"""Typed results of the balancing steps (see :mod:`curate.core.results`)."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any

from curate.core.results import Counts


@dataclass(frozen=True)
class EmbedResult(Counts):
    """``curate embed``: records and images embedded, the embedding size, the shards."""

    records_embedded: int = 0
    images_embedded: int = 0
    dim: int = 0
    shards: int = 0


@dataclass(frozen=True)
class VocabEmbedResult:
    """``curate vocab embed``: concepts embedded, skipped per script, whether the cache answered."""

    rows: int = 0
    embedded: int = 0
    dim: int = 0
    skipped: dict[str, int] = field(default_factory=dict)
    cached: bool = False
    cache_dir: str = ""
    seconds: float = 0.0


@dataclass(frozen=True)
class TagResult(Counts):
    """``curate tag``: records tagged, usable concepts, the embeddings read."""

    records_tagged: int = 0
    concepts_embedded: int = 0
    embedding_files: int = 0
    layout: str = ""


@dataclass(frozen=True)
class BalanceReport:
    """Concept coverage and head share before and after resampling (:func:`curate.balance.report.compare`)."""

    concepts_covered_before: int = 0
    concepts_covered_after: int = 0
    head_share_before: float = 0.0
    head_share_after: float = 0.0
    normalized_entropy_before: float = 0.0
    normalized_entropy_after: float = 0.0


@dataclass(frozen=True)
class ResampleResult(Counts):
    """``curate resample``: records selected from the tagged pool, copies, balance before/after."""

    pool: int = 0
    records_selected: int = 0
    copies_total: int = 0
    with_replacement: bool = False
    balance: BalanceReport = field(default_factory=BalanceReport)
    records_written: dict[str, Any] | None = None
    languages: dict[str, Any] | None = None


@dataclass(frozen=True)
class BalanceResult(Counts):
    """``curate balance``: the figures of every step in one folder."""

    records_embedded: int = 0
    pool: int = 0
    records_selected: int = 0
    copies_total: int = 0
    with_replacement: bool = False
    balance: BalanceReport = field(default_factory=BalanceReport)
    records_written: dict[str, Any] | None = None
    languages: dict[str, Any] | None = None
    text_only: int = 0  #: records without images, written to records/ untouched (not selected, not dropped)
    records_out: int = 0  #: records_selected + text_only


def language_lines(languages: dict[str, Any] | None, most: int = 8) -> list[str]:
    """What ``resample``/``balance`` print of the per-language figures (MetaCLIP's modes on tags with languages)."""
    if not languages:
        return []
    lines = []
    if "tail_share" in languages:
        lines.append(f"tail share {languages['tail_share']:.4f} in every language ({languages['tail_share_from']})")
    for lang, f in list(languages["per_language"].items())[:most]:
        lines.append(f"  {lang}: t={f['t'] if f['t'] is not None else '-'}  kept {f['kept']:,} of "
                     f"{f['candidates']:,} ({f['kept_share']:.3f}); share {f['pool_share']:.3f} → "
                     f"{f['selection_share']:.3f}")
    return lines


def records_lines(written: dict[str, Any] | None, out: str | os.PathLike[str]) -> list[str]:
    """What ``resample``/``balance`` print of ``OUT/records/``: the records written, and a warning when selected
    ids were not in the record files given (other files, or ids read otherwise than when they were tagged)."""
    if written is None:
        return []
    lines = [f"records: {out}/records/ ({written['records']:,} written)"]
    missing = int(written.get("selected_not_found", 0))
    if missing:
        lines.append(f"[yellow]{missing:,} selected ids are in none of the record files given: give the records "
                     "that were tagged (ids read by this curate version; see stats.json records_written)[/yellow]")
    return lines


def wall_timings(stats: Any, started: float) -> dict[str, float]:
    """A step's ``timings`` for ``stats.json``: its stats' timings (by step) and the wall time since ``started``
    (a :func:`time.perf_counter` reading)."""
    import time

    return {**stats.to_dict()["timings"], "wall": round(time.perf_counter() - started, 3)}
