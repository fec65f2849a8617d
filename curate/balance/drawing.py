"""The draw of ``curate resample``: concept frequencies and weights over the eligible records, then the seeded
draw itself (inverse frequency, MetaCLIP's rule, or MetaCLIP 2's pairs; see :mod:`curate.balance.resample`)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from curate.balance.config import ResampleConfig
from curate.balance.metaclip import draw_records, draw_texts
from curate.balance.pairs import TextRows
from curate.balance.thresholds import Thresholds
from curate.balance.weights import TagArrays, concept_counts, draw, record_weights

#: Mixed with ``--seed`` into the draw's generator (the same numbers as before the draw had its own module).
SALT = 0x5E1EC7


@dataclass
class Chosen:
    """One selection: the pool and target, concept counts before, copies and weights per record; with MetaCLIP's
    rules also the per-language thresholds (``worldwide``), and with a row per text the text drawn per record and
    the kept pairs (a row mask)."""

    pool: int
    target: int | None
    before: np.ndarray
    copies: np.ndarray
    weights: np.ndarray
    thresholds: Thresholds | None = None
    text: np.ndarray | None = None
    kept_rows: np.ndarray | None = None


def draw_pairs(arrays: TagArrays, rows: TextRows, eligible: np.ndarray, before: np.ndarray,
               config: ResampleConfig, meta: dict[str, str]) -> Chosen:
    """MetaCLIP 2's pair selection (one row per text; :mod:`curate.balance.pairs`)."""
    picked = draw_texts(arrays, rows, eligible, before, config, meta, generator(config.seed))
    pool = int(rows.any_row(eligible).sum())
    return Chosen(pool, None, before, picked.copies, picked.weights, picked.thresholds, picked.text,
                  picked.kept_rows)


def weigh(arrays: TagArrays, eligible: np.ndarray, n_concepts: int, config: ResampleConfig,
          out: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray | None]:
    """Concept frequencies over the ``eligible`` records and (``inverse`` mode) their weights, 0 if not eligible
    (written into ``out`` when given and the layout allows)."""
    before = concept_counts(arrays, n_concepts, eligible)
    if config.mode != "inverse":
        return before, None
    weights = record_weights(arrays, before, weighting=config.weighting, temperature=config.temperature, out=out)
    weights[~eligible] = 0.0  # in place: no second array of 10M weights
    return before, weights


def draw_selection(arrays: TagArrays, eligible: np.ndarray, weighed: tuple[np.ndarray, np.ndarray | None],
                   config: ResampleConfig, ready: Prepared | None = None, meta: dict[str, str] | None = None) -> Chosen:
    """Draw among the ``eligible`` records (see :mod:`curate.balance.resample`); the generator starts from the seed
    (``ready``: its first numbers and the result's buffer, from :func:`prepare_draw`; ``meta``: the tags'
    metadata, for ``worldwide``)."""
    pool = int(eligible.sum())
    before, weights = weighed
    rng = generator(config.seed)
    if weights is not None:
        fraction = config.fraction if config.fraction is not None else 0.0
        n_target = config.target if config.target is not None else max(1, int(round(fraction * pool)))
        copies = draw(weights, n_target, rng, *((ready.exponentials, ready.copies) if ready else ()))
    else:
        picked = draw_records(arrays, eligible, before, config, meta or {}, rng)
        return Chosen(pool, None, before, picked.copies, picked.weights, picked.thresholds)
    return Chosen(pool, n_target, before, copies, weights)


def generator(seed: int) -> np.random.Generator:
    """The draw's generator for ``--seed``."""
    return np.random.default_rng([seed, SALT])


@dataclass
class Prepared:
    """What an ``inverse`` draw without replacement of ``n`` records needs before the weights: the first ``n``
    numbers of its generator, and buffers for the weights and the copies, their memory already faulted in."""

    exponentials: np.ndarray | None = None
    weights: np.ndarray | None = None
    copies: np.ndarray | None = None


def prepare_draw(n: int, config: ResampleConfig) -> Prepared:
    """:class:`Prepared` for an ``inverse`` draw without replacement of ``n`` records (empty for other draws, and
    for ``n`` = 0: tags with a row per text, whose records are known later)."""
    if n == 0 or config.mode != "inverse" or (config.target if config.target is not None else (config.fraction or 0) * n) > n:
        return Prepared()
    exponentials = generator(config.seed).standard_exponential(n, out=np.empty(n, np.float64))
    weights, copies = np.empty(n, np.float64), np.empty(n, np.int32)
    weights.fill(0.0)
    copies.fill(0)
    return Prepared(exponentials, weights, copies)
