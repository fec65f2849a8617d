"""Verbs of concept balancing: ``embed``, ``tag``, ``resample``, ``balance`` (curate/balance/)."""

from __future__ import annotations

import click

from curate.balance.config import INDEXES, MATCHES, MODES, PER, RULES, SCRIPT_CHOICES, WEIGHTINGS
from curate.balance.results import (BalanceResult, EmbedResult, ResampleResult, TagResult, language_lines,
                                    records_lines)
from curate.core import validate as v
from curate.core.results import from_stats
from curate.cli.group import cli
from curate.core.errors import UserError
from curate.cli.options import (executor_options, image_limit_options, image_limits_given, image_root_option,
                                 make_executor, model_options, print_rejects, refuse_given, threads_for)


def _text_match_options(fn):  # noqa: ANN001, ANN202 - click decorators
    """``--text-field``, ``--rules``, ``--case-sensitive``, ``--per`` and ``--lang-id`` of ``tag --match text`` and
    ``balance --match text``."""
    fn = click.option("--lang-id", is_flag=True,
                      help="With --match text: identify each text's language (py3langid, offline) and count per "
                           "language, for --mode worldwide (implied by --vocab LANG=FILE).")(fn)
    fn = click.option("--per", type=click.Choice(PER), default=None,
                      help="With --match text: match and count each text of a record (its captions or turns) on "
                           "its own, as MetaCLIP does, or the record's texts joined "
                           "(default: text with --rules metaclip, else record).")(fn)
    fn = click.option("--case-sensitive", is_flag=True,
                      help="With --match text: curate's rules but case compared as written.")(fn)
    fn = click.option("--rules", type=click.Choice(RULES), default="curate", show_default=True,
                      help="With --match text: metaclip = MetaCLIP 2's rules exactly (case as written, entries "
                           "as given, counted per text); curate folds case and strips entries (docs/metaclip.md).")(fn)
    return click.option("--text-field", default=None,
                        help="With --match text: match this raw field (e.g. alt_text, or a caption beside a "
                             "conversation) instead of the assistant messages; a row with no conversation, caption, "
                             "text, problem or question is read as a caption record from this field (resample "
                             "--records then finds it too).")(fn)


_TEXT_MATCH = ("text_field", "rules", "case_sensitive", "per", "lang_id")
_IVF = ("nlist", "nprobe")
_INVERSE = ("weighting", "temperature", "use_k")


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


def _metaclip_options(fn):  # noqa: ANN001, ANN202 - click decorators
    """``--t`` and ``--tail-share`` of ``resample``/``balance`` in MetaCLIP's modes."""
    fn = click.option("--tail-share", type=float, default=None,
                      help="--mode worldwide: every language's tail share, instead of English's at --t.")(fn)
    return click.option("--t", "t", type=int, default=None,
                        help="MetaCLIP's threshold (default 20,000 with --mode metaclip; with --mode worldwide "
                             "English's, default 170,000, which sets every language's).")(fn)


@cli.command("embed")
@click.argument("inputs", nargs=-1, required=True, type=click.Path(path_type=str))
@click.option("--out", required=True, type=click.Path(path_type=str), help="Output folder.")
@model_options
@click.option("--batch-size", type=int, default=64, show_default=True, help="Images per forward pass.")
@click.option("--decode-threads", type=int, default=None,
              help="Threads decoding images while the model runs (default: cores, at most 8).")
@click.option("--shard-size", type=int, default=5000, show_default=True, help="Records per shard (one .npy each).")
@image_root_option
@image_limit_options
@executor_options
def embed_cmd(inputs: tuple[str, ...], out: str, threads: int | None, workers: int, executor: str,
              ray_address: str | None, **settings: object) -> None:
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
    from curate.balance.config import EmbedConfig
    from curate.balance.embed import embed
    from curate.core.progress import console

    config = EmbedConfig(out=out, threads=threads_for(threads, workers), **settings,  # type: ignore[arg-type]
                         **image_limits_given())
    r = from_stats(EmbedResult, embed(list(inputs), config, executor=make_executor(executor, workers, ray_address)))
    console.print(f"[bold]embedded[/bold] {r.records_embedded:,} of {r.records_in:,} records "
                  f"({r.images_embedded:,} images, {r.dim}-d) in {r.shards} shards")
    print_rejects(r, out)
    console.print(f"embeddings: {out}/embeddings/   stats: {out}/stats.json")


@cli.command("tag")
@click.option("--match", "match", type=click.Choice(MATCHES), default="embeddings", show_default=True,
              help="embeddings = nearest concepts of image embeddings (FAISS); text = MetaCLIP's substring "
                   "matching of each record's text against --vocab (no model, CPU only).")
