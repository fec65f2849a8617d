"""``curate verify OUT``: re-read a packed folder and check every boundary and count.

Walks every tar once (:func:`curate.core.formats.containers.scan_groups`, which groups members as webdataset does: each
sequence's JSON is read, and each image goes through the image gate, which proves it decodes as the loader will
decode it), a few tars per shard of an executor (``--workers N`` processes or ``--executor ray``;
:class:`VerifyTarTask`), and checks, naming each problem:

* each sequence's JSON: ``cu_seqlens`` starts at 0, its steps equal ``tokens``, it
  ends at or below ``ctx``; per-sample lists have one entry per sample; the image
  members listed are present (and nothing else), every image decodes, and (with a processor, whose
  rule turns a size into a grid) its decoded size gives the stored grid;
* the whole: every id appears once, the ids equal the plan's, the number of
  sequences and of packed records equal ``stats.json``;
* a seeded sample of records re-tokenized with the processor gives the stored counts (with ``recount_all``,
  ``--recount-all``: every record, re-tokenized in the shards, each worker holding the processor);
* for a compute-balanced pack, every sequence's step, rank and cost (:class:`StepRecorder`).

In sections: the driver (:func:`verify_pack`), the per-tar shard task (:class:`VerifyTarTask`) and the step and
rank checks of a compute-balanced pack (:class:`StepRecorder`).
"""

from __future__ import annotations

import fnmatch
import json
import shutil
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from curate.core.columns import first_occurrences
from curate.core.formats.containers import scan_groups
from curate.core.image_headers import ImageAt
from curate.core.images import DEFAULT_LIMITS, ImageError, ImageLimits, check
from curate.core.io import input_size, open_input, write_json, write_parquet, read_json
from curate.core.remote import reading
from curate.core.shards import Shard, ShardContext, ShardTask
from curate.core.stats import StageStats
from curate.core.validate import configure
from packer.config import VerifyConfig, read_pack_stats
from packer.compute_balance import CostModel


