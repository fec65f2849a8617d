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

The one kept-record writer, :func:`write_kept`, used by every stage that writes the records it keeps
(rl-filter and any :class:`RecordFilter`, recaption, dedup, resample/balance), has two modes:

* joined: each shard writes the rows it keeps as they were read (the input's layout, extra columns too; image
  paths resolved so they still point at their images from ``OUT``; image bytes kept) to
  ``records/<shard>.jsonl`` (:class:`ShardRecords`); the driver joins them into ``<stem>.jsonl``, or
  ``<stem>.parquet`` with ``datasets`` image structs when the rows carry image bytes (docs/inputs.md);
* per input file (``inputs=``, ``selection=``: the kept ids, each with a copies count): the input files are read
  again and each ``NAME`` gives ``records/NAME`` in its own container (tars come back as Parquet;
  ``records/DATASET/NAME`` when ``NAME`` is only a shard number), a record kept ``k`` times written ``k`` times,
  copies after the first with the id ``id#k`` (:func:`copy_id`), relative image paths rewritten for the new
  folder. The files are read and written in worker processes, one file per task, each looking its records up
  in a :class:`SelectionIndex` shared with the driver; the files are the same as one process writes. Every
  input record is read again (images included), so at the seed's scale (85M records in 8,500 tars) this is the
  longest step of ``balance`` on the driver.