@click.option("--embeddings", type=click.Path(path_type=str), default=None,
              help="Embeddings folder: curate embed's OUT (or OUT/embeddings), or clip-retrieval's "
                   "(img_emb/ + metadata/). With --match embeddings.")
@click.option("--concepts", type=click.Path(path_type=str), default=None,
              help="Concept matrix from curate vocab embed. With --match embeddings.")
@click.option("--records", multiple=True, type=click.Path(path_type=str),
              help="With --match text: record files/folders whose text is matched. Repeatable.")
@click.option("--vocab", "vocab_values", multiple=True, type=click.Path(path_type=str), metavar="FILE|LANG=FILE",
              help="With --match text: the vocabulary, one entry per line (e.g. vocab/500k.txt), or one per "
                   "language, repeated (--vocab en=en.txt --vocab zh=zh.txt [--vocab other=other.txt]).")
@_text_match_options
@click.option("--shard-size", type=int, default=50000, show_default=True,
              help="With --match text: records per shard.")
@click.option("--top-k", type=int, default=None,
              help="Concepts per record (default: 5 with --match embeddings, every match with --match text).")
@click.option("--out", required=True, type=click.Path(path_type=str), help="Output folder.")
@click.option("--index", type=click.Choice(INDEXES), default="flat", show_default=True,
              help="flat = exact inner product; ivf = FAISS IVF (prints recall@K against exact search).")
@click.option("--nlist", type=int, default=None,
              help="IVF lists (default: 4·√V rounded to a power of 2, e.g. 2,048 for 500K concepts).")
@click.option("--nprobe", type=int, default=16, show_default=True, help="IVF lists searched per query.")
@click.option("--recall-sample", type=int, default=1000, show_default=True,
              help="Embeddings (seeded sample) used to measure IVF recall@K.")
@click.option("--id-column", default=None,
              help="Id column of clip-retrieval metadata (default: id, key, image_path or url).")
@executor_options
def tag_cmd(match: str, embeddings: str | None, concepts: str | None, records: tuple[str, ...],
            vocab_values: tuple[str, ...], text_field: str | None, rules: str, case_sensitive: bool, per: str | None,
            lang_id: bool, shard_size: int, top_k: int | None, out: str, index: str, nlist: int | None, nprobe: int,
            recall_sample: int, id_column: str | None, seed: int, workers: int, executor: str,
            ray_address: str | None) -> None:
    """Tag every embedding with its top-K nearest concepts (FAISS).

    Writes OUT/tags.parquet (id, source, concepts list<int32> = vocabulary line − 1,
    scores list<float32>, best first), per-file parts in OUT/tags/ and OUT/stats.json.
    Zero concept rows (entries the encoder could not read) are never returned.

    With --match text, each record's text is matched against --vocab as MetaCLIP
    does (substrings at word boundaries; no spaces needed in CJK/Thai text);
    scores are match counts. The output has the same layout.

    \b
    Examples:
      curate tag --embeddings emb/ --concepts concepts.npy --top-k 5 --out tagged/
      curate tag --embeddings clip_retrieval_out/ --concepts concepts.npy --index ivf --nlist 4096 --out tagged/
      curate tag --match text --records data/ --vocab vocab/500k.txt --workers 8 --out tagged/
      curate tag --match text --rules metaclip --records data/ --vocab metadata.txt --out tagged/
    """
    from curate.balance.config import TagConfig
    from curate.balance.tag import tag
    from curate.core.progress import console

    _refuse_other_modes(match, index)
    if match == "text":
        refuse_given(("index", "recall_sample", "id_column"), "is for --match embeddings")
    else:
        refuse_given(("records", "vocab_values", "shard_size"), "is for --match text")
    if match == "text":
        from curate.balance.config import MatchConfig
        from curate.balance.match import match_text
        from curate.balance.matching.vocabularies import parse_vocab_values

        vocab = parse_vocab_values(vocab_values)
        if not records or vocab is None or embeddings or concepts:
            raise UserError("--match text needs --records DATA and --vocab VOCAB (and no --embeddings/--concepts)")
        match_config = MatchConfig(out=out, text_field=text_field, rules=rules, case_sensitive=case_sensitive,
                                   per=per, lang_id=lang_id, top_k=top_k, shard_size=shard_size, seed=seed)
        for path in records:
            v.in_path("--records", path)
        r = match_text(list(records), vocab, match_config, executor=make_executor(executor, workers, ray_address))
        unit = "texts" if match_config.per == "text" else "records"
        console.print(f"[bold]matched[/bold] {r['records_tagged']:,} of {r['records_in']:,} records ({r['texts']:,} "
                      f"texts) against {r['concepts_embedded']:,} entries ({match_config.rules} rules): "
                      f"{r['matches']:,} matches, {r['rows_without_concept']:,} {unit} without any")
        for lang, n in list(r.get("texts_per_language", {}).items())[:8]:
            console.print(f"  {lang}: {n:,} texts")
        print_rejects(from_stats(TagResult, r), out)
        console.print(f"tags: {out}/tags.parquet   stats: {out}/stats.json")
        return
    if embeddings is None or concepts is None:
        raise UserError("curate tag needs --embeddings EMB and --concepts CONCEPTS.npy (or --match text)")
    top_k = 5 if top_k is None else top_k

    config = TagConfig(out=out, top_k=top_k, index=index, nlist=nlist, nprobe=nprobe, recall_sample=recall_sample,
                       id_column=id_column, seed=seed)
    r = from_stats(TagResult, tag(embeddings, concepts, config, executor=make_executor(executor, workers, ray_address)))
    console.print(f"[bold]tagged[/bold] {r.records_tagged:,} records with their top {top_k} of "
                  f"{r.concepts_embedded:,} concepts ({r.embedding_files} embedding files, {r.layout} layout)")
    print_rejects(r, out)
    console.print(f"tags: {out}/tags.parquet   stats: {out}/stats.json")


