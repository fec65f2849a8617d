"""``curate verify OUT``: re-read a packed folder and check every boundary and count.

Reads every shard with the ``webdataset`` library and checks, naming each problem:

* each sequence's JSON: ``cu_seqlens`` starts at 0, its steps equal ``tokens``, it
  ends at or below ``ctx``; per-sample lists have one entry per sample; the image
  members listed are present (and nothing else), their headers give the stored grids;
* the whole: every id appears once, the ids equal the plan's, the number of
  sequences and of packed records equal ``stats.json``;
* a seeded sample of records re-tokenized with the processor gives the stored counts;
* for a compute-balanced pack, every sequence's step, rank and cost (:mod:`packer.verify_steps`).
"""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow.parquet as pq

from curate.core.images import ImageError, probe
from curate.core.remote import local_copy
from curate.core.progress import StageProgress
from curate.core.validate import configure
from packer.config import VerifyConfig, read_pack_stats
from packer.verify_steps import StepRecorder


@dataclass
class VerifyReport:
    """What ``verify`` checked and every inconsistency found."""

    shards: int = 0
    sequences: int = 0
    records: int = 0
    images: int = 0
    recounted: int = 0
    problems: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        """True when no problem was found."""
        return not self.problems

    def add(self, problem: str) -> None:
        """Record a problem (the first 200 are kept in full; the rest are counted)."""
        if len(self.problems) < 200:
            self.problems.append(problem)
        elif len(self.problems) == 200:
            self.problems.append("... more problems not listed")


def _check_sequence(meta: dict[str, Any], sample: dict[str, Any], ctx: int, report: VerifyReport,
                    counter: Any, where: str) -> None:
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
            info = probe(sample[name], label=f"{where}.{name}")
        except ImageError as exc:
            report.add(f"{where}: image {name}: {exc.reason}")
            continue
        report.images += 1
        if counter is not None and counter.image_rule is not None:
            expect = list(counter.image_grid(info.height, info.width))
            if expect != list(grid):
                report.add(f"{where}: image {name} of {info.width}x{info.height} has grid {expect}, stored {grid}")
    for i, k in enumerate(meta["images_per_sample"]):
        if len(meta["image_tokens"][i]) != k:
            report.add(f"{where}: sample {meta['ids'][i]!r} lists {len(meta['image_tokens'][i])} image token counts "
                       f"for {k} images")


def verify_pack(out: str | Path | None = None, config: VerifyConfig | None = None, **settings: Any) -> VerifyReport:
    """Check a ``curate pack`` output folder; see the module docstring.

    Args:
        out: the folder (overrides ``config.out``).
        config: the settings (see :class:`VerifyConfig`: ``processor``, ``sample``, ``seed``).
        **settings: fields of :class:`VerifyConfig`, instead of or over ``config``.
    """
    import webdataset as wds

    config = configure(VerifyConfig, config, out=out, **settings)
    out = local_copy(config.out)  # a pack output in a bucket is read from a local mirror (curate.core.remote)
    processor, sample, seed = config.processor, config.sample, config.seed
    stats = read_pack_stats(out)
    ctx = int(stats["settings"]["ctx"])
    processor = processor or stats["settings"].get("processor_path")
    counter = None
    if processor:
        from packer.tokens import TokenCounter
        counter = TokenCounter(processor, min_pixels=stats["settings"].get("min_pixels"),
                               max_pixels=stats["settings"].get("max_pixels"))
    report = VerifyReport()
    if counter is not None and counter.fingerprint != stats["settings"].get("processor"):
        report.add(f"processor {processor} has fingerprint {counter.fingerprint}, the run used "
                   f"{stats['settings'].get('processor')}")
    shards = sorted((out / "shards").glob("*.tar"))
    if stats.get("sequences") and not shards:
        report.add(f"{out}/shards holds no tar files")
    leftovers = [p.name for p in (out / "shards").glob(".*")] if (out / "shards").exists() else []
    if leftovers:
        report.add(f"unfinished files in shards/: {leftovers[:5]}")
    ids: Counter[str] = Counter()
    rng = np.random.default_rng([seed, 0xC0])
    chosen: list[tuple[str, dict[str, Any], int]] = []
    seen_candidates = 0
    keys: list[str] = []
    balance = stats["settings"].get("balance")
    steps = StepRecorder(balance) if balance else None
    with StageProgress("verify shards", len(shards), unit="shards") as bar:
        for shard in shards:
            report.shards += 1
            try:
                for item in wds.WebDataset(str(shard), shardshuffle=False, empty_check=False):
                    where = f"{shard.name}:{item['__key__']}"
                    if "json" not in item:
                        report.add(f"{where}: no .json member")
                        continue
                    meta = json.loads(item["json"])
                    keys.append(item["__key__"])
                    report.sequences += 1
                    _check_sequence(meta, item, ctx, report, counter, where)
                    if steps is not None:
                        steps.add(shard.name, meta, where, report.add)
                    for i, rid in enumerate(meta.get("ids", [])):
                        ids[rid] += 1
                        report.records += 1
                        seen_candidates += 1  # reservoir sample of records to recount
                        entry = (where, meta, i)
                        if len(chosen) < sample:
                            chosen.append(entry)
                        else:
                            j = int(rng.integers(0, seen_candidates))
                            if j < sample:
                                chosen[j] = entry
            except Exception as exc:  # a tar that cannot be read at all
                report.add(f"{shard.name}: unreadable ({type(exc).__name__}: {exc})")
            bar.advance(1)
    if keys != sorted(keys) or len(set(keys)) != len(keys):
        report.add("sequence keys are not unique and increasing across shards")
    dup = [rid for rid, n in ids.items() if n > 1]
    if dup:
        report.add(f"{len(dup)} ids appear more than once, e.g. {dup[:3]}")
    if stats.get("sequences") is not None and report.sequences != stats["sequences"]:
        report.add(f"{report.sequences} sequences in the shards, stats.json says {stats['sequences']}")
    if report.records != stats["records_packed"]:
        report.add(f"{report.records} records in the shards, stats.json says {stats['records_packed']}")
    plan_path = out / "plan.parquet"
    if plan_path.exists():
        plan_ids = pq.read_table(plan_path, columns=["id"]).column("id").to_pylist()
        written = set(ids)
        missing = [i for i in plan_ids if i not in written]
        extra = written - set(plan_ids)
        errored = set()
        if (out / "rejects.parquet").exists():
            errored = set(pq.read_table(out / "rejects.parquet", columns=["id"]).column("id").to_pylist())
        missing = [i for i in missing if i not in errored]
        if missing or extra:
            report.add(f"shards and plan.parquet disagree: {len(missing)} planned ids missing, {len(extra)} extra")
    if steps is not None:
        steps.check(stats, plan_path, bool(stats.get("errored")), report.add)
    if counter is not None:
        for where, meta, i in chosen:
            try:
                got, _ = counter.encode(meta["messages"][i], list(meta["image_tokens"][i]))
            except ValueError as exc:
                report.add(f"{where}: sample {meta['ids'][i]!r} cannot be re-tokenized: {exc}")
                continue
            report.recounted += 1
            if len(got) != meta["tokens"][i]:
                report.add(f"{where}: sample {meta['ids'][i]!r} recounts to {len(got)} tokens, stored {meta['tokens'][i]}")
    return report
