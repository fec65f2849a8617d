"""The per-shard step of ``curate dedup``: every record's image hashes, one Parquet file per shard.

For every input shard :class:`HashTask` writes ``hashes/<shard>.parquet`` (:data:`HASH_SCHEMA`), one row per
readable record, in input order:

* ``id``, ``source``; ``images``: how many images the record has (0: it passes through untouched);
* ``pixels``: the sum of its images' areas (the keep rule prefers the largest);
* ``pixel_key``: null here; the driver fills it (:class:`DigestTask`: the pixel digest of its images,
  :func:`~curate.dedup.hashing.pixel_digest`, combined over several, for the records a near pair of at most
  :data:`~curate.dedup.hashing.EXACT_CANDIDATE_BITS` bits needs; the bytes digest, or a key of its own, for the
  others); ``bytes_key``: the same over the files' bytes (null for images read from a URL, which are not
  read twice: their pixels decide);
* ``phash``: the :data:`~curate.dedup.hashing.HASHES_PER_IMAGE` perceptual hashes of each image, in order.

Images are decoded by the image gate (:func:`curate.core.images.decode_small`: a JPEG at a reduced DCT scale, which
is all the perceptual hashes need), in a few threads (Pillow decodes
without holding the GIL); an image the gate refuses errors its record with the gate's reason
(``missing_image``, ``truncated``, ...), as in every stage. Within a shard an image whose bytes were seen
already is not decoded again. References (``--against``) go through the same task under another name
(:class:`AgainstTask`, ``against/hashes/``).
"""

from __future__ import annotations

import os
from collections import deque
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any, ClassVar, NamedTuple

import numpy as np
import pyarrow as pa

from curate.core.image_headers import ImageAt
from curate.core.images import ImageError, ImageLimits, decode, decode_small, image_label
from curate.core.io import is_url, write_parquet
from curate.core.shards import Shard, ShardContext, ShardTask, readable_records
from curate.core.stats import StageStats
from curate.dedup.config import DedupConfig
from curate.dedup.hashing import (DIGEST_BYTES, HASHES_PER_IMAGE, bytes_digest, combined_digest, perceptual_hashes,
                                  pixel_digest)

HASHES_DIR = "hashes"
DIGESTS_DIR = "digests"
AGAINST_DIR = "against"
INDEX_DIR = "_index/near"
PAIRS_DIR = "near_pairs"
PAIR_SCHEMA = pa.schema([("a", pa.int64()), ("b", pa.int64()), ("bits", pa.int8())])
DIGEST_SCHEMA = pa.schema([("id", pa.string()), ("pixel_key", pa.binary(DIGEST_BYTES))])
#: The size a JPEG is decoded at, at least, for its perceptual hashes (which box-reduce it further, to a shorter side
#: of 64-127 samples: :data:`curate.dedup.hashing.REDUCED_SIDE`; at 1/4 or 1/8 the scaled IDCT moved a hash up to
#: 6 bits from the same pixels' full decode, at 1/2 and above at most 4).
SIGNATURE_SIZE = (128, 128)
HASH_SCHEMA = pa.schema([("id", pa.string()), ("source", pa.string()), ("images", pa.int32()),
                         ("pixels", pa.int64()), ("pixel_key", pa.binary(DIGEST_BYTES)),
                         ("bytes_key", pa.binary(DIGEST_BYTES)), ("phash", pa.list_(pa.uint64()))])


class Signature(NamedTuple):
    """One image's hashes."""

    pixels: int
    pixel_key: bytes
    bytes_key: bytes | None
    phash: np.ndarray


class _Item(NamedTuple):
    rid: str
    source: str
    images: tuple[Any, ...]


def _default_threads() -> int:
    return max(1, min(4, os.cpu_count() or 1))


def _raw_bytes(src: Any) -> bytes | memoryview | None:
    """The bytes of an image that are at hand without a second read over the network (None for URLs)."""
    if isinstance(src, (bytes, bytearray)):
        return src
    if isinstance(src, ImageAt):
        return src.view if src.view is not None else None
    if isinstance(src, (str, os.PathLike)) and not is_url(src):
        try:
            with open(src, "rb") as fh:
                return fh.read()
        except OSError:
            return None  # the gate names the reason when it reads it
    return None


class _DecodingTask(ShardTask):
    """A dedup task decoding images: ``config``'s decoding threads (default: the cores, at most 4) and pixel limit."""

    unit = "records"

    def __init__(self, config: DedupConfig) -> None:
        self.config = config
        self.decode_threads = config.decode_threads or _default_threads()


