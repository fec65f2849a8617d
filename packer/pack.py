"""``curate pack``: exact token lengths → packing plan → WebDataset shards, with stats and a plot.

Steps (each resumable; see ``curate.core.shards`` for the contract):

1. **lengths** (per input shard, parallel): :class:`packer.lengths.LengthsTask`,
   merged into ``OUT/lengths.parquet``. Earlier counts are reused, at any ctx, only
   where they still hold: pass ``--lengths OLD_OUT/lengths.parquet``, or let the
   lengths index find a folder that counted the same inputs; the text counts of the
   input's records whose key (processor fingerprint + messages) matches are reused,
   image headers are read again, other records are counted, and records of the old
   table that are not in the input are ignored and reported (:mod:`packer.reuse`).
   ``--lengths`` without INPUT (``--plan-only``) plans from the table as it is.
2. **plan** (driver, global): duplicates and records longer than ctx are dropped
   with their reason; :func:`packer.plan.plan_bins` packs the rest; ``OUT/plan.parquet``.
3. **write** (per output shard, parallel): :class:`packer.writer.ShardWriteTask`.
"""

from __future__ import annotations

import hashlib
import math
import os
import shutil
import time
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from curate.core.columns import counts_by_source, first_occurrences, source_codes
from curate.core.errors import UserError
from curate.executors import Executor, get_executor, run_stage
from curate.core.io import atomic_open, curate_cache, dumps_json, file_sha256, read_json, write_json, write_parquet
from curate.core.progress import console
from curate.core.location import Location, shown
from curate.core.remote import reading, writing
from curate.core.staging import url_of
from curate.core.shards import SHARDS_DIR, Shard, inputs_fingerprint, plan_shards
from curate.core.stats import StageStats, finish_stage, run_header
from curate.core.validate import configure
from packer.config import DEFAULT_SEQUENCES_PER_SHARD, PackConfig  # noqa: F401 (re-exported)
from packer.lengths import LengthsTask
from packer.lengths_file import LENGTHS_FILE, LENGTHS_SHA, load_lengths, processor_of, vouched
from packer.reuse import INDEX_DIR, index_text_counts, reuse_report
from packer.compute_balance import BalanceOptions, balance_table, plan_arrays, plan_columns
from packer.padding import batch_padding_tokens, reduction_ratio
from packer.plan import plan_bins
from packer.report import plot_packing
from packer.writer import PLAN_ARRAYS, BinRange, ShardWriteTask


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
    from packer.lengths import LENGTHS_SCHEMA
    table = pa.concat_tables(tables) if tables else LENGTHS_SCHEMA.empty_table()
    write_parquet(out / "lengths.parquet", table)
    return table


def _reject(stats: StageStats, kind: str, reason: str, index: np.ndarray, ids: pa.ChunkedArray | pa.Array,
            codes: np.ndarray, names: pa.Array, details: pa.Array | str) -> np.ndarray:
    """List the rows ``index`` as rejects, as columns; return their count per source code."""
    if not len(index):
        return np.zeros(len(names), np.int64)
    picked = codes[index]
    stats.reject_columns(kind, reason, ids.take(pa.array(index, pa.int64())), names.take(pa.array(picked)), details)
    return np.bincount(picked, minlength=len(names))


