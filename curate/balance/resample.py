"""``curate resample``: concept tags → a seeded, concept-balanced selection of records.

Concept frequency ``f(c)`` = number of records tagged with concept ``c`` (each
record counts once per concept among its K tags).

Weights (``mode="inverse"``, the default): every tag of a record contributes
``f(c) ** -τ`` (``τ`` = ``temperature``; 1 = fully inverse, 0 = uniform, ½ is a
common middle ground), and the record's weight aggregates its K contributions:

* ``mean`` (default): ``w = (1/K) Σ_c f(c)^-τ`` - a record is rare when its
  concepts are rare on average; robust to one odd tag;
* ``max``: ``w = max_c f(c)^-τ`` - a record is kept for its rarest concept
  (closest to MetaCLIP's "any entry passes"); favours the tail hardest;
* ``sum``: ``w = Σ_c f(c)^-τ`` - like ``mean`` but records with more tags weigh more
  (only differs when some records have fewer than K tags).

``use_k = J`` keeps only each record's J best tags, for the frequencies and the
weights alike. With a real MetaCLIP model the K nearest concepts of an image are
usually related (cat, kitten, tabby) and all K help; when the weaker tags are
noise they dilute the signal. On the synthetic Zipf test of
``tests/curate/balance/test_pipeline.py`` (1,000 concepts, K = 3, 10% drawn), ``mean``
over K = 3 covers 1.16× the concepts of a uniform sample and cuts the share of
the 10 most frequent concepts from 0.47 to 0.37; ``use_k = 1`` covers 2× and
cuts it to about 0.09.

The target is drawn **without replacement** with probability proportional to
``w`` (Efraimidis-Spirakis: the ``N`` smallest of ``E_i / w_i`` with ``E_i ~ Exp(1)``),
or, when the target exceeds the pool, **with replacement** (a multinomial draw of
``N`` copies over ``w / Σw``), recording each record's ``copies``.

``mode="metaclip"`` applies MetaCLIP's balancing rule instead: each concept passes
with probability ``p(c) = t / max(f(c), t)`` (an independent draw per record and
concept), and a record is kept (once) when any of its concepts passes; its
``weight`` is then its keep probability ``1 - Π_c (1 - p(c))``. ``mode="worldwide"``
is MetaCLIP 2's: a t per language (:mod:`curate.balance.thresholds`). On tags with a
row per text (``tag --per text``) they count per text and draw image-text pairs
(:mod:`curate.balance.metaclip`, :mod:`curate.balance.pairs`; docs/metaclip.md).

Records with a repeated id keep their first occurrence (later ones are
errored ``duplicate_id``, as in every stage); records without any tag are ``no_concept``; records not drawn
are counted as ``not_selected`` (they are the complement of ``selection.parquet``
and are not listed one by one in ``rejects.parquet``).

Outputs in ``OUT``: ``selection.parquet`` (``id``, ``source``, ``copies``, ``weight``,
in the order of the tags), the selected records in the layout of their input
files (``records/``, when the inputs are given), ``balance.png`` and ``stats.json``
(see :mod:`curate.balance.report`).
"""

from __future__ import annotations

import os
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

from curate.balance.config import MODES, WEIGHTINGS, ResampleConfig  # noqa: F401 (re-exported)
from curate.balance.metaclip import counts_before, draw_records, draw_texts, drawn_rows, resolve_per
from curate.balance.pairs import TextRows, merge_texts
from curate.balance.report import compare, language_figures, plot_balance, top_concepts
from curate.balance.selected import copy_id, write_selected_records  # noqa: F401 (re-exported)
from curate.balance.tags_file import open_tags, read_tag_concepts, read_tag_ids, read_tags  # noqa: F401
from curate.balance.thresholds import REFERENCE, Thresholds
from curate.balance.weights import TagArrays, concept_counts, draw, keep_best, record_weights
from curate.core.arrow import from_numpy
from curate.core.columns import code_counts, first_occurrences, rows, take_rows
from curate.core.errors import UserError
from curate.core.io import write_parquet
from curate.core.lock import out_lock
from curate.core.malloc import small_numpy_pages
from curate.core.location import shown
from curate.core.remote import local_file, writing
from curate.core.stats import StageStats, finish_stage, run_header
from curate.core.validate import configure

