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
row per text (``curate match --per text``) they count per text and draw image-text pairs
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
from curate.balance.drawing import Chosen, Prepared, draw_pairs, draw_selection, prepare_draw, weigh
from curate.balance.metaclip import counts_before, drawn_rows, resolve_per
from curate.balance.pairs import TextRows, merge_texts
from curate.balance.report import compare, language_figures, plot_balance, top_concepts
from curate.balance.tags_file import open_tags, read_tag_concepts, read_tag_ids, read_tags  # noqa: F401
from curate.balance.thresholds import REFERENCE
from curate.balance.weights import TagArrays, concept_counts, draw, keep_best, record_weights  # noqa: F401
from curate.core.columns import code_counts, first_occurrences, from_numpy, rows, take_rows
from curate.core.errors import UserError
from curate.core.filters import write_kept
from curate.core.io import out_lock, shown, write_parquet
from curate.core.malloc import small_numpy_pages
from curate.core.remote import local_file, writing
from curate.core.stats import StageStats, finish_stage, stage_result
from curate.core.validate import configure

SELECTION_SCHEMA = pa.schema([("id", pa.string()), ("source", pa.string()), ("copies", pa.int32()),
                              ("weight", pa.float64())])
RECORDS_DIR = "records"


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


def resample(tags: str | os.PathLike[str], config: ResampleConfig | None = None, **settings: Any) -> dict[str, Any]:
    """Select a concept-balanced subset (see the module docstring).

    Args:
        tags: ``tags.parquet`` from ``curate tag`` or ``curate match``.
        config: the settings (see :class:`ResampleConfig`): ``out``, ``target`` (records or copies
            to draw, ``inverse`` mode) or ``fraction`` (of the tagged pool; > 1 draws with
            replacement), ``seed``, ``mode`` (``inverse`` or ``metaclip``), ``t`` (MetaCLIP's
            threshold), ``weighting`` and ``temperature`` (``inverse`` mode), ``use_k`` (use only
            each record's best tags), ``records`` (input record files: the selected ones are
            written to ``OUT/records/``), ``image_root`` (the folder their relative image paths start from),
            ``vocab`` (to name the top concepts), ``plot``.
        **settings: fields of :class:`ResampleConfig`, instead of or over ``config``.

    Returns:
        The ``stats.json`` content (also written, with ``OUT/rejects.parquet``).
    """
    config = configure(ResampleConfig, config, **settings)
    with writing(config.out) as out:
        result, stats = resample_step(tags, config, out)
        return finish_stage(out, result, stats)


def resample_step(tags: str | os.PathLike[str], config: ResampleConfig, out: Path) -> tuple[dict[str, Any], StageStats]:
    """The work of :func:`resample` into the local folder ``out``, for a pipeline that writes its own
    ``stats.json`` (``curate balance``): the step's ``stats.json`` content and its stats (with the rejects)."""
    # One run per folder (curate.core.io.out_lock); the lock also keeps OUT out of --records when it lies inside them.
    # small_numpy_pages: no huge-page faults for the arrays freed and made again (curate.core.malloc: 1.2x at 10M).
    # --tags in a bucket: read from a local copy.
    with out_lock(out), small_numpy_pages():
        here = local_file(tags, "--tags")
        assert here is not None
        return _run_resample(here, config, out, named=shown(tags))  # a bucket's URL, as given


