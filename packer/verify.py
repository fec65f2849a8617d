"""``curate verify OUT``: re-read a packed folder and check every boundary and count.

Walks every tar once (:func:`curate.core.formats.containers.scan_groups`, which groups members as webdataset does: each
sequence's JSON is read, and each image goes through the image gate, which proves it decodes as the loader will
decode it), a few tars per shard of an executor (``--workers N`` processes or ``--executor ray``;
:mod:`packer.verify_tar`), and checks, naming each problem:

* each sequence's JSON: ``cu_seqlens`` starts at 0, its steps equal ``tokens``, it
  ends at or below ``ctx``; per-sample lists have one entry per sample; the image
  members listed are present (and nothing else), every image decodes, and (with a processor, whose
  rule turns a size into a grid) its decoded size gives the stored grid;
* the whole: every id appears once, the ids equal the plan's, the number of
  sequences and of packed records equal ``stats.json``;
* a seeded sample of records re-tokenized with the processor gives the stored counts (with ``recount_all``,
  ``--recount-all``: every record, re-tokenized in the shards, each worker holding the processor);
* for a compute-balanced pack, every sequence's step, rank and cost (:mod:`packer.verify_steps`).
"""

from __future__ import annotations

import fnmatch
import shutil
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from curate.core.columns import first_occurrences
from curate.core.images import DEFAULT_LIMITS, ImageLimits
from curate.core.io import read_json
from curate.core.remote import reading
from curate.core.validate import configure
from packer.config import VerifyConfig, read_pack_stats
from packer.verify_steps import StepRecorder
from packer.verify_tar import ProblemLog, VerifyTarTask, recount, tar_shards


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
    task = VerifyTarTask(ctx=ctx, rule=counter.image_rule if counter is not None else None, sample=sample,
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
