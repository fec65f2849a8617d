"""Verbs of concept balancing: ``embed``, ``tag``, ``match``, ``resample``, ``balance`` (curate/balance/).

Their options are made from the fields of the step configs (:mod:`curate.balance.config`), where each setting's
flag, default and help are declared once; a verb passes the values straight to its config.
"""

from __future__ import annotations

import click

from curate.balance.config import (BalanceConfig, EmbedConfig, MatchConfig, ResampleConfig, TagConfig,
                                   VocabEmbedConfig)
from curate.balance.config import (BalanceResult, EmbedResult, ResampleResult, TagResult, language_lines,
                                    records_lines)
from curate.core.stats import from_stats
from curate.core.settings import build_config
from curate.cli.group import VerbCommand, cli
from curate.core.errors import UserError
from curate.cli.options import (Prepared, config_options, executor_options, image_limit_options,
                                 image_limits_given, make_executor, print_rejects, refuse_given, threads_for)

_TEXT_MATCH = ("text_field", "rules", "case_sensitive", "per", "lang_id")
_IVF = ("nlist", "nprobe")
_INVERSE = ("weighting", "temperature", "use_k")
_VOCAB_HELP = ("The vocabulary, one entry per line (e.g. vocab/500k.txt), or one per language, repeated "
               "(--vocab en=en.txt --vocab zh=zh.txt [--vocab other=other.txt]).")


def _refuse_other_modes(match: str, index: str | None = None, mode: str | None = None, image_limits: bool = False) -> None:
    """Flags of a mode other than the chosen one are refused, not ignored."""
    if match != "text":
        refuse_given(_TEXT_MATCH, "is for --match text")
    elif image_limits:
        refuse_given(("max_image_bytes", "max_image_pixels", "max_images_per_record"),
                     "bounds the images read by --match embeddings (--match text reads no image)")
    if index is not None and index != "ivf":
        refuse_given(_IVF, "is for --index ivf")
    if mode == "inverse":
        refuse_given(("t", "tail_share"), "is MetaCLIP's (--mode metaclip or worldwide)")
    elif mode is not None:
        refuse_given(_INVERSE, f"is for --mode inverse, not --mode {mode}")


def _vocab_option(help: str = _VOCAB_HELP):  # noqa: A002, ANN202 - click decorator
    """``--vocab FILE|LANG=FILE`` of ``match`` and ``balance`` (an input: repeatable, one file per language)."""
    return click.option("--vocab", "vocab_values", required=True, multiple=True, type=click.Path(path_type=str),
                        metavar="FILE|LANG=FILE", help=help)


@cli.command("embed")
@click.argument("inputs", nargs=-1, required=True, type=click.Path(path_type=str))
@config_options(EmbedConfig)
@image_limit_options
@executor_options
def embed_cmd(inputs: tuple[str, ...], threads: int | None, workers: int, executor: str, ray_address: str | None,
              **settings: object) -> Prepared:
    """Embed the images of records with open_clip (L2-normalised, float16).

    Writes OUT/embeddings/NNNNNN.npy (N×D float16) + NNNNNN.ids.parquet (id, source)
    per shard, OUT/rejects.parquet (unreadable images, records without image) and
    OUT/stats.json. A record with several images gets the normalised mean. Reruns
    resume at the first unfinished shard and give identical bytes.

    \b
    Examples:
      curate embed data/*.jsonl --out emb/                       # MetaCLIP ViT-B/32 (hub cache)
      curate embed data/ --model ViT-B-32-quickgelu:/ckpt/b32_400m.pt --precision bf16 --out emb/
    """
    from curate.balance.embed import embed
    from curate.core.progress import console

    out = str(settings["out"])
    config = build_config(EmbedConfig, settings, threads=threads_for(threads, workers), **image_limits_given())
    runner = make_executor(executor, workers, ray_address)

    def run() -> None:
        r = from_stats(EmbedResult, embed(list(inputs), config, executor=runner))
        console.print(f"[bold]embedded[/bold] {r.records_embedded:,} of {r.records_in:,} records "
                      f"({r.images_embedded:,} images, {r.dim}-d) in {r.shards} shards")
        print_rejects(r, out)
        console.print(f"embeddings: {out}/embeddings/   stats: {out}/stats.json")

    return Prepared(config, run)


class _TagCommand(VerbCommand):
    """``tag``, which sends ``--match text`` (its former text mode) to ``curate match`` in one line."""

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        if any(a == "--match" or a.startswith("--match=") for a in args):
            raise UserError("tag --match: matching records' text is its own verb: "
                            "curate match RECORDS... --vocab VOCAB --out OUT (tag reads embeddings only)")
        return super().parse_args(ctx, args)


@cli.command("tag", cls=_TagCommand)
@click.option("--embeddings", required=True, type=click.Path(path_type=str),
              help="Embeddings folder: curate embed's OUT (or OUT/embeddings), or clip-retrieval's "
                   "(img_emb/ + metadata/).")
