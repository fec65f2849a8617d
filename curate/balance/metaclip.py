"""MetaCLIP's selection for ``curate resample --mode metaclip|worldwide``: records, or image–text pairs.

* ``metaclip``: MetaCLIP's rule with one t: an entry matched ``n`` times passes with ``t / max(n, t)``.
* ``worldwide``: MetaCLIP 2's, with a t per language (:mod:`curate.balance.thresholds`).

On tags with one row per record, a record is kept when any of its entries passes (independent draws per
entry; its weight is ``1 - Π (1 - p)``). On tags with one row per text (``--per text``), counts are per text
and the selection is MetaCLIP 2's pair selection (:mod:`curate.balance.pairs`).
"""

from __future__ import annotations

from dataclasses import dataclass
import numpy as np

from curate.balance.config import ResampleConfig
from curate.balance.matching.vocabularies import parts_from_metadata
from curate.balance.pairs import TextRows, draw_pairs
from curate.balance.thresholds import Thresholds, language_probabilities, language_thresholds
from curate.core.errors import UserError
from curate.balance.weights import (TagArrays, TagProbabilities, concept_counts, concept_probabilities,
                                    draw_metaclip, keep_probabilities)


@dataclass
class MetaclipDraw:
    """One MetaCLIP selection: per record ``copies`` (0/1) and ``weights`` (keep probability); ``text`` (the text
    drawn per record, -1 for none) and ``kept_rows`` (row mask of the kept pairs) on tags with a row per text."""

    copies: np.ndarray
    weights: np.ndarray
    thresholds: Thresholds | None = None
    text: np.ndarray | None = None
    kept_rows: np.ndarray | None = None


def tag_probabilities(tags: TagArrays, counted: np.ndarray, before: np.ndarray, config: ResampleConfig,
                      meta: dict[str, str]) -> tuple[TagProbabilities, Thresholds | None]:
    """Each tag's probability of passing, and the per-language thresholds in ``worldwide`` mode.

    ``before``: the concept counts over the ``counted`` rows; ``meta``: ``tags.parquet``'s metadata (the
    vocabularies' concept ranges and size).
    """
    assert config.t is not None
    if config.mode != "worldwide":
        return concept_probabilities(before, config.t), None
    parts = parts_from_metadata(meta.get("vocabularies"))
    ranges = {p.lang: (p.offset, p.offset + p.size) for p in parts if p.lang is not None}
    size = int(meta["concept_rows"]) if meta.get("concept_rows", "").isdigit() else None
    thresholds = language_thresholds(tags, counted, before.size, t=config.t, share=config.tail_share,
                                     ranges=ranges or None, vocab_size=size)
    return language_probabilities(tags, thresholds.probabilities()), thresholds


def draw_records(tags: TagArrays, eligible: np.ndarray, before: np.ndarray, config: ResampleConfig,
                 meta: dict[str, str], rng: np.random.Generator) -> MetaclipDraw:
    """MetaCLIP's rule on one row per record (see the module docstring)."""
    p_tags, thresholds = tag_probabilities(tags, eligible, before, config, meta)
    assert config.t is not None
    copies, weights = draw_metaclip(tags, before, config.t, rng, eligible, p_tags=p_tags)
    return MetaclipDraw(copies, weights, thresholds)


def draw_texts(tags: TagArrays, rows: TextRows, eligible: np.ndarray, before: np.ndarray, config: ResampleConfig,
               meta: dict[str, str], rng: np.random.Generator) -> MetaclipDraw:
    """MetaCLIP 2's pair selection on one row per text: ``eligible`` and ``before`` are per text."""
    p_tags, thresholds = tag_probabilities(tags, eligible, before, config, meta)
    prob = keep_probabilities(tags, p_tags)
    copies, weights, text, kept_rows = draw_pairs(rows, eligible, prob, rng)
    return MetaclipDraw(copies, weights, thresholds, text, kept_rows)


def counts_before(tags: TagArrays, eligible: np.ndarray, n_concepts: int) -> np.ndarray:
    """Concept counts over the eligible rows (per text on tags with a row per text)."""
    return concept_counts(tags, n_concepts, eligible)


def resolve_per(config: ResampleConfig, per_text: bool) -> str:
    """What a concept counts and a draw picks: ``text`` (pairs, on tags with a row per text, MetaCLIP's modes) or
    ``record`` (the default for ``inverse``, whose weights are per record; texts are then merged per record).

    Raises:
        UserError: ``--per text`` on tags with a row per record, or with ``--mode inverse``.
    """
    if not per_text:
        if config.per == "text":
            raise UserError("--per text: these tags have one row per record; make them with curate match "
                            "--per text (or --rules metaclip)")
        return "record"
    if config.mode == "inverse":
        if config.per == "text":
            raise UserError("--per text draws image-text pairs by MetaCLIP's rule: use it with --mode metaclip or "
                            "worldwide; --mode inverse weighs records (--per record)")
        return "record"
    return config.per or "text"


def drawn_rows(rows: TextRows, text: np.ndarray | None) -> np.ndarray:
    """Row mask of each record's drawn text."""
    mask = np.zeros(len(rows.record), bool)
    if text is not None:
        has = text >= 0
        mask[rows.starts[has] + text[has]] = True
    return mask
