"""The ``curate`` command line: one click group, one thin verb per stage.

Each verb parses its flags and calls one function that holds the logic; tests
and executors call those functions directly.
"""

from __future__ import annotations

import sys

import click

from curate import __version__
from curate.errors import UserError


@click.group(context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
@click.version_option(__version__, prog_name="curate")
def cli() -> None:
    """Prepare the training data of vision-language models.

    Stages compose through files: each reads records (JSONL, Parquet) and writes
    its outputs plus a stats.json into an output folder. Reruns resume.
    """


def main(argv: list[str] | None = None) -> None:
    """Entry point of the ``curate`` console script: user errors print one line and exit 2."""
    try:
        cli.main(args=argv, prog_name="curate", standalone_mode=False)
    except UserError as exc:
        click.secho(f"error: {exc}", fg="red", err=True)
        sys.exit(exc.exit_code)
    except click.exceptions.Abort:
        click.echo("aborted", err=True)
        sys.exit(130)
    except click.ClickException as exc:
        exc.show()
        sys.exit(exc.exit_code)
    except click.exceptions.Exit as exc:
        sys.exit(exc.exit_code)


# ---------------------------------------------------------------------------
# Verbs. Each block below is one verb (or one sub-group); keep them thin.
# ---------------------------------------------------------------------------


def _executor_options(fn):  # noqa: ANN001, ANN202 - click decorator
    """Flags shared by every sharded verb: executor, workers, Ray address, seed."""
    fn = click.option("--ray-address", default=None, metavar="ADDR",
                      help="Ray cluster address for --executor ray (default: start a local cluster, or RAY_ADDRESS).")(fn)
    fn = click.option("--executor", type=click.Choice(["local", "ray"]), default="local", show_default=True,
                      help="Where shards run: this machine, or a Ray cluster.")(fn)
    fn = click.option("--workers", type=int, default=1, show_default=True,
                      help="Worker processes (local) or actors (ray) running shards in parallel.")(fn)
    fn = click.option("--seed", type=int, default=0, show_default=True,
                      help="Seed of every random choice; the same seed gives the same outputs.")(fn)
    return fn


def _make_executor(executor: str, workers: int, ray_address: str | None, **kw):  # noqa: ANN003, ANN202
    from curate.executors import get_executor
    return get_executor(executor, workers=workers, ray_address=ray_address, **kw)


@cli.command("pack")
@click.argument("inputs", nargs=-1, type=click.Path(path_type=str))
@click.option("--processor", metavar="PROC", help="Processor folder or hub id used by the trainer (AutoProcessor).")
@click.option("--ctx", type=int, default=8192, show_default=True, help="Tokens per packed sequence.")
@click.option("--out", required=True, type=click.Path(path_type=str), help="Output folder.")
@click.option("--min-pixels", type=int, default=None, help="Override the image processor's min_pixels.")
@click.option("--max-pixels", type=int, default=None, help="Override the image processor's max_pixels.")
@click.option("--verify-fraction", type=float, default=0.01, show_default=True,
              help="Share of records (seeded) also run through the full processor; any mismatch stops the run.")
@click.option("--exact", is_flag=True, help="Run the full processor on every record (decodes every image; slow).")
@click.option("--lengths", type=click.Path(path_type=str), default=None,
              help="Reuse token lengths (a lengths.parquet with id, tokens) instead of counting.")
@click.option("--plan-only", is_flag=True, help="Write plan.parquet and stats.json only, no shards.")
@click.option("--shard-size", type=int, default=5000, show_default=True, help="Input records per counting shard.")
@click.option("--sequences-per-shard", type=int, default=256, show_default=True,
              help="Packed sequences per output tar.")
@click.option("--trust-remote-code", is_flag=True, help="Allow processors that ship their own code.")
@_executor_options
def pack_cmd(inputs: tuple[str, ...], processor: str | None, ctx: int, out: str, min_pixels: int | None,
             max_pixels: int | None, verify_fraction: float, exact: bool, lengths: str | None, plan_only: bool,
             shard_size: int, sequences_per_shard: int, trust_remote_code: bool, seed: int, workers: int,
             executor: str, ray_address: str | None) -> None:
    """Pack records into sequences of at most --ctx tokens, as WebDataset shards.

    Token counts are exact for the given processor (image tokens from image
    headers, Qwen2-VL rule); samples longer than ctx are listed as too_long,
    never truncated. Outputs in OUT: shards/*.tar, lengths.parquet, plan.parquet,
    rejects.parquet, stats.json, packing.png.

    \b
    Examples:
      curate pack data/*.jsonl --processor lmms-lab/LLaVA-OneVision-1.5-8B-Instruct --ctx 8192 --out packed/
      curate pack --lengths packed/lengths.parquet --ctx 16384 --plan-only --out plan16k/
    """
    from packer.pack import pack

    stats = pack(list(inputs), out=out, ctx=ctx, processor=processor, min_pixels=min_pixels, max_pixels=max_pixels,
                 workers=workers, seed=seed, shard_size=shard_size, sequences_per_shard=sequences_per_shard,
                 verify_fraction=verify_fraction, exact=exact, lengths=lengths, plan_only=plan_only,
                 executor=_make_executor(executor, workers, ray_address), trust_remote_code=trust_remote_code)
    _summary_pack(stats, out)


def _summary_pack(stats: dict, out: str) -> None:
    from curate.progress import console

    pr = stats.get("padding_reduction")
    console.print(f"[bold]packed[/bold] {stats['records_packed']:,} of {stats['records_in']:,} records into "
                  f"{stats['bins']:,} sequences (lower bound {stats['lower_bound_bins']:,}, "
                  f"fill {stats['fill_ratio']:.3f}, padding reduction {'∞' if pr is None else f'{pr:.1f}×'})")
    if stats["dropped"] or stats["errored"]:
        console.print(f"dropped {stats['dropped'] or {}}  errored {stats['errored'] or {}}  → {out}/rejects.parquet")
    if stats.get("sequences") is not None:
        console.print(f"shards: {out}/shards/   plot: {out}/packing.png   stats: {out}/stats.json")
    else:
        console.print(f"plan: {out}/plan.parquet   plot: {out}/packing.png   stats: {out}/stats.json")


@cli.command("verify")
@click.argument("out", type=click.Path(path_type=str))
@click.option("--processor", metavar="PROC", default=None,
              help="Processor to recount tokens with (default: the one recorded in OUT/stats.json).")
@click.option("--sample", type=int, default=64, show_default=True, help="Records re-tokenized (seeded sample).")
@click.option("--seed", type=int, default=0, show_default=True)
def verify_cmd(out: str, processor: str | None, sample: int, seed: int) -> None:
    """Check a packed folder: every shard, boundary and count against its JSON and stats.json.

    Exits 1 and names each inconsistency when anything is wrong.
    """
    from curate.progress import console
    from packer.verify import verify_pack

    report = verify_pack(out, processor=processor, sample=sample, seed=seed)
    console.print(f"checked {report.shards} shards, {report.sequences:,} sequences, {report.records:,} records, "
                  f"{report.images:,} images; recounted {report.recounted} records with the processor")
    if not report.ok:
        for problem in report.problems:
            console.print(f"[red]✗[/red] {problem}")
        raise SystemExit(1)
    console.print("[green]✓[/green] all boundaries and counts consistent")


@cli.group("vocab")
def vocab_group() -> None:
    """Build and embed the concept vocabulary used by curate balance."""


@vocab_group.command("build")
@click.option("--out", required=True, type=click.Path(path_type=str), help="Vocabulary file to write (one concept per line).")
@click.option("--size", type=int, default=500_000, show_default=True, help="Number of concepts.")
@click.option("--word-list", "word_lists", multiple=True, type=click.Path(path_type=str),
              help="A word list (one entry per line); first priority. Repeatable.")
@click.option("--metaclip-metadata", type=click.Path(path_type=str), default=None,
              help="MetaCLIP's metadata.json (a JSON list of strings).")
@click.option("--captions", type=click.Path(path_type=str), default=None,
              help="Captions (JSONL with a caption field, or text one per line) to mine bigrams from by PMI.")
@click.option("--caption-field", default="caption", show_default=True, help="Field holding the caption in JSONL.")
@click.option("--pmi-threshold", type=float, default=6.0, show_default=True, help="Keep bigrams with PMI (log2) at least this.")
@click.option("--min-bigram-count", type=int, default=5, show_default=True, help="Keep bigrams seen at least this often.")
@click.option("--max-bigrams", type=int, default=None, help="At most this many mined bigrams.")
@click.option("--exclude", multiple=True, type=click.Path(path_type=str), help="Entries never to include (file). Repeatable.")
@click.option("--wordfreq-lang", "wordfreq_langs", multiple=True, type=click.Choice(["en", "zh"]),
              help="wordfreq languages to draw from (default: en and zh).")
@click.option("--no-wordfreq", is_flag=True, help="Do not use wordfreq's word lists.")
@click.option("--max-chars", type=int, default=50, show_default=True, help="Longest entry in characters.")
@click.option("--max-words", type=int, default=6, show_default=True, help="Longest entry in words.")
@click.option("--drop-single-han", is_flag=True, help="Drop single Chinese characters (kept by default: 猫, 狗 are words).")
@click.option("--stats", "stats_out", type=click.Path(path_type=str), default=None,
              help="Where to write the build's counts (default: NAME.stats.json beside --out).")
def vocab_build_cmd(out: str, size: int, word_lists: tuple[str, ...], metaclip_metadata: str | None,
                    captions: str | None, caption_field: str, pmi_threshold: float, min_bigram_count: int,
                    max_bigrams: int | None, exclude: tuple[str, ...], wordfreq_langs: tuple[str, ...],
                    no_wordfreq: bool, max_chars: int, max_words: int, drop_single_han: bool,
                    stats_out: str | None) -> None:
    """Build a concept vocabulary: exactly --size unique entries, English and Chinese.

    Sources in priority order: --word-list files, --metaclip-metadata, bigrams mined
    by PMI from --captions, then wordfreq's English and Chinese lists interleaved.
    Numbers, punctuation, clitics and near-duplicates are filtered. The bundled
    vocab/500k.txt was made with: curate vocab build --size 500000 --out vocab/500k.txt
    """
    from curate.stats import command_line
    from curate.vocab_build import build_vocab_file, summarize

    languages = () if no_wordfreq else (wordfreq_langs or ("en", "zh"))
    from pathlib import Path

    result = build_vocab_file(Path(out), stats_out=Path(stats_out) if stats_out else None, command=command_line(), size=size,
                              wordfreq_languages=languages, word_lists=[Path(p) for p in word_lists],
                              metaclip_metadata=Path(metaclip_metadata) if metaclip_metadata else None,
                              captions=Path(captions) if captions else None, caption_field=caption_field,
                              pmi_threshold=pmi_threshold, min_bigram_count=min_bigram_count, max_bigrams=max_bigrams,
                              exclude=[Path(p) for p in exclude], max_chars=max_chars, max_words=max_words,
                              keep_single_han=not drop_single_han)
    click.echo(summarize(result))

