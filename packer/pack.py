"""``curate pack``: exact token lengths → packing plan → WebDataset shards, with stats and a plot.

Steps (each resumable; see ``curate.core.shards`` for the contract):

1. **lengths** (per input shard, parallel): :class:`packer.count.LengthsTask`,
   merged into ``OUT/lengths.parquet`` (:func:`packer.count.count_lengths`). Earlier counts are reused, at any ctx, only
   where they still hold: pass ``--lengths OLD_OUT/lengths.parquet``, or let the
   lengths index find a folder that counted the same inputs; the text counts of the
   input's records whose key (processor fingerprint + messages) matches are reused,
   image headers are read again, other records are counted, and records of the old
   table that are not in the input are ignored and reported (:mod:`packer.count`).
   ``--lengths`` without INPUT (``--plan-only``) plans from the table as it is.
2. **plan** (driver, global): duplicates and records longer than ctx are dropped
   with their reason; :func:`packer.plan.plan_bins` packs the rest; ``OUT/plan.parquet``.
3. **write** (per output shard, parallel): :class:`packer.writer.ShardWriteTask`.
4. **finish** (driver): ``stats.json`` from :func:`curate.core.stats.stage_result`, ``packing.png``.

:func:`pack` runs them in that order (``_pack``), one short function each (``count_lengths``, ``_plan``,
``_write``, ``_finish``).
"""

from __future__ import annotations

import math
import os
import time
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from curate.core.columns import first_occurrences
from curate.core.errors import UserError
from curate.core.io import Location, atomic_open, file_sha256, read_json, shown, write_parquet
from curate.core.remote import reading, writing
from curate.core.shards import SHARDS_DIR, Shard
from curate.core.stats import StageStats, finish_stage, stage_result
from curate.core.validate import configure
from curate.executors import Executor, get_executor, run_stage
from packer.compute_balance import BalancedBins, BalanceOptions, balance_table, plan_arrays, plan_columns
from packer.config import PackConfig
from packer.count import LENGTHS_FILE, LENGTHS_SHA, Counted, count_lengths, table_sources
from packer.plan import batch_padding_tokens, plan_bins, reduction_ratio
from packer.writer import PLAN_ARRAYS, BinRange, ShardWriteTask


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
    codes, names = sources if sources is not None else table_sources(table)
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
    if inputs and config.processor is not None and config.lengths is None:
        from curate.models.hub import locate

        locate(config.processor, "--processor")  # off the network: one line now, not the hub's retries later


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


@dataclass
class _Planned:
    """What the plan step leaves: its figures for ``stats.json`` and what the plot, the writer and the end read."""

    figures: dict[str, Any]
    stats: StageStats  # the plan's drops (duplicates, too long, empty)
    bin_tokens: np.ndarray
    lengths: np.ndarray
    balanced: BalancedBins | None
    pending: Future  # plan.parquet being written
    background: ThreadPoolExecutor | None


def _pack(inputs: Sequence[str | os.PathLike[str]], config: PackConfig, out: Path, lengths: Path | None,
          executor: Executor | None) -> dict[str, Any]:
    """:func:`pack` in ``out``, a local folder (the run's own, or the staging folder of a bucket)."""
    check_request(inputs, config)
    out.mkdir(parents=True, exist_ok=True)
    _check_ctx(out, config.ctx)
    executor = executor or get_executor("local", workers=config.workers)
    timings: dict[str, float] = {}
    with _timed(timings, "lengths"):
        counted = count_lengths(inputs, config, out, lengths, executor)
    with _timed(timings, "plan"):
        planned = _plan(counted, config, out)
        total = counted.stats.then(planned.stats)
    sequences = None
    if not config.plan_only:
        with _timed(timings, "write"):
            written = _write(planned, counted, config, out, executor)
            sequences = int(written.extra.get("sequences", 0))
            total = total.then(written)
    return _finish(config, out, counted, planned, total, sequences, timings, explicit=lengths is not None)


@contextmanager
def _timed(timings: dict[str, float], step: str) -> Iterator[None]:
    """Wall time of a step of the driver into ``timings[step]``."""
    t0 = time.perf_counter()
    yield
    timings[step] = time.perf_counter() - t0