def _run_resample(tags: str | os.PathLike[str], config: ResampleConfig, out: Path,
                  named: str | None = None) -> tuple[dict[str, Any], StageStats]:
    """:func:`resample_step` from a local ``tags.parquet`` (``named``: as the user gave it, for ``stats.json``)."""
    out.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    timings: dict[str, float] = {}
    read = _read(tags, config, timings, t0)
    drawn = _choose(read, config)
    timings["select"] = time.perf_counter() - read.weighing_started
    languages = _languages(read, drawn, config)
    selection, stats, report = _report_and_store(read, drawn, config, out, timings)
    written = _write_records(tags, selection, config, out, timings)
    chosen, inverse = drawn.chosen, config.mode == "inverse"
    settings = {"mode": config.mode, "target": chosen.target, "fraction": config.fraction,
                "weighting": config.weighting if inverse else None, "temperature": config.temperature if inverse
                else None, "t": config.t if not inverse else None,
                "tail_share": config.tail_share, "per": read.per, "use_k": config.use_k, "tags": named or str(tags)}
    copies, pairs = chosen.copies, read.text_rows is not None
    result = stage_result(
        "resample", stats, seed=config.seed, settings=settings, out_key="records_selected", pool=chosen.pool,
        copies_total=int(copies.sum()),
        with_replacement=bool(chosen.target is not None and chosen.target > chosen.pool),
        max_copies=int(copies.max()) if copies.size else 0,
        **({"texts": len(read.arrays), "pairs_selected": int(drawn.kept_rows.sum())} if pairs else {}),
        balance=report, **({"languages": languages} if languages is not None else {}),
        **({"records_written": written} if written is not None else {}),
        timings={k: round(v, 4) for k, v in {**timings, "wall": time.perf_counter() - t0}.items()},
        outputs={"selection": "selection.parquet", "rejects": "rejects.parquet",
                 **({"records": f"{RECORDS_DIR}/"} if config.records else {}),
                 **({"plot": "balance.png"} if config.plot else {})})
    return result, stats


@dataclass
class _Read:
    """The tags as read, ahead of the draw: their concepts (``arrays``, one row per record, or per text with
    ``text_rows``), the first occurrence of each record's id, the records with a tag, and what the weighing already
    did beside the read (``eligible`` and ``weighed`` for pairs or a pool without repeats; the draw's ``ready``
    numbers)."""

    arrays: TagArrays
    meta: dict[str, str]
    per_text: bool
    per: str
    text_rows: TextRows | None
    n_concepts: int
    has_tags: np.ndarray
    first: np.ndarray
    ready: Prepared
    weighing_started: float
    eligible: np.ndarray | None = None
    weighed: tuple[np.ndarray, np.ndarray | None] | None = None


def _read(tags: str | os.PathLike[str], config: ResampleConfig, timings: dict[str, float], t0: float) -> _Read:
    """Read the tags and weigh them, the ids read and sorted for repeats on a second thread meanwhile."""
    tags_file = open_tags(tags)
    meta = {k.decode(): v.decode() for k, v in (tags_file.schema_arrow.metadata or {}).items()}
    per_text = "text" in tags_file.schema_arrow.names  # curate match --per text: one row per text
    eligible = weighed = None
    with ThreadPoolExecutor(max_workers=2) as thread:
        # One thread reads the ids and sorts them for repeats while this one reads the concepts and weighs
        # (the reads and the sort run outside the GIL). Nothing converts through pandas (curate.core.columns).
        repeats = thread.submit(_ids_and_first_occurrences, tags)
        # Then, while the weighing runs on this thread, the other draws the exponentials of the draw and
        # faults in the weights' memory (the first touch of fresh pages is a large part of both).
        prepared = thread.submit(prepare_draw, 0 if per_text else tags_file.metadata.num_rows, config)
        arrays = read_tag_concepts(tags_file, tags)
        if config.use_k is not None:
            arrays = keep_best(arrays, config.use_k)
        timings["read"] = time.perf_counter() - t0
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
            weighed = weigh(arrays, has_tags, n_concepts, config, ready.weights)
            arrays.ids, first = repeats.result()
    pa.default_memory_pool().release_unused()  # the read's and the sort's buffers go back to the system
    return _Read(arrays, meta, per_text, per, text_rows, n_concepts, has_tags, first, ready, t1, eligible, weighed)


@dataclass
class _Drawn:
    """A draw: the selection, the records it counts (one row each), which have a tag, the kept rows (records, or
    texts with pairs) and the rows that could be drawn."""

    chosen: Chosen
    records_view: TagArrays
    has_tags: np.ndarray
    kept_rows: np.ndarray
    eligible: np.ndarray


