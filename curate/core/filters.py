"""Record filters: a stage that keeps or drops each record, written as one class.

A filter stage is a :class:`RecordFilter`: a dataclass whose fields are its settings (declared with
:func:`curate.core.settings.setting`, so the command line offers them) and a :meth:`RecordFilter.verdict`
per record, ``None`` to keep it or the reason (``"short_caption"``, or ``(reason, detail)``) to drop it.
Optional per-worker state goes in :meth:`~curate.core.shards.ShardTask.setup` and per-shard state in
:meth:`RecordFilter.setup_shard`. :func:`curate.executors.filters.run_filter` is the one driver (a floor above the
core, as it runs shards with an executor): it plans the shards, runs them under
the shard contract (:mod:`curate.core.shards`: markers, resume, local or Ray), writes the kept records with
the one kept-record writer (:func:`write_kept`), the rejects with their reasons and ``stats.json``
(:func:`curate.core.stats.finish_stage`), and returns a :class:`FilterResult`.

The kept-record writer: each shard writes the rows it keeps as they were read (the input's layout, extra
columns too; image paths resolved so they still point at their images from ``OUT``; image bytes kept) to
``records/<shard>.jsonl`` (:class:`ShardRecords`); the driver joins them into ``<stem>.jsonl``, or
``<stem>.parquet`` with ``datasets`` image structs when the rows carry image bytes (docs/inputs.md).

Registering a filter as a verb is one :class:`curate.stages.StageSpec` row naming it (``filter=``): the CLI
verb, recipes, the report and ``--executor ray`` then come from that row.
"""

from __future__ import annotations

import dataclasses
import os
from abc import abstractmethod
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

from curate.core import validate as v
from curate.core.formats.writeback import (dumps_record, loads_record, merge_record_lines, with_resolved_paths,
                                           write_records)
from curate.core.location import Location, locations
from curate.core.results import Counts
from curate.core.settings import setting
from curate.core.shards import Shard, ShardContext, ShardTask, readable_records
from curate.core.stats import StageStats

PathLike = str | os.PathLike[str]
#: The folder of OUT holding each shard's kept rows (``records/<shard>.jsonl``).
KEPT_DIR = "records"
#: What a verdict may be: None (keep), a reason, or a reason and a detail.
Verdict = str | tuple[str, str] | None


@dataclass(frozen=True)
class FilterConfig:
    """The run settings every filter stage shares (a filter's own settings are fields of its class).

    Attributes:
        out: Output folder (or bucket URL).
        shard_size: Records per shard.
        seed: The run's seed (the verbs' ``--seed``), for filters that draw.
        image_root: Folder relative image paths start from (default: each input file's own).
        text_field: Rows in no known layout are read with this caption field.
    """

    out: Location | PathLike = setting(help="Output folder.")
    shard_size: int = setting(1000, help="Records per shard.")
    seed: int = setting(0, cli=False, help="Seed of the run (the verb's --seed).")
    image_root: Location | PathLike | None = setting(
        None, cli=False, help="Folder (or bucket prefix) relative image paths start from (the verb's --image-root).")
    text_field: str | None = setting(None, cli=False, help="Caption field of rows in no known layout.")

    def __post_init__(self) -> None:
        locations(self, {"out": "--out", "image_root": "--image-root"})
        v.out_dir("--out", self.out)
        v.in_dir("--image-root", self.image_root)
        v.at_least("--shard-size", self.shard_size, 1)


class ShardRecords:
    """The kept rows of one shard, written to ``work/records/<shard>.jsonl`` as they were read: the row in its
    input layout, its image paths resolved (a row written into ``OUT`` still points at its images), image bytes
    kept (base64 in this file, restored by :func:`write_kept`)."""

    def __init__(self, work: Path, shard_id: str) -> None:
        self.path = work / KEPT_DIR / f"{shard_id}.jsonl"
        self.lines: list[str] = []

    def add(self, raw: Any, record: Mapping[str, Any]) -> None:
        """Keep one row (``raw``, as :func:`~curate.core.shards.readable_records` yields it with ``with_raw``)."""
        self.lines.append(kept_line(raw, record))

    def close(self) -> None:
        """Write the shard's file (also when it keeps nothing: the driver reads every shard's)."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.path.write_text("".join(line + "\n" for line in self.lines), encoding="utf-8")


def kept_line(raw: Any, record: Mapping[str, Any]) -> str:
    """The line of a kept row in a shard's record file (image paths resolved, bytes kept)."""
    row = with_resolved_paths(raw, record["images"]) if isinstance(raw, dict) else raw
    return dumps_record(row)