def plan_step(table: pa.Table, ctx: int, out: Path, *, seed: int, workers: int, stats: StageStats,
              balance: BalanceOptions | None = None,
              sources: tuple[np.ndarray, list[str]] | None = None,
              background: ThreadPoolExecutor | None = None) -> dict[str, Any]:
    """Drop duplicates and too-long records, pack the rest, write the plan files; return plan stats.

    Works on columns (source codes, numpy masks, Arrow takes): no Python object is
    made per record, rejected ones included. With ``balance``, the bins are laid out in
    compute-balanced steps (:mod:`packer.compute_balance`). ``sources``: the table's
    :func:`source_codes` when the caller has them already. ``background``: a thread that
    computes the padding baseline while the planner runs and writes ``plan.parquet``
    while the caller draws the plot (wait for ``_pending`` of the result before the marker).
    """
    ids = table.column("id").cast(pa.string())  # chunked as read: no combined copy
    codes, names = sources if sources is not None else _source_codes(table)
    tokens = table.column("tokens").to_numpy()  # as stored (int32): the planner takes int64 of the candidates only
    if tokens.dtype.kind not in "iu":
        tokens = tokens.astype(np.int64)
    seen = np.bincount(codes, minlength=len(names))
    stats.seen_many(dict(zip(names, seen.tolist())))
    name_array = pa.array(names, pa.string())
    keep = first_occurrences(ids)
    pa.default_memory_pool().release_unused()  # the sort's buffers go back to the system before the planner
    rejected = _reject(stats, "errored", "duplicate_id", np.flatnonzero(~keep), ids, codes, name_array,
                       "id already seen earlier in the input")
    candidates = np.flatnonzero(keep)
    del keep
    counted = tokens[candidates]  # every counted sample, the too long ones included (for the plot)
    packed = (counted > 0) & (counted <= ctx)  # what the planner packs (plan.bin_of >= 0)
    baseline = _submit(background, batch_padding_tokens, counted[packed], batch_size=8, seed=seed)
    del packed
    plan = plan_bins(counted, ctx, seed=seed, workers=workers)
    too_long = candidates[plan.too_long]
    long_tokens = pa.array(tokens[too_long]).cast(pa.string())
    rejected += _reject(stats, "dropped", "too_long", too_long, ids, codes, name_array,
                        pc.binary_join_element_wise(long_tokens, f" tokens > ctx {ctx}", ""))
    rejected += _reject(stats, "dropped", "empty", candidates[plan.empty], ids, codes, name_array, "0 tokens")
    members = candidates[plan.members]
    pa.default_memory_pool().release_unused()
    stats.kept_many(dict(zip(names, (seen - rejected).tolist())))
    offsets, bin_tokens, lower_bound, packed_tokens = plan.bin_offsets, plan.bin_tokens, plan.lower_bound_bins, \
        plan.packed_tokens
    del plan, candidates  # per-record arrays not needed any more (the plan's are in candidate order)
    extra, columns, balanced = {}, {}, None
    if balance is not None:
        balanced = balance_table(table, offsets, members, balance, seed=seed)
        offsets, members, bin_tokens, extra = balanced.bin_offsets, balanced.members, balanced.bin_tokens, plan_arrays(balanced)
        columns = plan_columns(balanced)
    pending = _submit(background, _write_plan, out / "plan.parquet", offsets, members, ids, tokens, columns)
    del ids, tokens, columns
    np_path = out / PLAN_ARRAYS  # written here meanwhile: the shard writer reads it as soon as this returns
    np_path.parent.mkdir(parents=True, exist_ok=True)
    with atomic_open(np_path, "wb") as fh:
        np.savez(fh, bin_offsets=offsets, members=members, bin_tokens=bin_tokens, **extra)
    n_bins = int(bin_tokens.shape[0])
    padding = n_bins * ctx - packed_tokens
    reduction = reduction_ratio(baseline.result(), padding)
    return {
        "bins": n_bins, "lower_bound_bins": lower_bound,
        "bins_over_lower_bound": n_bins / lower_bound if lower_bound else 1.0,
        "fill_ratio": packed_tokens / (n_bins * ctx) if n_bins else 0.0, "packed_tokens": packed_tokens,
        "padding_reduction": None if math.isinf(reduction) else reduction,
        "padding_tokens_packed": padding,
        **({"balance": balanced.stats} if balanced is not None else {}),
        "_bin_tokens": bin_tokens, "_lengths": counted, "_balanced": balanced, "_pending": pending,
    }


def _write_plan(path: Path, offsets: np.ndarray, members: np.ndarray, ids: pa.ChunkedArray | pa.Array,
                tokens: np.ndarray, columns: dict[str, np.ndarray]) -> None:
    """``plan.parquet``: bin, id and tokens of every packed record in plan order (and ``columns`` per bin)."""
    bins = np.repeat(np.arange(offsets.shape[0] - 1, dtype=np.int64), np.diff(offsets))
    write_parquet(path, pa.table({"bin": pa.array(bins, pa.int64()), "id": ids.take(pa.array(members, pa.int64())),
                                  "tokens": pa.array(tokens[members], pa.int32()),
                                  **{k: v[bins] for k, v in columns.items()}}))


