"""The ``vocab`` group: ``vocab build`` and ``vocab embed`` (curate/balance/vocab/)."""

from __future__ import annotations

import click

from curate.balance.config import VocabEmbedConfig
from curate.balance.results import VocabEmbedResult
from curate.balance.vocab.config import VocabBuildConfig
from curate.balance.vocab.sources import WORDFREQ_SCRIPTS
from curate.core.results import from_stats
from curate.cli.group import cli
from curate.cli.options import config_options, executor_options, make_executor
from curate.core.settings import build_config


@cli.group("vocab")
def vocab_group() -> None:
    """Build and embed the concept vocabulary used by curate balance."""


def _help(name: str) -> str:
    """The help a field of :class:`VocabBuildConfig` declares (for its repeatable options)."""
    return VocabBuildConfig.__dataclass_fields__[name].metadata["help"]


@vocab_group.command("build")
@config_options(VocabBuildConfig, "out", "size")
@click.option("--word-list", "word_lists", multiple=True, type=click.Path(path_type=str), help=_help("word_lists"))
@config_options(VocabBuildConfig, "metaclip_metadata", "filter_metadata", "captions", "caption_field", "pmi_threshold",
                "min_bigram_count", "max_bigrams")
@click.option("--exclude", multiple=True, type=click.Path(path_type=str), help=_help("exclude"))
@click.option("--wordfreq-lang", "wordfreq_languages", multiple=True, type=click.Choice(sorted(WORDFREQ_SCRIPTS)),
              help=_help("wordfreq_languages"))
@config_options(VocabBuildConfig, "wordfreq", "max_chars", "max_words", "drop_single_han", "stats_out")
def vocab_build_cmd(wordfreq_languages: tuple[str, ...], **settings: object) -> None:
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
    from curate.core.stats import command_line

    if settings["out"] is None:
        raise click.UsageError("Missing option '--out'.")
    config = build_config(VocabBuildConfig, settings, wordfreq_languages=wordfreq_languages or None)
    click.echo(summarize(build_vocab_file(config, command=command_line())))  # paths or URLs


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
    config = build_config(VocabEmbedConfig, settings)
    sharded = executor == "ray" or workers > 1  # else: here, tokenizing beside the model in a thread
    r = from_stats(VocabEmbedResult, embed_vocab(None, config, executor=make_executor(executor, workers, ray_address)
                                                 if sharded else None))
    skipped = ", ".join(f"{n:,} {s}" for s, n in r.skipped.items()) or "none"
    console.print(f"[bold]{'reused' if r.cached else 'embedded'}[/bold] {r.embedded:,} of {r.rows:,} "
                  f"concepts ({r.dim}-d; skipped: {skipped}) in {r.seconds:.1f}s")
    target = Location(out)
    console.print(f"concepts: {target} (+ {target.parent / sidecar_path(target.name).name})   cache: {r.cache_dir}")
