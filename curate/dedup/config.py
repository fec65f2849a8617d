"""The settings of ``curate dedup``, checked on construction (one line naming the flag)."""

from __future__ import annotations

import os
from dataclasses import dataclass

from curate.core import validate as v
from curate.core.defaults import DEFAULT_SHARD_SIZE
from curate.core.errors import UserError
from curate.core.location import Location, locations
from curate.core.images import DEFAULT_MAX_PIXELS

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

    out: Location | PathLike
    near: bool = True
    near_threshold: int = DEFAULT_NEAR_THRESHOLD
    embeddings: Location | PathLike | None = None
    semantic_threshold: float = DEFAULT_SEMANTIC_THRESHOLD
    prefer: tuple[str, ...] = ()
    against: tuple[Location | PathLike, ...] = ()
    against_embeddings: Location | PathLike | None = None
    shard_size: int = DEFAULT_SHARD_SIZE
    search_block: int = DEFAULT_SEARCH_BLOCK
    decode_threads: int | None = None
    max_image_pixels: int = DEFAULT_MAX_PIXELS
    write_records: bool = True
    seed: int = 0
    image_root: Location | PathLike | None = None

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
