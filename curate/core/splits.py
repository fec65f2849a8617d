"""Input files split into parts for a shard plan: tars through a cache, and in parallel.

A Parquet file is split from its footer and a JSONL file by finding its lines (about 1.4 GB/s here),
but a tar is split by walking every member header (about 0.25 s of one core for an img2dataset tar of
10,000 samples, 60,000 headers with PAX; read from a bucket, its bytes come over the network). At the seed's
scale, 8,500 such tars, that is half an hour of the driver's one core before any stage
starts, and again for every stage, every step of a recipe and every rerun after a crash. So:

* the parts of a tar are kept in ``$CURATE_CACHE/splits/`` (default ``~/.cache/curate``), keyed by
  its path, size and version (modification time, or an object's ETag), the part size and the
  reader's version (:data:`~curate.core.records.READER_VERSION`): a file that changed is scanned
  again, and a scan that failed is never kept. A local file modified less than :data:`SETTLED`
  seconds before its scan is not kept either: it may still be being written, and a change within the
  same tick of the file system's clock would leave its stamp as it was;
* tars not in the cache are walked in parallel: local ones in worker processes (the walk is Python
  code; forked on Linux), objects in a bucket in threads (the walk waits on the network), once there are at least
  :data:`PARALLEL_FROM` of them.

The parts are the same as :func:`curate.core.records.split_file`'s, whichever way they came.
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from collections.abc import Sequence
from concurrent.futures import Executor, ProcessPoolExecutor, ThreadPoolExecutor
from pathlib import Path

from curate.core.io import Location, as_path, atomic_open, curate_cache, input_stamp, is_url
from curate.core.formats.containers import CONTAINERS
from curate.core.records import READER_VERSION, Part, input_format, split_file
from curate.core.threads import available_cpus, plain_workers_context

#: Formats whose split walks the whole file and is worth keeping (JSONL lines are found at about 1.4 GB/s here).
SCANNED = frozenset(name for name, c in CONTAINERS.items() if c.cached_split)
#: Files to scan from which the scans run in parallel (below, starting workers costs more than it saves).
PARALLEL_FROM = 8
_THREADS = 16  # concurrent scans of objects in a bucket
#: Seconds since its last modification after which a local tar's parts are kept.
SETTLED = 2.0


def cache_dir() -> Path:
    """Where split parts are kept: ``$CURATE_CACHE/splits`` (default ``~/.cache/curate/splits``)."""
    return curate_cache("splits")


def _key(path: str, stamp: str, rows_per_part: int) -> str:
    return hashlib.sha256(f"{path}|{stamp}|{rows_per_part}|reader {READER_VERSION}".encode()).hexdigest()[:32]


def _scan(path: str, rows_per_part: int) -> list[tuple[int, int, int]]:
    """``(start, stop, offset)`` of the parts of one file (run in a worker process or thread)."""
    return [(p.start, p.stop, p.offset) for p in split_file(as_path(path), rows_per_part)]


def _recall(entry: Path) -> list[tuple[int, int, int]] | None:
    try:
        with open(entry, encoding="utf-8") as fh:
            return [tuple(p) for p in json.load(fh)["parts"]]  # type: ignore[misc]
    except (OSError, ValueError, KeyError, TypeError):
        return None


def _settled(path: str, since: float) -> bool:
    """Whether a file was last modified :data:`SETTLED` seconds before ``since`` (objects: always; their
    ETag changes with their content)."""
    if is_url(path):
        return True
    try:
        return os.stat(path).st_mtime <= since - SETTLED
    except OSError:
        return False


def _remember(entry: Path, path: str, parts: list[tuple[int, int, int]]) -> None:
    try:
        entry.parent.mkdir(parents=True, exist_ok=True)
        with atomic_open(entry, "w") as fh:
            json.dump({"path": path, "parts": parts}, fh)
    except OSError:  # a cache that cannot be written costs the next plan a scan, nothing else
        pass


def split_inputs(paths: Sequence[Path | Location], rows_per_part: int) -> list[list[Part]]:
    """The parts of each input file (as :func:`~curate.core.records.split_file` gives them), in order.

    A tar (:data:`SCANNED`) comes from the cache when it is unchanged; the other tars are walked, in
    parallel when there are many, and remembered; files of other formats are split here.
    """
    formats = [input_format(p) for p in paths]
    texts = [str(p) for p in paths]
    scanned = [i for i, fmt in enumerate(formats) if fmt in SCANNED]
    stamps = dict(zip(scanned, input_stamps([texts[i] for i in scanned])))
    base = cache_dir()
    found: dict[int, list[tuple[int, int, int]]] = {}
    entries: dict[int, Path] = {}
    for i in scanned:
        entries[i] = base / f"{_key(texts[i], stamps[i], rows_per_part)}.json"
        recalled = _recall(entries[i])
        if recalled is not None:
            found[i] = recalled
    todo = [i for i in scanned if i not in found]
    began = time.time()
    remote = [i for i in todo if is_url(texts[i])]
    local = [i for i in todo if not is_url(texts[i])]
    for group, threads in ((remote, True), (local, False)):
        with _pool(len(group), threads=threads) as pool:
            for i, parts in zip(group, pool.map(_scan, [texts[i] for i in group], [rows_per_part] * len(group))):
                found[i] = parts
                if _settled(texts[i], began):
                    _remember(entries[i], texts[i], parts)
    return [[Part(texts[i], formats[i], s, e, o) for s, e, o in found[i]] if i in found
            else split_file(path, rows_per_part) for i, path in enumerate(paths)]


def input_stamps(paths: Sequence[str]) -> list[str]:
    """:func:`~curate.core.io.input_stamp` of each path, in order; objects in a bucket (a request each) are asked
    in threads when there are many (8,500 objects one after the other take minutes)."""
    remote = [i for i, path in enumerate(paths) if is_url(path)]
    with _pool(len(remote), threads=True) as pool:
        asked = dict(zip(remote, pool.map(input_stamp, [paths[i] for i in remote])))
    return [asked[i] if i in asked else input_stamp(path) for i, path in enumerate(paths)]


class _Serial(Executor):
    """Runs the calls here, one after the other (too few for workers)."""

    def map(self, fn, *iterables, timeout=None, chunksize=1):  # type: ignore[no-untyped-def,override]
        return list(map(fn, *iterables))


def _pool(n: int, *, threads: bool) -> Executor:
    """Threads or worker processes for ``n`` scans, or the calling thread when they are few."""
    cpus = available_cpus()
    if n < PARALLEL_FROM or (not threads and cpus < 2):
        return _Serial()
    if threads:
        return ThreadPoolExecutor(max_workers=min(_THREADS, n))
    # fork on Linux: a walk is plain Python and file reads, nothing of what the driver's other threads may hold
    # (pyarrow's, torch's), and a spawned worker would first import the driver's modules again (≈2 s each)
    return ProcessPoolExecutor(max_workers=min(cpus, n), mp_context=plain_workers_context())

