"""Step 3 of ``curate pack``: write packed sequences into WebDataset tars.

One output shard ``shards/NNNNNN.tar`` holds a contiguous range of bins of the
(shuffled) plan; for a compute-balanced plan, the bins of a single rank. Each packed sequence is one member group, written contiguously:

* ``<key>.json``: ``ids``, ``sources``, ``tokens`` (per sample), ``cu_seqlens``
  (offsets from 0 to the used length), ``image_grids`` (per image ``[t, h, w]``),
  ``images_per_sample``, ``image_tokens``, ``image_members``, ``messages`` (per sample),
  ``ctx``, ``processor`` (fingerprint) and ``key``; for a compute-balanced plan also
  ``step``, ``rank``, ``micro``, ``cost`` (training FLOPs of the sequence), ``dp``,
  ``micro_batches`` and ``steps``;
* ``<key>.img<j>.<ext>``: the original bytes of the sequence's j-th image (not re-encoded), read from
  its file or its tar member (seek + read), or taken from the store for other bytes (Parquet cells
  among them: see :mod:`packer.count`).

Beside each tar, ``shards/NNNNNN.index.json`` records the byte range of every sequence's member group
(and its step, rank and micro-batch when compute-balanced): the training loader reads one sequence with
one seek (:mod:`packer.sampler` reads it; its format, :class:`TarIndex`, is written here).

Keys are the bin's position in the plan (``%010d``), so sample ids with dots,
slashes, spaces or any Unicode live only inside the JSON and round-trip. Tar
headers are fixed (mtime 0, uid/gid 0, mode 0644) so a rerun gives the same bytes.
"""

from __future__ import annotations

import contextlib
import io
import json
import tarfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np
import pyarrow as pa

from curate.core.image_headers import read_member
from curate.core.images import ImageError, read_bytes
from curate.core.io import open_input
from curate.core.shards import Shard, ShardContext, ShardTask
from curate.core.stats import StageStats
from packer.config import PackConfig

PLAN_ARRAYS = "_plan/plan.npz"
INDEX_SUFFIX = ".index.json"
INDEX_FORMAT = "curate-sequence-index/1"


def index_path(tar: str) -> str:
    """The index file beside a tar: ``shards/000001.tar`` -> ``shards/000001.index.json``."""
    return (tar[:-4] if tar.endswith(".tar") else tar) + INDEX_SUFFIX


@dataclass
class TarIndex:
    """Byte ranges of the packed sequences of one tar (and their step, rank, micro-batch when balanced)."""

    starts: np.ndarray
    ends: np.ndarray
    steps: np.ndarray | None = None
    ranks: np.ndarray | None = None
    micros: np.ndarray | None = None
    keys: list[str] | None = None

    def __len__(self) -> int:
        return int(self.starts.size)

    def to_json(self, size: int) -> dict[str, Any]:
        """The index file's content for a tar of ``size`` bytes."""
        out: dict[str, Any] = {"format": INDEX_FORMAT, "tar_size": int(size), "start": self.starts.tolist(),
                               "end": self.ends.tolist(), "key": self.keys}
        if self.steps is not None:
            out.update(step=self.steps.tolist(), rank=self.ranks.tolist(), micro=self.micros.tolist())
        return out


def build_index(starts: Sequence[int], ends: Sequence[int], balance: Sequence[dict[str, Any]] | None,
                keys: Sequence[str] | None = None) -> TarIndex:
    """A :class:`TarIndex` from the writer's offsets and keys (``balance``: each sequence's step/rank/micro, or None)."""
    idx = TarIndex(np.asarray(starts, dtype=np.int64), np.asarray(ends, dtype=np.int64),
                   keys=list(keys) if keys is not None else None)
    if balance:
        idx.steps = np.asarray([b["step"] for b in balance], dtype=np.int64)
        idx.ranks = np.asarray([b["rank"] for b in balance], dtype=np.int64)
        idx.micros = np.asarray([b["micro"] for b in balance], dtype=np.int64)
    return idx



def key_of(position: int) -> str:
    """The WebDataset key of the packed sequence at plan position ``position``."""
    return f"{position:010d}"


