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
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Any

from curate.core import validate as v
from curate.core.limits import DEFAULT_SHARD_SIZE, ImageReading
from curate.core.errors import UserError
from curate.core.io import Location, locations
from curate.core.stats import Counts
from curate.core.settings import setting


if TYPE_CHECKING:  # the compute balance loads numpy and pyarrow: settings (and --help) are made without them
    from packer.compute_balance import BalanceOptions

PathLike = str | os.PathLike[str]

DEFAULT_SEQUENCES_PER_SHARD = 256
DEFAULT_VERIFY_SAMPLE = 1000
#: Largest supported ``--ctx`` (the planner's length histogram has ``ctx + 1`` entries).
MAX_CTX = 1 << 24
#: ``--balance-compute`` bounds: data-parallel ranks and micro-batches per rank (the layout's arrays grow with both).
MAX_DP, MAX_MICRO_BATCHES = 1 << 16, 1 << 10
SPLITS = ("train", "val", "test")
#: ``curate verify``'s default sample (``--recount-all`` refuses another one).
DEFAULT_VERIFY_RECOUNT = 64


def parse_split_ratio(ratio: str | Sequence[float]) -> tuple[float, float, float]:
    """``"8,1,1"`` or ``(0.8, 0.1, 0.1)`` → train/val/test weights (not normalised); raises UserError."""
    try:
        parts = [float(x) for x in (ratio.split(",") if isinstance(ratio, str) else ratio)]
    except (TypeError, ValueError):
        parts = []
    if len(parts) != 3 or any(p < 0 or p != p for p in parts) or sum(parts) <= 0:
        raise UserError(f"--split-ratio {ratio!r}: give three non-negative train,val,test weights, e.g. 1,0,0 or 8,1,1")
    return parts[0], parts[1], parts[2]