@click.option("--concepts", required=True, type=click.Path(path_type=str),
              help="Concept matrix from curate vocab embed.")
@config_options(TagConfig)
@executor_options
def tag_cmd(embeddings: str, concepts: str, seed: int, workers: int, executor: str, ray_address: str | None,
            **settings: object) -> Prepared:
    """Tag every embedding with its top-K nearest concepts (FAISS).

    Writes OUT/tags.parquet (id, source, concepts list<int32> = vocabulary line − 1,
    scores list<float32>, best first), per-file parts in OUT/tags/ and OUT/stats.json.
    Zero concept rows (entries the encoder could not read) are never returned.
    To tag records by their text instead (MetaCLIP's substring matching): curate match.

    \b
    Examples:
      curate tag --embeddings emb/ --concepts concepts.npy --top-k 5 --out tagged/
      curate tag --embeddings clip_retrieval_out/ --concepts concepts.npy --index ivf --nlist 4096 --out tagged/
    """
    from curate.balance.tag import tag
    from curate.core.progress import console

    _refuse_other_modes("embeddings", str(settings.get("index")))
    out = str(settings["out"])
    config = build_config(TagConfig, settings, seed=seed)
    runner = make_executor(executor, workers, ray_address)

    def run() -> None:
        r = from_stats(TagResult, tag(embeddings, concepts, config, executor=runner))
        console.print(f"[bold]tagged[/bold] {r.records_tagged:,} records with their top {config.top_k} of "
                      f"{r.concepts_embedded:,} concepts ({r.embedding_files} embedding files, {r.layout} layout)")
        print_rejects(r, out)
        console.print(f"tags: {out}/tags.parquet   stats: {out}/stats.json")

    return Prepared(config, run)


@cli.command("match")
@click.argument("inputs", nargs=-1, required=True, metavar="RECORDS...", type=click.Path(path_type=str))
@_vocab_option()
@config_options(MatchConfig)
@executor_options
def match_cmd(inputs: tuple[str, ...], vocab_values: tuple[str, ...], seed: int, workers: int, executor: str,
              ray_address: str | None, **settings: object) -> Prepared:
    """Tag records by MetaCLIP's substring matching of their text against a vocabulary.

    Each record's text (its assistant turns or captions, or --text-field) is matched
    against --vocab as MetaCLIP does (substrings at word boundaries; no spaces needed
    in CJK/Thai text; no model, CPU only). Writes OUT/tags.parquet in curate tag's
    layout (scores = match counts), per-shard parts in OUT/tags/, OUT/rejects.parquet
    and OUT/stats.json; curate resample reads the tags.

    \b
    Examples:
      curate match data/ --vocab vocab/500k.txt --workers 8 --out tagged/
      curate match data/ --rules metaclip --vocab metadata.txt --out tagged/
      curate match data/ --rules metaclip --vocab en=en.txt --vocab zh=zh.txt --out tagged/
    """
    from curate.balance.match import match
    from curate.balance.matching.vocabularies import parse_vocab_values
    from curate.core.progress import console
    from curate.core import validate as v

    vocab = parse_vocab_values(vocab_values)
    config = build_config(MatchConfig, settings, seed=seed)
    for path in inputs:
        v.in_path("RECORDS", path)
    out = str(settings["out"])
    runner = make_executor(executor, workers, ray_address)

    def run() -> None:
        r = match(list(inputs), vocab, config, executor=runner)
        unit = "texts" if config.per == "text" else "records"
        console.print(f"[bold]matched[/bold] {r['records_tagged']:,} of {r['records_in']:,} records ({r['texts']:,} "
                      f"texts) against {r['concepts_embedded']:,} entries ({config.rules} rules): "
                      f"{r['matches']:,} matches, {r['rows_without_concept']:,} {unit} without any")
        for lang, n in list(r.get("texts_per_language", {}).items())[:8]:
            console.print(f"  {lang}: {n:,} texts")
        print_rejects(from_stats(TagResult, r), out)
        console.print(f"tags: {out}/tags.parquet   stats: {out}/stats.json")

    return Prepared(config, run)


def _help(cls: type, name: str) -> str:
    """The help a config field declares (for an option ``config_options`` cannot make: a repeatable one)."""
    return cls.__dataclass_fields__[name].metadata["help"]


@cli.command("resample")
@click.option("--tags", required=True, type=click.Path(path_type=str),
              help="tags.parquet from curate tag or curate match.")
