"""The stage contract: a shard is the unit of work.

A stage is a :class:`ShardTask`: a pure function *shard in → files out + shard
stats*. An executor (``curate.executors``) runs it over shards. For every shard:

1. if its completion marker ``OUT/_shards/<stage>/<shard>.json`` exists, it is skipped;
2. the task writes its files into a private work folder under ``OUT/.tmp/``;
3. the files are renamed into place in ``OUT`` (same relative paths);
4. the shard's rejects and then its marker (the shard stats) are written last.

A killed run therefore leaves no half-written output under a final name, and a
rerun redoes exactly the shards without a marker, giving identical bytes. With ``OUT`` in a
bucket (:mod:`curate.core.remote`), step 4 is followed by the upload of the shard's files and then
of its marker, and its files leave the local disk (except those this machine reads again).
Randomness comes from ``seed`` combined with the shard index
(:meth:`ShardContext.rng`), never from global state.

The last section splits input files into the parts a shard plan is made of (tars through a cache, in parallel).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import time
import uuid
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import Executor, ProcessPoolExecutor, ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from curate.core.limits import DEFAULT_MAX_IMAGES, DEFAULT_SHARD_SIZE, TOO_MANY_IMAGES
from curate.core.errors import UserError, reading_input
from curate.core.formats.containers import CONTAINERS
from curate.core.io import (Location, as_path, atomic_open, curate_cache, dumps_json, input_stamp, is_url, pid_alive,
                            read_json, shown, text_of, url_of, write_json, write_parquet)
from curate.core.records import READER_VERSION, BadRecord, Part, expand_inputs, input_format, read_part, split_file
from curate.core.remote import fetch, push_shard, push_shard_later, warm_up
from curate.core.stats import StageStats, reject_schema
from curate.core.threads import available_cpus, plain_workers_context
from curate.core.validate import in_dir

SHARDS_DIR = "_shards"
TMP_DIR = ".tmp"


@dataclass(frozen=True)
class Shard:
    """A unit of work: row ranges of input files (``parts``), or a stage-defined range (``meta``).

    Input shards hold ``parts`` of at most ``shard_size`` rows. Stages that fan
    out again after a global step (e.g. shard writing after the packing plan)
    describe their work in ``meta`` and ``size``; ``meta`` is a ``NamedTuple`` of
    plain values defined by the stage (e.g. ``packer.writer.BinRange``), read by
    field name.
    """

    index: int
    parts: tuple[Part, ...] = ()
    meta: tuple[Any, ...] = ()
    size: int = -1

    @property
    def id(self) -> str:
        """Zero-padded shard index used in file names (``000042``)."""
        return f"{self.index:06d}"

    def __len__(self) -> int:
        return self.size if self.size >= 0 else sum(len(p) for p in self.parts)

    def read(self, *, with_raw: bool = False, heads: bool = False,  # noqa: ANN201 - generator of Record | BadRecord
             views: bool = False):
        """Yield the shard's canonical records (or BadRecord rows) in input order.

        With ``with_raw`` yield ``(raw row, record or BadRecord)`` pairs, for stages
        that write records back in the input's layout. With ``heads`` images in tars and
        Parquet files are known by their header bytes and address only
        (:class:`curate.core.image_headers.ImageAt`), for steps that need no pixels; with ``views``
        only Parquet cells are, as views on the Arrow buffers, for steps that decode pixels.
        """
        for part in self.parts:
            with reading_input(part.path):  # a damaged file: one line naming it, not --out
                yield from read_part(part, with_raw=with_raw, heads=heads, views=views)


def plan_shards(inputs: Sequence[str | os.PathLike[str]], shard_size: int = DEFAULT_SHARD_SIZE, *,
                text_field: str | None = None, image_root: str | os.PathLike[str] | None = None,
                text_only: bool = False, layout: str | None = None) -> list[Shard]:
    """Split inputs into shards of at most ``shard_size`` rows, in input order.

    Files are split at ``shard_size`` rows; consecutive small pieces of
    different files share a shard until it is full. The plan depends only on the
    inputs and ``shard_size``. Reading settings, carried to the workers by every part (and part of
    :func:`plan_hash`): ``text_field``, read rows in no known layout as captions from this field
    (:func:`curate.core.records.to_canonical`); ``image_root``, the folder relative image paths are
    read from (:func:`resolve_image_root`), instead of each file's own; ``text_only``, the stage reads text
    only, so a caption or URL row without image bytes is text rather than ``missing_image``; ``layout``, the RL
    layout rows are read in (:mod:`curate.core.formats.rl_layouts`; None: detected row by row)."""
    if shard_size < 1:
        raise UserError(f"--shard-size must be at least 1, got {shard_size}")
    root = resolve_image_root(image_root)
    shards: list[Shard] = []
    current: list[Part] = []
    rows = 0
    for parts in split_inputs(expand_inputs(inputs), shard_size):  # tars: walked in parallel, kept in a cache
        for part in parts:
            if text_field is not None or root is not None or text_only or layout is not None:
                part = replace(part, text_field=text_field, image_root=root, text_only=text_only, layout=layout)
            if rows + len(part) > shard_size and current:
                shards.append(Shard(len(shards), tuple(current)))
                current, rows = [], 0
            current.append(part)
            rows += len(part)
    if current:
        shards.append(Shard(len(shards), tuple(current)))
    return shards


def resolve_image_root(image_root: str | os.PathLike[str] | None) -> str | None:
    """The run's image root as the parts carry it: an absolute local folder, or a URL as given.

    Raises:
        UserError: a local path that is not a folder.
    """
    if image_root is None:
        return None
    root = text_of(image_root)
    if is_url(root):
        return root.rstrip("/")
    in_dir("--image-root", root)  # the configs' check, for callers that give no config
    return os.path.abspath(root)


def plan_hash(shards: Sequence[Shard]) -> str:
    """A hash of the shard plan: every shard's index, input row ranges, ``meta`` and size, and the reading
    settings its parts carry (``text_field``, ``image_root``, ``text_only``)."""
    h = hashlib.sha256()
    for shard in shards:
        h.update(f"{shard.index}|{tuple(shard.meta)!r}|{shard.size}\n".encode())
        for part in shard.parts:
            # each flag absent when off: earlier plans keep their hashes
            flags = ("|text-only" if part.text_only else "") + (f"|layout={part.layout}" if part.layout else "")
            h.update(f"{part.path}|{part.start}|{part.stop}|{part.text_field}|{part.image_root}{flags}\n".encode())
    return h.hexdigest()[:16]


def inputs_fingerprint(shards: Sequence[Shard]) -> str:
    """:func:`plan_hash` plus each input file's size and modification time and the reader's version
    (:data:`~curate.core.records.READER_VERSION`), for caches across runs."""
    h = hashlib.sha256(f"{plan_hash(shards)}|reader {READER_VERSION}".encode())
    paths = sorted({part.path for shard in shards for part in shard.parts})
    for path, stamp in zip(paths, input_stamps(paths)):  # local files and objects in a bucket (asked in threads)
        h.update(f"{path}|{stamp}\n".encode())
    return h.hexdigest()[:16]


@dataclass
class ShardContext:
    """What a task may use besides its shard: the run seed and a progress callback."""

    seed: int
    progress: Callable[[int], None] = field(default=lambda n: None)
    #: The run's output folder on this node, for tasks that keep a journal there or read files of it.
    out: Path | None = None
    #: Files of OUT this shard brought from the bucket (:meth:`local`).
    fetched: list[Path] = field(default_factory=list)

    def journal(self, stage: str, shard: Shard) -> Path:
        """A per-shard file under ``OUT/_journal/<stage>/`` that survives a killed run."""
        if self.out is None:
            raise RuntimeError("no output folder in this context")
        path = self.out / "_journal" / stage / f"{shard.id}.jsonl"
        path.parent.mkdir(parents=True, exist_ok=True)
        return path

    def local(self, rel: str) -> Path:
        """``OUT/rel`` as a local file: with ``OUT`` in a bucket it is fetched first when this node lacks it
        (a file of an earlier step, or one the driver wrote for the shards: see ``ShardTask.reads_out``)."""
        if self.out is None:
            raise RuntimeError("no output folder in this context")
        there = (self.out / rel).exists()
        path = fetch(self.out, rel)
        if not there:
            self.fetched.append(path)
        return path

    def rng(self, shard: Shard | int, *salt: int) -> np.random.Generator:
        """A generator seeded by (seed, shard index, *salt): independent of workers and order."""
        index = shard.index if isinstance(shard, Shard) else int(shard)
        return np.random.default_rng([self.seed, index, *salt])


class ShardTask(ABC):
    """A stage's per-shard work. Subclasses set ``stage`` and implement :meth:`run`.

    Instances are pickled to worker processes (or Ray actors); heavy state such as
    a model is created in :meth:`setup`, which each worker calls once, and named in
    :attr:`transient` so that it is not pickled.
    """

    stage: ClassVar[str] = "stage"
    #: What progress counts (shown next to the bar).
    unit: ClassVar[str] = "records"
    #: Attributes holding per-worker state (a loaded model, an open index): never pickled
    #: (set to None in the copy each worker gets), built again by :meth:`setup`.
    transient: ClassVar[tuple[str, ...]] = ()
    #: Glob patterns (relative to OUT) of the shard files the stage's driver reads once the shards are
    #: done (to merge them); None: all of them. With ``--out`` in a bucket only these (and the shards'
    #: rejects) are fetched for shards that finished elsewhere or earlier (:mod:`curate.core.remote`).
    driver_reads: ClassVar[tuple[str, ...] | None] = None
    #: Glob patterns (relative to OUT) of files written by earlier steps that shards read while they run;
    #: with ``--out`` in a bucket they are fetched before pending shards run.
    reads_out: ClassVar[tuple[str, ...]] = ()
    #: Glob patterns (relative to OUT) of shard files a later step of the same run reads on this machine:
    #: with ``--out`` in a bucket they stay on the local disk after their upload, like ``driver_reads``
    #: (every other shard file leaves it once uploaded).
    kept_local: ClassVar[tuple[str, ...]] = ()

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        for name in self.transient:
            state[name] = None
        return state

    def setup(self) -> None:
        """Load models or indexes; called once per worker before any shard."""

    def settings(self) -> dict[str, Any]:
        """Settings that change the outputs; a rerun with different settings is refused."""
        return {}

    @abstractmethod
    def run(self, shard: Shard, work: Path, ctx: ShardContext) -> StageStats:
        """Process one shard, writing output files under ``work`` (relative paths as in OUT)."""

    def shard_items(self, shard: Shard) -> int:
        """How many progress units a shard has (records, by default)."""
        return len(shard)


def readable_records(shard: Shard, stats: StageStats, ctx: ShardContext, *,
                     with_raw: bool = False, numbered: bool = False, heads: bool = False,
                     views: bool = False, max_images: int | None = DEFAULT_MAX_IMAGES) -> Iterator[Any]:
    """A shard's readable records, each counted in ``stats`` as seen: the one record loop of every stage.

    Rows that are not records (:class:`~curate.core.records.BadRecord`) are errored
    with the reader's reason; an id repeated within the shard is errored
    (``duplicate_id``; its first occurrence is yielded). Both advance the progress
    bar here; the caller accounts for every record yielded (kept, dropped or
    errored). With ``with_raw`` yields ``(raw row, record)`` pairs; with ``numbered``
    each item comes as ``(row position in the shard, item)``, positions counting
    every row (unreadable ones too), for per-row seeded choices. ``heads``, ``views``: see :meth:`Shard.read`.
    A record holding more than ``max_images`` images is errored ``too_many_images`` before any of them is
    read (None: no limit, for stages that read text only).
    """
    seen_ids: set[str] = set()
    for position, (raw, rec) in enumerate(shard.read(with_raw=True, heads=heads, views=views)):
        if isinstance(rec, BadRecord):
            stats.seen(rec.source)
            stats.error(rec.id, rec.source, rec.reason, rec.detail)
            ctx.progress(1)
            continue
        stats.seen(rec["source"])
        if rec["id"] in seen_ids:
            stats.error(rec["id"], rec["source"], "duplicate_id", "id already seen earlier in the shard")
            ctx.progress(1)
            continue
        seen_ids.add(rec["id"])
        if max_images is not None and len(rec["images"]) > max_images:
            stats.error(rec["id"], rec["source"], TOO_MANY_IMAGES, f"{len(rec['images']):,} images, more than the "
                        f"limit of {max_images:,} per record (raise --max-images-per-record to accept it)")
            ctx.progress(1)
            continue
        item = (raw, rec) if with_raw else rec
        yield (position, item) if numbered else item


def marker_path(out: Path, stage: str, shard_id: str) -> Path:
    """The completion marker of one shard of one stage."""
    return out / SHARDS_DIR / stage / f"{shard_id}.json"


#: ``StageStats.extra`` key: requests of the shard that failed for the server's reasons (timeouts, 5xx...).
UNANSWERED = "unanswered"


def read_marker(marker: Path) -> dict[str, Any] | None:
    """A complete shard's marker content, or None: no marker, an unreadable one, or :data:`UNANSWERED` requests.

    A shard whose generation requests failed on the server's side is written (so a
    run reports it) but not complete: a rerun runs it again, and its journal means
    only the unanswered requests are asked again.
    """
    try:
        content = read_json(marker)
    except (OSError, ValueError):
        return None
    return None if content.get("stats", {}).get("extra", {}).get(UNANSWERED, 0) else content


def is_complete(marker: Path) -> bool:
    """Whether a shard is done: its marker exists and it has no :data:`UNANSWERED` requests."""
    return read_marker(marker) is not None


def _rejects_rel(stage: str, shard_id: str) -> str:
    return f"{SHARDS_DIR}/{stage}/{shard_id}.rejects.parquet"


def execute_shard(task: ShardTask, shard: Shard, out: Path, seed: int,
                  progress: Callable[[int], None] | None = None, *, away: bool = False) -> dict[str, Any]:
    """Run one shard under the contract (skip if done; temp folder; rename; marker last).

    ``away``: this process works for a driver on another node (a Ray actor): with ``out`` a staging folder, its
    markers are not the bucket's (the bucket has none for this shard) and nothing of the shard stays on its disk.

    Returns the marker's content ``{"shard", "rows", "stats", "files"}`` (on disk: :meth:`StageStats.history_free`).
    """
    marker = marker_path(out, task.stage, shard.id)
    remote = url_of(out) is not None
    done = None if away and remote else read_marker(marker)
    if done is not None:
        return done
    warm_up(out)  # with OUT in a bucket, its client made ready while the shard is made
    work = out / TMP_DIR / task.stage / f"{shard.id}.{os.getpid()}.{uuid.uuid4().hex[:8]}"
    work.mkdir(parents=True, exist_ok=False)
    ctx = ShardContext(seed=seed, progress=progress or (lambda n: None), out=out)
    try:
        stats = task.run(shard, work, ctx)
        stats.check()
        write_parquet(work / _rejects_rel(task.stage, shard.id), stats.rejects_table())
        files = sorted(str(p.relative_to(work)) for p in work.rglob("*") if p.is_file())
        for rel in files:
            dest = out / rel
            dest.parent.mkdir(parents=True, exist_ok=True)
            os.replace(work / rel, dest)
        content = {"shard": shard.id, "rows": len(shard), "stats": stats.to_dict(), "files": files}
        write_json(marker, {**content, "stats": StageStats.history_free(content["stats"])})
        if remote and away:  # a node: outputs first, marker last, then off its disk (the driver fetches the marker)
            push_shard(out, files, marker)
            for path in [*(out / rel for rel in files), marker, *ctx.fetched]:
                path.unlink(missing_ok=True)
        elif remote:  # this machine: the same in the background while the next shard is made, then off the disk
            push_shard_later(out, files, marker, task.driver_reads, task.kept_local)
        return content
    finally:
        shutil.rmtree(work, ignore_errors=True)


_SETTING_NAMES = {"plan": "inputs, shard size or --image-root", "reader": "the curate version that reads the records"}


def check_settings(out: Path, stage: str, settings: dict[str, Any]) -> None:
    """Refuse to mix runs: OUT's recorded settings for ``stage`` must equal ``settings``.

    The first run records them in ``OUT/_shards/<stage>/settings.json``.
    """
    path = out / SHARDS_DIR / stage / "settings.json"
    normal = json.loads(dumps_json(settings))
    if path.exists():
        recorded = read_json(path)
        finished = any(p.name != "settings.json" for p in path.parent.glob("*.json"))
        if recorded != normal and finished:
            changed = sorted(k for k in set(recorded) | set(normal) if recorded.get(k) != normal.get(k))
            what = ", ".join(_SETTING_NAMES.get(k, k) for k in changed)
            raise UserError(f"{shown(out)} holds a '{stage}' run with other settings ({what}); "
                            "use another --out, or delete the folder to start again")
        if recorded == normal:
            return
    write_json(path, normal)  # first run, or no shard finished under the old settings


#: Seconds a run waits at its start for the workers of a killed run that are still writing into its ``OUT/.tmp/``.
WORKERS_GONE_WAIT = 10.0


def clean_tmp(out: Path, stage: str, *, wait: float = 0.0) -> None:
    """Remove work folders left by a killed run of ``stage``, but not those of another live process, and the
    half-written markers a killed process left (a marker is written whole or not at all: :func:`atomic_path`).

    A worker of a killed driver lives on for a moment (it stops within a second, or ends its shard): the
    folder it writes into is its own (``<shard>.<pid>.<hex>``) and is not removed. Removed under it, the
    worker would rename what it writes after that and then mark the shard done, listing only those files:
    a rerun trusting that marker would miss the shard's other files. ``wait``: seconds to wait first for
    such workers to be gone (a shard one of them finishes meanwhile is marked done, complete).
    """
    folder = out / TMP_DIR / stage
    deadline = time.monotonic() + wait
    while True:
        try:
            entries = list(folder.iterdir())
        except OSError:
            return
        live = {entry for entry in entries if _worked_by_another_live_process(entry.name)}
        if not live or time.monotonic() >= deadline:
            break
        time.sleep(0.05)
    for entry in entries:
        if entry in live:
            continue
        if entry.is_dir() and not entry.is_symlink():
            shutil.rmtree(entry, ignore_errors=True)
        else:
            entry.unlink(missing_ok=True)
    with contextlib.suppress(OSError):
        folder.rmdir()  # when no live worker works there
    for partial in (out / SHARDS_DIR / stage).glob(".*.tmp"):  # a marker a killed process was writing (atomic_path)
        partial.unlink(missing_ok=True)


def _worked_by_another_live_process(name: str) -> bool:
    """Whether a work folder (``<shard>.<pid>.<hex>``, :func:`execute_shard`) is another live process's of this
    host (a zombie is not live: its work is over)."""
    parts = name.split(".")
    return len(parts) == 3 and parts[1].isdigit() and int(parts[1]) != os.getpid() and pid_alive(int(parts[1]))


def merge_shards(out: Path, stage: str, markers: Sequence[dict[str, Any]]) -> StageStats:
    """Merge shard stats in shard order; also gathers every shard's rejects (a shard that dropped and errored
    nothing has none: its empty table is not read, which at 17,000 shards saves the driver thousands of reads)."""
    total = StageStats()
    tables = []
    for content in sorted(markers, key=lambda m: m["shard"]):
        stats = content["stats"]
        total.merge(StageStats.from_dict(stats))
        if not any(stats["dropped"].values()) and not any(stats["errored"].values()):
            continue
        rej = out / _rejects_rel(stage, content["shard"])
        if rej.exists():
            tables.append(pq.read_table(rej))
    table = pa.concat_tables(tables) if tables else reject_schema().empty_table()
    total.rejects = list(zip(*[table.column(c).to_pylist() for c in reject_schema().names])) if table.num_rows else []
    total.check()
    return total


# ---- Input files split into parts for a shard plan ----
#
# Input files split into parts for a shard plan: tars through a cache, and in parallel.
#
# A Parquet file is split from its footer and a JSONL file by finding its lines (about 1.4 GB/s here),
# but a tar is split by walking every member header (about 0.25 s of one core for an img2dataset tar of
# 10,000 samples, 60,000 headers with PAX; read from a bucket, its bytes come over the network). At the seed's
# scale, 8,500 such tars, that is half an hour of the driver's one core before any stage
# starts, and again for every stage, every step of a recipe and every rerun after a crash. So:
#
# * the parts of a tar are kept in ``$CURATE_CACHE/splits/`` (default ``~/.cache/curate``), keyed by
#   its path, size and version (modification time, or an object's ETag), the part size and the
#   reader's version (:data:`~curate.core.records.READER_VERSION`): a file that changed is scanned
#   again, and a scan that failed is never kept. A local file modified less than :data:`SETTLED`
#   seconds before its scan is not kept either: it may still be being written, and a change within the
#   same tick of the file system's clock would leave its stamp as it was;
# * tars not in the cache are walked in parallel: local ones in worker processes (the walk is Python
#   code; forked on Linux), objects in a bucket in threads (the walk waits on the network), once there are at least
#   :data:`PARALLEL_FROM` of them.
#
# The parts are the same as :func:`curate.core.records.split_file`'s, whichever way they came.

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
