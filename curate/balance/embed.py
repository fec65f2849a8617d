"""``curate embed``: images → L2-normalised float16 embeddings, one file pair per shard.

For every input shard the :class:`EmbedTask` writes

* ``embeddings/<shard>.npy``: ``N×D`` float16, L2-normalised rows;
* ``embeddings/<shard>.ids.parquet``: columns ``id`` and ``source``, row-aligned with the ``.npy``.

A record's embedding is its image's; a record with several images gets the
mean of its images' normalised embeddings, normalised again. Records without
images are dropped (``no_image``); unreadable images are errored with the
reason of :mod:`curate.core.images` (``missing_image``, ``truncated``, ...), so
records in = embedded + dropped + errored. Images are decoded and
preprocessed by a thread pool while the model runs on the previous batch; records are read as
they are needed, so only the ones being decoded hold image bytes (Parquet cells, tar members).

Outputs are deterministic: batches are formed from consecutive records of a
shard, so a rerun (or a resumed run) gives byte-identical files.
"""

from __future__ import annotations

import os
import time
from collections import deque
from collections.abc import Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

from curate.balance.config import EmbedConfig, wall_timings
from curate.models.encoders import Encoder, load_encoder
from curate.models.specs import check_weights
from curate.core.images import ImageError, decode
from curate.core.io import write_parquet
from curate.core.remote import writing
from curate.core.shards import (Shard, ShardContext, ShardTask, plan_hash, plan_shards,
                                readable_records)
from curate.core.stats import StageStats, finish_stage, stage_result
from curate.core.validate import configure

EMBED_DIR = "embeddings"
IDS_SCHEMA = pa.schema([("id", pa.string()), ("source", pa.string())])
#: The drop reason of a record without images (``curate balance`` passes such records through to ``records/``).
NO_IMAGE = "no_image"


@dataclass(frozen=True)
class _Item:
    rid: str
    source: str
    paths: tuple[str, ...]


def default_decode_threads() -> int:
    """Threads decoding images beside the model: the cores, at most 8."""
    return max(1, min(8, os.cpu_count() or 1))


class EmbedTask(ShardTask):
    """Embeds the images of one shard (see the module docstring)."""

    stage = "embed"
    unit = "records"
    transient = ("encoder",)

    def __init__(self, config: EmbedConfig) -> None:
        """Embed with the model, batch size, threads and image limits of ``config`` (checked when it was built)."""
        self.config = config
        self.decode_threads = config.decode_threads or default_decode_threads()
        self.limits = config.image_limits  # the gate's limits, made once
        self.encoder: Encoder | None = None

    def setup(self) -> None:
        """Load the model once per worker."""
        if self.encoder is None:
            c = self.config
            self.encoder = load_encoder(c.model, precision=c.precision, device=c.device, threads=c.threads)

    def settings(self) -> dict[str, Any]:
        """The model fingerprint, precision, batch size and decoding limits change the bytes."""
        self.setup()
        assert self.encoder is not None
        c = self.config
        return {"model": self.encoder.fingerprint, "model_spec": c.model, "precision": c.precision,
                "batch_size": c.batch_size, "image_limits": self.limits.settings(), "dim": self.encoder.dim,
                "max_images": c.max_images,
                "multi_image": "mean"}

    # ------------------------------------------------------------------
    def _load(self, item: _Item) -> list[Any]:
        assert self.encoder is not None
        return [self.encoder.prepare_image(decode(p, self.limits)) for p in item.paths]

    def run(self, shard: Shard, work: Path, ctx: ShardContext) -> StageStats:
        """Embed one shard; write its ``.npy`` and ``.ids.parquet``."""
        self.setup()
        assert self.encoder is not None
        stats = StageStats()
        batch = _Batch(self.encoder, self.config.batch_size, stats, ctx)
        for item, tensors in self._decoded(self._items(shard, stats, ctx), stats, ctx):
            batch.add(item, tensors)
        batch.flush()
        out_dir = work / EMBED_DIR
        out_dir.mkdir(parents=True, exist_ok=True)
        np.save(out_dir / f"{shard.id}.npy", np.ascontiguousarray(batch.matrix(), dtype=np.float16))
        write_parquet(out_dir / f"{shard.id}.ids.parquet",
                      pa.table({"id": [i.rid for i in batch.kept], "source": [i.source for i in batch.kept]},
                               schema=IDS_SCHEMA))
        stats.extra["images_embedded"] = batch.images
        return stats

    def _items(self, shard: Shard, stats: StageStats, ctx: ShardContext) -> Iterator[_Item]:
        """The shard's records with images, streamed: only the records being decoded hold their image bytes
        (Parquet cells, tar members; Parquet cells decode in place); a record without any is dropped ``no_image``."""
        for rec in readable_records(shard, stats, ctx, views=True, max_images=self.config.max_images):
            if not rec["images"]:
                stats.drop(rec["id"], rec["source"], NO_IMAGE, "record has no image to embed")
                ctx.progress(1)
            else:
                yield _Item(rec["id"], rec["source"], tuple(rec["images"]))

    def _decoded(self, items: Iterator[_Item], stats: StageStats,
                 ctx: ShardContext) -> Iterator[tuple[_Item, list[Any]]]:
        """Each item with its images decoded and preprocessed, in order, by a thread pool kept two batches ahead of
        the model; an image that fails errors its record with the gate's reason (or ``preprocess_failed``)."""
        ahead = 2 * self.config.batch_size
        with ThreadPoolExecutor(max_workers=self.decode_threads, thread_name_prefix="decode") as pool:
            pending: deque[tuple[_Item, Future]] = deque()

            def fill() -> None:
                while len(pending) < ahead:
                    item = next(items, None)
                    if item is None:
                        return
                    pending.append((item, pool.submit(self._load, item)))

            fill()
            while pending:
                item, fut = pending.popleft()
                fill()
                t0 = time.perf_counter()
                try:
                    tensors = fut.result()
                except ImageError as exc:
                    stats.error(item.rid, item.source, exc.reason, exc.detail)
                    ctx.progress(1)
                    continue
                except Exception as exc:  # noqa: BLE001 - a bad image never stops a run
                    stats.error(item.rid, item.source, "preprocess_failed", f"{type(exc).__name__}: {exc}")
                    ctx.progress(1)
                    continue
                finally:
                    stats.timings["wait_decode"] = stats.timings.get("wait_decode", 0.0) + time.perf_counter() - t0
                yield item, tensors