def open_store(out: Path) -> pa.Table:
    """Memory-map every ``_records/*.arrow`` store of a pack folder as one table (row = global index)."""
    tables = []
    for path in sorted((out / "_records").glob("*.arrow")):
        source = pa.memory_map(str(path), "r")
        tables.append(pa.ipc.open_file(source).read_all())
    if not tables:
        from curate.core.errors import UserError
        raise UserError(f"{out}: no counted records (_records/*.arrow); run the lengths step first")
    return pa.concat_tables(tables)


def _tarinfo(name: str, size: int) -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.size = size
    info.mtime = 0
    info.mode = 0o644
    info.uid = info.gid = 0
    info.uname = info.gname = ""
    return info


class BinRange(NamedTuple):
    """A shard-writing shard's ``meta``: the bins ``first`` (included) to ``stop`` (excluded) of the plan."""

    first: int
    stop: int


class ShardWriteTask(ShardTask):
    """Writes one tar of packed sequences per output shard (``meta`` a :class:`BinRange`)."""

    stage = "write"
    unit = "sequences"
    #: Local workers are forked (on Linux; spawned elsewhere), as the lengths step's are: a spawned worker would
    #: import pyarrow, numpy, the image readers and, with --out in a bucket, the S3 client again (≈1 s of CPU each);
    #: forked ones share the driver's pages. A writer runs no torch op and starts no thread before its first shard.
    start_method = "fork"
    transient = ("_store", "_plan", "_tars")
    driver_reads = ()  # the driver never reads the tars back (--out in a bucket: they stay there)
    reads_out = ("_records/*.arrow", PLAN_ARRAYS)  # the lengths step's record store, the driver's plan

    def __init__(self, config: PackConfig, processor: str, *, store_dir: str | None = None,
                 out: str | None = None) -> None:
        """Write sequences of ``config.ctx`` tokens; what the driver found at run time: ``processor``, the
        fingerprint of the processor the records were counted with, and ``store_dir``, the folder holding the
        lengths step's record store (None: the run's OUT, on whichever node runs the shard). ``out``: a folder
        :meth:`setup` opens the store and plan of (shards run through the contract open their own OUT)."""
        self.config = config
        self.out = out
        self.store_dir = store_dir
        self.processor = processor
        self._store: pa.Table | None = None
        self._plan: dict[str, np.ndarray] | None = None
        self._tars: dict[str, Any] = {}

    def settings(self) -> dict[str, Any]:
        """Outputs depend on the context length and the processor fingerprint (the plan is checked separately)."""
        return {"ctx": self.config.ctx, "processor": self.processor}

    def setup(self) -> None:
        """Memory-map the record store and load the plan arrays of ``out`` when it was given."""
        if self._store is None and self.out is not None:
            self._open(Path(self.out), Path(self.out) / PLAN_ARRAYS)

    def _open(self, out: Path, plan: Path) -> None:
        if self._store is None:
            self._store = open_store(Path(self.store_dir) if self.store_dir else out)
            with np.load(plan) as data:
                self._plan = {k: data[k] for k in data.files}

    def shard_items(self, shard: Shard) -> int:
        """Progress is counted in packed sequences."""
        return len(shard)

    def run(self, shard: Shard, work: Path, ctx: ShardContext) -> StageStats:
        """Write bins ``meta.first .. meta.stop`` (a :class:`BinRange`) into ``shards/<shard>.tar``."""
        self.setup()
        if self._store is None and ctx.out is not None:  # this node's OUT (a bucket's: the plan fetched if need be)
            self._open(ctx.out, ctx.local(PLAN_ARRAYS))
        assert self._store is not None and self._plan is not None
        first, stop = shard.meta.first, shard.meta.stop
        offsets, members = self._plan["bin_offsets"], self._plan["members"]
        stats = StageStats()
        base = int(offsets[first])
        records = self._store.take(pa.array(members[base:offsets[stop]])).to_pylist()
        sequences = 0
        starts: list[int] = []
        ends: list[int] = []
        keys: list[str] = []
        steps: list[dict[str, Any]] = []
        path = work / "shards" / f"{shard.id}.tar"  # work is private: the runner renames the file into place
        path.parent.mkdir(parents=True, exist_ok=True)
        with open(path, "wb") as fh, contextlib.ExitStack() as opened:
            self._tars = {}
            opened.callback(self._close_tars)
            with tarfile.open(fileobj=fh, mode="w", format=tarfile.USTAR_FORMAT) as tar:
                for b in range(first, stop):
                    rows = records[offsets[b] - base:offsets[b + 1] - base]
                    meta, blobs = self._sequence(b, rows, stats)
                    if not meta["ids"]:
                        continue
                    meta.update(self._step_of(b))
                    payload = json.dumps(meta, ensure_ascii=False, sort_keys=True).encode("utf-8")
                    key = meta["key"]
                    starts.append(tar.offset)
                    keys.append(key)
                    tar.addfile(_tarinfo(f"{key}.json", len(payload)), io.BytesIO(payload))
                    for name, data in blobs:
                        tar.addfile(_tarinfo(f"{key}.{name}", len(data)), io.BytesIO(data))
                    ends.append(tar.offset)
                    if "step" in meta:
                        steps.append(meta)
                    sequences += 1
                    ctx.progress(1)
        index = build_index(starts, ends, steps or None, keys).to_json(path.stat().st_size)
        with open(index_path(str(path)), "w", encoding="utf-8") as fh:  # the loader's random access (packer.sampler)
            json.dump(index, fh, separators=(",", ":"))
        stats.extra["sequences"] = sequences
        return stats

    def _member(self, tar: str, span: list[int]) -> bytes:
        """A tar member read again (``[offset, size]``; the tar is kept open for the rest of the shard)."""
        try:
            if tar not in self._tars:
                self._tars[tar] = open_input(tar)
            return read_member(self._tars[tar], int(span[0]), int(span[1]))
        except OSError as exc:
            raise ImageError("image_vanished", f"{tar} at offset {span[0]}: {exc}") from None

    def _close_tars(self) -> None:
        for fh in self._tars.values():
            fh.close()
        self._tars = {}

    def _step_of(self, b: int) -> dict[str, Any]:
        """``step``, ``rank``, ``micro``, ``cost``, ``dp``, ``micro_batches``, ``steps`` of a balanced plan's bin."""
        plan = self._plan
        if plan is None or "balance" not in plan:
            return {}
        dp, micro_batches, steps = (int(v) for v in plan["balance"])
        return {"step": int(plan["bin_step"][b]), "rank": int(plan["bin_rank"][b]),
                "micro": int(plan["bin_micro"][b]), "cost": float(plan["bin_cost"][b]),
                "dp": dp, "micro_batches": micro_batches, "steps": steps}

    def _sequence(self, position: int, rows: list[dict[str, Any]],
                  stats: StageStats) -> tuple[dict[str, Any], list[tuple[str, bytes]]]:
        meta: dict[str, Any] = {"key": key_of(position), "ctx": self.config.ctx, "processor": self.processor,
                                "ids": [],
                                "sources": [], "tokens": [], "image_grids": [], "images_per_sample": [],
                                "image_tokens": [], "image_members": [], "messages": []}
        blobs: list[tuple[str, bytes]] = []
        for rec in rows:
            rid, source = rec["id"], rec["source"]
            stats.seen(source)
            paths, exts = rec["images"], rec["image_exts"]
            carried = rec.get("image_bytes") or [None] * len(paths)
            spans = rec.get("image_spans") or [None] * len(paths)
            try:  # images carried as bytes are written as they came; paths and tar members are read now
                data = [b if b is not None else self._member(p, span) if span else read_bytes(p)
                        for p, b, span in zip(paths, carried, spans)]
            except ImageError as exc:  # changed or deleted since it was counted
                stats.error(rid, source, "image_vanished", exc.detail)
                continue
            names = []
            for data_j, ext in zip(data, exts):
                name = f"img{len(blobs)}.{ext}"
                blobs.append((name, data_j))
                names.append(name)
            meta["ids"].append(rid)
            meta["sources"].append(source)
            meta["tokens"].append(int(rec["tokens"]))
            meta["image_grids"].extend(rec["image_grids"])
            meta["image_tokens"].append(rec["image_tokens"])
            meta["images_per_sample"].append(len(paths))
            meta["image_members"].extend(names)
            meta["messages"].append(json.loads(rec["messages"]))
            stats.kept(source)
        meta["cu_seqlens"] = [0, *np.cumsum(meta["tokens"], dtype=np.int64).tolist()]
        return meta, blobs
