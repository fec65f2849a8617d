"""The long-tail report: concept frequency vs rank before/after resampling, and its statistics.

Definitions (``counts[c]`` = tag occurrences of concept ``c``; before = every
tagged record once, after = the selection with its copies):

* **covered**: concepts with a non-zero count;
* **head share**: share of all tag occurrences that fall on the ``h`` most
  frequent concepts of that distribution, with ``h = ceil(1% × covered before)``
  (the same ``h`` before and after, so the two figures compare);
* **per language** (tags with languages, :func:`language_figures`): each language's texts, matched texts,
  candidates and kept pairs, its share of the pool and of the selection, its t and tail share;
* **normalised entropy**: ``H(p) / ln(V)`` with ``p = counts / Σ counts`` and ``V``
  the number of concepts that can be tagged (non-zero rows of the concept
  matrix); 1 means every taggable concept equally often.
"""

from __future__ import annotations

import math
import os
from pathlib import Path
from typing import Any

import numpy as np

from curate.balance.thresholds import Thresholds, tail_share
from curate.balance.weights import TagArrays
from curate.core.chart import Series, loglog_png


def head_size(counts_before: np.ndarray) -> int:
    """``h``: 1% of the concepts covered before resampling, at least 1."""
    covered = int(np.count_nonzero(counts_before))
    return max(1, math.ceil(0.01 * covered))


def distribution_stats(counts: np.ndarray, *, head: int, n_concepts: int) -> dict[str, Any]:
    """Covered concepts, head share and normalised entropy of one concept distribution."""
    counts = np.asarray(counts, dtype=np.float64)
    total = float(counts.sum())
    covered = int(np.count_nonzero(counts))
    if total <= 0:
        return {"occurrences": 0, "covered": 0, "head_share": 0.0, "entropy": 0.0}
    nz = counts[counts > 0]
    top = np.partition(nz, len(nz) - min(head, len(nz)))[len(nz) - min(head, len(nz)):] if len(nz) else nz
    p = nz / total
    entropy = float(-(p * np.log(p)).sum())
    norm = math.log(n_concepts) if n_concepts > 1 else 1.0
    return {"occurrences": int(round(total)), "covered": covered, "head_share": round(float(top.sum()) / total, 6),
            "entropy": round(entropy / norm, 6)}


def compare(before: np.ndarray, after: np.ndarray, n_concepts: int) -> dict[str, Any]:
    """The report's statistics for both distributions (see the module docstring)."""
    h = head_size(before)
    b = distribution_stats(before, head=h, n_concepts=n_concepts)
    a = distribution_stats(after, head=h, n_concepts=n_concepts)
    return {
        "taggable_concepts": int(n_concepts), "head_concepts": h,
        "concepts_covered_before": b["covered"], "concepts_covered_after": a["covered"],
        "head_share_before": b["head_share"], "head_share_after": a["head_share"],
        "normalized_entropy_before": b["entropy"], "normalized_entropy_after": a["entropy"],
        "tag_occurrences_before": b["occurrences"], "tag_occurrences_after": a["occurrences"],
    }


def top_concepts(counts: np.ndarray, n: int = 10, names: list[str] | None = None) -> list[dict[str, Any]]:
    """The ``n`` most frequent concepts (ties by index) with their counts and, if known, names."""
    counts = np.asarray(counts)
    candidates = np.arange(len(counts))
    if 0 < n < len(counts) // 4:  # only the concepts at or above the n-th largest count are sorted
        candidates = np.flatnonzero(counts >= np.partition(counts, len(counts) - n)[len(counts) - n])
    order = candidates[np.lexsort((candidates, -counts[candidates]))][:n]
    rows = []
    for c in order.tolist():
        if counts[c] <= 0:
            break
        row: dict[str, Any] = {"concept": c, "count": int(counts[c])}
        if names is not None and c < len(names):
            row["name"] = names[c]
        rows.append(row)
    return rows


def plot_balance(path: str | os.PathLike[str], before: np.ndarray, after: np.ndarray, *,
                 title: str = "", stats: dict[str, Any] | None = None) -> Path:
    """Write the frequency-vs-rank plot (log-log) of both distributions to ``path`` (PNG), drawn with
    Pillow (:mod:`curate.core.chart`): a few hundredths of a second, no matplotlib to import."""
    series = []
    for counts, label, color in ((before, "before", "#c0392b"), (after, "after", "#2471a3")):
        counts = np.asarray(counts)
        ranked = np.sort(counts[counts > 0])[::-1]
        if ranked.size:
            extra = ""
            if stats:
                extra = (f": {stats[f'concepts_covered_{label}']:,} concepts, "
                         f"top 1% share {stats[f'head_share_{label}']:.3f}")
            # At most ~2,000 log-spaced ranks: the same curve on a log axis.
            ranks = np.unique(np.geomspace(1, ranked.size, num=min(ranked.size, 2000)).round().astype(np.int64))
            series.append(Series(ranks, ranked[ranks - 1], label + extra, color))
    return loglog_png(path, series, title=title or "Concept frequency before and after balancing",
                      xlabel="concept rank", ylabel="records tagged with the concept", empty="no tagged records")


def language_figures(tags: TagArrays, matched: np.ndarray, candidates: np.ndarray, kept: np.ndarray,
                     th: Thresholds | None, t: int | None) -> dict[str, Any]:
    """Per language (rows of ``tags``): texts, matched texts, candidates, kept and their shares, t, tail share
    (``th``: the thresholds of ``--mode worldwide``; ``t`` the one threshold of ``--mode metaclip``).

    ``matched``: rows with a match counted; ``candidates``: rows that stood for a draw (a record's drawn text, or
    the record); ``kept``: rows kept.
    """
    assert tags.lang is not None
    size = len(tags.lang_names)
    rows_of = np.bincount(tags.lang, minlength=size)
    matched_of = np.bincount(tags.lang[matched], minlength=size)
    candidates_of = np.bincount(tags.lang[candidates], minlength=size)
    kept_of = np.bincount(tags.lang[kept], minlength=size)
    total_matched, total_kept = max(int(matched_of.sum()), 1), max(int(kept_of.sum()), 1)
    per_language: dict[str, Any] = {}
    for code in np.argsort(-rows_of, kind="stable").tolist():
        name = tags.lang_names[code]
        t_lang = th.t[code] if th is not None else t
        counts = th.counts[code] if th is not None else None
        per_language[name] = {
            "texts": int(rows_of[code]), "matched": int(matched_of[code]),
            "entries_matched": int(np.count_nonzero(counts)) if counts is not None else None,
            "matches": int(counts.sum()) if counts is not None else None,
            "t": t_lang, "tail_share": round(tail_share(counts, t_lang), 6) if counts is not None and t_lang else None,
            "candidates": int(candidates_of[code]), "kept": int(kept_of[code]),
            "kept_share": round(int(kept_of[code]) / int(candidates_of[code]), 6) if candidates_of[code] else 0.0,
            "pool_share": round(int(matched_of[code]) / total_matched, 6),
            "selection_share": round(int(kept_of[code]) / total_kept, 6),
        }
    figures: dict[str, Any] = {"per_language": per_language}
    if th is not None:
        figures.update(tail_share=round(th.share, 6), tail_share_from=th.given)
    return figures