SELECTION_SCHEMA = pa.schema([("id", pa.string()), ("source", pa.string()), ("copies", pa.int32()),
                              ("weight", pa.float64())])
RECORDS_DIR = "records"
_SALT = 0x5E1EC7


def _build_stats(tags: TagArrays, first: np.ndarray, has_tags: np.ndarray, copies: np.ndarray) -> StageStats:
    """Counts per source; duplicates and untagged records as rejects, not-selected as a count.

    Two passes over the records (all, then the selected); the not-selected per source
    are what is left once the few rejects are taken away.
    """
    stats = StageStats()
    codes, names = tags.codes, tags.source_names
    size = len(names)
    seen = code_counts(codes, size)
    kept = code_counts(codes, size, copies > 0)
    left = seen - kept
    stats.seen_many(dict(zip(names, seen.tolist())))
    stats.kept_many(dict(zip(names, kept.tolist())))
    for mask, kind, reason, detail in ((~first, "errored", "duplicate_id", "id already seen earlier in the tags"),
                                       (first & ~has_tags, "dropped", "no_concept", "record has no concept tag")):
        index = np.flatnonzero(mask)
        left -= code_counts(codes[index], size)
        stats.reject_many(kind, reason, rows(tags.ids, index), [names[c] for c in codes[index].tolist()], detail)
    for name, n in zip(names, left.tolist()):
        if n:
            stats.drop_unlisted(name, "not_selected", n)
    stats.check()
    return stats


def resample(tags: str | os.PathLike[str], config: ResampleConfig | None = None, *, write_stats: bool = True,
             **settings: Any) -> dict[str, Any]:
    """Select a concept-balanced subset; returns the ``stats.json`` content (see :func:`run_resample`)."""
    return run_resample(tags, config, write_stats=write_stats, **settings)[0]


def run_resample(tags: str | os.PathLike[str], config: ResampleConfig | None = None, *, write_stats: bool = True,
                 **settings: Any) -> tuple[dict[str, Any], StageStats]:
    """Select a concept-balanced subset (see the module docstring).

    Args:
        tags: ``tags.parquet`` from ``curate tag``.
        config: the settings (see :class:`ResampleConfig`): ``out``, ``target`` (records or copies
            to draw, ``inverse`` mode) or ``fraction`` (of the tagged pool; > 1 draws with
            replacement), ``seed``, ``mode`` (``inverse`` or ``metaclip``), ``t`` (MetaCLIP's
            threshold), ``weighting`` and ``temperature`` (``inverse`` mode), ``use_k`` (use only
            each record's best tags), ``records`` (input record files: the selected ones are
            written to ``OUT/records/``), ``image_root`` (the folder their relative image paths start from),
            ``vocab`` (to name the top concepts), ``plot``.
        write_stats: write ``stats.json`` and ``rejects.parquet``.
        **settings: fields of :class:`ResampleConfig`, instead of or over ``config``.

    Returns:
        The ``stats.json`` content and the stats (with the rejects).
    """
    config = configure(ResampleConfig, config, **settings)
    # One run per folder (curate.core.lock); the lock also keeps OUT out of --records when it lies inside them.
    # small_numpy_pages: no huge-page faults for the arrays freed and made again (curate.core.malloc: 1.2x at 10M).
    # writing: OUT in a bucket is written through a staging folder (curate.core.remote); --tags read from a local copy.
    with writing(config.out) as out, out_lock(out), small_numpy_pages():
        here = local_file(tags, "--tags")
        assert here is not None
        return _run_resample(here, config, out, write_stats, named=shown(tags))  # a bucket's URL, as given