def _choose(read: _Read, config: ResampleConfig) -> _Drawn:
    """Draw pairs (a row per text), or records: weighed again without the repeated ids when some repeat."""
    arrays = read.arrays
    if read.text_rows is not None:
        assert read.eligible is not None and read.weighed is not None
        chosen = draw_pairs(arrays, read.text_rows, read.eligible, read.weighed[0], config, read.meta)
        records_view = merge_texts(arrays, read.text_rows)  # one row per record: the counts, the selection, the records
        return _Drawn(chosen, records_view, read.text_rows.any_row(read.has_tags), chosen.kept_rows, read.eligible)
    eligible = read.first & read.has_tags
    weighed = read.weighed
    if read.per_text or not read.first.all():
        weighed = weigh(arrays, eligible, read.n_concepts, config, read.ready.weights)
    assert weighed is not None
    chosen = draw_selection(arrays, eligible, weighed, config, read.ready, read.meta)  # after the sort's memory is free
    return _Drawn(chosen, arrays, read.has_tags, chosen.copies > 0, eligible)


def _languages(read: _Read, drawn: _Drawn, config: ResampleConfig) -> dict[str, Any] | None:
    """Per-language figures of MetaCLIP's modes on tags that name each row's language."""
    if read.arrays.lang is None or config.mode == "inverse":
        return None
    candidates = drawn.eligible if read.text_rows is None else drawn_rows(read.text_rows, drawn.chosen.text)
    return language_figures(read.arrays, drawn.eligible, candidates, drawn.kept_rows, drawn.chosen.thresholds,
                            config.t)


def _report_and_store(read: _Read, drawn: _Drawn, config: ResampleConfig, out: Path,
                      timings: dict[str, float]) -> tuple[pa.Table, StageStats, dict[str, Any]]:
    """Write ``selection.parquet`` while the concepts are counted again, the report made, the plot drawn and the
    stats counted (taking rows and writing Parquet run outside the GIL)."""
    chosen = drawn.chosen
    before, copies = chosen.before, chosen.copies
    with ThreadPoolExecutor(max_workers=2) as threads:
        stored = threads.submit(_store_selection, out / "selection.parquet", drawn.records_view, copies,
                                chosen.weights, chosen.text)
        after = concept_counts(read.arrays, read.n_concepts, copies if read.text_rows is None else drawn.kept_rows)
        taggable = read.arrays.taggable or max(int(np.count_nonzero(before)), 1)
        report = compare(before, after, taggable)
        names = _vocab_names(config.vocab, read.meta)
        report["top_before"] = top_concepts(before, 10, names)
        report["top_after"] = top_concepts(after, 10, names)
        if config.plot:
            t_plot = time.perf_counter()
            label = {"inverse": "inverse frequency", "metaclip": f"MetaCLIP t={config.t}",
                     "worldwide": f"MetaCLIP 2 worldwide, t({REFERENCE})={config.t}"}[config.mode]
            plot_balance(out / "balance.png", before, after, stats=report,
                         title=f"{chosen.pool:,} tagged records → {int(copies.sum()):,} selected ({label})")
            timings["plot"] = time.perf_counter() - t_plot
        stats = _build_stats(drawn.records_view, read.first, drawn.has_tags, copies)
        selection, timings["build_selection"], timings["write_selection"] = stored.result()
    return selection, stats, report


def _write_records(tags: str | os.PathLike[str], selection: pa.Table, config: ResampleConfig, out: Path,
                   timings: dict[str, float]) -> dict[str, Any] | None:
    """With ``--records``: the selected records written to ``OUT/records/`` in their input files' layout (its worker
    processes are forked while no other thread of ours runs)."""
    if not config.records:
        return None
    records = [str(r) for r in config.records]
    t1 = time.perf_counter()
    from curate.balance.match import matched_text_field

    written = write_kept(out / RECORDS_DIR, inputs=records, selection=selection, text_field=matched_text_field(tags),
                         image_root=config.image_root, pass_text_only=config.pass_text_only)
    timings["write_records"] = time.perf_counter() - t1
    if selection.num_rows and not written.get("records"):  # unrelated files: nothing to write is not a result
        raise UserError(f"--records {' '.join(records)}: none of the {selection.num_rows:,} selected "
                        "records is in them; give the record files that were tagged")
    return written


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