@cli.command("resample")
@click.option("--tags", required=True, type=click.Path(path_type=str), help="tags.parquet from curate tag.")
@click.option("--target", type=int, default=None, help="Records to draw (with replacement beyond the pool).")
@click.option("--fraction", type=float, default=None, help="Target as a fraction of the tagged records (>1: copies).")
@click.option("--out", required=True, type=click.Path(path_type=str), help="Output folder.")
@click.option("--mode", type=click.Choice(MODES), default="inverse", show_default=True,
              help="inverse = weights from inverse concept frequency; metaclip = keep with p = t / max(count, t); "
                   "worldwide = MetaCLIP 2's, a t per language set from English's tail share.")
@_metaclip_options
@click.option("--weighting", type=click.Choice(WEIGHTINGS), default="mean", show_default=True,
              help="How a record's K inverse frequencies combine into its weight.")
@click.option("--temperature", type=float, default=1.0, show_default=True,
              help="Exponent τ in freq^-τ: 1 fully inverse, 0 uniform.")
@click.option("--use-k", type=int, default=None,
              help="Use only each record's J best tags for frequencies and weights (default: all K).")
@click.option("--per", type=click.Choice(PER), default=None,
              help="On tags with a row per text (tag --per text): count per text and draw image-text pairs as "
                   "MetaCLIP 2 does (default in MetaCLIP's modes), or merge each record's texts.")
@click.option("--records", multiple=True, type=click.Path(path_type=str),
              help="Input record files/folders; the selected records are written to OUT/records/ in their layout. "
                   "Repeatable.")
@click.option("--vocab", type=click.Path(path_type=str), default=None,
              help="Vocabulary, to name the top concepts in stats.json.")
@image_root_option
@click.option("--seed", type=int, default=0, show_default=True, help="Seed of the draw.")
def resample_cmd(tags: str, out: str, records: tuple[str, ...], **settings: object) -> None:
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
    from curate.balance.config import ResampleConfig
    from curate.balance.resample import resample
    from curate.core.progress import console

    _refuse_other_modes("embeddings", mode=str(settings.get("mode")))
    config = ResampleConfig(out=out, records=records or None, **settings)  # type: ignore[arg-type]
    r = from_stats(ResampleResult, resample(tags, config))
    b = r.balance
    console.print(f"[bold]selected[/bold] {r.records_selected:,} of {r.pool:,} tagged records "
                  f"({r.copies_total:,} copies); concepts covered {b.concepts_covered_before:,} → "
                  f"{b.concepts_covered_after:,}, top-1% share {b.head_share_before:.3f} → "
                  f"{b.head_share_after:.3f}")
    for line in language_lines(r.languages) + records_lines(r.records_written, out):
        console.print(line)
    console.print(f"selection: {out}/selection.parquet   plot: {out}/balance.png   stats: {out}/stats.json")


@cli.command("balance")
@click.argument("inputs", nargs=-1, required=True, type=click.Path(path_type=str))
@click.option("--vocab", "vocab_values", required=True, multiple=True, type=click.Path(path_type=str),
              metavar="FILE|LANG=FILE",
              help="Concept vocabulary (e.g. vocab/500k.txt); with --match text also one per language, repeated "
                   "(--vocab en=en.txt --vocab zh=zh.txt).")