def _run_resample(tags: str | os.PathLike[str], config: ResampleConfig, out: Path,
                  write_stats: bool, named: str | None = None) -> tuple[dict[str, Any], StageStats]:
    fraction, seed, mode, t, use_k = config.fraction, config.seed, config.mode, config.t, config.use_k
    records = [str(r) for r in config.records] if config.records else None
    out.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    tags_file = open_tags(tags)
    meta = {k.decode(): v.decode() for k, v in (tags_file.schema_arrow.metadata or {}).items()}
    per_text = "text" in tags_file.schema_arrow.names  # tag --match text --per text: one row per text
    with ThreadPoolExecutor(max_workers=2) as thread:
        # One thread reads the ids and sorts them for repeats while this one reads the concepts and weighs
        # (the reads and the sort run outside the GIL). Nothing converts through pandas (curate.core.arrow).
        repeats = thread.submit(_ids_and_first_occurrences, tags)
        # Then, while the weighing runs on this thread, the other draws the exponentials of the draw and
        # faults in the weights' memory (the first touch of fresh pages is a large part of both).
        prepared = thread.submit(_prepare_draw, 0 if per_text else tags_file.metadata.num_rows, config)
        arrays = read_tag_concepts(tags_file, tags)
        if use_k is not None:
            arrays = keep_best(arrays, use_k)
        timings = {"read": time.perf_counter() - t0}
        t1 = time.perf_counter()
        ready = prepared.result()
        per, text_rows = resolve_per(config, per_text), None
        if per_text:  # the records are known once the ids are: texts drawn as pairs, or merged per record
            arrays.ids = repeats.result()[0]
            text_rows = TextRows.of(arrays)
            if per == "record":
                arrays, text_rows = merge_texts(arrays, text_rows), None
        n_concepts = arrays.max_tag() + 1
        has_tags = arrays.has_tags()
        if text_rows is not None:
            first = first_occurrences(take_rows(arrays.ids, text_rows.starts))
            eligible = first[text_rows.record] & has_tags  # per text
            weighed = (counts_before(arrays, eligible, n_concepts), None)
        elif per_text:
            first = first_occurrences(arrays.ids)
        else:
            # Frequencies and weights are computed as if no id repeated while the sort runs; if one does,
            # they are computed again without the repeats (the same numbers as a run that waited).
            weighed = _weigh(arrays, has_tags, n_concepts, config, ready.weights)
            arrays.ids, first = repeats.result()
    pa.default_memory_pool().release_unused()  # the read's and the sort's buffers go back to the system
    if text_rows is not None:
        chosen = _draw_texts(arrays, text_rows, eligible, weighed[0], config, meta)
        records_view = merge_texts(arrays, text_rows)  # one row per record: the counts, the selection, the records
        has_tags, kept_rows = text_rows.any_row(has_tags), chosen.kept_rows
    else:
        eligible = first & has_tags
        if per_text or not first.all():
            weighed = _weigh(arrays, eligible, n_concepts, config, ready.weights)
        chosen = _draw(arrays, eligible, weighed, config, ready, meta)  # after the sort's memory is free
        records_view, kept_rows = arrays, chosen.copies > 0
    before, copies, weights = chosen.before, chosen.copies, chosen.weights
    timings["select"] = time.perf_counter() - t1
    languages = None
    if arrays.lang is not None and config.mode != "inverse":
        candidates = eligible if text_rows is None else drawn_rows(text_rows, chosen.text)
        languages = language_figures(arrays, eligible, candidates, kept_rows, chosen.thresholds, t)

    with ThreadPoolExecutor(max_workers=2) as threads:
        # The selection is built and written while the concepts are counted again, the report made, the plot
        # drawn and the stats counted (taking rows and writing Parquet run outside the GIL).
        stored = threads.submit(_store_selection, out / "selection.parquet", records_view, copies, weights,
                                chosen.text)
        after = concept_counts(arrays, n_concepts, copies if text_rows is None else kept_rows)
        taggable = arrays.taggable or max(int(np.count_nonzero(before)), 1)
        report = compare(before, after, taggable)
        names = _vocab_names(config.vocab, meta)
        report["top_before"] = top_concepts(before, 10, names)
        report["top_after"] = top_concepts(after, 10, names)
        if config.plot:
            t_plot = time.perf_counter()
            label = {"inverse": "inverse frequency", "metaclip": f"MetaCLIP t={t}",
                     "worldwide": f"MetaCLIP 2 worldwide, t({REFERENCE})={t}"}[mode]
            plot_balance(out / "balance.png", before, after, stats=report,
                         title=f"{chosen.pool:,} tagged records → {int(copies.sum()):,} selected ({label})")
            timings["plot"] = time.perf_counter() - t_plot
        stats = _build_stats(records_view, first, has_tags, copies)
        selection, timings["build_selection"], timings["write_selection"] = stored.result()
    written = None
    if records:  # its worker processes are forked while no other thread of ours runs
        t1 = time.perf_counter()
        from curate.balance.match import matched_text_field

        written = write_selected_records(records, selection, out / RECORDS_DIR, text_field=matched_text_field(tags),
                                         image_root=config.image_root)
        timings["write_records"] = time.perf_counter() - t1
        if selection.num_rows and not written.get("records"):  # unrelated files: nothing to write is not a result
            raise UserError(f"--records {' '.join(map(str, records))}: none of the {selection.num_rows:,} selected "
                            "records is in them; give the record files that were tagged")
    counts = stats.to_dict()
    n_target, pool = chosen.target, chosen.pool
    inverse = mode == "inverse"
    settings = {"mode": mode, "target": n_target, "fraction": fraction,
                "weighting": config.weighting if inverse else None, "temperature": config.temperature if inverse
                else None, "t": t if mode != "inverse" else None,
                "tail_share": config.tail_share, "per": per, "use_k": use_k, "tags": named or str(tags)}
    result: dict[str, Any] = {
        **run_header("resample", seed=seed, settings=settings),
        "records_in": counts["records_in"], "pool": pool, "records_selected": counts["records_out"],
        "copies_total": int(copies.sum()), "with_replacement": bool(n_target is not None and n_target > pool),
        "max_copies": int(copies.max()) if copies.size else 0,
        "dropped": counts["dropped"], "errored": counts["errored"], "per_source": counts["per_source"],
        **({"texts": len(arrays), "pairs_selected": int(kept_rows.sum())} if text_rows is not None else {}),
        "balance": report, **({"languages": languages} if languages is not None else {}),
        **({"records_written": written} if written is not None else {}),
        "timings": {k: round(v, 4) for k, v in {**timings, "wall": time.perf_counter() - t0}.items()},
        "outputs": {"selection": "selection.parquet", "rejects": "rejects.parquet",
                    **({"records": f"{RECORDS_DIR}/"} if records else {}), **({"plot": "balance.png"} if config.plot else {})},
    }
    if write_stats:
        finish_stage(out, result, stats)
    return result, stats