@config_options(ResampleConfig)
@click.option("--records", multiple=True, type=click.Path(path_type=str), help=_help(ResampleConfig, "records"))
def resample_cmd(tags: str, records: tuple[str, ...], **settings: object) -> Prepared:
    """Draw a concept-balanced selection of the tagged records.

    Record weight = mean (or max, sum) over its concepts of freq^-τ; the target is
    drawn without replacement ∝ weight, or with replacement (copies) past the pool.
    Writes OUT/selection.parquet (id, source, copies, weight), OUT/records/ (with
    --records), OUT/balance.png (frequency vs rank, before/after) and OUT/stats.json.

    \b
    Examples:
      curate resample --tags tagged/tags.parquet --fraction 0.3 --records data/ --out balanced/
      curate resample --tags tagged/tags.parquet --mode metaclip --t 20000 --out balanced/
      curate resample --tags tagged/tags.parquet --mode worldwide --t 170000 --out balanced/
    """
    from curate.balance.resample import resample
    from curate.core.progress import console

    _refuse_other_modes("embeddings", mode=str(settings.get("mode")))
    out = str(settings["out"])
    config = build_config(ResampleConfig, settings, records=records or None)

    def run() -> None:
        r = from_stats(ResampleResult, resample(tags, config))
        b = r.balance
        console.print(f"[bold]selected[/bold] {r.records_selected:,} of {r.pool:,} tagged records "
                      f"({r.copies_total:,} copies); concepts covered {b.concepts_covered_before:,} → "
                      f"{b.concepts_covered_after:,}, top-1% share {b.head_share_before:.3f} → "
                      f"{b.head_share_after:.3f}")
        for line in language_lines(r.languages) + records_lines(r.records_written, out):
            console.print(line)
        console.print(f"selection: {out}/selection.parquet   plot: {out}/balance.png   stats: {out}/stats.json")

    return Prepared(config, run)


@cli.command("balance")
@click.argument("inputs", nargs=-1, required=True, type=click.Path(path_type=str))
@_vocab_option("Concept vocabulary (e.g. vocab/500k.txt); with --match text also one per language, repeated "
               "(--vocab en=en.txt --vocab zh=zh.txt).")
@config_options(EmbedConfig, "out", "model", "precision", "device", "threads", "batch_size")
@config_options(VocabEmbedConfig, "template", "scripts", "cache_dir")
@config_options(BalanceConfig, "match")
@config_options(MatchConfig, *_TEXT_MATCH)
@config_options(TagConfig, "top_k")
@config_options(TagConfig, "index", "nlist", "nprobe")
@config_options(ResampleConfig, "target", "fraction", "mode", "t", "tail_share", "weighting", "temperature", "use_k")
@config_options(EmbedConfig, "shard_size")
@click.option("--no-records", is_flag=True, help="Write selection.parquet only, not the selected records.")
@config_options(EmbedConfig, "image_root")
@image_limit_options
@executor_options
def balance_cmd(inputs: tuple[str, ...], vocab_values: tuple[str, ...], threads: int | None, no_records: bool,
                workers: int, executor: str, ray_address: str | None, **settings: object) -> Prepared:
    """Concept-balance records: embed → concept embeddings → tag → resample → report.

    Everything goes to OUT (embeddings/, concepts.npy, tags.parquet, selection.parquet,
    records/, balance.png, rejects.parquet, stats.json). Resumable: rerun the same
    command after an interruption. Tags are only meaningful with a real MetaCLIP
    checkpoint; the tiny test model exercises the pipeline. With --match text the
    first steps are curate match's (no model); without --target/--fraction half the
    tagged records are kept. Records without images (text-only chats) have nothing
    to tag: they are passed through to records/ untouched (text_only in stats.json).

    \b
    Examples:
      curate balance data/*.jsonl --vocab vocab/500k.txt --fraction 0.3 --out balanced/
      curate balance data/ --vocab vocab/500k.txt --model ViT-B-32-quickgelu:/ckpt/metaclip_b32_400m.pt \\
          --precision bf16 --top-k 5 --target 2000000 --out balanced/
      curate balance data/ --vocab vocab/500k.txt --match text --text-field caption --mode metaclip --out balanced/
      curate balance data/ --vocab en=en.txt --vocab zh=zh.txt --match text --rules metaclip --mode worldwide \\
          --out balanced/
    """
    from curate.balance.pipeline import balance, summary_lines
    from curate.balance.matching.vocabularies import parse_vocab_values
    from curate.core.progress import console

    _refuse_other_modes(str(settings.get("match")), str(settings.get("index")), str(settings.get("mode")),
                        image_limits=True)
    config = BalanceConfig.build(vocab=parse_vocab_values(vocab_values),  # type: ignore[arg-type]
                                 threads=threads_for(threads, workers), write_records=not no_records,
                                 **settings, **image_limits_given())  # type: ignore[arg-type]
    runner = make_executor(executor, workers, ray_address)

    def run() -> None:
        r = from_stats(BalanceResult, balance(list(inputs), config, executor=runner))
        for line in summary_lines(r, str(settings["out"])):
            console.print(line)

    return Prepared(config, run)