@click.option("--out", required=True, type=click.Path(path_type=str), help="Output folder (all steps).")
@model_options
@click.option("--batch-size", type=int, default=64, show_default=True, help="Images per forward pass.")
@click.option("--template", default=None, metavar="TEXT", help="Concept prompt template, e.g. 'a photo of {}'.")
@click.option("--scripts", type=click.Choice(SCRIPT_CHOICES), default="auto",
              show_default=True, help="Vocabulary entries to embed by script (auto: what the tokenizer reads).")
@click.option("--cache-dir", type=click.Path(path_type=str), default=None,
              help="Concept embedding cache (default: $CURATE_CACHE/concepts or ~/.cache/curate/concepts).")
@click.option("--match", "match", type=click.Choice(MATCHES), default="embeddings", show_default=True,
              help="How records get their concepts: nearest concept embeddings, or MetaCLIP's substring "
                   "matching of each record's text against --vocab (no model; no embeddings/ or concepts.npy).")
@_text_match_options
@click.option("--top-k", type=int, default=None,
              help="Concepts per record (default: 5 with --match embeddings, every match with --match text).")
@click.option("--index", type=click.Choice(INDEXES), default="flat", show_default=True, help="FAISS index.")
@click.option("--nlist", type=int, default=None, help="IVF lists (default: 4·√V rounded to a power of 2).")
@click.option("--nprobe", type=int, default=16, show_default=True, help="IVF lists searched per query.")
@click.option("--target", type=int, default=None, help="Records to draw.")
@click.option("--fraction", type=float, default=None, help="Target as a fraction of the tagged records (default 0.5).")
@click.option("--mode", type=click.Choice(MODES), default="inverse", show_default=True,
              help="Resampling rule (worldwide: MetaCLIP 2's per-language t; needs --lang-id or --vocab LANG=FILE).")
@_metaclip_options
@click.option("--weighting", type=click.Choice(WEIGHTINGS), default="mean", show_default=True,
              help="How a record's K inverse frequencies combine.")
@click.option("--temperature", type=float, default=1.0, show_default=True, help="Exponent τ in freq^-τ.")
@click.option("--use-k", type=int, default=None, help="Resample on each record's J best tags only (default: all K).")
@click.option("--shard-size", type=int, default=5000, show_default=True, help="Records per embedding shard.")
@click.option("--no-records", is_flag=True, help="Write selection.parquet only, not the selected records.")
@image_root_option
@image_limit_options
@executor_options
def balance_cmd(inputs: tuple[str, ...], vocab_values: tuple[str, ...], out: str, threads: int | None, no_records: bool,
                workers: int, executor: str, ray_address: str | None, **settings: object) -> None:
    """Concept-balance records: embed → concept embeddings → tag → resample → report.

    Everything goes to OUT (embeddings/, concepts.npy, tags.parquet, selection.parquet,
    records/, balance.png, rejects.parquet, stats.json). Resumable: rerun the same
    command after an interruption. Tags are only meaningful with a real MetaCLIP
    checkpoint; the tiny test model exercises the pipeline.

    \b
    Examples:
      curate balance data/*.jsonl --vocab vocab/500k.txt --fraction 0.3 --out balanced/
      curate balance data/ --vocab vocab/500k.txt --model ViT-B-32-quickgelu:/ckpt/metaclip_b32_400m.pt \\
          --precision bf16 --top-k 5 --target 2000000 --out balanced/
      curate balance data/ --vocab vocab/500k.txt --match text --text-field caption --mode metaclip --out balanced/
      curate balance data/ --vocab en=en.txt --vocab zh=zh.txt --match text --rules metaclip --mode worldwide \\
          --out balanced/
    """
    from curate.balance.config import BalanceConfig
    from curate.balance.pipeline import balance, summary_lines
    from curate.core.progress import console

    from curate.balance.matching.vocabularies import parse_vocab_values

    _refuse_other_modes(str(settings.get("match")), str(settings.get("index")), str(settings.get("mode")),
                        image_limits=True)
    config = BalanceConfig.build(out=out, vocab=parse_vocab_values(vocab_values),  # type: ignore[arg-type]
                                 threads=threads_for(threads, workers), write_records=not no_records,
                                 **settings, **image_limits_given())  # type: ignore[arg-type]  (the flags are settings)
    r = from_stats(BalanceResult, balance(list(inputs), config, executor=make_executor(executor, workers, ray_address)))
    for line in summary_lines(r, out):
        console.print(line)