@dataclass
class _Chosen:
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


def _draw_texts(arrays: TagArrays, rows: TextRows, eligible: np.ndarray, before: np.ndarray,
                config: ResampleConfig, meta: dict[str, str]) -> _Chosen:
    """MetaCLIP 2's pair selection (one row per text; :mod:`curate.balance.pairs`)."""
    picked = draw_texts(arrays, rows, eligible, before, config, meta, _generator(config.seed))
    pool = int(rows.any_row(eligible).sum())
    return _Chosen(pool, None, before, picked.copies, picked.weights, picked.thresholds, picked.text,
                   picked.kept_rows)


def _weigh(arrays: TagArrays, eligible: np.ndarray, n_concepts: int, config: ResampleConfig,
           out: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray | None]:
    """Concept frequencies over the ``eligible`` records and (``inverse`` mode) their weights, 0 if not eligible
    (written into ``out`` when given and the layout allows)."""
    before = concept_counts(arrays, n_concepts, eligible)
    if config.mode != "inverse":
        return before, None
    weights = record_weights(arrays, before, weighting=config.weighting, temperature=config.temperature, out=out)
    weights[~eligible] = 0.0  # in place: no second array of 10M weights
    return before, weights


def _draw(arrays: TagArrays, eligible: np.ndarray, weighed: tuple[np.ndarray, np.ndarray | None],
          config: ResampleConfig, ready: _Prepared | None = None, meta: dict[str, str] | None = None) -> _Chosen:
    """Draw among the ``eligible`` records (see the module docstring); the generator starts from the seed
    (``ready``: its first numbers and the result's buffer, from :func:`_prepare_draw`; ``meta``: the tags'
    metadata, for ``worldwide``)."""
    pool = int(eligible.sum())
    before, weights = weighed
    rng = _generator(config.seed)
    if weights is not None:
        fraction = config.fraction if config.fraction is not None else 0.0
        n_target = config.target if config.target is not None else max(1, int(round(fraction * pool)))
        copies = draw(weights, n_target, rng, *((ready.exponentials, ready.copies) if ready else ()))
    else:
        picked = draw_records(arrays, eligible, before, config, meta or {}, rng)
        return _Chosen(pool, None, before, picked.copies, picked.weights, picked.thresholds)
    return _Chosen(pool, n_target, before, copies, weights)


