"""MetaCLIP 2's worldwide balancing: a threshold t per language, set from English's tail share.

MetaCLIP balances each entry's matches down to at most about ``t``: an entry matched ``n`` times passes with
probability ``t / max(n, t)``. One t cannot fit every language: a language with a third of English's texts
has heads a third as large. MetaCLIP 2 (``metaclip/curation/curate.py``, ``global_count``) keeps the same
*tail share* in every language instead, learned from its public code:

* **tail share** of a language at threshold t (``t_to_p``): the share of all its entry matches that fall on
  entries matched fewer than t times, ``Σ_{n_e < t} n_e / Σ_e n_e``;
* English keeps the t it is given (``--t``, 170,000 in MetaCLIP 2 at its scale), which sets the share
  ``p = tail_share(English, t)``;
* every other language gets the t whose tail share is closest to ``p`` (``p_to_t``): its entries sorted by
  count, the count of the entry where the running share of matches comes closest to ``p`` (the first such
  entry when two are as close).

``--tail-share P`` gives ``p`` directly (then English's t comes from ``p`` too): for a corpus without
English, or to choose the share rather than English's t. Counts are per language: the matches of the texts
that count under it (:mod:`curate.balance.matching.languages`).

A language whose closest entry has no match gets t = 0: MetaCLIP 2 then gives its matched entries probability
0 (``0 / n``); this module does the same, so such a language keeps nothing, and says so in ``stats.json``.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from curate.balance.weights import TagArrays, TagProbabilities, concept_counts
from curate.core.errors import UserError

REFERENCE = "en"
"""The language whose t (``--t``) sets the tail share of the others."""


def tail_share(counts: np.ndarray, t: float) -> float:
    """Share of all matches that fall on entries matched fewer than ``t`` times (MetaCLIP 2's ``t_to_p``)."""
    counts = np.asarray(counts, np.int64)
    total = int(counts.sum())
    return float(counts[counts < t].sum() / total) if total else 0.0


def threshold_for_share(counts: np.ndarray, share: float) -> int:
    """The t whose tail share is closest to ``share`` (MetaCLIP 2's ``p_to_t``; see the module docstring).

    Entries never matched change nothing: their running share is 0 and their count 0 either way.
    """
    ordered = np.sort(np.asarray(counts, np.int64))
    if not ordered.size or ordered[-1] == 0:
        return 0
    running = np.cumsum(ordered) / ordered.sum()
    return int(ordered[int(np.abs(running - share).argmin())])


def entry_probabilities(counts: np.ndarray, t: int) -> np.ndarray:
    """``t / max(count, t)`` per entry, MetaCLIP's keep probability of one entry (0 for every entry when t = 0)."""
    counts = np.asarray(counts, np.float64)
    if t <= 0:
        return np.zeros_like(counts)
    return t / np.maximum(counts, float(t))


@dataclass
class Thresholds:
    """Per-language counts, thresholds and entry probabilities of one worldwide balancing.

    Attributes:
        names: the languages (``TagArrays.lang_names`` order).
        counts: ``(languages, concepts)`` matches of each entry among each language's counted rows.
        t: each language's threshold (None for a language without any match).
        share: the tail share every language was fitted to.
        given: how ``share`` was set: ``t of en`` or ``--tail-share``.
    """

    names: list[str]
    counts: np.ndarray
    t: list[int | None]
    share: float
    given: str

    def probabilities(self) -> np.ndarray:
        """``(languages, concepts)``: each entry's keep probability within each language."""
        return np.stack([entry_probabilities(c, t or 0) for c, t in zip(self.counts, self.t)]) \
            if self.names else np.zeros((0, self.counts.shape[1] if self.counts.ndim == 2 else 0))


def _entries(row: np.ndarray, lo: int, hi: int) -> np.ndarray:
    """The counts of concepts ``lo … hi - 1`` (a language's metadata), zeros past the counted concepts."""
    out = np.zeros(max(hi - lo, 0), np.int64)
    part = row[lo:hi]
    out[:part.size] = part
    return out


def language_thresholds(tags: TagArrays, counted: np.ndarray, n_concepts: int, *, t: int,
                        share: float | None = None, ranges: dict[str, tuple[int, int]] | None = None,
                        vocab_size: int | None = None) -> Thresholds:
    """Count each language's entry matches over the ``counted`` rows and set its t (see the module docstring).

    Args:
        tags: tags with languages (``lang``).
        counted: rows that count (first occurrences with tags).
        n_concepts: concepts to count (the largest concept index + 1).
        t: English's threshold (``--t``), unless ``share`` is given.
        share: the tail share of every language (``--tail-share``).
        ranges: each language's concepts (per-language vocabularies), so that t is fitted over that
            language's metadata as MetaCLIP 2 does (its unmatched entries included).
        vocab_size: the entries of a vocabulary shared by every language (default ``n_concepts``).

    Raises:
        UserError: no languages in the tags, or no English match to set the share from.
    """
    if tags.lang is None:
        raise UserError("--mode worldwide needs each text's language: make the tags with curate match "
                        "--lang-id (or a vocabulary per language, --vocab LANG=FILE)")
    names = list(tags.lang_names)
    counts = np.zeros((len(names), n_concepts), np.int64)
    for code in range(len(names)):
        counts[code] = concept_counts(tags, n_concepts, counted & (tags.lang == code))
    given = "--tail-share"
    if share is None:
        if REFERENCE not in names or not counts[names.index(REFERENCE)].any():
            raise UserError(f"--mode worldwide: no {REFERENCE} text matched any entry, so English's t cannot set the "
                            "tail share of the other languages; give it with --tail-share P (e.g. 0.1)")
        share = tail_share(counts[names.index(REFERENCE)], t)  # entries never matched add nothing
        given = f"t of {REFERENCE}"
    thresholds: list[int | None] = []
    for name, row in zip(names, counts):
        if not row.any():
            thresholds.append(None)
        elif name == REFERENCE and given != "--tail-share":
            thresholds.append(int(t))
        else:
            lo, hi = (ranges or {}).get(name, (0, max(vocab_size or 0, n_concepts)))
            thresholds.append(threshold_for_share(_entries(row, lo, hi), share))
    return Thresholds(names, counts, thresholds, float(share), given)


def language_probabilities(tags: TagArrays, table: np.ndarray) -> TagProbabilities:
    """Each tag's keep probability within the language of its row (``table``: :meth:`Thresholds.probabilities`)."""
    assert tags.lang is not None
    lang, lengths, width = tags.lang, tags.lengths, tags.width

    def lookup(flat: np.ndarray, lo: int, hi: int) -> np.ndarray:
        rows = np.repeat(lang[lo:hi], width) if width is not None else np.repeat(lang[lo:hi], lengths[lo:hi])
        return table[rows, flat]

    return lookup