class _Batch:
    """The images of one shard on their way through the model: gathered until a batch is full, then embedded; a
    record's rows (the mean of its images', normalised again, when it has several) kept in order."""

    def __init__(self, encoder: Encoder, size: int, stats: StageStats, ctx: ShardContext) -> None:
        self.encoder, self.size, self.stats, self.ctx = encoder, size, stats, ctx
        self.waiting: list[tuple[_Item, list[Any]]] = []
        self.rows: list[np.ndarray] = []
        self.kept: list[_Item] = []
        self.images = 0

    def add(self, item: _Item, tensors: list[Any]) -> None:
        """One record's preprocessed images; the batch runs once it holds ``size`` images."""
        self.waiting.append((item, tensors))
        self.images += len(tensors)
        if sum(len(ts) for _, ts in self.waiting) >= self.size:
            self.flush()

    def flush(self) -> None:
        """Embed the waiting images, one row per record."""
        if not self.waiting:
            return
        pixels = self.encoder.to_pixels([t for _, ts in self.waiting for t in ts])
        with self.stats.timer("model"):
            feats = self.encoder.encode_images(pixels)
        start = 0
        for item, ts in self.waiting:
            vec = feats[start:start + len(ts)]
            start += len(ts)
            if len(ts) > 1:
                vec = vec.mean(axis=0, keepdims=True)
                vec /= max(float(np.linalg.norm(vec)), 1e-12)
            self.rows.append(vec.astype(np.float16))
            self.kept.append(item)
            self.stats.kept(item.source)
        self.ctx.progress(len(self.waiting))
        self.waiting.clear()

    def matrix(self) -> np.ndarray:
        """The shard's ``N×D`` float16 rows."""
        return np.concatenate(self.rows) if self.rows else np.zeros((0, self.encoder.dim), np.float16)


def embed(inputs: Sequence[str | os.PathLike[str]], config: EmbedConfig | None = None, *, executor: Any = None,
          **settings: Any) -> dict[str, Any]:
    """Embed the images of the records in ``inputs`` into ``OUT/embeddings/``; resumable.

    Args:
        inputs: record files or folders (JSONL, JSON, Parquet).
        config: the settings (output folder, model, batch and shard sizes...; see :class:`EmbedConfig`).
        executor: a :class:`curate.executors.Executor` (default: local, one worker).
        **settings: fields of :class:`EmbedConfig` (``out=...``), instead of or over ``config``.

    Returns:
        The ``stats.json`` content (also written, with ``OUT/rejects.parquet``).
    """
    config = configure(EmbedConfig, config, **settings)
    check_weights(config.model)  # before any work: off the network a hub tag fails here, in one line
    with writing(config.out) as out:  # a bucket: shards stream there (curate.core.remote)
        result, stats = embed_step(inputs, config, out, executor=executor)
        return finish_stage(out, result, stats)


def embed_step(inputs: Sequence[str | os.PathLike[str]], config: EmbedConfig, out: Path, *,
               executor: Any = None) -> tuple[dict[str, Any], StageStats]:
    """The work of :func:`embed` into the local folder ``out``, for a pipeline that writes its own
    ``stats.json`` (``curate balance``): the step's ``stats.json`` content and its stats (with the rejects)."""
    from curate.executors import run_stage

    shards = plan_shards(inputs, config.shard_size, image_root=config.image_root)
    task = EmbedTask(config)
    settings = {**task.settings(), "shard_size": config.shard_size, "plan": plan_hash(shards)}
    t0 = time.perf_counter()
    stats = run_stage(task, shards, out, executor=executor, seed=config.seed, desc="embed images", settings=settings)
    result = stage_result("embed", stats, seed=config.seed, settings=settings, out_key="records_embedded",
                          images_embedded=int(stats.extra.get("images_embedded", 0)), dim=settings["dim"],
                          shards=len(shards), timings=wall_timings(stats, t0),
                          outputs={"embeddings": f"{EMBED_DIR}/", "rejects": "rejects.parquet"})
    return result, stats