Registering a filter as a verb is one :class:`curate.stages.StageSpec` row naming it (``filter=``): the CLI
verb, recipes, the report and ``--executor ray`` then come from that row.
"""

from __future__ import annotations

import dataclasses
import os
from abc import abstractmethod
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, ClassVar, overload

import numpy as np
import pyarrow as pa

from curate.core import validate as v
from curate.core.columns import hash_strings, take_rows
from curate.core.formats.containers import CONTAINERS
from curate.core.formats.listing import record_suffix
from curate.core.formats.rows import default_id_prefix
from curate.core.formats.writeback import (dumps_record, loads_record, merge_record_lines, with_resolved_paths,
                                           write_records)
from curate.core.io import Location, as_path, locations
from curate.core.records import BadRecord, expand_inputs, input_format, read_part, split_file
from curate.core.stats import Counts, StageStats
from curate.core.settings import setting
from curate.core.shards import Shard, ShardContext, ShardTask, readable_records, resolve_image_root
from curate.core.threads import available_cpus, plain_workers_context

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


@overload
def write_kept(folder: Path, stem: str, parts: Sequence[Path], *, take: Sequence[Sequence[int]] | None = None,
               annotate: Callable[[int, dict[str, Any]], None] | None = None) -> str: ...


@overload
def write_kept(folder: Path, *, inputs: Sequence[PathLike], selection: pa.Table, workers: int | None = None,
               text_field: str | None = None, image_root: PathLike | None = None,
               pass_text_only: bool = False) -> dict[str, Any]: ...


def write_kept(folder: Path, stem: str = "", parts: Sequence[Path] = (), *,
               take: Sequence[Sequence[int]] | None = None,
               annotate: Callable[[int, dict[str, Any]], None] | None = None,
               inputs: Sequence[PathLike] | None = None, selection: pa.Table | None = None,
               workers: int | None = None, text_field: str | None = None, image_root: PathLike | None = None,
               pass_text_only: bool = False) -> str | dict[str, Any]:
    """The one kept-record writer, in one of two modes (see the module's docstring).

    Joined (``stem``, ``parts``): the rows of the shards' record files ``parts`` (in order) as
    ``folder/<stem>.jsonl``, or ``<stem>.parquet`` (image structs) when they carry image bytes; returns the file
    name. Per input file (``inputs``, ``selection``): each input file ``NAME`` gives ``folder/NAME`` with its
    kept records, each written ``copies`` times; returns counts per output file.

    Args:
        folder: Where the kept records go (``OUT``, or ``OUT/records`` per input file).
        stem: Joined: the file's name without suffix (``records``, ``kept``).
        parts: Joined: the shards' record files (:class:`ShardRecords`), in shard order.
        take: Joined: per part, the line numbers to write (None: every line). Only the parts with lines taken
            are read.
        annotate: Joined: called with each written row's number and the row, to add fields (e.g. a score).
        inputs: Per input file: the record files (or folders) the kept records were read from.
        selection: Per input file: the kept records, a table with ``id`` and ``copies``.
        workers, text_field, image_root, pass_text_only: Per input file: see :func:`_write_per_input`.
    """
    if inputs is not None or selection is not None:
        if inputs is None or selection is None or stem or parts:
            raise TypeError("write_kept: give either stem and parts (joined) or inputs and selection (per input file)")
        return _write_per_input(inputs, selection, folder, workers=workers, text_field=text_field,
                                image_root=image_root, pass_text_only=pass_text_only)
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


def copy_id(rid: str, k: int) -> str:
    """The id of the ``k``-th copy (1-based) of a record kept several times: ``id``, ``id#2``, ``id#3``..."""
    return rid if k == 1 else f"{rid}#{k}"


class SelectionIndex:
    """The kept ids, looked up a batch of records at a time: their 64-bit hashes sorted, with the ids and
    copies in the same order; a hash match is confirmed on the id itself, so lookups are exact. Three
    arrays (about 20 bytes and the id per kept record), which worker processes share with the driver."""

    def __init__(self, selection: pa.Table) -> None:
        ids = selection.column("id")
        hashes = hash_strings(ids)
        order = np.argsort(hashes, kind="stable")
        self.hashes = hashes[order]
        self.ids = take_rows(ids, order)
        self.copies = selection.column("copies").to_numpy()[order].astype(np.int64)

    def __len__(self) -> int:
        return len(self.hashes)

    def lookup(self, ids: list[str]) -> np.ndarray:
        """The position of each id in the index, -1 for ids not kept."""
        found = np.full(len(ids), -1, np.int64)
        if not ids or not len(self):
            return found
        hashes = hash_strings(pa.array(ids, pa.string()))
        lo = np.searchsorted(self.hashes, hashes, "left")
        hi = np.searchsorted(self.hashes, hashes, "right")
        for i in np.flatnonzero(hi > lo).tolist():
            for at in range(int(lo[i]), int(hi[i])):  # almost always one: the hash is shared by different ids rarely
                if self.ids[at].as_py() == ids[i]:
                    found[i] = at
                    break
        return found


_INDEX: SelectionIndex | None = None  # the selection, in worker processes (set by _share before they start)
_BATCH = 256  # records looked up at once (their rows, image bytes included, are held until then)


def _share(index: SelectionIndex) -> None:
    global _INDEX
    _INDEX = index


def _write_per_input(inputs: Sequence[PathLike], selection: pa.Table, folder: Path, *, workers: int | None = None,
                     text_field: str | None = None, image_root: PathLike | None = None,
                     pass_text_only: bool = False) -> dict[str, Any]:
    """Write each selected record ``copies`` times, in its input file's format and layout.

    Each input file ``NAME`` gives ``folder/NAME`` (same format; ``folder/DATASET/NAME`` when the name is
    only a shard number and its folder ``DATASET`` names it, as in ids); relative image paths are
    rewritten relative to the new file; copies after the first get the id ``id#k`` so that ids stay
    unique; a row without an id or source gets the ones it was read with. A selected id found in
    several rows is written at its first row in input order. The input files are read in worker
    processes (``workers``, default one per core; each reads and writes whole files), which gives the
    same files as one process. ``text_field``: rows in no known layout are read with this caption
    field, as ``curate match`` read them (:func:`curate.core.records.to_canonical`), so their ids
    are found. ``image_root``: the folder the inputs' relative image paths start from (``--image-root``;
    default each file's own); the written paths are rewritten from there. ``pass_text_only``: records without
    images (which ``curate balance`` cannot tag) are written too, once, in their place (``curate balance``).
    Returns counts per output file.
    """
    paths = expand_inputs(inputs)
    names: list[str] = []
    taken: set[str] = set()
    for path in paths:
        container = CONTAINERS[input_format(path)]
        suffix = container.written_suffix or record_suffix(path.name)  # tars come back as Parquet
        stem = default_id_prefix(str(path))  # vqav2/train-00000-of-00002: a shard number alone names no dataset
        name, k = stem + suffix, 2
        while name in taken:
            name = f"{stem}-{k}{suffix}"
            k += 1
        names.append(name)
        taken.add(name)
    folder.mkdir(parents=True, exist_ok=True)
    index = SelectionIndex(selection)
    _share(index)
    root = resolve_image_root(image_root)
    jobs = [(str(p), n, str(folder.resolve()), text_field, root, pass_text_only) for p, n in zip(paths, names)]
    size = min(workers or available_cpus(), len(jobs))
    results = _run(jobs, index, size)
    seen = np.zeros(len(index), bool)
    files: dict[str, int] = {}
    for job, (count, found) in zip(jobs, results):
        if seen[found].any():  # also selected in an earlier file: written there (rare), so this file again without
            count, found = _write_file(*job, skip=frozenset(np.flatnonzero(seen).tolist()))
        name = job[1]
        seen[found] = True
        files[name] = count
    _drop_stale(folder, set(files))
    return {"files": files, "records": sum(files.values()), "selected_not_found": int(len(index) - seen.sum())}


def _drop_stale(folder: Path, written: set[str]) -> None:
    """Remove the files an earlier run left in ``folder`` that this one did not write (other inputs, or names
    of another curate version), so that ``records/`` holds this selection only."""
    for path in sorted(folder.rglob("*"), reverse=True):  # files before the folders that hold them
        rel = path.relative_to(folder).as_posix()
        if path.is_file() and rel not in written:
            path.unlink()
        elif path.is_dir() and not any(path.iterdir()):
            path.rmdir()


def _run(jobs: list[tuple[str, str, str, str | None, str | None, bool]], index: SelectionIndex,
         size: int) -> list[tuple[int, np.ndarray]]:
    """Every job through :func:`_write_file`: here when one worker is enough, else in worker processes."""
    from curate.core.progress import StageProgress  # rich: only when records are written

    if size <= 1:
        with StageProgress("write selected records", len(jobs), unit="files") as bar:
            out = []
            for job in jobs:
                out.append(_write_file(*job))
                bar.advance(1)
            return out
    # fork: the index is shared, not copied (spawned workers get it pickled, through the initializer)
    with ProcessPoolExecutor(max_workers=size, mp_context=plain_workers_context(), initializer=_share,
                             initargs=(index,)) as pool:
        futures = [pool.submit(_write_file, *job) for job in jobs]  # every worker started before the bar's thread
        with StageProgress("write selected records", len(jobs), unit="files") as bar:
            for future in as_completed(futures):
                future.result()
                bar.advance(1)
        return [f.result() for f in futures]


def _write_file(path: str, name: str, dest: str, text_field: str | None = None, image_root: str | None = None,
                pass_text_only: bool = False, skip: frozenset[int] = frozenset()) -> tuple[int, np.ndarray]:
    """Write the selected records of one input file to ``dest/name``; returns the records written and the
    index positions found, in row order (``skip``: positions not to write; ``text_field``, ``image_root``,
    ``pass_text_only``: see :func:`_write_per_input`)."""
    assert _INDEX is not None
    source, fmt = as_path(path), input_format(path)
    rows_out: list[tuple[int, Any]] = []
    found: list[int] = []
    taken = set(skip)
    batch: list[tuple[str, str, Any, list[Any]]] = []
    target = Path(dest) / name

    def flush() -> None:
        for (rid, src, raw, images), at in zip(batch, _INDEX.lookup([b[0] for b in batch]).tolist()):
            if at >= 0 and at not in taken:  # a repeated id: its first row only
                taken.add(at)
                found.append(at)
                # image paths as the reader resolved them (the file's folder or --image-root), for the new folder
                row = with_resolved_paths(raw, images, relative_to=str(target.parent))
                rows_out.extend((c, (rid, src, row)) for c in range(1, int(_INDEX.copies[at]) + 1))
            elif at < 0 and pass_text_only and not images:  # nothing to tag: passed through as it was read
                rows_out.append((1, (rid, src, raw)))
        batch.clear()

    for part in split_file(source, 1 << 62):
        # the one row reader: the same ids as every stage; text only: a selected row is written back whatever
        # images it has (text matching selects caption rows that hold none)
        for raw, rec in read_part(replace(part, text_field=text_field, image_root=image_root, text_only=True),
                                  with_raw=True):
            if isinstance(rec, BadRecord):
                continue
            batch.append((rec["id"], rec["source"], raw, rec["images"]))
            if len(batch) >= _BATCH:
                flush()
    flush()
    target.parent.mkdir(parents=True, exist_ok=True)  # a dataset's folder (vqav2/train-00000-of-00002.parquet)
    count = _write_rows(target, fmt, rows_out, source)
    return count, np.array(found, np.int64)


def _rebased_row(raw: dict[str, Any], rid: str, source: str, copy: int) -> dict[str, Any]:
    """The row as written to ``records/`` (its image paths already resolved): the id and source it was read with
    when it had none (``<file>:<row>`` and its folder's name: in ``records/`` they would become others), ``id#k``
    for copies."""
    row = dict(raw)
    if copy > 1:
        row["id"] = copy_id(rid, copy)
    elif row.get("id") in (None, ""):
        row["id"] = rid
    if row.get("source", row.get("data_source")) in (None, ""):
        row["source"] = source
    return row


def _write_rows(dest: Path, fmt: str, rows: list[tuple[int, Any]], source_path: Path) -> int:
    """Write the selected rows (with their copies) in the input's container (:mod:`curate.core.formats.containers`)."""
    objs = [_rebased_row(raw, rid, src, c) for c, (rid, src, raw) in rows]
    return CONTAINERS[fmt].write_back(dest, objs, source_path)


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


__all__ = ["FilterConfig", "FilterResult", "KEPT_DIR", "RecordFilter", "SelectionIndex", "ShardRecords", "Verdict",
           "copy_id", "kept_line", "write_kept"]
