"""A few tars of ``curate verify``, run as a shard by an executor: read each tar once and check every sequence.

Tars are read front to back once (:func:`iter_samples`): the JSON of every sequence, and every image
through the image gate (:func:`curate.core.images.check`), which proves it decodes as the loader will
decode it (JPEG and PNG without a full decode) and gives its displayed size; with the processor's
image rule (from the driver: a worker imports no torch and loads no model) that size must give the
stored grid.

A shard's results go to ``verify/<shard>.json`` (per tar: counts, problems, the seeded
candidates for the processor recount, compute-balance rows) and
``verify/<shard>.parquet`` (sequence keys and record ids, for the whole-pack
checks on the driver, which work on those columns).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

from curate.core.image_headers import ImageAt
from curate.core.formats.containers import scan_groups
from curate.core.images import DEFAULT_LIMITS, ImageError, ImageLimits, check
from curate.core.io import input_size, open_input, write_json, write_parquet
from curate.core.shards import Shard, ShardContext, ShardTask
from curate.core.stats import StageStats
from packer.verify_steps import StepRecorder

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

    def __init__(self, *, ctx: int, rule: Any, sample: int, balance: dict[str, Any] | None,
                 limits: ImageLimits = DEFAULT_LIMITS, processor: dict[str, Any] | None = None) -> None:
        self.ctx, self.rule = ctx, rule  # the processor's image rule (a small dataclass): workers load no model
        self.sample, self.balance, self.limits = sample, balance, limits
        self.processor = processor  # --recount-all: TokenCounter arguments, each worker loads the processor
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
            summary, table = check_tar(path, index, ctx=self.ctx, rule=self.rule, sample=self.sample,
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