def _generator(seed: int) -> np.random.Generator:
    return np.random.default_rng([seed, _SALT])


@dataclass
class _Prepared:
    """What an ``inverse`` draw without replacement of ``n`` records needs before the weights: the first ``n``
    numbers of its generator, and buffers for the weights and the copies, their memory already faulted in."""

    exponentials: np.ndarray | None = None
    weights: np.ndarray | None = None
    copies: np.ndarray | None = None


def _prepare_draw(n: int, config: ResampleConfig) -> _Prepared:
    """:class:`_Prepared` for an ``inverse`` draw without replacement of ``n`` records (empty for other draws, and
    for ``n`` = 0: tags with a row per text, whose records are known later)."""
    if n == 0 or config.mode != "inverse" or (config.target if config.target is not None else (config.fraction or 0) * n) > n:
        return _Prepared()
    exponentials = _generator(config.seed).standard_exponential(n, out=np.empty(n, np.float64))
    weights, copies = np.empty(n, np.float64), np.empty(n, np.int32)
    weights.fill(0.0)
    copies.fill(0)
    return _Prepared(exponentials, weights, copies)


def _ids_and_first_occurrences(tags: str | os.PathLike[str]) -> tuple[pa.ChunkedArray, np.ndarray]:
    ids = read_tag_ids(open_tags(tags))
    return ids, first_occurrences(ids)


def _store_selection(path: Path, arrays: TagArrays, copies: np.ndarray, weights: np.ndarray,
                     text: np.ndarray | None = None) -> tuple[pa.Table, float, float]:
    """Build the selection table of the drawn records and write it; returns it and the two steps' seconds.

    ``text``: the text each record was drawn with (pairs), written as the column ``text``."""
    t0 = time.perf_counter()
    index = np.flatnonzero(copies > 0)
    columns = [take_rows(arrays.ids, index), arrays.source_column(index),
               from_numpy(copies[index], pa.int32()), from_numpy(weights[index], pa.float64())]
    schema = SELECTION_SCHEMA
    if text is not None:
        columns.append(from_numpy(text[index].astype(np.int32), pa.int32()))
        schema = schema.append(pa.field("text", pa.int32()))
    selection = pa.table(columns, schema=schema)
    t1 = time.perf_counter()
    write_selection(path, selection)
    return selection, t1 - t0, time.perf_counter() - t1


def write_selection(path: Path, selection: pa.Table) -> None:
    """Write ``selection.parquet`` atomically with cheap settings: snappy, a dictionary for ``source`` only
    (ids are unique, weights barely repeat), no statistics; the same bytes for the same table."""
    write_parquet(path, selection, compression="snappy", use_dictionary=["source"], write_statistics=False)


def _vocab_names(vocab: str | os.PathLike[str] | None, meta: dict[str, str]) -> list[str] | None:
    """The concepts' names: ``--vocab``, else the per-language vocabularies the tags were matched with (when the
    files are still there)."""
    from curate.balance.matching.vocabularies import parts_from_metadata
    from curate.balance.vocab.files import load_vocab

    if vocab is not None:
        return load_vocab(local_file(vocab, "--vocab"))  # type: ignore[arg-type]
    parts = parts_from_metadata(meta.get("vocabularies"))
    if not parts or not all(Path(p.path).is_file() for p in parts):
        return None
    return [name for p in sorted(parts, key=lambda p: p.offset) for name in load_vocab(Path(p.path))]
