"""The ``dedup`` verb (curate/dedup/)."""

from __future__ import annotations

import click

from curate.cli.group import cli
from curate.cli.options import executor_options, image_root_option, make_executor, print_rejects
from curate.core.defaults import DEFAULT_SHARD_SIZE
from curate.dedup.config import (DEFAULT_NEAR_THRESHOLD, DEFAULT_SEARCH_BLOCK, DEFAULT_SEMANTIC_THRESHOLD,
                                 MAX_NEAR_THRESHOLD)


def _sources(ctx: click.Context, param: click.Parameter, value: str | None) -> tuple[str, ...]:
    return tuple(s.strip() for s in value.split(",")) if value else ()


@cli.command("dedup")
@click.argument("inputs", nargs=-1, required=True, type=click.Path(path_type=str))
@click.option("--out", required=True, type=click.Path(path_type=str), help="Output folder.")
@click.option("--near/--no-near", default=True, show_default=True,
              help="Find near duplicates with perceptual hashes (re-encoded, resized, slightly cropped, watermarked).")
@click.option("--near-threshold", type=int, default=DEFAULT_NEAR_THRESHOLD, show_default=True,
              help=f"Bits (of 63) within which two images are near duplicates (at most {MAX_NEAR_THRESHOLD}).")
@click.option("--embeddings", type=click.Path(path_type=str), default=None,
              help="curate embed's output for these records: also remove semantic duplicates (cosine).")
@click.option("--semantic-threshold", type=float, default=DEFAULT_SEMANTIC_THRESHOLD, show_default=True,
              help="With --embeddings: cosine similarity from which two records are duplicates.")
@click.option("--prefer", default=None, callback=_sources, metavar="SRC,SRC",
              help="Sources to keep first when copies are found, best first (then the largest image, then the id).")
@click.option("--against", multiple=True, type=click.Path(path_type=str),
              help="Benchmark records or folders (any layout curate reads): records whose image copies one are "
                   "removed (benchmark_overlap). Repeatable.")
@click.option("--against-embeddings", type=click.Path(path_type=str), default=None,
              help="curate embed's output for the --against records: semantic overlap too (needs --embeddings).")
@click.option("--shard-size", type=int, default=DEFAULT_SHARD_SIZE, show_default=True, help="Records per hashing shard.")
@click.option("--search-block", type=int, default=DEFAULT_SEARCH_BLOCK, show_default=True,
              help="Images per shard of the near-duplicate search.")
@click.option("--decode-threads", type=int, default=None, help="Threads decoding images per worker (default: cores, at most 4).")
@click.option("--no-records", is_flag=True, help="Write rejects.parquet and stats.json only, not the kept records.")
@image_root_option
@executor_options
def dedup_cmd(inputs: tuple[str, ...], out: str, no_records: bool, workers: int, executor: str,
              ray_address: str | None, **settings: object) -> None:
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
    from curate.core.results import from_stats
    from curate.dedup.config import DedupConfig
    from curate.dedup.results import DedupResult
    from curate.dedup.stage import dedup

    config = DedupConfig(out=out, write_records=not no_records, **settings)  # type: ignore[arg-type]
    r = from_stats(DedupResult, dedup(list(inputs), config, executor=make_executor(executor, workers, ray_address)))
    d = r.duplicates
    console.print(f"[bold]kept[/bold] {r.records_out:,} of {r.records_in:,} records; removed "
                  f"{d.get('exact_same_bytes', 0) + d.get('exact_same_pixels', 0):,} exact, {d.get('near', 0):,} near, "
                  f"{d.get('semantic', 0):,} semantic duplicates"
                  + (f", {r.benchmark_overlap['records']:,} benchmark copies" if r.benchmark_overlap else ""))
    print_rejects(r, out)
    if r.records_written is not None:
        console.print(f"records: {out}/records/ ({r.records_written['records']:,} written)")
    console.print(f"stats: {out}/stats.json")