def _plan(counted: Counted, config: PackConfig, out: Path) -> _Planned:
    """Step 2, the plan (:func:`plan_step`); the lengths table is let go of once it is made."""
    stats = StageStats()
    background = ThreadPoolExecutor(1) if config.workers > 1 else None  # a second core: baseline and plan writing
    assert counted.table is not None
    figures = plan_step(counted.table, config.ctx, out, seed=config.seed, workers=config.workers, stats=stats,
                        balance=config.balance, sources=counted.sources, background=background)
    counted.table = counted.sources = None
    return _Planned(figures, stats, figures.pop("_bin_tokens"), figures.pop("_lengths"), figures.pop("_balanced"),
                    figures.pop("_pending"), background)


def _write(planned: _Planned, counted: Counted, config: PackConfig, out: Path, executor: Executor) -> StageStats:
    """Step 3, the tar shards: ``sequences_per_shard`` bins each (with compute balance a tar holds one rank's)."""
    bins, per = planned.figures["bins"], config.sequences_per_shard
    bounds = [0, bins] if planned.balanced is None else planned.balanced.layout.rank_starts().tolist()
    ranges = [(lo, min(lo + per, hi)) for lo_r, hi in zip(bounds[:-1], bounds[1:]) for lo in range(lo_r, hi, per)]
    shards = [Shard(k, meta=BinRange(*r), size=r[1] - r[0]) for k, r in enumerate(ranges)]
    writer = ShardWriteTask(config, counted.fingerprint or "",
                            store_dir=None if counted.store_dir == out else str(counted.store_dir))
    return run_stage(writer, shards, out, executor=executor, seed=config.seed, desc="write shards",
                     settings={**writer.settings(), "plan": file_sha256(out / PLAN_ARRAYS)[:16]})


def _finish(config: PackConfig, out: Path, counted: Counted, planned: _Planned, total: StageStats,
            sequences: int | None, timings: dict[str, float], *, explicit: bool) -> dict[str, Any]:
    """Step 4: ``stats.json`` (:func:`stage_result`) and the plot, then the stage's end (:func:`finish_stage`).

    ``explicit``: the earlier counts were given (``--lengths``), so their reuse report is recorded."""
    total.check()
    reuse = counted.reuse if explicit else None
    step_timings = total.to_dict()["timings"]
    result = stage_result(
        "pack", total, seed=config.seed, settings=_settings(config, counted), out_key="records_packed",
        **planned.figures, sequences=sequences, verified_records=int(total.extra.get("verified", 0)),
        **({"lengths_reuse": reuse} if reuse is not None else {}),
        **({LENGTHS_SHA: file_sha256(out / LENGTHS_FILE)} if (out / LENGTHS_FILE).exists() else {}),
        timings={**{f"{k}_steps": v for k, v in step_timings.items()}, **timings},
        outputs={"lengths": "lengths.parquet", "plan": "plan.parquet", "rejects": "rejects.parquet",
                 **({} if config.plan_only else {"shards": "shards/"}), **({"plot": "packing.png"} if config.plot else {})})
    if config.plot:  # drawn while the background thread may still be writing plan.parquet
        ctx, balanced = config.ctx, planned.balanced
        plot_packing(out / "packing.png", planned.lengths, planned.bin_tokens, ctx,
                     step_ratio=None if balanced is None else balanced.step_ratio,
                     title=f"{total.records_out:,} samples → {planned.figures['bins']:,} sequences of ≤{ctx} tokens")
    planned.pending.result()  # plan.parquet complete before stats.json, the marker
    if planned.background is not None:
        planned.background.shutdown()
    return finish_stage(out, result, total)


def _settings(config: PackConfig, counted: Counted) -> dict[str, Any]:
    """The settings ``stats.json`` records: what decides the counts, the plan and the shards."""
    balance = config.balance
    return {"ctx": config.ctx, "processor": counted.fingerprint, "processor_path": counted.processor,
            "min_pixels": config.min_pixels, "max_pixels": config.max_pixels, "exact": config.exact,
            "verify_fraction": config.verify_fraction, "verify_sample": config.checked_sample,
            "plan_only": config.plan_only, "balance": balance.settings() if balance else None,
            **config.reading_settings()}