class HashTask(_DecodingTask):
    """Hashes the images of one shard (see the module docstring)."""

    stage: ClassVar[str] = "dedup_hash"
    folder: ClassVar[str] = HASHES_DIR

    def settings(self) -> dict[str, Any]:
        """The decoding limit and the hashing scheme change the bytes (threads do not)."""
        return {"max_image_pixels": self.config.max_image_pixels, "hashes_per_image": HASHES_PER_IMAGE,
                "hash_version": 4,
                "signature_size": list(SIGNATURE_SIZE)}

    def _signature(self, src: Any, index: int, cache: dict[bytes, Signature]) -> Signature:
        """The image's size, bytes digest and perceptual hashes, from a reduced decode (no pixel digest: the
        driver asks :class:`DigestTask` for those of the images a near pair needs)."""
        raw = _raw_bytes(src)
        key = bytes_digest(raw) if raw is not None and len(raw) else None
        if key is not None and key in cache:
            return cache[key]
        img, width, height = decode_small(src, ImageLimits(max_pixels=self.config.max_image_pixels),
                                          label=image_label(src, index), size=SIGNATURE_SIZE, grey=True)
        sig = Signature(width * height, b"", key, perceptual_hashes(img))
        if key is not None:
            cache[key] = sig
        return sig

    def _record(self, item: _Item, cache: dict[bytes, Signature]) -> list[Signature]:
        return [self._signature(src, i, cache) for i, src in enumerate(item.images)]

    def run(self, shard: Shard, work: Path, ctx: ShardContext) -> StageStats:
        """Hash one shard; write ``<folder>/<shard>.parquet``."""
        stats = StageStats()
        cols: dict[str, list[Any]] = {name: [] for name in HASH_SCHEMA.names}
        cache: dict[bytes, Signature] = {}

        def items() -> Iterator[_Item]:
            for rec in readable_records(shard, stats, ctx, views=True):  # Parquet cells decode in place
                yield _Item(rec["id"], rec["source"], tuple(rec["images"] or ()))

        def add(item: _Item, sigs: list[Signature]) -> None:
            cols["id"].append(item.rid)
            cols["source"].append(item.source)
            cols["images"].append(len(sigs))
            cols["pixels"].append(sum(s.pixels for s in sigs))
            cols["pixel_key"].append(None)  # filled by the driver (DigestTask) where a near pair needs it
            keys = [s.bytes_key for s in sigs]
            cols["bytes_key"].append(combined_digest(keys) if sigs and None not in keys else None)
            cols["phash"].append(np.concatenate([s.phash for s in sigs]) if sigs else None)
            stats.kept(item.source)

        with ThreadPoolExecutor(max_workers=self.decode_threads, thread_name_prefix="dedup-decode") as pool:
            pending: deque[tuple[_Item, Future | None]] = deque()
            queue = items()
            ahead = 4 * self.decode_threads
            while True:
                while len(pending) < ahead:
                    item = next(queue, None)
                    if item is None:
                        break
                    pending.append((item, pool.submit(self._record, item, cache) if item.images else None))
                if not pending:
                    break
                item, future = pending.popleft()
                try:
                    sigs = future.result() if future is not None else []
                except ImageError as exc:
                    stats.error(item.rid, item.source, exc.reason, exc.detail)
                    ctx.progress(1)
                    continue
                add(item, sigs)
                ctx.progress(1)
        table = pa.table({**cols, "phash": pa.array([None if p is None else p.tolist() for p in cols["phash"]],
                                                   pa.list_(pa.uint64()))}, schema=HASH_SCHEMA)
        write_parquet(work / self.folder / f"{shard.id}.parquet", table)
        return stats


class AgainstTask(HashTask):
    """:class:`HashTask` for the reference images of ``--against`` (``against/hashes/``)."""

    stage: ClassVar[str] = "dedup_against"
    folder: ClassVar[str] = f"{AGAINST_DIR}/{HASHES_DIR}"


class Needed(NamedTuple):
    """A digest shard's ``meta``: the ids of the input shard whose pixel digests a near pair needs."""

    ids: tuple[str, ...]


