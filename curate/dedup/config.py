"""The settings of ``curate dedup``, checked on construction (one line naming the flag)."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any

from curate.core import validate as v
from curate.core.limits import DEFAULT_SHARD_SIZE
from curate.core.errors import UserError
from curate.core.io import Location, locations
from curate.core.images import DEFAULT_MAX_PIXELS
from curate.core.settings import setting
from curate.core.stats import Counts


PathLike = str | os.PathLike[str]

#: Bits (of 63) within which two images are near duplicates (see docs/dedup.md for how it was chosen).
DEFAULT_NEAR_THRESHOLD = 8
#: Cosine similarity from which two records are semantic duplicates (with --embeddings).
DEFAULT_SEMANTIC_THRESHOLD = 0.95
#: Queries per shard of the candidate search.
DEFAULT_SEARCH_BLOCK = 100_000
#: The largest near threshold accepted: 11 bits probe 1,562 values per chunk, 7× the cost of 8.
MAX_NEAR_THRESHOLD = 11


@dataclass(frozen=True)
class DedupConfig:
    """Settings of ``curate dedup`` (see :func:`curate.dedup.stage.dedup`)."""

    out: Location | PathLike = setting(help="Output folder.")
    near: bool = setting(True, help="Find near duplicates with perceptual hashes (re-encoded, resized, slightly "
                                    "cropped, watermarked).")
    near_threshold: int = setting(
        DEFAULT_NEAR_THRESHOLD,
        help=f"Bits (of 63) within which two images are near duplicates (at most {MAX_NEAR_THRESHOLD}).")
    embeddings: Location | PathLike | None = setting(
        None, help="curate embed's output for these records: also remove semantic duplicates (cosine).")
    semantic_threshold: float = setting(
        DEFAULT_SEMANTIC_THRESHOLD, help="With --embeddings: cosine similarity from which two records are duplicates.")
    #: Offered as ``SRC,SRC``, split into a tuple (:func:`curate.verbs.field_option`).
    prefer: tuple[str, ...] = setting(
        (), cli=False, metavar="SRC,SRC",
        help="Sources to keep first when copies are found, best first (then the largest image, then the id).")
    #: Offered as a repeatable option (:func:`curate.verbs.field_option`).
    against: tuple[Location | PathLike, ...] = setting(
        (), cli=False, help="Benchmark records or folders (any layout curate reads): records whose image copies one "
                            "are removed (benchmark_overlap). Repeatable.")
    against_embeddings: Location | PathLike | None = setting(
        None, help="curate embed's output for the --against records: semantic overlap too (needs --embeddings).")
    shard_size: int = setting(DEFAULT_SHARD_SIZE, help="Records per hashing shard.")
    search_block: int = setting(DEFAULT_SEARCH_BLOCK, help="Images per shard of the near-duplicate search.")
    decode_threads: int | None = setting(None, help="Threads decoding images per worker (default: cores, at most 4).")
    max_image_pixels: int = DEFAULT_MAX_PIXELS
    #: Offered as ``--no-records`` (by hand: a flag that turns the setting off).
    write_records: bool = setting(
        True, cli=False, help="Write the kept records (--no-records: rejects.parquet and stats.json only).")
    seed: int = setting(0, cli=False, help="Seed of the run (the verb's --seed).")
    image_root: Location | PathLike | None = setting(
        None, cli=False, help="Folder (or bucket prefix) relative image paths start from (default: each input "
                              "file's own; the verb's --image-root).")

    def __post_init__(self) -> None:
        locations(self, {"out": "--out", "embeddings": "--embeddings", "against": "--against",
                         "against_embeddings": "--against-embeddings", "image_root": "--image-root"})
        v.out_dir("--out", self.out)
        v.in_dir("--image-root", self.image_root)
        v.at_least("--near-threshold", self.near_threshold, 0)
        if self.near_threshold > MAX_NEAR_THRESHOLD:
            raise UserError(f"--near-threshold must be at most {MAX_NEAR_THRESHOLD} bits, got {self.near_threshold}; "
                            "past that distinct photos start to match (docs/dedup.md)")
        v.within("--semantic-threshold", self.semantic_threshold, 0.0, 1.0)
        v.in_dir("--embeddings", self.embeddings)
        v.in_dir("--against-embeddings", self.against_embeddings)
        for path in self.against:
            v.in_path("--against", path)
        if self.against_embeddings is not None and not self.against:
            raise UserError("--against-embeddings needs --against (the benchmark records they embed)")
        if self.against_embeddings is not None and self.embeddings is None:
            raise UserError("--against-embeddings needs --embeddings too (the inputs' embeddings to compare)")
        if len(set(self.prefer)) != len(self.prefer) or any(not s.strip() for s in self.prefer):
            raise UserError(f"--prefer {','.join(self.prefer)}: name each source once, e.g. --prefer laion,coyo")
        v.at_least("--shard-size", self.shard_size, 1)
        v.at_least("--search-block", self.search_block, 1)
        v.at_least("--decode-threads", self.decode_threads, 1)
        v.at_least("--max-image-pixels", self.max_image_pixels, 1)


# The typed result of ``curate dedup`` (see :mod:`curate.core.stats`).
@dataclass(frozen=True)
class DedupResult(Counts):
    """``curate dedup``: records kept, copies removed by kind, benchmark overlap, records written."""

    records_out: int = 0
    duplicates: dict[str, int] = field(default_factory=dict)
    benchmark_overlap: dict[str, Any] | None = None
    records_written: dict[str, Any] | None = None