# ``curate verify`` on a compute-balanced pack: the step and rank of every sequence.
#
# Checked, naming each problem:
#
# * every sequence's JSON has ``step``, ``rank``, ``micro`` and ``cost`` within range,
#   and ``dp``, ``micro_batches``, ``steps`` equal to the run's;
# * no (step, rank, micro-batch) slot is used twice; every step but the last is full
#   (unless records errored while writing);
# * a tar holds the sequences of one rank, and keys run rank-major (rank, then
#   step, then micro-batch), the order the loader relies on;
# * ``cost`` equals the cost model of ``stats.json`` recomputed from the JSON's
#   tokens and image grids, and ``plan.parquet``'s ``step``, ``rank`` and ``cost`` agree.
@dataclass
class StepRecorder:
    """Collects the step fields of every sequence while ``verify`` reads the shards."""

    settings: dict[str, Any]
    rows: list[tuple[str, int, int, int, int, float, float]] = field(default_factory=list)
    model: CostModel = field(init=False)

    def __post_init__(self) -> None:
        self.model = CostModel(**self.settings["cost_model"])

    def add(self, shard: str, meta: dict[str, Any], where: str, problem: Callable[[str], None]) -> None:
        """Record one sequence (``meta`` is its JSON); report missing or inconsistent fields."""
        missing = [k for k in ("step", "rank", "micro", "cost", "dp", "micro_batches", "steps") if k not in meta]
        if missing:
            problem(f"{where}: compute-balanced pack but the JSON has no {', '.join(missing)}")
            return
        dp, m = self.settings["dp"], self.settings["micro_batches"]
        if (meta["dp"], meta["micro_batches"]) != (dp, m):
            problem(f"{where}: dp {meta['dp']} x {meta['micro_batches']} micro-batches, the run used {dp} x {m}")
        tokens = np.asarray(meta.get("tokens", []), dtype=np.int64)
        grids = np.asarray(meta.get("image_grids", []), dtype=np.int64).reshape(-1, 3)
        per_sample = np.asarray(meta.get("images_per_sample", []), dtype=np.int64)
        if grids.shape[0] != int(per_sample.sum()) or per_sample.shape[0] != tokens.shape[0]:
            return  # reported by the sequence check
        owner = np.repeat(np.arange(tokens.shape[0]), per_sample)
        expect = float(self.model.sample_costs(tokens, grids.prod(axis=1), owner).sum())
        self.rows.append((shard, int(meta["key"]), int(meta["step"]), int(meta["rank"]), int(meta["micro"]),
                          float(meta["cost"]), expect))

    def check(self, stats: dict[str, Any], plan_path: Path, errored: bool, problem: Callable[[str], None]) -> None:
        """Check the whole pack once every sequence was added."""
        dp, m = self.settings["dp"], self.settings["micro_batches"]
        steps = int((stats.get("balance") or {}).get("steps", -1))
        if not self.rows:
            return
        shard, key, step, rank, micro, cost, expect = (np.asarray(c) for c in zip(*self.rows))
        bad = (step < 0) | (step >= steps) | (rank < 0) | (rank >= dp) | (micro < 0) | (micro >= m)
        for i in np.flatnonzero(bad)[:5].tolist():
            problem(f"{shard[i]}:{key[i]:010d}: step {step[i]}, rank {rank[i]}, micro-batch {micro[i]} out of range "
                    f"({steps} steps, dp {dp}, {m} micro-batches)")
        if bad.any():
            return
        slot = (step * dp + rank) * m + micro
        uniq, counts = np.unique(slot, return_counts=True)
        if (counts > 1).any():
            problem(f"{int((counts > 1).sum())} (step, rank, micro-batch) slots hold more than one sequence")
        per_step = np.bincount(step, minlength=steps)
        short = np.flatnonzero(per_step[:-1] < dp * m)
        if short.size and not errored:
            problem(f"{short.size} steps before the last hold fewer than {dp * m} sequences, e.g. step {int(short[0])}")
        for name in np.unique(shard).tolist():
            ranks = np.unique(rank[shard == name])
            if ranks.size > 1:
                problem(f"{name} holds sequences of ranks {ranks.tolist()[:4]}; a tar must hold one rank")
        order = np.argsort(key, kind="stable")
        major = (rank[order] * steps + step[order]) * m + micro[order]
        if (np.diff(major) <= 0).any():
            problem("sequence keys do not run rank-major (rank, then step, then micro-batch)")
        off = ~np.isclose(cost, expect, rtol=1e-9, atol=0.0)
        for i in np.flatnonzero(off)[:5].tolist():
            problem(f"{shard[i]}:{key[i]:010d}: cost {cost[i]:.6g}, the cost model gives {expect[i]:.6g}")
        if plan_path.exists():
            self._check_plan(plan_path, key, step, rank, cost, problem)

    @staticmethod
    def _check_plan(plan_path: Path, key: np.ndarray, step: np.ndarray, rank: np.ndarray, cost: np.ndarray,
                    problem: Callable[[str], None]) -> None:
        table = pq.read_table(plan_path)
        need = {"bin", "step", "rank", "cost"}
        if not need <= set(table.column_names):
            problem(f"plan.parquet lacks {', '.join(sorted(need - set(table.column_names)))} for a balanced pack")
            return
        bins = table.column("bin").to_numpy()
        first = np.unique(bins, return_index=True)[1]
        ub = bins[first]
        pos = np.searchsorted(ub, key)
        found = (pos < ub.size) & (ub[np.minimum(pos, ub.size - 1)] == key)
        if not found.all():
            problem(f"{int((~found).sum())} sequences have no bin in plan.parquet")
        rows = first[pos[found]]
        same = ((table.column("step").to_numpy()[rows] == step[found])
                & (table.column("rank").to_numpy()[rows] == rank[found])
                & np.isclose(table.column("cost").to_numpy()[rows], cost[found], rtol=1e-12))
        if not same.all():
            problem(f"{int((~same).sum())} sequences disagree with plan.parquet on step, rank or cost")


# A few tars of ``curate verify``, run as a shard by an executor: read each tar once and check every sequence.
#
# Tars are read front to back once (:func:`iter_samples`): the JSON of every sequence, and every image
# through the image gate (:func:`curate.core.images.check`), which proves it decodes as the loader will
# decode it (JPEG and PNG without a full decode) and gives its displayed size; with the processor's
# image rule (from the driver: a worker imports no torch and loads no model) that size must give the
# stored grid.
#
# A shard's results go to ``verify/<shard>.json`` (per tar: counts, problems, the seeded
# candidates for the processor recount, compute-balance rows) and
# ``verify/<shard>.parquet`` (sequence keys and record ids, for the whole-pack
# checks on the driver, which work on those columns).
MAX_PROBLEMS = 200
_RECOUNT_SALT = 0xC0