class DigestTask(_DecodingTask):
    """Pixel digests (:func:`~curate.dedup.hashing.pixel_digest`, full decode) of the records of one input shard
    named in its ``meta`` (:class:`Needed`): ``digests/<shard>.parquet`` (id, pixel_key), first occurrence of an id.

    A record whose image the full decode refuses (the reduced one accepted it) gets no row: it has no digest.
    """

    stage: ClassVar[str] = "dedup_digest"
    folder: ClassVar[str] = DIGESTS_DIR

    def settings(self) -> dict[str, Any]:
        """The decoding limit and the digest scheme (the ids are in the plan)."""
        return {"max_image_pixels": self.config.max_image_pixels, "digest_version": 1}

    def _digest(self, images: tuple[Any, ...]) -> bytes | None:
        limits = ImageLimits(max_pixels=self.config.max_image_pixels)
        try:
            return combined_digest([pixel_digest(decode(src, limits, label=image_label(src, i)))
                                    for i, src in enumerate(images)])
        except ImageError:
            return None

    def run(self, shard: Shard, work: Path, ctx: ShardContext) -> StageStats:
        """Digest the named records of one shard; write ``<folder>/<shard>.parquet``."""
        wanted = set(Needed(*shard.meta).ids)
        stats = StageStats()
        items: list[_Item] = []
        for rec in readable_records(shard, stats, ctx, views=True):
            if rec["id"] in wanted and rec["images"]:
                wanted.discard(rec["id"])
                items.append(_Item(rec["id"], rec["source"], tuple(rec["images"])))
            ctx.progress(1)
        with ThreadPoolExecutor(max_workers=self.decode_threads, thread_name_prefix="dedup-digest") as pool:
            keys = list(pool.map(lambda item: self._digest(item.images), items))
        rows = [(item.rid, key) for item, key in zip(items, keys) if key is not None]
        write_parquet(work / self.folder / f"{shard.id}.parquet",
                      pa.table({"id": [r for r, _ in rows], "pixel_key": [k for _, k in rows]}, schema=DIGEST_SCHEMA))
        return StageStats()  # the hash step counted these records; this step only adds digests


class AgainstDigestTask(DigestTask):
    """:class:`DigestTask` for the reference images of ``--against`` (``against/digests/``)."""

    stage: ClassVar[str] = "dedup_against_digest"
    folder: ClassVar[str] = f"{AGAINST_DIR}/{DIGESTS_DIR}"


class QueryBlock(NamedTuple):
    """A search shard's ``meta``: the queries ``start:stop`` of the near-duplicate index."""

    start: int
    stop: int


class SearchTask(ShardTask):
    """Searches one block of queries of the near-duplicate index (``near_pairs/<shard>.parquet``: a, b, bits).

    The index is ``OUT/_index/near/`` as the driver wrote it (fetched first where ``OUT`` is a bucket), memory-mapped
    once per worker.
    """

    stage: ClassVar[str] = "dedup_search"
    unit = "queries"
    transient = ("index",)
    reads_out = (f"{INDEX_DIR}/*",)

    def __init__(self, config: DedupConfig, threshold: int, digest: str) -> None:
        """Search within ``threshold`` bits (the driver's: ``config``'s near threshold, or further for the candidates
        of the same pixels) the index whose hashes have the digest ``digest``."""
        self.config, self.threshold, self.digest = config, threshold, digest
        self.index: tuple[str, dict[str, np.ndarray]] | None = None

    def settings(self) -> dict[str, Any]:
        """The threshold and the index (its digest) decide the pairs; the run's near threshold (None with
        ``--no-near``; the search may go further, for the candidates of the same pixels) is recorded with them."""
        near = self.config.near_threshold if self.config.near else None
        return {"near_threshold": near, "search_threshold": self.threshold, "index": self.digest}

    def run(self, shard: Shard, work: Path, ctx: ShardContext) -> StageStats:
        """Write the pairs found from this block's queries."""
        from curate.dedup.search import load_index, search_block

        assert ctx.out is not None
        folder = str(ctx.out / INDEX_DIR)
        if self.index is None or self.index[0] != folder:
            self.index = (folder, load_index(folder))
        block = QueryBlock(*shard.meta)
        stats = StageStats()
        with stats.timer("search"):
            a, b, d = search_block(self.index[1], block.start, block.stop, self.threshold)
        write_parquet(work / PAIRS_DIR / f"{shard.id}.parquet", pa.table({"a": a, "b": b, "bits": d}, schema=PAIR_SCHEMA))
        stats.extra["near_pairs_found"] = int(len(a))
        ctx.progress(block.stop - block.start)
        return stats
