"""``curate balance``: embed → concept embeddings → tag → resample → report, in one folder.

With ``--match text`` the first three steps are one: each record's text is
matched against the vocabulary (:mod:`curate.balance.match`, no model), writing
the same ``tags.parquet``; no ``embeddings/`` or ``concepts.npy`` is made.

Layout of ``OUT``::

    embeddings/NNNNNN.npy + .ids.parquet   image embeddings, one pair per input shard (curate embed)
    concepts.npy + concepts.json           the vocabulary's embeddings (curate vocab embed; cached)
    tags/NNNNNN.parquet, tags.parquet      top-K concepts per record (curate tag)
    selection.parquet                      id, source, copies, weight (curate resample)
    records/                               the selected records, in their input files' layout
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
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from curate.balance.config import DEFAULT_FRACTION, BalanceConfig  # noqa: F401 (re-exported)
from curate.balance.embed import EMBED_DIR, run_embed
from curate.balance.match import run_match_text
from curate.balance.results import BalanceResult, language_lines, records_lines
from curate.core.results import from_stats
from curate.models.encoders import load_encoder
from curate.core.progress import console
from curate.core.remote import writing
from curate.balance.resample import RECORDS_DIR, run_resample
from curate.core.stats import StageStats, finish_stage, run_header
from curate.balance.tag import run_tag
from curate.balance.vocab.embed import embed_vocab


def _compose(embed_stats: StageStats, tag_stats: StageStats, resample_stats: StageStats) -> StageStats:
    """One run's counts: records in = selected + dropped + errored across the three steps."""
    return embed_stats.then(tag_stats).then(resample_stats)


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
    with writing(config.out) as out:  # a bucket: every step's shards stream there (curate.core.remote)
        return _balance(inputs, config, out, executor)


def _balance(inputs: Sequence[str | os.PathLike[str]], config: BalanceConfig, out: Path,
             executor: Any) -> dict[str, Any]:
    """:func:`balance` into the local folder ``out``."""
    vocab, seed = config.vocab.vocab, config.embed.seed
    e, r = config.embed, config.resample
    model, precision, batch_size, shard_size = e.model, e.precision, e.batch_size, e.shard_size
    mode, t, fraction, weighting, temperature, use_k = r.mode, r.t, r.fraction, r.weighting, r.temperature, r.use_k
    top_k, index, template = config.tag.top_k, config.tag.index, config.vocab.template
    write_records = config.write_records
    out.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    timings: dict[str, float] = {}

    text = config.match == "text"
    concepts: dict[str, Any] | None = None
    if text:
        console.print("[bold]1/2[/bold] match the records' text against the vocabulary")
        tag_result, tag_stats = run_match_text(inputs, config.text_vocab, config.text, executor=executor,
                                               write_stats=False)
        embed_result, embed_stats = {"records_embedded": 0}, None
        timings["match"] = time.perf_counter() - t0
    else:
        console.print("[bold]1/4[/bold] embed images")
        embed_result, embed_stats = run_embed(inputs, config.embed, executor=executor, write_stats=False)
        timings["embed"] = time.perf_counter() - t0

        t1 = time.perf_counter()
        console.print("[bold]2/4[/bold] embed the vocabulary")
        encoder = load_encoder(model, precision=precision, device=e.device)
        sharded = executor is not None and not executor.in_process
        concepts = embed_vocab(None, config.vocab, encoder=encoder, executor=executor if sharded else None)
        if concepts["cached"]:
            console.print(f"  concept embeddings reused from the cache {concepts['cache_dir']}")
        timings["vocab_embed"] = time.perf_counter() - t1

        t1 = time.perf_counter()
        console.print("[bold]3/4[/bold] tag")
        tag_result, tag_stats = run_tag(out / EMBED_DIR, out / "concepts.npy", config.tag, executor=executor,
                                        write_stats=False)
        timings["tag"] = time.perf_counter() - t1

    t1 = time.perf_counter()
    console.print("[bold]2/2[/bold] resample and report" if text else "[bold]4/4[/bold] resample and report")
    with console.status("resampling"):
        res_result, res_stats = run_resample(out / "tags.parquet", config.resample, write_stats=False,
                                             records=tuple(inputs) if write_records else None)
    timings["resample"] = time.perf_counter() - t1

    total = tag_stats.then(res_stats) if embed_stats is None else _compose(embed_stats, tag_stats, res_stats)
    counts = total.to_dict()
    if text:
        m = config.text
        assert m is not None
        matching = {k: tag_result["settings"][k] for k in ("match", "text_field", "rules", "case_sensitive", "per",
                                                            "lang_id", "top_k")}
    else:
        assert concepts is not None
        matching = {"match": "embeddings", "model": model, "precision": precision, "template": template,
                    "scripts": concepts["scripts"], "top_k": top_k, "index": index}
    settings = {**matching, "vocab": str(vocab) if not config.vocabularies else dict(config.vocabularies),
                "mode": mode,
                "target": res_result["settings"]["target"], "fraction": fraction,
                "weighting": weighting, "temperature": temperature, "use_k": use_k,
                "t": t if mode != "inverse" else None, "tail_share": r.tail_share, "per": res_result["settings"]["per"],
                "batch_size": batch_size, "shard_size": shard_size}
    if concepts is not None:
        concept_info = {k: concepts[k] for k in ("rows", "dim", "embedded", "skipped", "model", "vocab_sha256",
                                                  "template", "scripts", "cache_dir")}  # not "cached": history
    else:
        concept_info = {"rows": tag_result["concept_rows"], "entries": tag_result["concepts_embedded"],
                        **{k: tag_result[k] for k in ("texts", "matches", "rows_without_concept", "rows_without_text",
                                                      "texts_per_language", "vocabularies") if k in tag_result}}
    first = {"match": _step(tag_result)} if text else {"embed": _step(embed_result), "tag": _step(tag_result)}
    made = {"tags": "tags.parquet"} if text else {"embeddings": f"{EMBED_DIR}/", "concepts": "concepts.npy",
                                                  "tags": "tags.parquet"}
    result: dict[str, Any] = {
        **run_header("balance", seed=seed, settings=settings),
        "records_in": counts["records_in"], "records_embedded": embed_result["records_embedded"],
        "records_tagged": tag_result["records_tagged"], "pool": res_result["pool"],
        "records_selected": counts["records_out"], "copies_total": res_result["copies_total"],
        "with_replacement": res_result["with_replacement"],
        "dropped": counts["dropped"], "errored": counts["errored"], "per_source": counts["per_source"],
        "concepts": concept_info, "balance": res_result["balance"],
        **({"languages": res_result["languages"]} if "languages" in res_result else {}),
        **({"ivf": tag_result["ivf"]} if "ivf" in tag_result else {}),
        **({"records_written": res_result["records_written"]} if "records_written" in res_result else {}),
        "steps": {**first, "resample": _step(res_result)},
        "timings": {**{k: round(v, 3) for k, v in timings.items()}, "wall": round(time.perf_counter() - t0, 3)},
        "outputs": {**made, "selection": "selection.parquet", "plot": "balance.png", "rejects": "rejects.parquet",
                    **({"records": f"{RECORDS_DIR}/"} if write_records else {})},
    }
    return finish_stage(out, result, total)


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
    lines += language_lines(r.languages)
    if r.rejected:
        lines.append(f"dropped {dict(r.dropped)}  errored {dict(Counter(r.errored))}  → {out}/rejects.parquet")
    lines += records_lines(r.records_written, out)
    lines.append(f"plot: {out}/balance.png   selection: {out}/selection.parquet   stats: {out}/stats.json")
    return lines
