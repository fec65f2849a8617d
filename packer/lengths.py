"""Step 1 of ``curate pack``: exact token lengths of every record, per input shard.

For each shard the task writes

* ``lengths/<shard>.parquet``: ``id, source, tokens, text_tokens, image_tokens, n_images, image_grids``;
* ``_records/<shard>.arrow``: the canonical records (messages as JSON, image paths and
  extensions, image grids; images carried as bytes in ``image_bytes``, their path empty, except
  tar members: their tar in ``images`` and ``[offset, size]`` in ``image_spans``, read again by the
  writer with one seek instead of copied), memory-mapped later by the shard writer. The store is
  written a batch at a time, so a shard never holds more than one batch of image bytes.
  Parquet cells are copied into the store (a Parquet file can only be read a whole row group at
  a time, and the shuffled plan puts each output shard's samples in thousands of row groups:
  reading them again from the input would read the corpus once per output shard).

Every image goes through the image gate (:func:`curate.core.images.check`): its displayed size, from
an image proven to decode (JPEG and PNG without a full decode, other formats decoded), so what is
packed is what ``verify`` passes and the loader reads; ``exact`` decodes every image and runs the
full processor.

Reusing counts (``reuse_from``: an earlier ``lengths.parquet``) never reuses a stale
count. What determines a record's tokens is (a) its text, rendered by the chat
template and tokenized, and (b) each image's displayed size with the pixel bounds.
(a) is keyed: ``text_key`` = sha256 of the text fingerprint (tokenizer, chat
template and its variables) and the record's messages; a text count is
reused only for a record whose key is in the earlier table. (b) is never reused:
every image header is read again and its grid computed with this run's
``min_pixels``/``max_pixels``. The header is the exact determinant of the count and
reading it is the cost of probing an image anyway (a few KiB per image, no
decoding), so it is cheaper and stronger than keying by size + mtime + a hash of
the header bytes (which a replaced file of the same size and mtime, or a copy with
a new mtime, would fool or miss) and far cheaper than a hash of the whole file.
The saving is the text: rendering and tokenizing, the bulk of the counting time.
A fixed, seeded number of records (``verify_sample``, spread over the shards in
proportion to their sizes; see :meth:`LengthsTask.choose_verified`) is also run
through the full processor (its pixel values neither rescaled nor normalised: that
changes no count, see :meth:`~packer.tokens.TokenCounter.count_exact`); any
disagreement stops the run with a message naming the record. The older
``verify_fraction`` (a share of every shard) still works, but at 85M records 1% is
850K processor runs: prefer a fixed sample.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

from curate.core.errors import UserError
from curate.core.formats.refs import ImageAt
from curate.core.images import ImageError, check, decode, file_extension, image_label
from curate.core.io import write_parquet
from curate.core.shards import Shard, ShardContext, ShardTask, readable_records
from curate.core.stats import StageStats
from curate.core.textlimits import MAX_RECORD_CHARS, TOO_LONG, over, total_chars
from packer.config import PackConfig
from packer.reserved import SPECIAL_TOKEN
from packer.reuse import TextCounts, reusable_text_counts  # noqa: F401 (re-exported)
from packer.tokens import TokenCounter

def _member(image: Any) -> bool:
    """Whether an image is known by its place in an input (a tar member)."""
    return isinstance(image, ImageAt)


def _kept(image: Any) -> Any:
    """What the store keeps of a counted image: a tar member's address, a Parquet cell's bytes, a path."""
    if not isinstance(image, ImageAt):
        return image
    return image.detach() if len(image.where) == 2 else image.read()


def _where(image: Any) -> str:
    """What ``_records`` keeps in ``images``: a path, the tar of a member ("" for bytes)."""
    if isinstance(image, ImageAt):
        return image.file
    return "" if isinstance(image, bytes) else image


LENGTHS_SCHEMA = pa.schema([
    ("id", pa.string()), ("source", pa.string()), ("tokens", pa.int32()), ("text_tokens", pa.int32()),
    ("image_tokens", pa.int32()), ("n_images", pa.int16()), ("image_grids", pa.list_(pa.list_(pa.int32()))),
    ("text_key", pa.string()),
])
RECORDS_SCHEMA = pa.schema([
    ("id", pa.string()), ("source", pa.string()), ("messages", pa.string()), ("images", pa.list_(pa.string())),
    ("image_bytes", pa.list_(pa.large_binary())), ("image_exts", pa.list_(pa.string())), ("image_grids", pa.list_(pa.list_(pa.int32()))),
    ("image_tokens", pa.list_(pa.int32())), ("tokens", pa.int32()),
    ("image_spans", pa.list_(pa.list_(pa.int64()))),
])
_BATCH = 256
_VERIFY_SALT = 0x7E51F


class VerifyMismatch(UserError):
    """The header-based count disagrees with the full processor."""


def text_key(fingerprint: str, messages: list[dict[str, Any]]) -> str:
    """What a record's text count depends on: the processor fingerprint and the messages (sha256, 32 hex)."""
    data = json.dumps(messages, ensure_ascii=False, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(f"{fingerprint}\x1f{data}".encode("utf-8", "surrogatepass")).hexdigest()[:32]


class LengthsTask(ShardTask):
    """Counts every record's tokens as the processor would (see module docstring)."""

    stage = "lengths"
    transient = ("counter", "_reused")
    #: Local workers are forked (on Linux; spawned elsewhere): the driver has loaded the processor already
    #: (``settings()``), and a spawned worker would spend ≈6 s of CPU importing torch and loading it again;
    #: forked ones share its pages. Each caps its torch/OpenMP threads when it starts (the driver runs no
    #: torch op before).
    start_method = "fork"
    driver_reads = ("lengths/*.parquet",)  # merged by pack
    kept_local = ("_records/*.arrow",)  # read by the shard writer (with --out in a bucket: kept on this disk)

    def __init__(self, config: PackConfig, processor: str, *, reuse_from: str | None = None,
                 max_chars: int = MAX_RECORD_CHARS) -> None:
        """Count with ``processor`` (the run's, or the one its earlier counts name) under ``config``'s settings;
        ``reuse_from``: an earlier lengths.parquet whose text counts may be reused, by ``text_key``; ``max_chars``:
        text beyond it is never rendered nor tokenized (:mod:`curate.core.textlimits`)."""
        self.config = config
        self.processor_spec = processor
        self.verify_sample = config.checked_sample
        self.verified_rows: dict[str, tuple[int, ...]] = {}
        self.limits = config.image_limits  # the gate's limits, made once
        self.max_chars = max_chars
        self.reuse_from = reuse_from
        self._reused: TextCounts | dict[str, int] | None = None  # sorted arrays, not a dict per worker
        self.counter: TokenCounter | None = None

    def choose_verified(self, shards: Sequence[Shard], seed: int) -> int:
        """Pick the ``verify_sample`` records checked with the full processor; return how many.

        Positions are drawn without replacement over all records of the run
        (seeded, independent of the executor), so each shard gets its share in
        proportion to its size; shard ``s`` checks its rows ``verified_rows[s.id]``.
        """
        self.verified_rows = {}
        if self.verify_sample is None or self.config.exact:
            return 0
        sizes = np.array([len(s) for s in shards], dtype=np.int64)
        total = int(sizes.sum())
        k = min(self.verify_sample, total)
        if k == 0:
            return 0
        picks = np.sort(np.random.default_rng([seed, _VERIFY_SALT]).choice(total, size=k, replace=False))
        starts = np.concatenate([[0], np.cumsum(sizes)])
        owner = np.searchsorted(starts, picks, side="right") - 1
        for i in np.unique(owner).tolist():
            self.verified_rows[shards[i].id] = tuple((picks[owner == i] - starts[i]).tolist())
        return k

    def setup(self) -> None:
        """Load the processor once per worker."""
        if self.counter is None:
            c = self.config
            self.counter = TokenCounter(self.processor_spec, min_pixels=c.min_pixels, max_pixels=c.max_pixels,
                                        trust_remote_code=c.trust_remote_code)
        if self._reused is None:
            self._reused = reusable_text_counts(self.reuse_from)

    def settings(self) -> dict[str, Any]:
        """Outputs depend on the processor and the pixel bounds (not on ctx)."""
        self.setup()
        assert self.counter is not None
        c = self.config
        return {"processor": self.counter.fingerprint, "min_pixels": c.min_pixels, "max_pixels": c.max_pixels,
                "exact": c.exact, "image_limits": self.limits.settings(), "max_chars": self.max_chars,
                "max_images": c.max_images}

    # -------------------------------------------------------------------------------------
    def run(self, shard: Shard, work: Path, ctx: ShardContext) -> StageStats:
        """Count one shard; write its lengths and its record store."""
        self.setup()
        assert self.counter is not None
        stats = StageStats()
        store_path = work / "_records" / f"{shard.id}.arrow"
        store_path.parent.mkdir(parents=True, exist_ok=True)
        sink = pa.OSFile(str(store_path), "wb")
        with sink, pa.ipc.new_file(sink, RECORDS_SCHEMA) as store:
            counts = _ShardCounts(self, stats, ctx, store)
            self._count_shard(shard, stats, ctx, counts)
        stats.extra["verified"] = sum(1 for r in counts.rows if r.get("verified"))
        self._write_lengths(counts.rows, work, shard.id)
        return stats

    def _count_shard(self, shard: Shard, stats: StageStats, ctx: ShardContext, counts: _ShardCounts) -> None:
        rng = ctx.rng(shard)
        chosen = frozenset(self.verified_rows.get(shard.id, ()))
        exact, fraction = self.config.exact, self.config.verify_fraction
        for position, rec in readable_records(shard, stats, ctx, numbered=True, heads=True,
                                              max_images=self.config.max_images):
            item = self._prepare(rec, stats)
            if item is None:
                ctx.progress(1)
                continue
            if fraction is not None:
                item["verify"] = exact or (fraction > 0 and rng.random() < fraction)
            else:
                item["verify"] = exact or position in chosen
            counts.add(item)
        counts.flush()

    def _prepare(self, rec: dict[str, Any], stats: StageStats) -> dict[str, Any] | None:
        assert self.counter is not None
        long = over(total_chars(m.get("content") for m in rec["messages"]), self.max_chars, "characters of text")
        if long:  # bounded before rendering or tokenizing: memory follows the limit, never the row
            stats.drop(rec["id"], rec["source"], TOO_LONG, long)
            return None
        reserved = self.counter.reserved.find(rec["messages"])
        if reserved:  # the trainer would read it as the token: errored, never escaped (packer.reserved)
            stats.error(rec["id"], rec["source"], SPECIAL_TOKEN, reserved)
            return None
        grids, tokens, exts = [], [], []
        for j, path in enumerate(rec["images"]):
            try:
                with stats.timer("image_gate"):
                    info = check(path, self.limits, label=image_label(path, j))
            except ImageError as exc:
                stats.error(rec["id"], rec["source"], exc.reason, exc.detail)
                return None
            try:
                grid = self.counter.image_grid(info.height, info.width)
                n = self.counter.image_tokens(info.height, info.width)
            except ValueError as exc:
                stats.error(rec["id"], rec["source"], "extreme_aspect_ratio", f"{image_label(path, j)}: {exc}")
                return None
            grids.append(list(grid))
            tokens.append(n)
            exts.append(file_extension(info.format, path))
        key = text_key(self.counter.text_fingerprint, rec["messages"])
        text = ""
        if key not in (self._reused or {}):
            with stats.timer("render"):
                text = self.counter.render(rec["messages"])
        return {"id": rec["id"], "source": rec["source"], "messages": rec["messages"], "images": rec["images"],
                "image_exts": exts, "image_grids": grids, "image_tokens": tokens, "text": text, "text_key": key}

    def _verify(self, item: dict[str, Any], stats: StageStats) -> None:
        """Run the full processor on decoded pixels; a disagreement stops the run."""
        assert self.counter is not None
        try:
            with stats.timer("verify"):
                images = [decode(p, self.limits) for p in item["images"]]
                exact, grids = self.counter.count_exact(item["messages"], images)
        except ImageError as exc:  # header fine, pixels broken: a bad record, not a mismatch
            stats.error(item["id"], item["source"], exc.reason, exc.detail)
            item["error"] = exc.reason
            return
        if self.counter.render(item["messages"]) != self.counter.render_reference(item["messages"]):
            raise VerifyMismatch(f"record {item['id']!r}: the chat template renders differently through the "
                                 "processor than through the template renderer; please report this processor")
        if self.config.exact:
            item["tokens"], item["image_grids"] = exact, grids
            item["image_tokens"] = [g[0] * g[1] * g[2] // (self.counter.image_rule.merge_size ** 2)
                                    if self.counter.image_rule else 0 for g in grids]
        elif exact != item["tokens"] or grids != item["image_grids"]:
            raise VerifyMismatch(f"record {item['id']!r}: {self._mismatch(item, images, exact, grids)}")
        item["verified"] = True

    def _mismatch(self, item: dict[str, Any], images: list[Any], exact: int, grids: list[list[int]]) -> str:
        """What disagrees between the count and the full processor, named (the image, its size, both grids)."""
        for j, (mine, theirs) in enumerate(zip(item["image_grids"], grids)):
            if list(mine) != list(theirs):
                w, h = images[j].size
                return (f"{image_label(item['images'][j], j)} decodes to {w}x{h}: the Qwen2-VL rule gives grid "
                        f"{list(mine)}, the processor {list(theirs)}; this processor resizes images another way "
                        "(other min/max pixels, or not the Qwen2-VL family): rerun with --exact, which counts "
                        "every image through the processor")
        return (f"counted {item['tokens']} tokens ({item['text_tokens']} of text), the processor gives {exact} with "
                f"the same image grids: its tokenizer or template differs from the one counted with; rerun with "
                "--exact, and report this processor")

    def _write_lengths(self, rows: list[dict[str, Any]], work: Path, shard_id: str) -> None:
        lengths = pa.table({
            "id": [r["id"] for r in rows], "source": [r["source"] for r in rows],
            "tokens": [r["tokens"] for r in rows], "text_tokens": [r["text_tokens"] for r in rows],
            "image_tokens": [sum(r["image_tokens"]) for r in rows], "n_images": [r["n_images"] for r in rows],
            "image_grids": [r["image_grids"] for r in rows], "text_key": [r["text_key"] for r in rows],
        }, schema=LENGTHS_SCHEMA)
        write_parquet(work / "lengths" / f"{shard_id}.parquet", lengths)

    @staticmethod
    def _store_table(rows: list[dict[str, Any]]) -> pa.Table:
        """One batch of the record store (see the module docstring)."""
        return pa.table({
            "id": [r["id"] for r in rows], "source": [r["source"] for r in rows],
            "messages": [json.dumps(r["messages"], ensure_ascii=False) for r in rows],
            "images": [[_where(p) for p in r["images"]] for r in rows],
            "image_bytes": [[p if isinstance(p, bytes) else None for p in r["images"]] for r in rows],
            "image_spans": [[p.span() if _member(p) else [] for p in r["images"]] for r in rows],
            "image_exts": [r["image_exts"] for r in rows],
            "image_grids": [r["image_grids"] for r in rows], "image_tokens": [r["image_tokens"] for r in rows],
            "tokens": [r["tokens"] for r in rows],
        }, schema=RECORDS_SCHEMA)


class _ShardCounts:
    """One shard's records on their way from the reader to the record store: a batch is tokenized at once (its
    texts not counted before), checked where chosen, and written to the store; each shard keeps only the rows of
    its lengths table."""

    def __init__(self, task: LengthsTask, stats: StageStats, ctx: ShardContext, store: Any) -> None:
        self.task, self.stats, self.ctx, self.store = task, stats, ctx, store
        self.pending: list[dict[str, Any]] = []  # prepared, not yet counted
        self.rows: list[dict[str, Any]] = []  # counted and stored: the shard's lengths

    def add(self, item: dict[str, Any]) -> None:
        """A prepared record; the batch is counted when it is full."""
        self.pending.append(item)
        if len(self.pending) >= _BATCH:
            self.flush()

    def flush(self) -> None:
        """Count the pending records' texts (those not reused), check the chosen ones, store the batch."""
        if not self.pending:
            return
        task, stats, counter = self.task, self.stats, self.task.counter
        assert counter is not None
        known = task._reused or {}
        fresh = [p for p in self.pending if p["text_key"] not in known]
        with stats.timer("tokenize"):
            lengths = counter.text_lengths([p["text"] for p in fresh]) if fresh else []
            counted = {id(p): n for p, n in zip(fresh, lengths)}
        stats.extra["text_counts_reused"] = stats.extra.get("text_counts_reused", 0) + len(self.pending) - len(fresh)
        stats.extra["text_counts_made"] = stats.extra.get("text_counts_made", 0) + len(fresh)
        batch = []
        for item in self.pending:
            n_text = counted[id(item)] if id(item) in counted else known[item["text_key"]]
            item["text_tokens"] = n_text
            item["tokens"] = counter.count(n_text, item["image_tokens"])
            if item.pop("verify"):
                task._verify(item, stats)
                if item.get("error"):
                    continue
            # a tar member keeps its address, a Parquet cell its bytes (the row group is freed)
            item["images"] = [_kept(p) for p in item["images"]]
            item["text"] = ""
            batch.append(item)
            stats.kept(item["source"])
        self.ctx.progress(len(self.pending))
        self.pending.clear()
        if batch:  # the batch's image bytes go to the store now; the shard keeps only counts
            self.store.write_table(task._store_table(batch), max_chunksize=4096)
            for item in batch:
                item["n_images"], item["images"], item["messages"] = len(item["images"]), (), ()
            self.rows.extend(batch)