# The packing plot: sample-length histogram, bin-fill histogram and, when balanced, per-step imbalance.
def plot_packing(path: Path, lengths: np.ndarray, bin_tokens: np.ndarray, ctx: int, *, title: str = "",
                 step_ratio: dict[str, np.ndarray] | None = None) -> None:
    """Write ``packing.png``: token lengths of the samples (log counts) and fill of the bins.

    With ``step_ratio`` (``{"token_only": ..., "balanced": ...}``, max/mean rank
    cost of every step), a third panel compares the step imbalance of the
    token-only plan and of the compute-balanced one.
    """
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure  # no pyplot: its import and figure manager are not needed for a file

    panels = 3 if step_ratio is not None else 2
    fig = Figure(figsize=(5.5 * panels, 4), dpi=110)
    FigureCanvasAgg(fig)
    axes = fig.subplots(1, panels)
    left, right = axes[0], axes[1]
    if lengths.size:
        values, weights = _value_counts(lengths)  # the histograms are binned from per-value counts
        counts, edges = np.histogram(values, bins=min(80, max(10, int(np.sqrt(lengths.size)))), weights=weights)
        left.stairs(counts, edges, fill=True, color="#4c72b0", baseline=_FLOOR)
        left.axvline(ctx, color="#c44e52", ls="--", lw=1, label=f"ctx {ctx}")
        _log_counts(left, float(counts.max()))
        left.legend(loc="upper right")
    left.set_xlabel("tokens per sample")
    left.set_ylabel("samples (log)")
    left.set_title(f"sample lengths (n={lengths.size:,})")
    if bin_tokens.size:
        values, weights = _value_counts(bin_tokens)
        counts, edges = np.histogram(values / ctx, bins=np.linspace(0, 1, 41), weights=weights)
        mean = float((values * weights).sum() / weights.sum() / ctx)
        right.stairs(counts, edges, fill=True, color="#55a868")
        right.axvline(mean, color="#333333", ls=":", lw=1, label=f"mean fill {mean:.3f}")
        right.legend(loc="upper left")
    right.set_xlabel("bin fill (used tokens / ctx)")
    right.set_ylabel("bins")
    right.set_title(f"bin fill (bins={bin_tokens.size:,})")
    if step_ratio is not None:
        _imbalance_panel(axes[2], step_ratio)
    if title:
        fig.suptitle(title)
    fig.subplots_adjust(left=0.075 if panels == 2 else 0.055, right=0.98, bottom=0.13, top=0.84 if title else 0.9,
                        wspace=0.25)  # fixed margins: tight_layout measured every text (~1 s)
    with atomic_open(path, "wb") as fh:
        fig.savefig(fh, format="png", metadata={"Software": None})


#: The bottom of a log-count axis: a bar of count 1 rises from here to 1, as visible as any other.
_FLOOR = 0.5


def _log_counts(ax: object, most: float) -> None:
    """A log y axis of counts whose bars of count 1 show (the axis starts at :data:`_FLOOR`), labelled with plain
    counts (1, 2, 5, 10, … or 1, 10, 100, … over many decades; never ``2×10⁰``)."""
    from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter

    top = max(2.0, most * 1.6)
    ax.set_yscale("log")
    ax.set_ylim(_FLOOR, top)
    subs = (1.0, 2.0, 5.0) if top <= 2000 else (1.0,)
    ax.yaxis.set_major_locator(LogLocator(base=10, subs=subs))
    ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:,.0f}" if v >= 1 else ""))
    ax.yaxis.set_minor_formatter(NullFormatter())


def _value_counts(values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Distinct values and their counts (``bincount`` for integers: one pass, no sort)."""
    if values.dtype.kind in "iu" and values.size and int(values.min()) >= 0 and int(values.max()) < 1 << 26:
        counts = np.bincount(values)
        found = np.flatnonzero(counts)
        return found, counts[found]
    return np.unique(values, return_counts=True)


def _imbalance_panel(ax: object, step_ratio: dict[str, np.ndarray]) -> None:
    """Histogram of per-step max/mean rank cost, token-only vs compute-balanced (log counts)."""
    before, after = step_ratio["token_only"], step_ratio["balanced"]
    both = np.concatenate([before, after]) if before.size or after.size else np.ones(1)
    hi = float(np.percentile(both, 99.9)) if both.size > 10 else float(both.max())
    edges = np.linspace(1.0, max(hi, 1.01), 61)
    most = 1.0
    for values, color, label in ((before, "#c44e52", "token-only"), (after, "#4c72b0", "compute-balanced")):
        if values.size:
            p99 = float(np.percentile(values, 99))
            counts, _ = np.histogram(np.minimum(values, edges[-1]), bins=edges)
            ax.stairs(counts, edges, fill=True, baseline=_FLOOR, color=color, alpha=0.6,
                      label=f"{label}: mean {values.mean():.3f}, p99 {p99:.3f}")
            most = max(most, float(np.max(counts)))
    _log_counts(ax, most)
    ax.set_xlabel("step imbalance (max / mean rank cost)")
    ax.set_ylabel("steps (log)")
    ax.set_title("per-step imbalance, before and after")
    ax.legend(loc="upper right", fontsize=8)
