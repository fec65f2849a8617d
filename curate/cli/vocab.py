"""The ``vocab`` group: ``vocab build`` and ``vocab embed`` (curate/balance/vocab/)."""

from __future__ import annotations

import click

from curate.balance.config import VocabEmbedConfig
from curate.balance.results import VocabEmbedResult
from curate.balance.vocab.sources import WORDFREQ_SCRIPTS
from curate.core.results import from_stats
from curate.cli.group import cli
from curate.cli.options import config_options, executor_options, make_executor


@cli.group("vocab")
def vocab_group() -> None:
    """Build and embed the concept vocabulary used by curate balance."""


@vocab_group.command("build")
@click.option("--out", required=True, type=click.Path(path_type=str), help="Vocabulary file to write (one concept per line).")
@click.option("--size", type=int, default=None,
              help="Number of concepts (default 500,000; with --metaclip-metadata every entry the sources give).")
@click.option("--word-list", "word_lists", multiple=True, type=click.Path(path_type=str),
              help="A word list (one entry per line); first priority. Repeatable.")
@click.option("--metaclip-metadata", type=click.Path(path_type=str), default=None,
              help="MetaCLIP's metadata as published, kept entry for entry: metadata.json (a JSON list), MetaCLIP 2's "
                   "per-language LANG.json (a list, or an object whose keys are the entries), or a text file with "
                   "one entry per line. Nothing is added unless asked (--wordfreq-lang, --word-list, --captions).")
@click.option("--filter-metadata", is_flag=True,
              help="Put --metaclip-metadata through curate's filters and merging like the other sources "
                   "(drops numbers, punctuation, single characters, case and accent variants).")
@click.option("--captions", type=click.Path(path_type=str), default=None,
              help="Captions (JSONL with a caption field, or text one per line) to mine bigrams from by PMI.")
@click.option("--caption-field", default="caption", show_default=True, help="Field holding the caption in JSONL.")
@click.option("--pmi-threshold", type=float, default=6.0, show_default=True, help="Keep bigrams with PMI (log2) at least this.")
@click.option("--min-bigram-count", type=int, default=5, show_default=True, help="Keep bigrams seen at least this often.")
@click.option("--max-bigrams", type=int, default=None, help="At most this many mined bigrams.")
@click.option("--exclude", multiple=True, type=click.Path(path_type=str), help="Entries never to include (file). Repeatable.")
@click.option("--wordfreq-lang", "wordfreq_langs", multiple=True, type=click.Choice(sorted(WORDFREQ_SCRIPTS)),
              help="wordfreq languages to draw from (default: en and zh; none with --metaclip-metadata).")
@click.option("--no-wordfreq", is_flag=True, help="Do not use wordfreq's word lists.")
@click.option("--max-chars", type=int, default=50, show_default=True, help="Longest entry in characters.")
@click.option("--max-words", type=int, default=6, show_default=True, help="Longest entry in words.")
@click.option("--drop-single-han", is_flag=True, help="Drop single Chinese characters (kept by default: 猫, 狗 are words).")
@click.option("--stats", "stats_out", type=click.Path(path_type=str), default=None,
              help="Where to write the build's counts (default: NAME.stats.json beside --out).")
def vocab_build_cmd(out: str, size: int | None, word_lists: tuple[str, ...], metaclip_metadata: str | None,
                    filter_metadata: bool, captions: str | None, caption_field: str, pmi_threshold: float, min_bigram_count: int,
                    max_bigrams: int | None, exclude: tuple[str, ...], wordfreq_langs: tuple[str, ...],
                    no_wordfreq: bool, max_chars: int, max_words: int, drop_single_han: bool,
                    stats_out: str | None) -> None:
    """Build a concept vocabulary: exactly --size unique entries, English and Chinese.

    Sources in priority order: --word-list files, --metaclip-metadata, bigrams mined
    by PMI from --captions, then wordfreq's English and Chinese lists interleaved.
    Numbers, punctuation, clitics and near-duplicates are filtered, except in
    MetaCLIP's metadata, which is kept as published (see docs/metaclip.md). The
    bundled vocab/500k.txt was made with: curate vocab build --size 500000 --out vocab/500k.txt

    \b
    Examples:
      curate vocab build --metaclip-metadata metadata.json --out vocab/metaclip.txt
      curate vocab build --metaclip-metadata data/metadata/zh.json --out vocab/zh.txt
    """
    from curate.balance.vocab.build import build_vocab_file, summarize
    from curate.core import validate as v
    from curate.core.stats import command_line

    v.out_file("--out", out)
    v.out_file("--stats", stats_out)
    if size is None and metaclip_metadata is None:
        size = 500_000
    v.at_least("--size", size, 1)
    v.at_least("--max-chars", max_chars, 1)
    v.at_least("--max-words", max_words, 1)
    v.at_least("--min-bigram-count", min_bigram_count, 1)
    v.at_least("--max-bigrams", max_bigrams, 0)
    v.finite("--pmi-threshold", pmi_threshold)
    for flag, paths in (("--word-list", word_lists), ("--metaclip-metadata", [metaclip_metadata]),
                        ("--captions", [captions]), ("--exclude", exclude)):
        for path in paths:
            v.in_file(flag, path)
    default_langs = () if metaclip_metadata else ("en", "zh")  # published metadata is not filled up unless asked
    languages = () if no_wordfreq else (wordfreq_langs or default_langs)
    result = build_vocab_file(out, stats_out=stats_out, command=command_line(), size=size,  # paths or URLs
                              wordfreq_languages=languages, word_lists=list(word_lists),
                              metaclip_metadata=metaclip_metadata, captions=captions, caption_field=caption_field,
                              pmi_threshold=pmi_threshold, min_bigram_count=min_bigram_count, max_bigrams=max_bigrams,
                              exclude=list(exclude), max_chars=max_chars, max_words=max_words,
                              keep_single_han=not drop_single_han, filter_metadata=filter_metadata)
    click.echo(summarize(result))


@vocab_group.command("embed")
@config_options(VocabEmbedConfig)
@executor_options
def vocab_embed_cmd(seed: int, workers: int, executor: str, ray_address: str | None, **settings: object) -> None:
    """Embed a concept vocabulary with the model's text tower (cached, resumable).

    The cache key is the model fingerprint + the vocabulary's hash + template +
    scripts: a second run only copies the cached matrix. A killed run resumes at
    the first unfinished chunk of 16,384 entries.

    \b
    Example:
      curate vocab embed --vocab vocab/500k.txt --template 'a photo of {}' --out concepts.npy
    """
    from curate.balance.concepts import sidecar_path
    from curate.core.location import Location
    from curate.balance.vocab.embed import embed_vocab
    from curate.core.progress import console

    if settings["out"] is None:
        raise click.UsageError("Missing option '--out'.")
    out = str(settings["out"])
    config = VocabEmbedConfig(**settings)  # type: ignore[arg-type]
    sharded = executor == "ray" or workers > 1  # else: here, tokenizing beside the model in a thread
    r = from_stats(VocabEmbedResult, embed_vocab(None, config, executor=make_executor(executor, workers, ray_address)
                                                 if sharded else None))
    skipped = ", ".join(f"{n:,} {s}" for s, n in r.skipped.items()) or "none"
    console.print(f"[bold]{'reused' if r.cached else 'embedded'}[/bold] {r.embedded:,} of {r.rows:,} "
                  f"concepts ({r.dim}-d; skipped: {skipped}) in {r.seconds:.1f}s")
    target = Location(out)
    console.print(f"concepts: {target} (+ {target.parent / sidecar_path(target.name).name})   cache: {r.cache_dir}")
