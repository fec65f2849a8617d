"""Step 1 of ``curate pack``, the count: exact token lengths of every record, the lengths file, and the
reuse of earlier counts (see :mod:`packer.pack`).

**On the driver.** :func:`count_lengths` runs :class:`LengthsTask` over the input's shards and merges their
``lengths/*.parquet`` into ``OUT/lengths.parquet``, reusing the text counts of earlier ones (``--lengths``, or a
folder that counted the same inputs, found through the lengths index in the cache); with ``--lengths`` and no
INPUT it reads that table as it is. Either way it hands the next steps a :class:`Counted`.

**Per input shard** (:class:`LengthsTask`). For each shard the task writes

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

**A lengths file given back** (``--lengths``): read, checked, vouched for. Every ``curate pack`` records
the SHA-256 of the ``lengths.parquet`` it wrote in its ``stats.json`` (``lengths_sha256``). A lengths file
read back is held to it:

* beside the ``stats.json`` of the pack that wrote it, its bytes must still have that hash: a file
  changed since (token counts edited by hand or by a tool) is refused, never planned nor reused;
* its counts are reused for other records (``--lengths`` with INPUT, or an earlier folder that counted
  the same inputs) only when it is vouched for that way;
* a table without such a record (made elsewhere) is planned as it is (``--lengths`` without INPUT,
  ``--plan-only``), after its columns are checked: ``id`` and ``tokens`` present, ``tokens`` integers,
  none null or negative.

**Reusing earlier counts**: the text counts looked up by key, and a report of what was reused.
``curate pack INPUT --lengths OLD/lengths.parquet`` (or the automatic reuse of a folder
that counted the same inputs) takes from ``OLD`` only the text counts of the input's
records whose ``text_key`` matches (:func:`text_key`); every other record is
counted, and records of ``OLD`` that are not in the input are ignored and reported,
never packed. Both sides work on columns: the driver sorts the earlier keys once into
two ``.npy`` files (:func:`index_text_counts`) that every worker memory-maps
(:class:`TextCounts`: one binary search per lookup, pages shared by all workers of a
machine), and the report compares id columns with Arrow's ``is_in``.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from curate.core.columns import counts_by_source, source_codes
from curate.core.errors import UserError
from curate.core.image_headers import ImageAt
from curate.core.images import ImageError, check, decode, file_extension, image_label
from curate.core.io import (atomic_open, curate_cache, dumps_json, file_sha256, read_json, url_of, write_json,
                            write_parquet)
from curate.core.progress import note
from curate.core.shards import (
    SHARDS_DIR,
    Shard,
    ShardContext,
    ShardTask,
    inputs_fingerprint,
    plan_shards,
    readable_records,
)
from curate.core.stats import StageStats
from curate.core.limits import MAX_RECORD_CHARS, TOO_LONG, over, total_chars
from curate.executors import Executor, run_stage
from packer.config import PackConfig
from packer.tokens import SPECIAL_TOKEN, TokenCounter


# ---------------------------------------------------------------------------
# The lengths file given back (--lengths)
# ---------------------------------------------------------------------------


#: The name of a pack's lengths file, and the ``stats.json`` key of its hash.
LENGTHS_FILE, LENGTHS_SHA = "lengths.parquet", "lengths_sha256"


def vouched(path: Path) -> bool | None:
    """Whether the pack that wrote ``path`` vouches for its bytes: True (same hash), False (changed since),
    None (no finished pack's record of it beside it)."""
    try:
        recorded = read_json(path.parent / "stats.json").get(LENGTHS_SHA) if path.name == LENGTHS_FILE else None
    except (OSError, ValueError, AttributeError):
        recorded = None
    if not isinstance(recorded, str):
        return None
    return file_sha256(path) == recorded


def load_lengths(path: Path, *, need_store: bool, reuse: bool = False,
                 columns: Sequence[str] | None = None) -> tuple[pa.Table, Path, str | None]:
    """Read a lengths file (only ``columns`` of it when given and present): ``(table, its folder, the processor
    fingerprint it was counted with)``; ``reuse``: its counts will be reused for other records.

    Raises:
        UserError: no such file, not Parquet, missing, null or negative counts, changed since its pack wrote
            it, or (``reuse``) not vouched for by a pack's ``stats.json``.
    """
    if not path.exists():
        raise UserError(f"--lengths {path}: no such file")
    trusted = vouched(path)
    if trusted is False:
        raise UserError(f"--lengths {path}: changed since curate pack wrote it (its SHA-256 differs from "
                        f"{path.parent / 'stats.json'}); its counts cannot be trusted: count again from INPUT")
    if trusted is None and reuse:
        raise UserError(f"--lengths {path}: no stats.json of the curate pack that wrote it vouches for it, so its "
                        "counts are not reused for INPUT; give a pack's own lengths.parquet, or plan it as it is "
                        "with --plan-only and no INPUT")
    try:
        # ParquetFile, not read_table: the dataset layer (and the pandas it imports) is not needed for one file
        schema = pq.read_schema(path)
        if columns is not None:
            columns = [c for c in columns if c in schema.names]
        as_codes = [c for c in ("source",) if columns is not None and c in columns  # a few names: read as codes
                    and pa.types.is_string(schema.field(c).type)]
        table = pq.ParquetFile(path, read_dictionary=as_codes or None).read(columns=columns)
    except Exception as exc:  # pyarrow raises several types
        raise UserError(f"--lengths {path}: not a readable Parquet file ({exc})") from None
    missing = {"id", "tokens"} - set(table.column_names)
    if missing:
        raise UserError(f"--lengths {path}: missing column(s) {', '.join(sorted(missing))}; need at least id and tokens")
    tokens = table.column("tokens")
    if not pa.types.is_integer(tokens.type):
        raise UserError(f"--lengths {path}: tokens are {tokens.type}, not integers")
    if tokens.null_count:
        raise UserError(f"--lengths {path}: {tokens.null_count:,} records have no token count (null)")
    if table.num_rows and pc.min(tokens).as_py() < 0:
        raise UserError(f"--lengths {path}: negative token counts")
    folder = path.parent
    fingerprint = None
    settings = folder / SHARDS_DIR / "lengths" / "settings.json"
    if settings.exists():
        fingerprint = read_json(settings).get("processor")
    if need_store and not (folder / "_records").is_dir():
        raise UserError(f"--lengths {path}: writing shards needs the counted records stored beside it "
                        f"({folder}/_records); pack with --plan-only, or count again from INPUT")
    return table, folder, fingerprint


def processor_of(lengths: Path) -> str:
    """The processor an earlier pack counted with (its ``stats.json``), for ``--lengths`` with INPUT."""
    try:
        found = read_json(lengths.parent / "stats.json").get("settings", {}).get("processor_path")
    except (OSError, ValueError, AttributeError):
        found = None
    if not found:
        raise UserError(f"--lengths {lengths} with INPUT counts the records that changed: give --processor "
                        "(the one the trainer uses)")
    return str(found)


# ---------------------------------------------------------------------------
# Reusing earlier counts
# ---------------------------------------------------------------------------


SHOWN_IDS = 5


INDEX_DIR = "_reuse"
"""Folder of an output (beside its shards) holding the sorted earlier keys for the workers."""


class TextCounts:
    """``text_key → text_tokens`` of an earlier ``lengths.parquet``, as sorted arrays (no Python object per row).

    Supports ``key in counts``, ``counts[key]`` and ``len(counts)`` like the dict it replaces;
    a lookup is one binary search. Made from the columns (:meth:`from_columns`) or opened
    memory-mapped from :func:`index_text_counts`'s folder (:meth:`open`).
    """

    def __init__(self, keys: np.ndarray, counts: np.ndarray) -> None:
        self._keys, self._counts = keys, counts

    @classmethod
    def from_columns(cls, keys: pa.Array | pa.ChunkedArray, counts: pa.Array | pa.ChunkedArray) -> TextCounts:
        """Sort the keys (rows without a key or a count are left out)."""
        valid = pc.and_(pc.is_valid(keys), pc.is_valid(counts))
        keys, counts = keys.filter(valid), counts.filter(valid)
        order = pc.sort_indices(keys)
        return cls(_fixed_width(keys.take(order)), np.asarray(counts.take(order).to_numpy(), dtype=np.int64))

    @classmethod
    def open(cls, folder: str | Path) -> TextCounts:
        """The arrays :meth:`save` wrote, memory-mapped (read-only, shared between processes)."""
        folder = Path(folder)
        return cls(np.load(folder / "keys.npy", mmap_mode="r"), np.load(folder / "counts.npy", mmap_mode="r"))

    def save(self, folder: str | Path) -> None:
        """Write ``keys.npy`` and ``counts.npy`` into ``folder`` (each atomically; keys last, read first)."""
        folder = Path(folder)
        for name, array in (("counts.npy", self._counts), ("keys.npy", self._keys)):
            with atomic_open(folder / name, "wb") as fh:
                np.save(fh, array)

    def __len__(self) -> int:
        return int(self._counts.shape[0])

    def _find(self, key: str) -> int:
        raw = key.encode("utf-8")
        i = int(np.searchsorted(self._keys, raw))
        return i if i < len(self) and self._keys[i] == raw else -1

    def __contains__(self, key: object) -> bool:
        return isinstance(key, str) and self._find(key) >= 0

    def __getitem__(self, key: str) -> int:
        i = self._find(key)
        if i < 0:
            raise KeyError(key)
        return int(self._counts[i])


def _fixed_width(keys: pa.Array | pa.ChunkedArray) -> np.ndarray:
    """Strings as a numpy ``S<width>`` array in the same order (zero-copy when all have one length, as keys do)."""
    arr = keys.combine_chunks() if isinstance(keys, pa.ChunkedArray) else keys
    arr = arr.cast(pa.string())
    n = len(arr)
    if n == 0:
        return np.zeros(0, "S1")
    offsets = np.frombuffer(arr.buffers()[1], np.int32, n + 1, arr.offset * 4)
    lengths = np.diff(offsets)
    width = max(int(lengths.max()), 1)
    if int(lengths.min()) == width and arr.null_count == 0:
        return np.frombuffer(arr.buffers()[2], f"S{width}", n, int(offsets[0])).copy()
    return np.array([k.encode("utf-8") for k in arr.to_pylist()], f"S{width}")  # mixed lengths: rare


def reusable_text_counts(path: str | None) -> TextCounts | dict[str, int]:
    """The text counts of an earlier ``lengths.parquet``, or of its index folder (empty without one, or without keys)."""
    if path is None:
        return {}
    if Path(path).is_dir():
        return TextCounts.open(path) if (Path(path) / "keys.npy").exists() else {}
    try:
        schema = pq.read_schema(path)
        if "text_key" not in schema.names or "text_tokens" not in schema.names:
            return {}  # counted before keys existed: nothing can be trusted
        table = pq.ParquetFile(path).read(columns=["text_key", "text_tokens"])
    except (OSError, ValueError, pa.ArrowException):
        return {}
    return TextCounts.from_columns(table.column("text_key"), table.column("text_tokens"))


def index_text_counts(earlier: str | Path, out: str | Path) -> str:
    """Sort an earlier ``lengths.parquet``'s keys once, into ``OUT/_reuse``; return what workers should open.

    The workers then memory-map the same two files instead of each building its own copy.
    Returns the folder, or ``earlier`` itself when it has no keys (nothing is reused then).
    """
    found = reusable_text_counts(str(earlier))
    if not isinstance(found, TextCounts):
        return str(earlier)
    folder = Path(out) / INDEX_DIR
    found.save(folder)
    return str(folder)


def reuse_report(earlier: Path, table: pa.Table, stats: StageStats, *, explicit: bool) -> dict[str, Any]:
    """Compare the earlier counts with this run's; print one line on stderr and return the figures.

    Args:
        earlier: The earlier ``lengths.parquet``.
        table: This run's merged lengths (records counted).
        stats: This run's lengths-step stats (``text_counts_reused`` in ``extra``; rejects).
        explicit: Whether the user named ``earlier`` (``--lengths``) or it was found automatically.
    """
    old_ids = pq.ParquetFile(earlier).read(columns=["id"]).column("id").combine_chunks().cast(pa.string())
    here = pa.chunked_array([table.column("id").cast(pa.string()),
                             stats.rejects_table().column("id")], pa.string()).combine_chunks()
    missing = pc.unique(old_ids.filter(pc.invert(pc.is_in(old_ids, value_set=here, skip_nulls=False))))
    ignored = missing.take(pc.sort_indices(missing)).drop_null()
    shown = ignored.slice(0, SHOWN_IDS).to_pylist()
    reused = int(stats.extra.get("text_counts_reused", 0))
    report = {"from": str(earlier), "records_in_lengths": pc.count_distinct(old_ids, mode="only_valid").as_py(),
              "text_counts_reused": reused, "counted": int(stats.extra.get("text_counts_made", 0)), "ignored": len(ignored),
              "ignored_ids": shown}
    where = f"--lengths {earlier}" if explicit else f"token counts of an earlier run ({earlier})"
    more = f" (e.g. {', '.join(shown)})" if shown else ""
    note(f"{where}: reused the text counts of {reused:,} records, counted {report['counted']:,} new or changed "
         f"records (every image goes through the image gate again), ignored {len(ignored):,} of its records that are not "
         f"in the input{more}")
    return report


# ---------------------------------------------------------------------------
# Per input shard: the counting task
# ---------------------------------------------------------------------------


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
        text beyond it is never rendered nor tokenized (:mod:`curate.core.limits`)."""
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
        if reserved:  # the trainer would read it as the token: errored, never escaped (packer.tokens)
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


# ---------------------------------------------------------------------------
# On the driver: the count step
# ---------------------------------------------------------------------------


PLAN_COLUMNS = ("id", "source", "tokens")
"""What a plan from lengths alone reads (a compute-balanced plan reads every column)."""


def _lengths_index() -> Path:
    return curate_cache("lengths-index.json")


def _lengths_key(shards: Sequence[Shard], settings: dict[str, Any]) -> str:
    return hashlib.sha256((inputs_fingerprint(shards) + dumps_json(settings)).encode()).hexdigest()[:24]


def _find_counted(key: str, out: Path) -> Path | None:
    """A folder (other than ``out``) whose lengths step finished for the same key."""
    index = _lengths_index()
    if not index.exists():
        return None
    try:
        folder = Path(read_json(index).get(key, ""))
    except (OSError, ValueError):
        return None
    if folder and folder != out and (folder / "_records").is_dir() and (folder / LENGTHS_FILE).exists() \
            and vouched(folder / LENGTHS_FILE):  # counts reused only from a file its pack vouches for
        return folder
    return None


def _remember_counted(key: str, out: Path) -> None:
    if url_of(out) is not None:
        return  # a bucket's staging folder does not keep the counts: nothing to find here later
    index = _lengths_index()
    try:
        data = read_json(index) if index.exists() else {}
        data[key] = str(out.resolve())
        write_json(index, data)
    except OSError:
        pass  # the index is a convenience; never fail a run for it


def _merge_lengths(out: Path) -> pa.Table:
    tables = [pq.read_table(p) for p in sorted((out / "lengths").glob("*.parquet"))]
    table = pa.concat_tables(tables) if tables else LENGTHS_SCHEMA.empty_table()
    write_parquet(out / "lengths.parquet", table)
    return table


@dataclass
class Counted:
    """What the count step leaves for the next ones of :func:`packer.pack.pack`: the lengths table and where its records are."""

    table: pa.Table | None  # let go once planned
    stats: StageStats
    fingerprint: str | None  # the processor's, as the counts recorded it
    processor: str | None  # the processor as given (or as the earlier counts name it)
    store_dir: Path  # the folder whose _records/ the writer reads
    sources: tuple[np.ndarray, list[str]] | None = None  # the table's source codes, when made already
    reuse: dict[str, Any] | None = None  # the reuse report of earlier counts


def count_lengths(inputs: Sequence[str | os.PathLike[str]], config: PackConfig, out: Path, lengths: Path | None,
           executor: Executor) -> Counted:
    """Step 1, the token lengths: counted for INPUT (reusing earlier text counts by key), or ``--lengths`` as it
    is when there is no INPUT (a plan from counts alone: no records to check them against)."""
    if lengths is not None and not inputs:
        table, store_dir, fingerprint = load_lengths(lengths, need_store=False,
                                                      columns=None if config.balance is not None else PLAN_COLUMNS)
        sources = table_sources(table)
        by_source = counts_by_source(*sources)
        stats = StageStats()
        stats.seen_many(by_source)
        stats.kept_many(by_source)
        return Counted(table, stats, fingerprint, config.processor, store_dir, sources=sources)
    processor = config.processor
    if lengths is not None:
        # one line for an unreadable file, or one whose counts nothing vouches for, before any work
        load_lengths(lengths, need_store=False, reuse=True, columns=("id", "tokens"))
        processor = processor or processor_of(lengths)
    shards = plan_shards(inputs, config.shard_size, image_root=config.image_root)
    key = _lengths_key(shards, {})  # finds a folder that counted these inputs; record keys decide what is reused
    earlier = lengths if lengths is not None else _find_counted(key, out.resolve())
    if earlier is not None and earlier.is_dir():
        earlier = earlier / "lengths.parquet"
    # text counts reused by key; every image goes through the gate again
    task = LengthsTask(config, processor, reuse_from=index_text_counts(earlier, out) if earlier is not None else None)
    task.choose_verified(shards, config.seed)
    settings = task.settings()
    check = {"verify_fraction": config.verify_fraction, "verify_sample": task.verify_sample}
    stats = run_stage(task, shards, out, executor=executor, seed=config.seed, desc="count tokens",
                      settings={**settings, **check})
    shutil.rmtree(out / INDEX_DIR, ignore_errors=True)  # the workers' shared index of earlier keys is done
    table = _merge_lengths(out)
    _remember_counted(key, out)
    reuse = reuse_report(earlier, table, stats, explicit=lengths is not None) if earlier is not None else None
    return Counted(table, stats, settings["processor"], processor, out, reuse=reuse)


def table_sources(table: pa.Table) -> tuple[np.ndarray, list[str]]:
    """The source codes of a lengths table's rows and the sources' names (:func:`curate.core.columns.source_codes`)."""
    return source_codes(table.column("source") if "source" in table.column_names else None, table.num_rows)
