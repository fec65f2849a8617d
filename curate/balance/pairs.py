"""Records with several texts (``curate match --per text``: one row of tags per caption or turn).

MetaCLIP counts per text and selects image–text *pairs* (``metaclip/curation/curate.py``, learned from its
public code): each text's matched entries count once for that text; then, for each image, one of its texts
that matched an entry is drawn at random, and the image is kept with that text's probability
``1 - Π_e (1 - p(e))``. So an image is kept at most once, with the text it was drawn with, and its chance
is the mean of its matched texts' probabilities. (MetaCLIP 1's demo ``balancing.py`` instead tries every
text and appends the image once per passing text; curate follows MetaCLIP 2.)

Here, rows of one record are consecutive in ``tags.parquet``, its first text with ``text`` = 0.
``--per record`` on such tags merges each record's rows into one: the union of its texts' concepts (in the
order they first appear), counted once per record; the record counts under its first text's language.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from curate.balance.weights import TagArrays, uniform_width
from curate.core.columns import take_rows
from curate.core.errors import UserError


@dataclass
class TextRows:
    """Where each record's rows are: ``starts`` (its first row), ``record`` (the record of each row)."""

    starts: np.ndarray
    record: np.ndarray

    @classmethod
    def of(cls, tags: TagArrays) -> TextRows:
        """The records of tags with one row per text.

        Raises:
            UserError: the first row is not a record's first text.
        """
        assert tags.text is not None
        starts = np.flatnonzero(tags.text == 0)
        if len(tags) and (not starts.size or starts[0] != 0):
            raise UserError("tags.parquet: the first row is not the first text of a record (text 0); "
                            "use the tags.parquet that curate match --per text wrote")
        record = np.repeat(np.arange(starts.size), np.diff(np.append(starts, len(tags))))
        return cls(starts, record)

    def __len__(self) -> int:
        return int(self.starts.size)

    def any_row(self, mask: np.ndarray) -> np.ndarray:
        """Per record: whether any of its rows is set in ``mask``."""
        return np.bincount(self.record[mask], minlength=len(self)) > 0


def merge_texts(tags: TagArrays, rows: TextRows) -> TagArrays:
    """One row per record: the union of its texts' concepts, in the order they first appear (ids included)."""
    flat = np.concatenate([part for _, part in tags.parts()]) if tags.parts() else np.zeros(0, np.int32)
    owner = np.repeat(rows.record, tags.lengths)
    order = np.lexsort((np.arange(flat.size), flat, owner))  # by record, then concept, then position
    new = np.ones(flat.size, bool)
    new[1:] = (owner[order][1:] != owner[order][:-1]) | (flat[order][1:] != flat[order][:-1])
    keep = np.zeros(flat.size, bool)
    keep[order[new]] = True
    offsets = np.zeros(len(rows) + 1, np.int64)
    np.cumsum(np.bincount(owner[keep], minlength=len(rows)), out=offsets[1:])
    width = uniform_width(offsets)
    starts = rows.starts
    return TagArrays(take_rows(tags.ids, starts) if len(tags.ids) else tags.ids, tags.codes[starts],
                     tags.source_names, None if width else offsets, flat[keep], tags.taggable, width, None,
                     tags.lang[starts] if tags.lang is not None else None, tags.lang_names)


def draw_pairs(rows: TextRows, eligible: np.ndarray, prob: np.ndarray,
               rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """MetaCLIP 2's pair selection (see the module docstring).

    Args:
        rows: where each record's rows are.
        eligible: rows that may be drawn (first occurrences whose text matched an entry).
        prob: each row's keep probability ``1 - Π (1 - p)``.
        rng: the draw's generator (one uniform number per record for the text, one for the keep).

    Returns:
        ``(copies 0/1, keep probability, text drawn or -1, chosen rows)`` per record; the last is a row mask
        of the kept pairs.
    """
    n = len(rows)
    candidates = np.flatnonzero(eligible)
    owner = rows.record[candidates]
    per_record = np.bincount(owner, minlength=n)
    first = np.zeros(n + 1, np.int64)
    np.cumsum(per_record, out=first[1:])
    pick_u, keep_u = rng.random(n), rng.random(n)
    has = per_record > 0
    pick = np.minimum((pick_u * per_record).astype(np.int64), np.maximum(per_record - 1, 0))
    chosen = np.full(n, -1, np.int64)
    chosen[has] = candidates[first[:-1][has] + pick[has]]
    keep = has & (keep_u < np.where(has, prob[np.maximum(chosen, 0)], 0.0))
    mean = np.divide(np.bincount(owner, weights=prob[candidates], minlength=n), per_record,
                     out=np.zeros(n), where=has)
    text = np.full(n, -1, np.int32)
    text[has] = (chosen[has] - rows.starts[has]).astype(np.int32)
    kept_rows = np.zeros(len(rows.record), bool)
    kept_rows[chosen[keep]] = True
    return keep.astype(np.int32), mean, text, kept_rows
