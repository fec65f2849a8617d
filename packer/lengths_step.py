"""Step 1 of ``curate pack`` on the driver: the token lengths, counted or read (see :mod:`packer.pack`).

:func:`count_lengths` runs :class:`packer.lengths.LengthsTask` over the input's shards and merges their
``lengths/*.parquet`` into ``OUT/lengths.parquet``, reusing the text counts of earlier ones (``--lengths``, or a
folder that counted the same inputs, found through the lengths index in the cache); with ``--lengths`` and no
INPUT it reads that table as it is. Either way it hands the next steps a :class:`Counted`.
"""

from __future__ import annotations

import hashlib
import os
import shutil
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from curate.core.columns import counts_by_source, source_codes
from curate.core.io import curate_cache, dumps_json, read_json, write_json, write_parquet
from curate.core.shards import Shard, inputs_fingerprint, plan_shards
from curate.core.staging import url_of
from curate.core.stats import StageStats
from curate.executors import Executor, run_stage
from packer.config import PackConfig
from packer.lengths import LENGTHS_SCHEMA, LengthsTask
from packer.lengths_file import LENGTHS_FILE, load_lengths, processor_of, vouched
from packer.reuse import INDEX_DIR, index_text_counts, reuse_report

PLAN_COLUMNS = ("id", "source", "tokens")
"""What a plan from lengths alone reads (a compute-balanced plan reads every column)."""


def _lengths_index() -> Path:
    return curate_cache("lengths-index.json")


def _lengths_key(shards: Sequence[Shard], settings: dict[str, Any]) -> str:
    return hashlib.sha256((inputs_fingerprint(shards) + dumps_json(settings)).encode()).hexdigest()[:24]


def _find_counted(key: str, out: Path) -> Path | None:
    """A folder (other than ``out``) whose lengths step finished for the same key."""
    index = _lengths_index()
    if not index.exists():
        return None
    try:
        folder = Path(read_json(index).get(key, ""))
    except (OSError, ValueError):
        return None
    if folder and folder != out and (folder / "_records").is_dir() and (folder / LENGTHS_FILE).exists() \
            and vouched(folder / LENGTHS_FILE):  # counts reused only from a file its pack vouches for
        return folder
    return None


def _remember_counted(key: str, out: Path) -> None:
    if url_of(out) is not None:
        return  # a bucket's staging folder does not keep the counts: nothing to find here later
    index = _lengths_index()
    try:
        data = read_json(index) if index.exists() else {}
        data[key] = str(out.resolve())
        write_json(index, data)
    except OSError:
        pass  # the index is a convenience; never fail a run for it


def _merge_lengths(out: Path) -> pa.Table:
    tables = [pq.read_table(p) for p in sorted((out / "lengths").glob("*.parquet"))]
    table = pa.concat_tables(tables) if tables else LENGTHS_SCHEMA.empty_table()
    write_parquet(out / "lengths.parquet", table)
    return table


@dataclass
class Counted:
    """What the count step leaves for the next ones of :func:`packer.pack.pack`: the lengths table and where its records are."""

    table: pa.Table | None  # let go once planned
    stats: StageStats
    fingerprint: str | None  # the processor's, as the counts recorded it
    processor: str | None  # the processor as given (or as the earlier counts name it)
    store_dir: Path  # the folder whose _records/ the writer reads
    sources: tuple[np.ndarray, list[str]] | None = None  # the table's source codes, when made already
    reuse: dict[str, Any] | None = None  # the reuse report of earlier counts


def count_lengths(inputs: Sequence[str | os.PathLike[str]], config: PackConfig, out: Path, lengths: Path | None,
           executor: Executor) -> Counted:
    """Step 1, the token lengths: counted for INPUT (reusing earlier text counts by key), or ``--lengths`` as it
    is when there is no INPUT (a plan from counts alone: no records to check them against)."""
    if lengths is not None and not inputs:
        table, store_dir, fingerprint = load_lengths(lengths, need_store=False,
                                                      columns=None if config.balance is not None else PLAN_COLUMNS)
        sources = table_sources(table)
        by_source = counts_by_source(*sources)
        stats = StageStats()
        stats.seen_many(by_source)
        stats.kept_many(by_source)
        return Counted(table, stats, fingerprint, config.processor, store_dir, sources=sources)
    processor = config.processor
    if lengths is not None:
        # one line for an unreadable file, or one whose counts nothing vouches for, before any work
        load_lengths(lengths, need_store=False, reuse=True, columns=("id", "tokens"))
        processor = processor or processor_of(lengths)
    shards = plan_shards(inputs, config.shard_size, image_root=config.image_root)
    key = _lengths_key(shards, {})  # finds a folder that counted these inputs; record keys decide what is reused
    earlier = lengths if lengths is not None else _find_counted(key, out.resolve())
    if earlier is not None and earlier.is_dir():
        earlier = earlier / "lengths.parquet"
    # text counts reused by key; every image goes through the gate again
    task = LengthsTask(config, processor, reuse_from=index_text_counts(earlier, out) if earlier is not None else None)
    task.choose_verified(shards, config.seed)
    settings = task.settings()
    check = {"verify_fraction": config.verify_fraction, "verify_sample": task.verify_sample}
    stats = run_stage(task, shards, out, executor=executor, seed=config.seed, desc="count tokens",
                      settings={**settings, **check})
    shutil.rmtree(out / INDEX_DIR, ignore_errors=True)  # the workers' shared index of earlier keys is done
    table = _merge_lengths(out)
    _remember_counted(key, out)
    reuse = reuse_report(earlier, table, stats, explicit=lengths is not None) if earlier is not None else None
    return Counted(table, stats, settings["processor"], processor, out, reuse=reuse)


def table_sources(table: pa.Table) -> tuple[np.ndarray, list[str]]:
    """The source codes of a lengths table's rows and the sources' names (:func:`curate.core.columns.source_codes`)."""
    return source_codes(table.column("source") if "source" in table.column_names else None, table.num_rows)