def _submit(pool: ThreadPoolExecutor | None, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Future:
    """``fn`` run by ``pool``, or here and now without one; its future either way."""
    if pool is not None:
        return pool.submit(fn, *args, **kwargs)
    done: Future = Future()
    done.set_result(fn(*args, **kwargs))
    return done


def _check_ctx(out: Path, ctx: int) -> None:
    recorded = out / SHARDS_DIR / "write" / "settings.json"
    if recorded.exists() and read_json(recorded).get("ctx") != ctx:
        old = read_json(recorded).get("ctx")
        raise UserError(f"{shown(out)} was packed at ctx {old}; to pack the same input at ctx {ctx} reuse its "
                        f"lengths: curate pack ... --lengths {shown(out)}/lengths.parquet --ctx {ctx} --out NEW_FOLDER")


def check_request(inputs: Sequence[str | os.PathLike[str]], config: PackConfig) -> None:
    """What a pack needs beside valid settings: INPUT or ``--lengths``, a processor to count INPUT, ``--plan-only``
    for a plan from lengths alone (checked by the verb before any work, and by :func:`pack`).

    Raises:
        UserError: one of them is missing.
    """
    if not inputs and config.lengths is None:
        raise UserError("give INPUT files to pack, or --lengths LENGTHS.parquet with --plan-only")
    if inputs and config.processor is None and config.lengths is None:
        raise UserError("--processor is required to count tokens (a processor folder or hub id)")
    if not inputs and not config.plan_only:
        raise UserError("--lengths without INPUT packs a plan only: add --plan-only (shards need the records)")


def pack(inputs: Sequence[str | os.PathLike[str]], config: PackConfig | None = None, *,
         executor: Executor | None = None, **settings: Any) -> dict[str, Any]:
    """Pack records into sequences of at most ``ctx`` tokens; see the module docstring.

    Args:
        inputs: record files or folders (none with ``lengths`` and ``plan_only``).
        config: the settings (see :class:`PackConfig`), checked before anything is read; its
            ``balance_compute`` (with ``dp``, optional ``micro_batches`` and ``cost_model``) lays
            the bins out in steps of equal compute per rank (:mod:`packer.compute_balance`). ``out`` and
            ``lengths`` may be in a bucket (:mod:`curate.core.remote`).
        executor: an executor (default: local, ``config.workers`` processes).
        **settings: fields of :class:`PackConfig` (``out=``, ``ctx=``...), instead of or over ``config``.

    Returns:
        The content written to ``OUT/stats.json``.
    """
    config = configure(PackConfig, config, **settings)
    with writing(config.out) as out, _lengths_here(config.lengths) as lengths:
        return _pack(inputs, config, out, lengths, executor)


@contextmanager
def _lengths_here(lengths: Location | None) -> Iterator[Path | None]:
    """``--lengths`` as a local file, with what pack reads beside it (its run's stats and count settings)."""
    if lengths is None:
        yield None
        return
    beside = (lengths.name, "stats.json", f"{SHARDS_DIR}/lengths/settings.json")
    with reading(lengths.parent, include=beside) as folder:
        yield folder / lengths.name


def _pack(inputs: Sequence[str | os.PathLike[str]], config: PackConfig, out: Path, lengths: Path | None,
          executor: Executor | None) -> dict[str, Any]:
    """:func:`pack` in ``out``, a local folder (the run's own, or the staging folder of a bucket)."""
    ctx, processor, seed, workers = config.ctx, config.processor, config.seed, config.workers
    min_pixels, max_pixels, exact = config.min_pixels, config.max_pixels, config.exact
    shard_size, sequences_per_shard, plan_only = config.shard_size, config.sequences_per_shard, config.plan_only
    verify_fraction, trust_remote_code, plot = config.verify_fraction, config.trust_remote_code, config.plot
    verify_sample = config.verify_sample
    check_request(inputs, config)
    balance = config.balance
    out.mkdir(parents=True, exist_ok=True)
    _check_ctx(out, ctx)
    executor = executor or get_executor("local", workers=workers)
    timings: dict[str, float] = {}
    total = StageStats()
    store_dir = out
    fingerprint = None

    t0 = time.perf_counter()
    reuse: dict[str, Any] | None = None
    sources: tuple[np.ndarray, list[str]] | None = None  # the source codes, when the lengths-only path made them
    if lengths is not None and not inputs:  # a plan from counts alone: no records to check them against
        table, store_dir, fingerprint = load_lengths(Path(lengths), need_store=False,
                                                      columns=None if balance is not None else PLAN_COLUMNS)
        sources = _source_codes(table)
        by_source = counts_by_source(*sources)
        total.seen_many(by_source)
        total.kept_many(by_source)
    else:
        if lengths is not None:
            # one line for an unreadable file, or one whose counts nothing vouches for, before any work
            load_lengths(Path(lengths), need_store=False, reuse=True, columns=("id", "tokens"))
            processor = processor or processor_of(Path(lengths))
        shards = plan_shards(inputs, shard_size, image_root=config.image_root)
        key = _lengths_key(shards, {})  # finds a folder that counted these inputs; record keys decide what is reused
        earlier = Path(lengths) if lengths is not None else _find_counted(key, out.resolve())
        if earlier is not None and earlier.is_dir():
            earlier = earlier / "lengths.parquet"
        task = LengthsTask(processor, min_pixels=min_pixels, max_pixels=max_pixels, exact=exact,
                           verify_fraction=verify_fraction, trust_remote_code=trust_remote_code,
                           verify_sample=verify_sample, limits=config.image_limits, max_images=config.max_images,
                           # text counts reused by key; every image goes through the gate again
                           reuse_from=index_text_counts(earlier, out) if earlier is not None else None)
        task.choose_verified(shards, seed)
        settings = task.settings()
        check = {"verify_fraction": verify_fraction, "verify_sample": task.verify_sample}
        fingerprint = settings["processor"]
        total = run_stage(task, shards, out, executor=executor, seed=seed, desc="count tokens",
                          settings={**settings, **check})
        shutil.rmtree(out / INDEX_DIR, ignore_errors=True)  # the workers' shared index of earlier keys is done
        table = _merge_lengths(out)
        _remember_counted(key, out)
        if earlier is not None:
            reuse = reuse_report(earlier, table, total, explicit=lengths is not None)
    timings["lengths"] = time.perf_counter() - t0

    t0 = time.perf_counter()
    planned = StageStats()
    background = ThreadPoolExecutor(1) if workers > 1 else None  # a second core: baseline and plan writing
    plan_stats = plan_step(table, ctx, out, seed=seed, workers=workers, stats=planned, balance=balance,
                           sources=sources, background=background)
    del table, sources
    balanced, pending = plan_stats.pop("_balanced"), plan_stats.pop("_pending")
    total = total.then(planned)
    timings["plan"] = time.perf_counter() - t0

    sequences = 0
    if not plan_only:
        t0 = time.perf_counter()
        bins = plan_stats["bins"]
        bounds = [0, bins] if balanced is None else balanced.layout.rank_starts().tolist()  # a tar holds one rank
        ranges = [(lo, min(lo + sequences_per_shard, hi)) for lo_r, hi in zip(bounds[:-1], bounds[1:])
                  for lo in range(lo_r, hi, sequences_per_shard)]
        out_shards = [Shard(k, meta=BinRange(*r), size=r[1] - r[0]) for k, r in enumerate(ranges)]
        writer = ShardWriteTask(ctx=ctx, processor=fingerprint or "",
                                store_dir=None if store_dir == out else str(store_dir))
        write_stats = run_stage(writer, out_shards, out, executor=executor, seed=seed, desc="write shards",
                                settings={**writer.settings(), "plan": file_sha256(out / PLAN_ARRAYS)[:16]})
        sequences = int(write_stats.extra.get("sequences", 0))
        total = total.then(write_stats)
        timings["write"] = time.perf_counter() - t0

    total.check()
    bin_tokens, counted_lengths = plan_stats.pop("_bin_tokens"), plan_stats.pop("_lengths")
    counts = total.to_dict()
    result: dict[str, Any] = {
        **run_header("pack", seed=seed, settings={"ctx": ctx, "processor": fingerprint, "processor_path": processor,
                                                  "min_pixels": min_pixels,
                                                  "max_pixels": max_pixels, "exact": exact,
                                                  "verify_fraction": verify_fraction,
                                                  "verify_sample": None if verify_fraction is not None else verify_sample,
                                                  "plan_only": plan_only,
                                                  "balance": balance.settings() if balance else None,
                                                  **config.reading_settings()}),
        "records_in": counts["records_in"], "records_packed": counts["records_out"],
        "dropped": counts["dropped"], "errored": counts["errored"], "per_source": counts["per_source"],
        **plan_stats, "sequences": sequences if not plan_only else None,
        "verified_records": int(total.extra.get("verified", 0)),
        **({"lengths_reuse": reuse} if reuse is not None and lengths is not None else {}),
        **({LENGTHS_SHA: file_sha256(out / LENGTHS_FILE)} if (out / LENGTHS_FILE).exists() else {}),
        "timings": {**{f"{k}_steps": v for k, v in counts["timings"].items()}, **timings},
        "outputs": {"lengths": "lengths.parquet", "plan": "plan.parquet", "rejects": "rejects.parquet",
                    **({} if plan_only else {"shards": "shards/"}), **({"plot": "packing.png"} if plot else {})},
    }
    if plot:  # drawn while the background thread may still be writing plan.parquet
        plot_packing(out / "packing.png", counted_lengths, bin_tokens, ctx,
                     step_ratio=None if balanced is None else balanced.step_ratio,
                     title=f"{counts['records_out']:,} samples → {plan_stats['bins']:,} sequences of ≤{ctx} tokens")
    pending.result()  # plan.parquet complete before stats.json, the marker
    if background is not None:
        background.shutdown()
    return finish_stage(out, result, total)


def _source_codes(table: pa.Table) -> tuple[np.ndarray, list[str]]:
    return source_codes(table.column("source") if "source" in table.column_names else None, table.num_rows)