def write_kept(folder: Path, stem: str, parts: Sequence[Path], *, take: Sequence[Sequence[int]] | None = None,
               annotate: Callable[[int, dict[str, Any]], None] | None = None) -> str:
    """The one kept-record writer: the rows of the shards' record files ``parts`` (in order) as ``<stem>.jsonl``,
    or ``<stem>.parquet`` (image structs) when they carry image bytes; returns the file name.

    Args:
        folder: Where the file goes (``OUT``).
        stem: Its name without suffix (``records``, ``kept``).
        parts: The shards' record files (:class:`ShardRecords`), in shard order.
        take: Per part, the line numbers to write (None: every line). Only the parts with lines taken are read.
        annotate: Called with each written row's number and the row, to add fields (e.g. a score).
    """
    if take is None and annotate is None:
        return merge_record_lines(list(parts), folder, stem)  # streamed when the rows carry no bytes
    rows: list[dict[str, Any]] = []
    for i, part in enumerate(parts):
        mine = None if take is None else take[i]
        if mine is not None and not len(mine):
            continue
        lines = part.read_text(encoding="utf-8").split("\n")
        for at in (range(len(lines) - 1) if mine is None else mine):
            row = loads_record(lines[at])
            if annotate is not None:
                annotate(len(rows), row)
            rows.append(row)
    return write_records(folder, stem, rows)


@dataclass
class RecordFilter(ShardTask):
    """A filter stage's per-record decision. Subclasses are dataclasses whose fields are their settings
    (``setting(...)``), set ``stage`` (the verb's name) and implement :meth:`verdict`.

    ``max_images``: a record with more images is errored ``too_many_images`` before its verdict (None, the
    default: no limit, for filters that read no pixels).
    """

    stage: ClassVar[str] = "filter"
    max_images: ClassVar[int | None] = None
    driver_reads: ClassVar[tuple[str, ...] | None] = (f"{KEPT_DIR}/*.jsonl",)

    @abstractmethod
    def verdict(self, record: dict[str, Any]) -> Verdict:
        """None to keep ``record`` (canonical, :mod:`curate.core.records`), else why it is dropped: a reason, or
        ``(reason, detail)``."""

    def setup_shard(self, shard: Shard, ctx: ShardContext) -> None:
        """Prepare one shard before its first verdict (optional; e.g. a per-shard generator, ``ctx.rng(shard)``)."""

    def settings(self) -> dict[str, Any]:
        """The filter's fields: what changes its decisions (a rerun with others is refused)."""
        return {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}

    def run(self, shard: Shard, work: Path, ctx: ShardContext) -> StageStats:
        """Keep or drop every readable record of ``shard``; the kept rows go to ``records/<shard>.jsonl``."""
        self.setup()
        self.setup_shard(shard, ctx)
        stats = StageStats()
        kept = ShardRecords(work, shard.id)
        for raw, rec in readable_records(shard, stats, ctx, with_raw=True, max_images=self.max_images):
            why = self.verdict(rec)
            if why is None:
                stats.kept(rec["source"])
                kept.add(raw, rec)
            else:
                reason, detail = (why, "") if isinstance(why, str) else why
                stats.drop(rec["id"], rec["source"], reason, detail)
            ctx.progress(1)
        kept.close()
        return stats


@dataclass(frozen=True)
class FilterResult(Counts):
    """What a filter stage returns: its record counts, the kept records' file and the ``stats.json`` content."""

    stage: str = ""
    records_out: int = 0
    per_source: dict[str, Any] = field(default_factory=dict)
    records_file: str = ""
    stats: dict[str, Any] = field(default_factory=dict)


__all__ = ["FilterConfig", "FilterResult", "KEPT_DIR", "RecordFilter", "ShardRecords", "Verdict", "kept_line",
           "write_kept"]
