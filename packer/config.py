"""The settings of ``curate pack`` and ``curate verify``, checked on construction.

The verb builds a :class:`PackConfig` (or :class:`VerifyConfig`) from its flags and
passes it down; ``__post_init__`` refuses a bad value with one line naming the
flag before a processor loads or a record is read.
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from curate.core import validate as v
from curate.core.errors import UserError
from curate.core.defaults import DEFAULT_SHARD_SIZE
from curate.core.location import Location, locations
from curate.core.record_limits import ImageReading
from packer.compute_balance import balance_options
from packer.lengths import DEFAULT_VERIFY_SAMPLE
from packer.plan import MAX_CTX

PathLike = str | os.PathLike[str]

DEFAULT_SEQUENCES_PER_SHARD = 256
#: ``--balance-compute`` bounds: data-parallel ranks and micro-batches per rank (the layout's arrays grow with both).
MAX_DP, MAX_MICRO_BATCHES = 1 << 16, 1 << 10
SPLITS = ("train", "val", "test")


def parse_split_ratio(ratio: str | Sequence[float]) -> tuple[float, float, float]:
    """``"8,1,1"`` or ``(0.8, 0.1, 0.1)`` → train/val/test weights (not normalised); raises UserError."""
    try:
        parts = [float(x) for x in (ratio.split(",") if isinstance(ratio, str) else ratio)]
    except (TypeError, ValueError):
        parts = []
    if len(parts) != 3 or any(p < 0 or p != p for p in parts) or sum(parts) <= 0:
        raise UserError(f"--split-ratio {ratio!r}: give three non-negative train,val,test weights, e.g. 1,0,0 or 8,1,1")
    return parts[0], parts[1], parts[2]


@dataclass(frozen=True)
class PackConfig(ImageReading):
    """Settings of ``curate pack`` (see :func:`packer.pack.pack`).

    Attributes:
        out: Output folder.
        ctx: Tokens per packed sequence.
        processor: Processor folder or hub id (needed unless ``lengths`` is given).
        min_pixels, max_pixels: Overrides of the image processor's pixel bounds.
        workers: Worker processes of the default executor and of the planner.
        seed: Seed of the verification sample and of the plan.
        shard_size: Input records per counting shard.
        image_root: Folder (or bucket prefix) relative image paths start from (default: each input file's own).
        sequences_per_shard: Packed sequences per output tar.
        verify_fraction: Older form: a share of every shard also run through the full processor.
        verify_sample: Records (seeded, spread over the shards) also run through the full processor.
        exact: Run the full processor on every record.
        lengths: Reuse a ``lengths.parquet`` instead of counting.
        plan_only: Write the plan only, no shards.
        trust_remote_code: Allow processors that ship their own code.
        plot: Write ``packing.png``.
        balance_compute, dp, micro_batches, cost_model, step_mix: Compute-balanced layout
            (:mod:`packer.compute_balance`); ``cost_model`` is a YAML of the model's fields or a timing log to fit
            (:mod:`packer.timing`), ``step_mix`` the groups of similar sequences per step.
        energon: Also make ``out`` an Energon dataset with this train,val,test split (the CLI's ``--energon``).
        max_image_bytes, max_image_pixels, max_images: What one record may cost in images
            (:class:`curate.core.record_limits.ImageReading`).
    """

    out: Location | PathLike
    ctx: int = 8192
    processor: str | None = None
    min_pixels: int | None = None
    max_pixels: int | None = None
    workers: int = 1
    seed: int = 0
    shard_size: int = DEFAULT_SHARD_SIZE
    sequences_per_shard: int = DEFAULT_SEQUENCES_PER_SHARD
    verify_fraction: float | None = None
    verify_sample: int | None = DEFAULT_VERIFY_SAMPLE
    exact: bool = False
    lengths: Location | PathLike | None = None
    plan_only: bool = False
    trust_remote_code: bool = False
    plot: bool = True
    balance_compute: bool = False
    dp: int | None = None
    micro_batches: int | None = None
    cost_model: Location | PathLike | None = None
    step_mix: int | None = None
    energon: str | None = None
    image_root: Location | PathLike | None = None

    def __post_init__(self) -> None:
        locations(self, {"out": "--out", "lengths": "--lengths", "cost_model": "--cost-model",
                         "image_root": "--image-root"})
        v.out_dir("--out", self.out)
        self.check_image_reading()
        v.in_dir("--image-root", self.image_root)
        v.integer("--ctx", self.ctx, 1)
        if self.ctx > MAX_CTX:
            raise UserError(f"--ctx {self.ctx} is larger than the supported maximum {MAX_CTX}")
        v.integer("--min-pixels", self.min_pixels, 1)
        v.integer("--max-pixels", self.max_pixels, 1)
        if self.min_pixels is not None and self.max_pixels is not None and self.min_pixels > self.max_pixels:
            raise UserError(f"--min-pixels {self.min_pixels} is larger than --max-pixels {self.max_pixels}; "
                            "give min <= max")
        v.integer("--workers", self.workers, 1)
        v.integer("--shard-size", self.shard_size, 1)
        v.integer("--sequences-per-shard", self.sequences_per_shard, 1)
        v.within("--verify-fraction", self.verify_fraction, 0.0, 1.0)
        v.integer("--verify-sample", self.verify_sample, 0)
        v.integer("--seed", self.seed, 0)
        v.in_file("--lengths", self.lengths)
        v.in_file("--cost-model", self.cost_model)
        if self.energon is not None:
            parse_split_ratio(self.energon)
            energon_here("--energon", self.out)
        v.at_most("--dp", self.dp, MAX_DP, "ranks laid out per training step")  # bounded before packer.compute_balance sizes
        v.at_most("--micro-batches", self.micro_batches, MAX_MICRO_BATCHES)  # its arrays by them
        balance_options(self.balance_compute, self.dp, self.micro_batches, self.cost_model, self.step_mix)


@dataclass(frozen=True)
class VerifyConfig:
    """Settings of ``curate verify`` (see :func:`packer.verify.verify_pack`)."""

    out: Location | PathLike
    processor: str | None = None
    sample: int = 64
    seed: int = 0
    recount_all: bool = False

    def __post_init__(self) -> None:
        locations(self, {"out": "OUT"})
        v.integer("--sample", self.sample, 0)
        if self.recount_all and self.sample != 64:
            raise UserError("--recount-all re-tokenizes every record: drop --sample")
        v.integer("--seed", self.seed, 0)
        if self.out.is_remote or v.later(self.out):
            return  # in a bucket: its small files read through a local copy, its tars in place (packer.verify);
            # or made by an earlier step
        out = Path(self.out)
        if not out.is_dir():
            raise UserError(f"{out}: no such folder; give a curate pack output folder")
        read_pack_stats(out)


def energon_here(flag: str, out: Location | PathLike) -> None:
    """Energon prepares a dataset on a file system: refuse a folder in object storage in one line."""
    if Location(out).is_remote:
        raise UserError(f"{flag}: Megatron-Energon prepares datasets on a file system, not {out}; pack into a "
                        "local or mounted folder (or copy the shards there) and run curate energon-prepare on it")


def read_pack_stats(out: PathLike, name: str | None = None) -> dict:
    """``OUT/stats.json`` of a finished ``curate pack`` run, checked (one line naming the file otherwise).

    ``name``: how the folder is named in errors (its URL when ``out`` is a local copy of a bucket's files).
    """
    path = Path(out) / "stats.json"
    where = name or str(out)
    if not path.is_file():
        raise UserError(f"{where}: no stats.json; is this a finished curate pack output folder?")
    try:
        stats = json.loads(path.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, ValueError) as exc:
        raise UserError(f"{where}/stats.json: not a readable stats file ({type(exc).__name__}: {exc}); pack again into a "
                        "new folder") from None
    if not isinstance(stats, dict) or stats.get("stage") != "pack":
        stage = stats.get("stage") if isinstance(stats, dict) else None
        raise UserError(f"{where}/stats.json is from stage {stage!r}, not pack")
    settings = stats.get("settings")
    if not isinstance(settings, dict) or not isinstance(settings.get("ctx"), int):
        raise UserError(f"{where}/stats.json: settings.ctx is missing; is this a finished curate pack output folder?")
    return stats
