"""The ``dedup`` verb as a function of values (curate/dedup/)."""

from __future__ import annotations

import os

from curate.core.settings import option
from curate.dedup.config import DedupConfig
from curate.verbs import (EXECUTOR_OPTIONS, IMAGE_ROOT, Prepared, Values, Verb, executor_of, field_option, inputs,
                          options_of, print_rejects, settings)


def dedup(values: Values) -> Prepared:
    """Remove exact, near and semantic duplicate records, and copies of benchmark images.

    Exact: the same bytes or the same decoded pixels. Near: perceptual hashes within
    --near-threshold bits. Semantic (--embeddings): cosine >= --semantic-threshold.
    One record of each group is kept (--prefer, then the largest image, then the id);
    every other is in OUT/rejects.parquet with its reason and duplicate_of. Writes
    OUT/records/ (the kept records in their input layout: curate balance reads it),
    OUT/hashes/, OUT/stats.json. Reruns resume.

    \b
    Examples:
      curate dedup data/ --out dedup/ --prefer laion,coyo --workers 8
      curate dedup data/ --embeddings emb/ --against bench/mmmu/ --against bench/chartqa/ --out dedup/
    """
    from curate.core.settings import build_config

    out = values["out"]
    config = build_config(DedupConfig, settings(values, "inputs", "no_records"), write_records=not values["no_records"])
    runner = executor_of(values)
    records = list(values["inputs"])

    def run() -> None:
        from curate.core.progress import console
        from curate.core.stats import from_stats
        from curate.dedup.config import DedupResult
        from curate.dedup.stage import dedup as dedup_records

        r = from_stats(DedupResult, dedup_records(records, config, executor=runner.make()))
        d = r.duplicates
        console.print(f"[bold]kept[/bold] {r.records_out:,} of {r.records_in:,} records; removed "
                      f"{d.get('exact_same_bytes', 0) + d.get('exact_same_pixels', 0):,} exact, {d.get('near', 0):,} near, "
                      f"{d.get('semantic', 0):,} semantic duplicates"
                      + (f", {r.benchmark_overlap['records']:,} benchmark copies" if r.benchmark_overlap else ""))
        print_rejects(r, out)
        if r.records_written is not None:
            console.print(f"records: {out}/records/ ({r.records_written['records']:,} written)")
        console.print(f"stats: {out}/stats.json")

    return Prepared(config, run)


VERBS = {
    "dedup": Verb("dedup", inputs(), (
        *options_of(DedupConfig, "out", "near", "near_threshold", "embeddings", "semantic_threshold"),
        field_option(DedupConfig, "prefer", split=True, default=(), type=str),
        field_option(DedupConfig, "against", multiple=True, type=os.PathLike),
        *options_of(DedupConfig, "against_embeddings", "shard_size", "search_block", "decode_threads"),
        option("no_records", type=bool, default=False,
               help="Write rejects.parquet and stats.json only, not the kept records."),
        IMAGE_ROOT, *EXECUTOR_OPTIONS), dedup),
}
