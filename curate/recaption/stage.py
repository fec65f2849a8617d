"""``curate recaption``: new captions (English and Chinese, or any language) for the images of records.

For every record with at least one image, the :class:`RecaptionTask` asks the
generation backend (:mod:`curate.generate`) for one caption of **every** image of the
record per language (``--langs en,zh``; any ISO 639-1 code py3langid identifies), or
in one language drawn per record (``--mix en=0.76,zh=0.24``). Each caption is a
single-image training pair, as in LLaVA-OneVision-1.5's mid-training data; an image the
image gate refuses is not asked for (its rows carry the reason), and a record all of
whose images are refused is errored.

Requests: the user turn is ``<image>\\n`` + the language's prompt; the request key
is ``<id>#<lang>`` for a record's first image and ``<id>#<n>#<lang>`` for its ``n``-th
(so seeds, and answers of a rollouts file, are per image and language). Every answer goes through :func:`curate.recaption.checks.check_caption`.
An answer that fails a check is asked again **once**, as the request
``<id>#<lang>#retry`` (another key, hence another seed; a rollouts file may hold
answers under that key); the retry's verdict is final. With ``--temperature 0``
a retry would repeat the answer and is skipped. Backend failures (unreadable
image, server error after the backend's own retries...) are not retried here.

Resume: every answer is journaled (``OUT/_journal/recaption/<shard>.jsonl``,
keyed by request key) as soon as it arrives, and the checks are recomputed from
the journal, so a rerun after a kill never asks for an answer (first or retry)
it already has. Backend failures are not journaled, and a shard with failures of the
server (timeouts, lost connections, 429/5xx) is not complete: a rerun asks again.
Generation counters and timings go to ``history.json`` (:mod:`curate.core.stats`).

Per shard the task writes ``captions/<shard>.parquet`` (one row per image ×
language requested) and ``records/<shard>.jsonl`` (one canonical record per kept
caption); :func:`recaption` concatenates them into ``captions.parquet`` and
``records.jsonl`` and writes ``stats.json`` and ``rejects.parquet``.

Where it lives: :mod:`curate.recaption.config` (the flags: languages, mix, prompts),
:mod:`curate.recaption.prompts` (request keys, the language drawn, the user turn),
:mod:`curate.recaption.task` (the shard task), :mod:`curate.recaption.retries`
(the one retry and the final verdict), :mod:`curate.recaption.checks` (caption
checks), :mod:`curate.recaption.report` (stats per language and source), and
this module's :func:`recaption` driver.

Accounting (records): a record is *out* when at least one of its captions is
kept; a record without images is dropped (``no_image``); a record none of whose
captions was kept is *dropped* with the check reason of its first language
(``refusal``, ``language``...) when every failure was a check, else *errored*
with the first backend failure (``missing_image``, ``timeout``...).
Unreadable rows are errored with the reader's reason and a repeated id within a
shard is errored (``duplicate_id``), as in every stage
(:func:`curate.core.shards.readable_records`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pyarrow as pa

from curate.core.validate import configure
from curate.core.filters import write_kept
from curate.core.remote import writing
from curate.core.io import write_parquet
from curate.core.shards import UNANSWERED
from curate.core.stats import finish_stage, stage_result
from curate.recaption.config import RecaptionConfig
from curate.recaption.report import caption_report
from curate.recaption.task import CAPTION_SCHEMA, RecaptionTask


def recaption(inputs: list[str], config: RecaptionConfig | None = None, *, executor: Any = None,
              **settings: Any) -> dict[str, Any]:
    """Caption the images of ``inputs`` into ``config.out``; returns the content of ``stats.json``.

    Args:
        inputs: Record files or folders (any accepted layout).
        config: The settings (see :class:`RecaptionConfig`): backend, languages or mix, prompts,
            sampling, caption rules, seed, shard size.
        executor: An executor (default: local, one worker).
        **settings: fields of :class:`RecaptionConfig` (``out=``, ``backend=``, ``langs=``...), instead of or
            over ``config``.

    Outputs in ``config.out``: ``captions.parquet``, ``records.jsonl``, ``rejects.parquet``, ``stats.json``.
    """
    config = configure(RecaptionConfig, config, **settings)
    with writing(config.out) as folder:  # a bucket: shards stream there (curate.core.remote)
        return _recaption(inputs, config, folder, executor)


def _recaption(inputs: list[str], config: RecaptionConfig, out: Path, executor: Any) -> dict[str, Any]:
    """:func:`recaption` into the local folder ``out``."""
    import pyarrow.parquet as pq

    from curate.executors import pending, run_stage
    from curate.core.shards import plan_shards
    from curate.core.stats import HISTORY, operational_of, record_run, split_extra

    seed, lang_list = config.seed, list(config.langs or ())
    task = RecaptionTask(config)
    shards = plan_shards(inputs, config.shard_size, image_root=config.image_root)
    reused = len(shards) - len(pending(task, shards, out))  # found done
    stats = run_stage(task, shards, out, executor=executor, seed=seed, desc="recaption")
    tables = [pq.read_table(out / "captions" / f"{s.id}.parquet") for s in shards]
    table = pa.concat_tables(tables) if tables else CAPTION_SCHEMA.empty_table()
    write_parquet(out / "captions.parquet", table)
    records_name = write_kept(out, "records", [out / "records" / f"{s.id}.jsonl" for s in shards])
    rows = table.to_pylist()
    counts = stats.to_dict()
    extra = counts.get("extra", {})
    per_source = {}
    for source, entry in counts["per_source"].items():
        mine = [r for r in rows if r["source"] == source]
        per_source[source] = {**entry, "captions": {lang: caption_report([r for r in mine if r["lang"] == lang])
                                                    for lang in lang_list}}
    result = stage_result(
        "recaption", stats, seed=seed, settings=task.settings(), inputs=inputs, captions=caption_report(rows),
        per_lang={lang: caption_report([r for r in rows if r["lang"] == lang]) for lang in lang_list},
        per_source=per_source, images_captioned=int(extra.get("images_captioned", 0)), history=HISTORY,
        outputs={"captions": "captions.parquet", "records": records_name, "rejects": "rejects.parquet"})
    record_run(out, "recaption", timings=counts["timings"], shards=len(shards), reused=reused, generation=split_extra(extra),
               unanswered=int(extra.get(UNANSWERED, 0)), backend=task.backend.describe(),
               operational=operational_of(task.backend.describe()))
    if extra.get(UNANSWERED):
        from curate.core.progress import console
        console.print(f"[yellow]{extra[UNANSWERED]} caption requests got no answer from the server (errored: "
                      f"{counts['errored']}); rerun the same command to ask them again[/yellow]")
    return finish_stage(out, result, stats)