class ProblemLog:
    """The one rule for problems, in a tar and in a whole run: the first :data:`MAX_PROBLEMS` are kept
    in full, every later one is counted in ``more_problems``; nothing found is ever lost from the count."""

    problems: list[str]
    more_problems: int

    def add(self, problem: str) -> None:
        """Record a problem."""
        if len(self.problems) < MAX_PROBLEMS:
            self.problems.append(problem)
        else:
            self.more_problems += 1

    def absorb(self, problems: list[str], more_problems: int) -> None:
        """Add another log's problems (its listed ones, then its count of unlisted ones)."""
        for problem in problems:
            self.add(problem)
        self.more_problems += more_problems

    @property
    def problem_count(self) -> int:
        """Every problem found, listed or not."""
        return len(self.problems) + self.more_problems


class TarReport(ProblemLog):
    """What one tar showed (see :func:`check_tar`)."""

    def __init__(self) -> None:
        self.sequences = self.records = self.images = self.recounted = 0
        self.problems = []
        self.more_problems = 0


def _owner(meta: dict[str, Any], member: int) -> str:
    """The id of the sample that holds the ``member``-th image of a sequence."""
    ends = np.cumsum(meta.get("images_per_sample", []))
    k = int(np.searchsorted(ends, member, side="right"))
    ids = meta.get("ids", [])
    return ids[k] if k < len(ids) else "?"


def _check_sequence(meta: dict[str, Any], sample: dict[str, Any], ctx: int, report: TarReport,
                    rule: Any, where: str, limits: ImageLimits = DEFAULT_LIMITS) -> None:
    """Check one sequence's JSON against itself and its tar members: every image decodes (the image gate)
    and, with ``rule``, gives the stored grid."""
    n = len(meta.get("ids", []))
    for key in ("sources", "tokens", "messages", "images_per_sample", "image_tokens"):
        if len(meta.get(key, [])) != n:
            report.add(f"{where}: {key} has {len(meta.get(key, []))} entries for {n} samples")
            return
    cu = meta.get("cu_seqlens", [])
    if len(cu) != n + 1 or (cu and cu[0] != 0):
        report.add(f"{where}: cu_seqlens {cu} does not have {n + 1} offsets starting at 0")
        return
    if list(np.diff(cu)) != list(meta["tokens"]):
        report.add(f"{where}: cu_seqlens steps {list(np.diff(cu))} differ from tokens {meta['tokens']}")
    if cu[-1] > ctx or meta.get("ctx") != ctx:
        report.add(f"{where}: uses {cu[-1]} tokens with ctx {meta.get('ctx')} (run ctx {ctx})")
    members = meta.get("image_members", [])
    grids = meta.get("image_grids", [])
    if sum(meta["images_per_sample"]) != len(members) or len(members) != len(grids):
        report.add(f"{where}: {sum(meta['images_per_sample'])} images per samples, {len(members)} members, "
                   f"{len(grids)} grids")
        return
    present = {k for k in sample if not k.startswith("__") and k != "json"}
    if present != set(members):
        report.add(f"{where}: tar members {sorted(present)} differ from image_members {sorted(members)}")
        return
    for name, grid in zip(members, grids):
        try:
            info = check(sample[name], limits, label=f"{where}.{name}")
        except ImageError as exc:
            report.add(f"{where}: image {name} of sample {_owner(meta, members.index(name))!r} does not decode "
                       f"({exc.reason}: {exc.detail}); the loader would fail on it")
            continue
        report.images += 1
        if rule is None:
            continue
        try:
            expect = list(rule.grid(info.height, info.width))
        except ValueError as exc:
            report.add(f"{where}: image {name} of {info.width}x{info.height}: the processor refuses it ({exc})")
            continue
        if expect != list(grid):
            report.add(f"{where}: image {name} of sample {_owner(meta, members.index(name))!r} decodes to "
                       f"{info.width}x{info.height}, grid {expect}, stored {grid}")
    for i, k in enumerate(meta["images_per_sample"]):
        if len(meta["image_tokens"][i]) != k:
            report.add(f"{where}: sample {meta['ids'][i]!r} lists {len(meta['image_tokens'][i])} image token counts "
                       f"for {k} images")


