"""The one driver of filter stages (:mod:`curate.core.filters`): shards planned, run by an executor, kept records
written by the one kept-record writer, rejects and ``stats.json`` by :func:`curate.core.stats.finish_stage`."""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from curate.core.filters import KEPT_DIR, FilterConfig, FilterResult, RecordFilter, write_kept
from curate.core.remote import writing
from curate.core.stats import finish_stage, from_stats, stage_result

PathLike = str | os.PathLike[str]


def run_filter(inputs: Sequence[PathLike], config: FilterConfig, filter: RecordFilter, *,  # noqa: A002
               executor: Any = None) -> FilterResult:
    """Run ``filter`` over the records of ``inputs`` into ``config.out``.

    Outputs: ``records.jsonl`` (``records.parquet`` when the records carry image bytes: the kept rows in their
    input layout, in input order), ``rejects.parquet`` (every dropped record with its reason), ``stats.json``
    and ``history.json``. A rerun resumes: finished shards are not run again.
    """
    with writing(config.out) as folder:  # a bucket: shards stream there (curate.core.remote)
        return _run_filter(inputs, config, filter, folder, executor)


def _run_filter(inputs: Sequence[PathLike], config: FilterConfig, task: RecordFilter, out: Path,
                executor: Any) -> FilterResult:
    from curate.core.stats import record_run
    from curate.core.shards import plan_shards
    from curate.executors import pending, run_stage

    shards = plan_shards(list(inputs), config.shard_size, text_field=config.text_field,
                         image_root=config.image_root, text_only=task.max_images is None)
    reused = len(shards) - len(pending(task, shards, out))  # found done
    stats = run_stage(task, shards, out, executor=executor, seed=config.seed, desc=task.stage)
    name = write_kept(out, KEPT_DIR, [out / KEPT_DIR / f"{s.id}.jsonl" for s in shards])
    _drop_other(out, KEPT_DIR, name)
    record_run(out, task.stage, timings=stats.to_dict()["timings"], shards=len(shards), reused=reused)
    result = stage_result(task.stage, stats, seed=config.seed, settings=task.settings(), inputs=list(inputs),
                          outputs={"records": name, "rejects": "rejects.parquet"})
    content = finish_stage(out, result, stats)
    return from_stats(FilterResult, {**content, "records_file": name})


def _drop_other(out: Path, stem: str, written: str) -> None:
    """Remove the other form of the kept records an earlier run may have left (``.jsonl`` vs ``.parquet``)."""
    for suffix in (".jsonl", ".parquet"):
        if stem + suffix != written:
            (out / (stem + suffix)).unlink(missing_ok=True)