@dataclass(frozen=True, kw_only=True)
class PackConfig(ImageReading):
    """Settings of ``curate pack`` (see :func:`packer.pack.pack`); each field's help says what it does.

    Keyword-only fields, in the order ``curate pack --help`` lists them. ``workers``
    and ``seed`` are the shared executor flags, ``image_root`` the shared ``--image-root``, the image limits
    (:class:`curate.core.limits.ImageReading`) the shared image limit flags; ``plot`` is for Python
    callers only. ``balance_compute``, ``dp``, ``micro_batches``, ``cost_model``, ``step_mix``: the
    compute-balanced layout (:mod:`packer.compute_balance`; ``cost_model`` is a YAML of the model's fields or a
    timing log to fit, :mod:`packer.compute_balance`), checked once into :attr:`balance`.
    """

    processor: str | None = setting(None, metavar="PROC",
                                    help="Processor folder or hub id used by the trainer (AutoProcessor).")
    ctx: int = setting(8192, tokens=True, help="Tokens per packed sequence (8192, 8k or 8K).")
    out: Location | PathLike = setting(help="Output folder.")
    min_pixels: int | None = setting(None, help="Override the image processor's min_pixels.")
    max_pixels: int | None = setting(None, help="Override the image processor's max_pixels.")
    verify_sample: int | None = setting(
        DEFAULT_VERIFY_SAMPLE, help="Records (seeded, spread over shards) also run through the full processor; any "
                                    "mismatch stops the run. 0 turns the check off.")
    verify_fraction: float | None = setting(
        None, help="Older form: a share of every shard checked instead of --verify-sample (1% of 85M records is "
                   "850K processor runs); prefer --verify-sample.")
    exact: bool = setting(False, help="Run the full processor on every record (decodes every image; slow).")
    lengths: Location | PathLike | None = setting(
        None, help="Earlier token lengths (a lengths.parquet). With INPUT: text counts of unchanged records "
                   "reused, images and new records counted, its other records ignored; without: plan them as they are.")
    plan_only: bool = setting(False, help="Write plan.parquet and stats.json only, no shards.")
    shard_size: int = setting(DEFAULT_SHARD_SIZE, help="Input records per counting shard.")
    sequences_per_shard: int = setting(DEFAULT_SEQUENCES_PER_SHARD, help="Packed sequences per output tar.")
    trust_remote_code: bool = setting(False, help="Allow processors that ship their own code.")
    energon: str | None = setting(None, metavar="TRAIN,VAL,TEST",
                                  help="Also make OUT a Megatron-Energon dataset with this split of the shards, e.g. "
                                       "1,0,0 (see curate energon-prepare).")
    energon_layout: str = setting(
        "curate", choices=("curate", "llava-ov-1.5"),
        help="What --energon writes: curate (OUT itself, sample type packer.energon.PackedSequenceSample) or "
             "llava-ov-1.5 (also OUT/llava-ov/: LLaVA-OneVision-1.5's offline-packing layout, PackedCaptioningSample; "
             "docs/energon.md).")
    balance_compute: bool = setting(
        False, help="Lay the bins out in training steps of equal compute per data-parallel rank (needs --dp).")
    dp: int | None = setting(None, metavar="N", help="Data-parallel ranks that train on the pack.")
    micro_batches: int | None = setting(None, metavar="M", help="Packed sequences per rank per step (default 1).")
    cost_model: Location | PathLike | None = setting(
        None, metavar="FILE",
        help="YAML of architecture parameters for the compute cost (default: LLaVA-OneVision-1.5-8B), or a timing "
             "log (.csv/.parquet of measured sequences) to fit the cost to (docs/compute-balance.md).")
    step_mix: int | None = setting(
        None, metavar="K", help="Groups of similar sequences per step (default: one per micro-batch). More groups mix "
                                "what a step holds at the price of balance; must divide dp x micro-batches.")
    image_root: Location | PathLike | None = setting(
        None, cli=False, help="Folder (or bucket prefix) relative image paths start from (default: each input "
                              "file's own); the shared --image-root.")
    workers: int = setting(1, cli=False, help="Worker processes of the default executor and of the planner.")
    seed: int = setting(0, cli=False, help="Seed of the verification sample and of the plan.")
    plot: bool = setting(True, cli=False, help="Write packing.png.")

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
        if self.energon_layout != "curate" and self.energon is None:
            raise UserError(f"--energon-layout {self.energon_layout} needs --energon TRAIN,VAL,TEST (e.g. 1,0,0)")
        v.at_most("--dp", self.dp, MAX_DP, "ranks laid out per training step")  # bounded before the compute
        v.at_most("--micro-batches", self.micro_batches, MAX_MICRO_BATCHES)  # balance sizes its arrays by them
        _ = self.balance  # the --balance-compute flags checked (and the cost model read) once, here

    @cached_property
    def balance(self) -> BalanceOptions | None:
        """The compute-balanced layout asked for (:func:`packer.compute_balance.balance_options`), None when off."""
        from packer.compute_balance import balance_options

        return balance_options(self.balance_compute, self.dp, self.micro_batches, self.cost_model, self.step_mix)

    @property
    def checked_sample(self) -> int | None:
        """Records the count step checks with the full processor: ``verify_sample``, or None when the older
        ``verify_fraction`` (a share of every shard) is given."""
        return None if self.verify_fraction is not None else self.verify_sample


@dataclass(frozen=True)
class VerifyConfig:
    """Settings of ``curate verify`` (see :func:`packer.verify.verify_pack`)."""

    out: Location | PathLike = setting(cli=False, help="A curate pack output folder (the verb's OUT).")
    processor: str | None = setting(
        None, metavar="PROC", help="Processor to recount tokens with (default: the one recorded in OUT/stats.json).")
    sample: int = setting(DEFAULT_VERIFY_RECOUNT, help="Records re-tokenized (seeded sample).")
    seed: int = setting(0, cli=False, help="Seed of the sample; the shared --seed.")
    recount_all: bool = setting(
        False, help="Re-tokenize every record instead of a sample, in the shards (each worker loads the processor): "
                    "the proof that every stored count is right, at about the cost of counting again.")

    def __post_init__(self) -> None:
        locations(self, {"out": "OUT"})
        v.integer("--sample", self.sample, 0)
        if self.recount_all and self.sample != DEFAULT_VERIFY_RECOUNT:
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


# Typed results of ``curate pack`` (see :mod:`curate.core.stats`).
@dataclass(frozen=True)
class PackResult(Counts):
    """``curate pack``: records packed into sequences, fill, padding, the compute balance if asked."""

    records_packed: int = 0
    bins: int = 0
    lower_bound_bins: int = 0
    fill_ratio: float = 0.0
    padding_reduction: float | None = None
    sequences: int | None = None
    balance: dict[str, Any] | None = None
