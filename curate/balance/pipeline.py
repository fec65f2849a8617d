"""``curate balance``: embed → concept embeddings → tag → resample → report, in one folder.

With ``--match text`` the first three steps are one: each record's text is
matched against the vocabulary (:mod:`curate.balance.match`, no model), writing
the same ``tags.parquet``; no ``embeddings/`` or ``concepts.npy`` is made.

Layout of ``OUT``::

    embeddings/NNNNNN.npy + .ids.parquet   image embeddings, one pair per input shard (curate embed)
    concepts.npy + concepts.json           the vocabulary's embeddings (curate vocab embed; cached)
    tags/NNNNNN.parquet, tags.parquet      top-K concepts per record (curate tag)
    selection.parquet                      id, source, copies, weight (curate resample)
    records/                               the selected records, in their input files' layout, and the
                                           records without images (text only: nothing to tag), untouched
    balance.png                            concept frequency vs rank, before and after
    rejects.parquet, stats.json            every dropped/errored record with its reason; all counts

Every step resumes: embedding and tagging skip the shards whose completion
marker exists, the concept embeddings resume chunk by chunk from the cache, and
resampling (seconds) is redone; a killed run rerun with the same arguments gives
byte-identical embeddings, tags and selection.
"""

from __future__ import annotations

import os
import time
from collections import Counter
from dataclasses import dataclass, replace
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from curate.balance.config import DEFAULT_FRACTION, BalanceConfig  # noqa: F401 (re-exported)
from curate.balance.embed import EMBED_DIR, NO_IMAGE, embed_step
from curate.balance.match import match_step
from curate.balance.config import BalanceResult, language_lines, records_lines
from curate.core.stats import StageStats, finish_stage, from_stats, stage_result
from curate.models.encoders import load_encoder
from curate.models.specs import check_weights
from curate.core.progress import console
from curate.core.remote import writing
from curate.balance.resample import RECORDS_DIR, resample_step
from curate.balance.tag import tag_step
from curate.balance.vocab.embed import embed_vocab


@dataclass
class _Tagged:
    """What the first steps of a run leave for the resampling: their stats (one run's counts from the
    records in to the records tagged), the settings that made the tags, what ``stats.json`` says of the
    concepts, the steps' own results, the files made, and the records embedded."""

    stats: StageStats
    matching: dict[str, Any]
    concepts: dict[str, Any]
    steps: dict[str, dict[str, Any]]
    made: dict[str, str]
    embedded: int = 0
    ivf: dict[str, Any] | None = None


def balance(inputs: Sequence[str | os.PathLike[str]], config: BalanceConfig | None = None, *, executor: Any = None,
            **settings: Any) -> dict[str, Any]:
    """Run the whole concept-balancing pipeline into ``out`` (see the module docstring).

    Args:
        inputs: record files or folders.
        config: one config per step (see :class:`BalanceConfig`); every setting is checked
            before the first image is embedded.
        executor: a :class:`curate.executors.Executor` (default: local, one worker).
        **settings: instead of ``config``, the flat settings of :meth:`BalanceConfig.build`
            (``out=``, ``vocab=``, ``model=``, ``top_k=``...).

    Without ``target``/``fraction`` the inverse mode keeps :data:`DEFAULT_FRACTION`
    of the tagged records. Returns the ``stats.json`` content.
    """
    if config is None:
        config = BalanceConfig.build(**settings)
    elif settings:
        raise TypeError("balance(): give either a BalanceConfig or settings, not both")
    if config.match != "text":
        check_weights(config.embed.model)  # before any work: off the network a hub tag fails here, in one line
    with writing(config.out) as out:  # a bucket: every step's shards stream there (curate.core.remote)
        out.mkdir(parents=True, exist_ok=True)
        t0 = time.perf_counter()
        timings: dict[str, float] = {}
        first = _match_texts if config.match == "text" else _embed_and_tag
        tagged = first(inputs, config, out, executor, timings)
        return _resample(inputs, config, out, tagged, timings, t0)


