"""The ``dedup`` verb (curate/dedup/)."""

from __future__ import annotations

from typing import Any

import click

from curate.cli.group import cli
from curate.cli.options import setting_option
from curate.cli.options import (Prepared, config_options, executor_options, image_root_option, make_executor,
                                print_rejects)
from curate.dedup.config import DedupConfig
from curate.core.settings import build_config


def _sources(ctx: click.Context, param: click.Parameter, value: str | None) -> tuple[str, ...]:
    return tuple(s.strip() for s in value.split(",")) if value else ()


@cli.command("dedup")
@click.argument("inputs", nargs=-1, required=True, type=click.Path(path_type=str))
@config_options(DedupConfig, "out", "near", "near_threshold", "embeddings", "semantic_threshold")
@setting_option(DedupConfig, "prefer", default=None, callback=_sources)
@setting_option(DedupConfig, "against", multiple=True, type=click.Path(path_type=str))
@config_options(DedupConfig, "against_embeddings", "shard_size", "search_block", "decode_threads")
@click.option("--no-records", is_flag=True, help="Write rejects.parquet and stats.json only, not the kept records.")
@image_root_option
@executor_options
def dedup_cmd(inputs: tuple[str, ...], out: str, no_records: bool, workers: int, executor: str,
              ray_address: str | None, **settings: Any) -> Prepared:
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
    from curate.core.progress import console
    from curate.core.stats import from_stats
    from curate.dedup.config import DedupResult
    from curate.dedup.stage import dedup

    config = build_config(DedupConfig, settings, out=out, write_records=not no_records)
    runner = make_executor(executor, workers, ray_address)

    def run() -> None:
        r = from_stats(DedupResult, dedup(list(inputs), config, executor=runner))
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
