"""One tar of ``curate verify``, run as a shard by an executor: read the tar once and check every sequence.

Tars are read with :mod:`tarfile` in one streaming pass (:func:`iter_samples`), so a
worker imports no torch and no model: the image rule comes from the driver.

Each tar's results go to ``verify/<shard>.json`` (counts, problems, the seeded
candidates for the processor recount, compute-balance rows) and
``verify/<shard>.parquet`` (sequence keys and record ids, for the whole-pack
checks on the driver, which work on those columns).
"""

from __future__ import annotations

import json
import tarfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

from curate.core.images import ImageError, probe
from curate.core.io import write_json, write_parquet
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
        self.sequences = self.records = self.images = 0
        self.problems = []
        self.more_problems = 0


def _check_sequence(meta: dict[str, Any], sample: dict[str, Any], ctx: int, report: TarReport,
                    rule: Any, where: str) -> None:
    """Check one sequence's JSON against itself, its tar members and (with ``rule``) their image headers."""
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
    if rule is None:
        report.images += len(members)  # no rule turns a header into a grid: the JSON is the count, nothing to read
        members = []
    for name, grid in zip(members, grids):
        try:
            info = probe(sample[name], label=f"{where}.{name}")
        except ImageError as exc:
            report.add(f"{where}: image {name}: {exc.reason}")
            continue
        report.images += 1
        expect = list(rule.grid(info.height, info.width))
        if expect != list(grid):
            report.add(f"{where}: image {name} of {info.width}x{info.height} has grid {expect}, stored {grid}")
    for i, k in enumerate(meta["images_per_sample"]):
        if len(meta["image_tokens"][i]) != k:
            report.add(f"{where}: sample {meta['ids'][i]!r} lists {len(meta['image_tokens'][i])} image token counts "
                       f"for {k} images")


def check_tar(path: str, index: int, *, ctx: int, rule: Any, sample: int, seed: int,
              balance: dict[str, Any] | None) -> tuple[dict[str, Any], pa.Table]:
    """Read one tar once; return its summary and its ``(key, id)`` columns.

    ``sample`` candidates for the recount are a seeded uniform sample of the tar's
    records, in random order (the driver takes a share of them from each tar).
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
            _check_sequence(meta, item, ctx, report, rule, where)
            if steps is not None:
                steps.add(name, meta, where, report.add)
            for i, rid in enumerate(meta.get("ids", [])):
                ids.append(rid)
                report.records += 1
                entry = {"where": where, "id": rid, "messages": _at(meta, "messages", i),
                         "image_tokens": _at(meta, "image_tokens", i), "tokens": _at(meta, "tokens", i)}
                if len(chosen) < sample:  # reservoir sample
                    chosen.append(entry)
                else:
                    j = int(rng.integers(0, report.records))
                    if j < sample:
                        chosen[j] = entry
    except Exception as exc:  # noqa: BLE001 - a tar that cannot be read at all
        report.add(f"{name}: unreadable ({type(exc).__name__}: {exc})")
    order = rng.permutation(len(chosen)).tolist()
    summary = {"tar": name, "sequences": report.sequences, "records": report.records, "images": report.images,
               "problems": report.problems, "more_problems": report.more_problems,
               "candidates": [chosen[k] for k in order], "steps": steps.rows if steps is not None else None}
    table = pa.table({"kind": pa.array(["key"] * len(keys) + ["id"] * len(ids), pa.dictionary(pa.int8(), pa.string())),
                      "value": pa.array(keys + ids, pa.string())})
    return summary, table


def iter_samples(path: str) -> Iterator[dict[str, Any]]:
    """The samples of a tar in order, as webdataset groups them: ``{"__key__": key, ext: bytes, ...}``.

    Consecutive members ``KEY.EXT`` (the key ends at the first dot of the file name)
    form one sample. Read with the standard library in one pass, so a worker needs
    neither torch nor webdataset.
    """
    current: dict[str, Any] | None = None
    with tarfile.open(path, "r|*") as tar:
        for member in tar:
            if not member.isfile():
                continue
            folder, _, name = member.name.rpartition("/")
            stem, dot, ext = name.partition(".")
            if not dot:
                continue
            key = f"{folder}/{stem}" if folder else stem
            if current is None or current["__key__"] != key:
                if current is not None:
                    yield current
                current = {"__key__": key}
            handle = tar.extractfile(member)
            current[ext] = handle.read() if handle is not None else b""
    if current is not None:
        yield current


def _at(meta: dict[str, Any], key: str, i: int) -> Any:
    values = meta.get(key, [])
    return values[i] if isinstance(values, list) and i < len(values) else None


class VerifyTarTask(ShardTask):
    """``curate verify`` of one tar (``shard.meta = (path,)``); see :func:`check_tar`."""

    stage = "verify"
    unit = "tars"
    #: Local workers are forked: they inherit the driver's loaded image rule (transformers' smart_resize,
    #: seconds to import per spawned process) and use no threads, torch or OpenMP themselves.
    start_method = "fork"

    def __init__(self, *, ctx: int, rule: Any, sample: int, balance: dict[str, Any] | None) -> None:
        self.ctx, self.rule = ctx, rule  # the processor's image rule (a small dataclass): workers load no model
        self.sample, self.balance = sample, balance

    def shard_items(self, shard: Shard) -> int:
        """Progress counts tars."""
        return 1

    def run(self, shard: Shard, work: Path, ctx: ShardContext) -> StageStats:
        """Check one tar; write its summary and columns under ``verify/``."""
        summary, table = check_tar(shard.meta[0], shard.index, ctx=self.ctx, rule=self.rule,
                                   sample=self.sample, seed=ctx.seed, balance=self.balance)
        write_json(work / "verify" / f"{shard.id}.json", summary)
        write_parquet(work / "verify" / f"{shard.id}.parquet", table)
        stats = StageStats()
        stats.seen("tars")
        stats.kept("tars")
        ctx.progress(1)
        return stats