def _match_texts(inputs: Sequence[str | os.PathLike[str]], config: BalanceConfig, out: Path, executor: Any,
                 timings: dict[str, float]) -> _Tagged:
    """Step 1 of 2 with ``--match text``: each record's text matched against the vocabulary (``curate match``)."""
    assert config.text is not None
    t0 = time.perf_counter()
    console.print("[bold]1/2[/bold] match the records' text against the vocabulary")
    result, stats = match_step(inputs, config.text_vocab, config.text, out, executor=executor)
    timings["match"] = time.perf_counter() - t0
    keys = ("texts", "matches", "rows_without_concept", "rows_without_text", "texts_per_language", "vocabularies")
    concepts = {"rows": result["concept_rows"], "entries": result["concepts_embedded"],
                **{k: result[k] for k in keys if k in result}}
    matching = {k: result["settings"][k] for k in ("match", "text_field", "rules", "case_sensitive", "per",
                                                   "lang_id", "top_k")}
    return _Tagged(stats, matching, concepts, {"match": _step(result)}, {"tags": "tags.parquet"})


def _embed_and_tag(inputs: Sequence[str | os.PathLike[str]], config: BalanceConfig, out: Path, executor: Any,
                   timings: dict[str, float]) -> _Tagged:
    """Steps 1 to 3 of 4: the images embedded (``curate embed``), the vocabulary embedded (``curate vocab
    embed``; cached), every record tagged with its nearest concepts (``curate tag``)."""
    t0 = time.perf_counter()
    console.print("[bold]1/4[/bold] embed images")
    embedded, embed_stats = embed_step(inputs, config.embed, out, executor=executor)
    timings["embed"] = time.perf_counter() - t0

    t1 = time.perf_counter()
    console.print("[bold]2/4[/bold] embed the vocabulary")
    e = config.embed
    encoder = load_encoder(e.model, precision=e.precision, device=e.device)
    sharded = executor is not None and not executor.in_process
    concepts = embed_vocab(None, config.vocab, encoder=encoder, executor=executor if sharded else None)
    if concepts["cached"]:
        console.print(f"  concept embeddings reused from the cache {concepts['cache_dir']}")
    timings["vocab_embed"] = time.perf_counter() - t1

    t1 = time.perf_counter()
    console.print("[bold]3/4[/bold] tag")
    tagged, tag_stats = tag_step(out / EMBED_DIR, out / "concepts.npy", config.tag, out, executor=executor)
    timings["tag"] = time.perf_counter() - t1
    matching = {"match": "embeddings", "model": e.model, "precision": e.precision, "template": config.vocab.template,
                "scripts": concepts["scripts"], "top_k": config.tag.top_k, "index": config.tag.index}
    info = {k: concepts[k] for k in ("rows", "dim", "embedded", "skipped", "model", "vocab_sha256", "template",
                                     "scripts", "cache_dir")}  # not "cached": history
    made = {"embeddings": f"{EMBED_DIR}/", "concepts": "concepts.npy", "tags": "tags.parquet"}
    return _Tagged(embed_stats.then(tag_stats), matching, info, {"embed": _step(embedded), "tag": _step(tagged)},
                   made, embedded=embedded["records_embedded"], ivf=tagged.get("ivf"))


