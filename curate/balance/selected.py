"""Selected records written back in the layout of their input files (``OUT/records/`` of ``curate resample``).

Each input file ``NAME`` gives ``OUT/records/NAME`` in the same format (``OUT/records/DATASET/NAME`` when
``NAME`` is only a shard number, e.g. ``laion400m/00000.parquet`` from img2dataset's tars); a record
drawn ``k`` times is written ``k`` times, copies after the first with the id
``id#k``; relative image paths are rewritten for the new folder.

Every input record is read again (images included), so at the seed's scale (85M records in 8,500
tars) this is the longest step of ``balance`` on the driver. The files are read and written in
worker processes, one file per task, each looking its records up in a :class:`SelectionIndex`
shared with the driver; the files are the same as one process writes.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

from curate.core.formats.listing import record_suffix
from curate.core.formats.containers import CONTAINERS


def copy_id(rid: str, k: int) -> str:
    """The id of the ``k``-th copy (1-based) of a record drawn several times: ``id``, ``id#2``, ``id#3``..."""
    return rid if k == 1 else f"{rid}#{k}"


class SelectionIndex:
    """The selected ids, looked up a batch of records at a time: their 64-bit hashes sorted, with the ids and
    copies in the same order; a hash match is confirmed on the id itself, so lookups are exact. Three
    arrays (about 20 bytes and the id per selected record), which worker processes share with the driver."""

    def __init__(self, selection: pa.Table) -> None:
        from curate.core.columns import hash_strings, take_rows

        ids = selection.column("id")
        hashes = hash_strings(ids)
        order = np.argsort(hashes, kind="stable")
        self.hashes = hashes[order]
        self.ids = take_rows(ids, order)
        self.copies = selection.column("copies").to_numpy()[order].astype(np.int64)

    def __len__(self) -> int:
        return len(self.hashes)

    def lookup(self, ids: list[str]) -> np.ndarray:
        """The position of each id in the index, -1 for ids not selected."""
        from curate.core.columns import hash_strings

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


def write_selected_records(inputs: Sequence[str | os.PathLike[str]], selection: pa.Table,
                           folder: Path, *, workers: int | None = None, text_field: str | None = None,
                           image_root: str | os.PathLike[str] | None = None,
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
    from curate.core.formats.rows import default_id_prefix
    from curate.core.records import expand_inputs, input_format
    from curate.core.shards import resolve_image_root
    from curate.core.threads import available_cpus

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
    from curate.core.progress import StageProgress

    if size <= 1:
        with StageProgress("write selected records", len(jobs), unit="files") as bar:
            out = []
            for job in jobs:
                out.append(_write_file(*job))
                bar.advance(1)
            return out
    from curate.core.threads import plain_workers_context

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
    ``pass_text_only``: see :func:`write_selected_records`)."""
    from curate.core.formats.writeback import with_resolved_paths
    from curate.core.io import as_path
    from curate.core.records import BadRecord, input_format, read_part, split_file

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