def check_tar(path: str, index: int, *, ctx: int, rule: Any, sample: int, seed: int,
              balance: dict[str, Any] | None, limits: ImageLimits = DEFAULT_LIMITS,
              counter: Any = None) -> tuple[dict[str, Any], pa.Table]:
    """Read one tar once; return its summary and its ``(key, id)`` columns.

    ``sample`` candidates for the recount are a seeded uniform sample of the tar's
    records, in random order (the driver takes a share of them from each tar). With ``counter``
    (a :class:`~packer.tokens.TokenCounter`: ``verify --recount-all``) every record is re-tokenized here
    instead, and none is left to the driver.
    """
    report = TarReport()
    name = Path(path).name
    keys: list[str] = []
    ids: list[str] = []
    steps = StepRecorder(balance) if balance else None
    rng = np.random.default_rng([seed, _RECOUNT_SALT, index])
    chosen: list[dict[str, Any]] = []
    try:
        for item in iter_samples(path):
            where = f"{name}:{item['__key__']}"
            if "json" not in item:
                report.add(f"{where}: no .json member")
                continue
            meta = json.loads(item["json"])
            keys.append(item["__key__"])
            report.sequences += 1
            _check_sequence(meta, item, ctx, report, rule, where, limits)
            if steps is not None:
                steps.add(name, meta, where, report.add)
            for i, rid in enumerate(meta.get("ids", [])):
                ids.append(rid)
                report.records += 1
                entry = {"where": where, "id": rid, "messages": _at(meta, "messages", i),
                         "image_tokens": _at(meta, "image_tokens", i), "tokens": _at(meta, "tokens", i)}
                if counter is not None:
                    report.recounted += recount(counter, entry, report.add)
                elif len(chosen) < sample:  # reservoir sample
                    chosen.append(entry)
                else:
                    j = int(rng.integers(0, report.records))
                    if j < sample:
                        chosen[j] = entry
    except _Unreadable as exc:
        report.add(f"{name}: unreadable after {report.sequences} sequences: {exc}")
    except Exception as exc:  # noqa: BLE001 - a tar that cannot be read at all
        report.add(f"{name}: unreadable ({type(exc).__name__}: {exc})")
    order = rng.permutation(len(chosen)).tolist()
    summary = {"tar": name, "sequences": report.sequences, "records": report.records, "images": report.images,
               "recounted": report.recounted,
               "problems": report.problems, "more_problems": report.more_problems,
               "candidates": [chosen[k] for k in order], "steps": steps.rows if steps is not None else None}
    table = pa.table({"kind": pa.array(["key"] * len(keys) + ["id"] * len(ids), pa.dictionary(pa.int8(), pa.string())),
                      "value": pa.array(keys + ids, pa.string())})
    return summary, table


def recount(counter: Any, entry: dict[str, Any], problem: Any) -> int:
    """Re-tokenize one record (``entry``: where, id, messages, image_tokens, tokens) and report a difference;
    1 when it was re-tokenized, 0 when it could not be."""
    where, rid = entry["where"], entry["id"]
    try:
        got, _ = counter.encode(entry["messages"], list(entry["image_tokens"] or []))
    except (ValueError, TypeError, KeyError) as exc:
        problem(f"{where}: sample {rid!r} cannot be re-tokenized: {exc}")
        return 0
    if len(got) != entry["tokens"]:
        problem(f"{where}: sample {rid!r} recounts to {len(got)} tokens, stored {entry['tokens']}")
    return 1


def iter_samples(path: str, heads: bool = True) -> Iterator[dict[str, Any]]:
    """The samples of a tar in order, as webdataset groups them: ``{"__key__": key, ext: value, ...}``.

    Consecutive members ``KEY.EXT`` (the key ends at the first dot of the file name) form one
    sample, walked by their headers (:func:`curate.core.formats.containers.scan_groups`): ``.json`` members
    are read whole; every other member (the images) is an :class:`~curate.core.image_headers.ImageAt`
    holding its bytes with ``heads``, else None (skipped by seeking). A worker needs neither torch
    nor webdataset.

    Raises:
        _Unreadable: the tar ends inside a member or its headers stop making sense (after the samples before).
    """
    with open_input(path) as fh:
        for group in scan_groups(fh, input_size(path)):
            if group.truncated:
                raise _Unreadable(group.truncated)
            sample: dict[str, Any] = {"__key__": group.key}
            for ext, at, size in group.members:
                if ext == "json":
                    fh.seek(at)
                    sample[ext] = fh.read(size)
                    if len(sample[ext]) != size:
                        raise _Unreadable(f"member {group.key}.json is cut short")
                elif heads:  # the images (img0.jpg, …): any member but the JSON may be listed as one
                    try:
                        sample[ext] = ImageAt.member(fh, path, at, size)
                    except OSError as exc:
                        raise _Unreadable(str(exc)) from None
                else:
                    sample[ext] = None
            yield sample