def _resample(inputs: Sequence[str | os.PathLike[str]], config: BalanceConfig, out: Path, tagged: _Tagged,
              timings: dict[str, float], t0: float) -> dict[str, Any]:
    """The last step (``curate resample``, the selected records written unless ``--no-records``), then the
    run's ``stats.json``: records in = selected + dropped + errored across every step."""
    t1 = time.perf_counter()
    text = config.match == "text"
    console.print("[bold]2/2[/bold] resample and report" if text else "[bold]4/4[/bold] resample and report")
    passing = config.write_records and not text  # records without images go to OUT/records/ untouched
    step = replace(config.resample, records=tuple(inputs) if config.write_records else None, pass_text_only=passing)
    with console.status("resampling"):
        res_result, res_stats = resample_step(out / "tags.parquet", step, out)
    timings["resample"] = time.perf_counter() - t1
    total = tagged.stats.then(res_stats)
    text_only = pass_text_only(total) if passing else 0
    r = config.resample
    settings = {**tagged.matching,
                "vocab": str(config.vocab.vocab) if not config.vocabularies else dict(config.vocabularies),
                "mode": r.mode, "target": res_result["settings"]["target"], "fraction": r.fraction,
                "weighting": r.weighting, "temperature": r.temperature, "use_k": r.use_k,
                "t": r.t if r.mode != "inverse" else None, "tail_share": r.tail_share,
                "per": res_result["settings"]["per"], "batch_size": config.embed.batch_size,
                "shard_size": config.embed.shard_size}
    written = {"records_written": res_result["records_written"]} if "records_written" in res_result else {}
    result = stage_result(
        "balance", total, seed=config.embed.seed, settings=settings, out_key="records_selected",
        records_embedded=tagged.embedded, records_tagged=tagged.stats.records_out, pool=res_result["pool"],
        copies_total=res_result["copies_total"], with_replacement=res_result["with_replacement"],
        concepts=tagged.concepts, balance=res_result["balance"],
        **({"languages": res_result["languages"]} if "languages" in res_result else {}),
        **({"ivf": tagged.ivf} if tagged.ivf else {}), **written,
        steps={**tagged.steps, "resample": _step(res_result)},
        timings={**{k: round(v, 3) for k, v in timings.items()}, "wall": round(time.perf_counter() - t0, 3)},
        outputs={**tagged.made, "selection": "selection.parquet", "plot": "balance.png", "rejects": "rejects.parquet",
                 **({"records": f"{RECORDS_DIR}/"} if config.write_records else {})})
    if passing:  # out = selected + passed through: records_in = records_out + dropped + errored
        result = {**result, "records_selected": total.records_out - text_only, "text_only": text_only,
                  "records_out": total.records_out}
    return finish_stage(out, result, total)


def pass_text_only(total: StageStats) -> int:
    """The records without images (``embed`` dropped them ``no_image``: nothing to tag) counted out, not dropped:
    :func:`~curate.core.filters.write_kept` (per input file) writes them to ``OUT/records/`` untouched. Returns how
    many; their rows leave the rejects."""
    import pyarrow.compute as pc

    n = total.dropped.pop(NO_IMAGE, 0)
    if not n:
        return 0
    total.records_out += n
    for entry in total.per_source.values():
        entry["records_out"] += entry["dropped"].pop(NO_IMAGE, 0)
    total.rejects = [r for r in total.rejects if (r[2], r[3]) != ("dropped", NO_IMAGE)]
    total.reject_blocks = [t.filter(pc.invert(pc.and_(pc.equal(t["kind"], "dropped"), pc.equal(t["reason"], NO_IMAGE))))
                           for t in total.reject_blocks]
    total.check()
    return n


def _step(result: dict[str, Any]) -> dict[str, Any]:
    skip = {"stage", "command", "versions", "per_source", "balance", "outputs", "records_written"}
    return {k: v for k, v in result.items() if k not in skip}


def summary_lines(result: BalanceResult | dict[str, Any], out: str | os.PathLike[str]) -> list[str]:
    """The closing lines ``curate balance`` prints (from the typed result or the ``stats.json`` content)."""
    r = result if isinstance(result, BalanceResult) else from_stats(BalanceResult, result)
    b = r.balance
    lines = [
        f"selected {r.records_selected:,} of {r.records_in:,} records "
        "(" + (f"{r.records_embedded:,} embedded, " if r.records_embedded else "") + f"{r.pool:,} tagged"
        + (f"; drawn with replacement: {r.copies_total:,} copies in all)" if r.with_replacement
           else "; drawn without replacement)"),
        f"concepts covered {b.concepts_covered_before:,} → {b.concepts_covered_after:,}; "
        f"top-1% share {b.head_share_before:.3f} → {b.head_share_after:.3f}; "
        f"normalised entropy {b.normalized_entropy_before:.3f} → {b.normalized_entropy_after:.3f}",
    ]
    if r.text_only:
        lines.append(f"passed through untouched: {r.text_only:,} text-only records (no image to tag) → "
                     f"{out}/{RECORDS_DIR}/")
    lines += language_lines(r.languages)
    if r.rejected:
        lines.append(f"dropped {dict(r.dropped)}  errored {dict(Counter(r.errored))}  → {out}/rejects.parquet")
    lines += records_lines(r.records_written, out)
    lines.append(f"plot: {out}/balance.png   selection: {out}/selection.parquet   stats: {out}/stats.json")
    return lines
