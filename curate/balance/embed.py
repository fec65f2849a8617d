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

from curate.balance.config import DEFAULT_BATCH, EmbedConfig
from curate.models.encoders import DEFAULT_MODEL, Encoder, load_encoder
from curate.core.defaults import DEFAULT_MAX_IMAGES
from curate.core.errors import UserError
from curate.core.images import DEFAULT_LIMITS, ImageError, ImageLimits, decode
from curate.core.io import write_parquet
from curate.core.remote import writing
from curate.core.shards import (Shard, ShardContext, ShardTask, plan_hash, plan_shards,
                                readable_records)
from curate.core.stats import StageStats, finish_stage, run_header
from curate.core.validate import configure

EMBED_DIR = "embeddings"
IDS_SCHEMA = pa.schema([("id", pa.string()), ("source", pa.string())])


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

    def __init__(self, model: str = DEFAULT_MODEL, *, precision: str = "fp32", device: str = "auto",
                 batch_size: int = DEFAULT_BATCH, decode_threads: int | None = None, threads: int | None = None,
                 limits: ImageLimits = DEFAULT_LIMITS, max_images: int = DEFAULT_MAX_IMAGES) -> None:
        if batch_size < 1:
            raise UserError(f"--batch-size must be at least 1, got {batch_size}")
        if decode_threads is not None and decode_threads < 1:
            raise UserError(f"--decode-threads must be at least 1, got {decode_threads}")
        self.model_spec, self.precision, self.device = model, precision, device
        self.batch_size = batch_size
        self.decode_threads = decode_threads or default_decode_threads()
        self.threads = threads
        self.limits, self.max_images = limits, max_images
        self.encoder: Encoder | None = None

    def setup(self) -> None:
        """Load the model once per worker."""
        if self.encoder is None:
            self.encoder = load_encoder(self.model_spec, precision=self.precision, device=self.device,
                                        threads=self.threads)

    def settings(self) -> dict[str, Any]:
        """The model fingerprint, precision, batch size and decoding limits change the bytes."""
        self.setup()
        assert self.encoder is not None
        return {"model": self.encoder.fingerprint, "model_spec": self.model_spec, "precision": self.precision,
                "batch_size": self.batch_size, "image_limits": self.limits.settings(), "dim": self.encoder.dim,
                "max_images": self.max_images,
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

        def records() -> Iterator[_Item]:
            # streamed: only the records being decoded hold their image bytes (Parquet cells, tar members)
            for rec in readable_records(shard, stats, ctx, views=True, max_images=self.max_images):  # Parquet cells decode in place
                if not rec["images"]:
                    stats.drop(rec["id"], rec["source"], "no_image", "record has no image to embed")
                    ctx.progress(1)
                else:
                    yield _Item(rec["id"], rec["source"], tuple(rec["images"]))

        rows: list[np.ndarray] = []
        kept: list[_Item] = []
        batch: list[tuple[_Item, list[Any]]] = []
        n_images = 0

        def flush() -> None:
            if not batch:
                return
            pixels = self.encoder.to_pixels([t for _, ts in batch for t in ts])
            with stats.timer("model"):
                feats = self.encoder.encode_images(pixels)
            start = 0
            for item, ts in batch:
                vec = feats[start:start + len(ts)]
                start += len(ts)
                if len(ts) > 1:
                    vec = vec.mean(axis=0, keepdims=True)
                    vec /= max(float(np.linalg.norm(vec)), 1e-12)
                rows.append(vec.astype(np.float16))
                kept.append(item)
                stats.kept(item.source)
            ctx.progress(len(batch))
            batch.clear()

        ahead = 2 * self.batch_size
        with ThreadPoolExecutor(max_workers=self.decode_threads, thread_name_prefix="decode") as pool:
            pending: deque[tuple[_Item, Future]] = deque()
            queue = records()

            def fill() -> None:
                while len(pending) < ahead:
                    item = next(queue, None)
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
                batch.append((item, tensors))
                n_images += len(tensors)
                if sum(len(ts) for _, ts in batch) >= self.batch_size:
                    flush()
            flush()

        matrix = np.concatenate(rows) if rows else np.zeros((0, self.encoder.dim), np.float16)
        out_dir = work / EMBED_DIR
        out_dir.mkdir(parents=True, exist_ok=True)
        np.save(out_dir / f"{shard.id}.npy", np.ascontiguousarray(matrix, dtype=np.float16))
        write_parquet(out_dir / f"{shard.id}.ids.parquet",
                      pa.table({"id": [i.rid for i in kept], "source": [i.source for i in kept]}, schema=IDS_SCHEMA))
        stats.extra["images_embedded"] = n_images
        return stats


def embed(inputs: Sequence[str | os.PathLike[str]], config: EmbedConfig | None = None, *, executor: Any = None,
          write_stats: bool = True, **settings: Any) -> dict[str, Any]:
    """Embed the images of the records in ``inputs`` into ``OUT/embeddings/``; see :func:`run_embed`."""
    return run_embed(inputs, config, executor=executor, write_stats=write_stats, **settings)[0]


def run_embed(inputs: Sequence[str | os.PathLike[str]], config: EmbedConfig | None = None, *, executor: Any = None,
              write_stats: bool = True, **settings: Any) -> tuple[dict[str, Any], StageStats]:
    """Embed the images of the records in ``inputs`` into ``OUT/embeddings/``; resumable.

    Args:
        inputs: record files or folders (JSONL, JSON, Parquet).
        config: the settings (output folder, model, batch and shard sizes...; see :class:`EmbedConfig`).
        executor: a :class:`curate.executors.Executor` (default: local, one worker).
        write_stats: write ``OUT/stats.json`` and ``OUT/rejects.parquet``.
        **settings: fields of :class:`EmbedConfig` (``out=...``), instead of or over ``config``.

    Returns:
        The ``stats.json`` content and the merged stats (with the rejects).
    """
    config = configure(EmbedConfig, config, **settings)
    with writing(config.out) as out:  # a bucket: shards stream there (curate.core.remote)
        return _embed(inputs, config, out, executor, write_stats)


def _embed(inputs: Sequence[str | os.PathLike[str]], config: EmbedConfig, out: Path, executor: Any,
           write_stats: bool) -> tuple[dict[str, Any], StageStats]:
    """:func:`run_embed` into the local folder ``out``."""
    from curate.executors import run_stage

    shard_size, seed = config.shard_size, config.seed
    model, precision, device, batch_size = config.model, config.precision, config.device, config.batch_size
    decode_threads, threads = config.decode_threads, config.threads
    shards = plan_shards(inputs, shard_size, image_root=config.image_root)
    task = EmbedTask(model, precision=precision, device=device, batch_size=batch_size,
                     decode_threads=decode_threads, threads=threads, limits=config.image_limits,
                     max_images=config.max_images)
    settings = {**task.settings(), "shard_size": shard_size, "plan": plan_hash(shards)}
    t0 = time.perf_counter()
    stats = run_stage(task, shards, out, executor=executor, seed=seed, desc="embed images", settings=settings)
    counts = stats.to_dict()
    result = {
        **run_header("embed", seed=seed, settings=settings),
        "records_in": counts["records_in"], "records_embedded": counts["records_out"],
        "dropped": counts["dropped"], "errored": counts["errored"], "per_source": counts["per_source"],
        "images_embedded": int(stats.extra.get("images_embedded", 0)), "dim": settings["dim"],
        "shards": len(shards), "timings": {**counts["timings"], "wall": round(time.perf_counter() - t0, 3)},
        "outputs": {"embeddings": f"{EMBED_DIR}/", "rejects": "rejects.parquet"},
    }
    if write_stats:
        finish_stage(out, result, stats)
    return result, stats