class _Unreadable(Exception):
    """The rest of a tar cannot be read."""


def _at(meta: dict[str, Any], key: str, i: int) -> Any:
    values = meta.get(key, [])
    return values[i] if isinstance(values, list) and i < len(values) else None


#: Tars per shard at most: a shard's fixed cost (its work folder, marker and files: ≈10 small file
#: operations) is then shared by several tars, now that a tar's own check costs a few milliseconds.
TARS_PER_SHARD = 8
#: Shards aimed at when there are few tars, so that every worker still gets several.
MIN_SHARDS = 32


def tar_shards(tars: list[str]) -> list[Shard]:
    """The shards of a verify run over ``tars`` (absolute paths or URLs): consecutive tars, ``ceil(len / 32)``
    per shard and at most :data:`TARS_PER_SHARD`; ``meta`` holds ``(path, tar index)`` pairs (the index
    seeds each tar's sample)."""
    per = max(1, min(TARS_PER_SHARD, -(-len(tars) // MIN_SHARDS)))
    groups = [tars[lo:lo + per] for lo in range(0, len(tars), per)]
    return [Shard(i, meta=tuple((path, i * per + j) for j, path in enumerate(group)), size=len(group))
            for i, group in enumerate(groups)]


class VerifyTarTask(ShardTask):
    """``curate verify`` of a few consecutive tars (``shard.meta``: see :func:`tar_shards`); see :func:`check_tar`."""

    stage = "verify"
    unit = "tars"
    #: Local workers are forked: they inherit the driver's loaded image rule (transformers' smart_resize,
    #: seconds to import per spawned process) and use no threads, torch or OpenMP themselves.
    start_method = "fork"

    transient = ("counter",)

    def __init__(self, config: VerifyConfig, *, ctx: int, rule: Any, balance: dict[str, Any] | None,
                 limits: ImageLimits = DEFAULT_LIMITS, processor: dict[str, Any] | None = None) -> None:
        """Check with ``config``'s recount sample; what the driver read of the pack at run time: its ``ctx``,
        compute ``balance`` settings and image ``limits`` (``stats.json``), the image ``rule`` of the processor
        it loaded (a small dataclass: workers load no model) and, with ``--recount-all``, ``processor``, the
        :class:`~packer.tokens.TokenCounter` arguments each worker loads the processor with."""
        self.config = config
        self.ctx, self.rule, self.balance, self.limits = ctx, rule, balance, limits
        self.processor = processor
        self.counter: Any = None

    def setup(self) -> None:
        """With ``--recount-all``, load the processor once per worker."""
        if self.processor is not None and self.counter is None:
            from packer.tokens import TokenCounter

            self.counter = TokenCounter(**self.processor)

    def run(self, shard: Shard, work: Path, ctx: ShardContext) -> StageStats:
        """Check the shard's tars; write their summaries (``{"tars": [...]}``) and columns under ``verify/``."""
        summaries, tables = [], []
        for path, index in shard.meta:
            summary, table = check_tar(path, index, ctx=self.ctx, rule=self.rule, sample=self.config.sample,
                                       seed=ctx.seed, balance=self.balance, limits=self.limits,
                                       counter=self.counter)
            summaries.append(summary)
            tables.append(table)
            ctx.progress(1)
        write_json(work / "verify" / f"{shard.id}.json", {"tars": summaries})
        write_parquet(work / "verify" / f"{shard.id}.parquet", pa.concat_tables(tables))
        stats = StageStats()
        stats.seen("tars", len(summaries))
        stats.kept("tars", len(summaries))
        return stats


@dataclass
class VerifyReport(ProblemLog):
    """What ``verify`` checked and every inconsistency found (listed and counted as in each tar: :class:`ProblemLog`)."""

    shards: int = 0
    sequences: int = 0
    records: int = 0
    images: int = 0
    recounted: int = 0
    problems: list[str] = field(default_factory=list)
    more_problems: int = 0

    @property
    def ok(self) -> bool:
        """True when no problem was found."""
        return self.problem_count == 0


def verify_pack(out: str | Path | None = None, config: VerifyConfig | None = None, *, executor: Any = None,
                workers: int = 1, **settings: Any) -> VerifyReport:
    """Check a ``curate pack`` output folder; see the module docstring.

    Args:
        out: the folder (overrides ``config.out``).
        config: the settings (see :class:`VerifyConfig`: ``processor`` to recount with, default the
            one recorded in ``stats.json``; ``sample`` records re-tokenized, a seeded uniform sample
            over all tars; ``seed``).
        executor: a :class:`curate.executors.Executor` reading the tars (default: local, ``workers``).
        workers: local worker processes when no executor is given.
        **settings: fields of :class:`VerifyConfig`, instead of or over ``config``.
    """
    config = configure(VerifyConfig, config, out=out, **settings)
    # A pack output in a bucket: the few files read whole come to a temporary local folder (curate.core.remote),
    # its tars are read where they are (by their headers: ≈29 KB per image), never copied to this machine's disk.
    with reading(config.out, include=READS) as folder:
        return _verify(config, folder, executor, workers)


#: What verify reads whole of a pack output (besides its tars).
READS = ("stats.json", "plan.parquet", "rejects.parquet")


def _verify(config: VerifyConfig, out: Path, executor: Any, workers: int) -> VerifyReport:
    """:func:`verify_pack` with the pack's small files in the local folder ``out``."""
    from curate.executors import get_executor, run_stage

    url = config.out.url if config.out.is_remote else None
    processor, sample, seed = config.processor, config.sample, config.seed
    stats = read_pack_stats(out, str(config.out))
    ctx = int(stats["settings"]["ctx"])
    processor = processor or stats["settings"].get("processor_path")
    min_pixels, max_pixels = stats["settings"].get("min_pixels"), stats["settings"].get("max_pixels")
    counter = None
    if processor:
        from packer.tokens import TokenCounter
        counter = TokenCounter(processor, min_pixels=min_pixels, max_pixels=max_pixels)
    report = VerifyReport()
    if counter is not None and counter.fingerprint != stats["settings"].get("processor"):
        report.add(f"processor {processor} has fingerprint {counter.fingerprint}, the run used "
                   f"{stats['settings'].get('processor')}")
    tars = _bucket_tars(url) if url else [str(p.resolve()) for p in sorted((out / "shards").glob("*.tar"))]
    if stats.get("sequences") and not tars:
        report.add(f"{url or out}/shards holds no tar files")
    leftovers = [p.name for p in (out / "shards").glob(".*")] if (out / "shards").exists() else []
    if leftovers:
        report.add(f"unfinished files in shards/: {leftovers[:5]}")
    balance = stats["settings"].get("balance")
    every = config.recount_all and counter is not None  # every record re-tokenized in the shards
    task = VerifyTarTask(config, ctx=ctx, rule=counter.image_rule if counter is not None else None,
                         balance=balance, limits=image_limits(stats),
                         processor={"processor": processor, "min_pixels": min_pixels, "max_pixels": max_pixels}
                         if every else None)
    shards = tar_shards(tars)
    work = out / ".verify" / uuid.uuid4().hex[:12]  # beside the shards: shared storage for Ray actors too
    try:
        if shards:
            run_stage(task, shards, work, executor=executor or get_executor("local", workers=workers), seed=seed,
                      desc="verify shards", settings={"tars": len(tars)})
        summaries = [tar for s in shards for tar in read_json(work / "verify" / f"{s.id}.json")["tars"]]
        tables = [pq.read_table(work / "verify" / f"{s.id}.parquet") for s in shards]
    finally:
        shutil.rmtree(work, ignore_errors=True)
        if (out / ".verify").is_dir() and not any((out / ".verify").iterdir()):
            (out / ".verify").rmdir()
    report.shards = len(tars)
    for summary in summaries:
        report.sequences += summary["sequences"]
        report.records += summary["records"]
        report.images += summary["images"]
        report.recounted += summary.get("recounted", 0)
        report.absorb(summary["problems"], summary["more_problems"])
    columns = pa.concat_tables(tables) if tables else pa.table({"kind": pa.array([], pa.string()),
                                                               "value": pa.array([], pa.string())})
    kind = columns.column("kind").cast(pa.string())
    keys = columns.filter(pc.equal(kind, "key")).column("value").combine_chunks()
    ids = columns.filter(pc.equal(kind, "id")).column("value").combine_chunks()
    _whole_pack(out, stats, keys, ids, report)
    if (out / "llava-ov").is_dir():  # --energon-layout llava-ov-1.5: the seed's layout holds exactly the pack
        from packer.verify_seed import check_seed_layout

        for problem in check_seed_layout(out):
            report.add(problem)
    if balance:
        steps = StepRecorder(balance)
        steps.rows = [tuple(r) for summary in summaries for r in (summary["steps"] or [])]
        steps.check(stats, out / "plan.parquet", bool(stats.get("errored")), report.add)
    if counter is not None and sample and not every:
        _recount(summaries, counter, sample, seed, report)
    return report


def image_limits(stats: dict[str, Any]) -> ImageLimits:
    """The image limits a pack was counted with (``stats.json``), the defaults for an older pack."""
    recorded = stats.get("settings", {}).get("image_limits")
    return ImageLimits(**recorded) if isinstance(recorded, dict) else DEFAULT_LIMITS


#: The shards of a pack output (hidden files are a writer's unfinished ones).
TARS = "shards/[!.]*.tar"


def _bucket_tars(url: str) -> list[str]:
    """The URLs of the tars of a pack output in a bucket, in name order."""
    from curate.core.remote import listing, remote_fs

    fs, inner = remote_fs(url)
    return [f"{url}/{rel}" for rel in sorted(listing(fs, inner, "shards")) if fnmatch.fnmatchcase(rel, TARS)]


def _whole_pack(out: Path, stats: dict[str, Any], keys: pa.Array, ids: pa.Array, report: VerifyReport) -> None:
    """Keys strictly increasing across tars, ids unique and equal to the plan's, counts equal to stats.json."""
    if len(keys) > 1 and pc.any(pc.less_equal(keys.slice(1), keys.slice(0, len(keys) - 1))).as_py():
        report.add("sequence keys are not unique and increasing across shards")
    repeated = np.flatnonzero(~first_occurrences(ids))
    if repeated.size:
        dup = sorted(set(ids.take(pa.array(repeated[:1000])).to_pylist()))
        report.add(f"{len(set(ids.take(pa.array(repeated)).to_pylist()))} ids appear more than once, e.g. {dup[:3]}")
    if stats.get("sequences") is not None and report.sequences != stats["sequences"]:
        report.add(f"{report.sequences} sequences in the shards, stats.json says {stats['sequences']}")
    if report.records != stats["records_packed"]:
        report.add(f"{report.records} records in the shards, stats.json says {stats['records_packed']}")
    plan_path = out / "plan.parquet"
    if plan_path.exists():
        plan_ids = pq.read_table(plan_path, columns=["id"]).column("id").combine_chunks()
        missing = plan_ids.filter(pc.invert(pc.is_in(plan_ids, value_set=ids)))
        if len(missing) and (out / "rejects.parquet").exists():
            errored = pq.read_table(out / "rejects.parquet", columns=["id"]).column("id").combine_chunks()
            missing = missing.filter(pc.invert(pc.is_in(missing, value_set=errored)))
        extra = pc.unique(ids.filter(pc.invert(pc.is_in(ids, value_set=plan_ids))))
        if len(missing) or len(extra):
            report.add(f"shards and plan.parquet disagree: {len(missing)} planned ids missing, {len(extra)} extra")


def _recount(summaries: list[dict[str, Any]], counter: Any, sample: int, seed: int, report: VerifyReport) -> None:
    """Re-tokenize a seeded uniform sample of ``sample`` records drawn over every tar."""
    sizes = np.array([s["records"] for s in summaries], dtype=np.int64)
    if not sizes.sum():
        return
    rng = np.random.default_rng([seed, 0xC1])
    quotas = rng.multivariate_hypergeometric(sizes, min(sample, int(sizes.sum())))
    for summary, quota in zip(summaries, quotas.tolist()):
        for cand in summary["candidates"][:quota]:
            report.recounted += recount(counter, cand, report.add)
