"""Verbs of concept balancing as functions of values: ``embed``, ``tag``, ``match``, ``resample``, ``balance``
(curate/balance/).

Their options are made from the fields of the step configs (:mod:`curate.balance.config`), where each setting's
flag, default and help are declared once; a verb passes the values straight to its config.
"""

from __future__ import annotations

import os

from curate.balance.config import BalanceConfig, EmbedConfig, MatchConfig, ResampleConfig, TagConfig, VocabEmbedConfig
from curate.core.settings import option
from curate.verbs import (EXECUTOR_OPTIONS, IMAGE_LIMITS, Prepared, Values, Verb, executor_of, image_limits, inputs,
                          options_of, print_rejects, refuse_given, settings, threads_for)

_TEXT_MATCH = ("text_field", "rules", "case_sensitive", "per", "lang_id")
_IVF = ("nlist", "nprobe")
_INVERSE = ("weighting", "temperature", "use_k")
_VOCAB_HELP = ("The vocabulary, one entry per line (e.g. vocab/500k.txt), or one per language, repeated "
               "(--vocab en=en.txt --vocab zh=zh.txt [--vocab other=other.txt]).")


def _refuse_other_modes(values: Values, match: str, index: str | None = None, mode: str | None = None,
                        image_limits: bool = False) -> None:
    """Options of a mode other than the chosen one are refused, not ignored."""
    if match != "text":
        refuse_given(values, _TEXT_MATCH, "is for --match text")
    elif image_limits:
        refuse_given(values, IMAGE_LIMITS, "bounds the images read by --match embeddings (--match text reads no image)")
    if index is not None and index != "ivf":
        refuse_given(values, _IVF, "is for --index ivf")
    if mode == "inverse":
        refuse_given(values, ("t", "tail_share"), "is MetaCLIP's (--mode metaclip or worldwide)")
    elif mode is not None:
        refuse_given(values, _INVERSE, f"is for --mode inverse, not --mode {mode}")


def _vocab_option(help: str = _VOCAB_HELP):  # noqa: A002, ANN202
    """``--vocab FILE|LANG=FILE`` of ``match`` and ``balance`` (an input: repeatable, one file per language)."""
    return option("vocab_values", flag="--vocab", type=os.PathLike, required=True, multiple=True,
                  metavar="FILE|LANG=FILE", help=help)


def embed(values: Values) -> Prepared:
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
    from curate.core.settings import build_config

    out = str(values["out"])
    given = settings(values, "inputs", "threads")
    config = build_config(EmbedConfig, given, threads=threads_for(values["threads"], values["workers"]),
                          **image_limits(values))
    runner = executor_of(values)
    records = list(values["inputs"])

    def run() -> None:
        from curate.balance.embed import embed as embed_records
        from curate.balance.config import EmbedResult
        from curate.core.progress import console
        from curate.core.stats import from_stats

        r = from_stats(EmbedResult, embed_records(records, config, executor=runner.make()))
        console.print(f"[bold]embedded[/bold] {r.records_embedded:,} of {r.records_in:,} records "
                      f"({r.images_embedded:,} images, {r.dim}-d) in {r.shards} shards")
        print_rejects(r, out)
        console.print(f"embeddings: {out}/embeddings/   stats: {out}/stats.json")

    return Prepared(config, run)


def tag(values: Values) -> Prepared:
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
    from curate.core.settings import build_config

    _refuse_other_modes(values, "embeddings", str(values.get("index")))
    out = str(values["out"])
    config = build_config(TagConfig, settings(values, "embeddings", "concepts"))
    runner = executor_of(values)
    embeddings, concepts = values["embeddings"], values["concepts"]

    def run() -> None:
        from curate.balance.config import TagResult
        from curate.balance.tag import tag as tag_embeddings
        from curate.core.progress import console
        from curate.core.stats import from_stats

        r = from_stats(TagResult, tag_embeddings(embeddings, concepts, config, executor=runner.make()))
        console.print(f"[bold]tagged[/bold] {r.records_tagged:,} records with their top {config.top_k} of "
                      f"{r.concepts_embedded:,} concepts ({r.embedding_files} embedding files, {r.layout} layout)")
        print_rejects(r, out)
        console.print(f"tags: {out}/tags.parquet   stats: {out}/stats.json")

    return Prepared(config, run)


def match(values: Values) -> Prepared:
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
    from curate.balance.matching.vocabularies import parse_vocab_values
    from curate.core import validate as v
    from curate.core.settings import build_config

    vocab = parse_vocab_values(values["vocab_values"])
    config = build_config(MatchConfig, settings(values, "inputs", "vocab_values"))
    records = list(values["inputs"])
    for path in records:
        v.in_path("RECORDS", path)
    out = str(values["out"])
    runner = executor_of(values)

    def run() -> None:
        from curate.balance.match import match as match_records
        from curate.balance.config import TagResult
        from curate.core.progress import console
        from curate.core.stats import from_stats

        r = match_records(records, vocab, config, executor=runner.make())
        unit = "texts" if config.per == "text" else "records"
        console.print(f"[bold]matched[/bold] {r['records_tagged']:,} of {r['records_in']:,} records ({r['texts']:,} "
                      f"texts) against {r['concepts_embedded']:,} entries ({config.rules} rules): "
                      f"{r['matches']:,} matches, {r['rows_without_concept']:,} {unit} without any")
        for lang, n in list(r.get("texts_per_language", {}).items())[:8]:
            console.print(f"  {lang}: {n:,} texts")
        print_rejects(from_stats(TagResult, r), out)
        console.print(f"tags: {out}/tags.parquet   stats: {out}/stats.json")

    return Prepared(config, run)


def resample(values: Values) -> Prepared:
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
    from curate.core.settings import build_config

    _refuse_other_modes(values, "embeddings", mode=str(values.get("mode")))
    out = str(values["out"])
    config = build_config(ResampleConfig, settings(values, "tags", "records"), records=values["records"] or None)
    tags = values["tags"]

    def run() -> None:
        from curate.balance.resample import resample as resample_tags
        from curate.balance.config import ResampleResult, language_lines, records_lines
        from curate.core.progress import console
        from curate.core.stats import from_stats

        r = from_stats(ResampleResult, resample_tags(tags, config))
        b = r.balance
        console.print(f"[bold]selected[/bold] {r.records_selected:,} of {r.pool:,} tagged records "
                      f"({r.copies_total:,} copies); concepts covered {b.concepts_covered_before:,} → "
                      f"{b.concepts_covered_after:,}, top-1% share {b.head_share_before:.3f} → "
                      f"{b.head_share_after:.3f}")
        for line in language_lines(r.languages) + records_lines(r.records_written, out):
            console.print(line)
        console.print(f"selection: {out}/selection.parquet   plot: {out}/balance.png   stats: {out}/stats.json")

    return Prepared(config, run)


def balance(values: Values) -> Prepared:
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
    from curate.balance.matching.vocabularies import parse_vocab_values

    _refuse_other_modes(values, str(values.get("match")), str(values.get("index")), str(values.get("mode")),
                        image_limits=True)
    flat = settings(values, "inputs", "vocab_values", "threads", "no_records")
    config = BalanceConfig.build(vocab=parse_vocab_values(values["vocab_values"]),  # type: ignore[arg-type]
                                 threads=threads_for(values["threads"], values["workers"]),
                                 write_records=not values["no_records"], **flat, **image_limits(values))
    runner = executor_of(values)
    records = list(values["inputs"])

    def run() -> None:
        from curate.balance.pipeline import balance as balance_records, summary_lines
        from curate.balance.config import BalanceResult
        from curate.core.progress import console
        from curate.core.stats import from_stats

        r = from_stats(BalanceResult, balance_records(records, config, executor=runner.make()))
        for line in summary_lines(r, str(values["out"])):
            console.print(line)

    return Prepared(config, run)


VERBS = {
    "embed": Verb("embed", inputs(), (*options_of(EmbedConfig), *IMAGE_LIMITS, *EXECUTOR_OPTIONS), embed),
    "tag": Verb("tag", None, (
        option("embeddings", type=os.PathLike, required=True,
               help="Embeddings folder: curate embed's OUT (or OUT/embeddings), or clip-retrieval's "
                    "(img_emb/ + metadata/)."),
        option("concepts", type=os.PathLike, required=True, help="Concept matrix from curate vocab embed."),
        *options_of(TagConfig), *EXECUTOR_OPTIONS), tag,
        moved=(("--match", "tag --match: matching records' text is its own verb: "
                           "curate match RECORDS... --vocab VOCAB --out OUT (tag reads embeddings only)"),)),
    "match": Verb("match", inputs(metavar="RECORDS..."), (_vocab_option(), *options_of(MatchConfig), *EXECUTOR_OPTIONS), match),
    "resample": Verb("resample", None, (
        option("tags", type=os.PathLike, required=True, help="tags.parquet from curate tag or curate match."),
        *options_of(ResampleConfig),
        option("records", type=os.PathLike, multiple=True, help=ResampleConfig.__dataclass_fields__["records"]
               .metadata["help"])), resample),
    "balance": Verb("balance", inputs(), (
        _vocab_option("Concept vocabulary (e.g. vocab/500k.txt); with --match text also one per language, repeated "
                      "(--vocab en=en.txt --vocab zh=zh.txt)."),
        *options_of(EmbedConfig, "out", "model", "precision", "device", "threads", "batch_size"),
        *options_of(VocabEmbedConfig, "template", "scripts", "cache_dir"),
        *options_of(BalanceConfig, "match"), *options_of(MatchConfig, *_TEXT_MATCH), *options_of(TagConfig, "top_k"),
        *options_of(TagConfig, "index", "nlist", "nprobe"),
        *options_of(ResampleConfig, "target", "fraction", "mode", "t", "tail_share", "weighting", "temperature",
                    "use_k"),
        *options_of(EmbedConfig, "shard_size"),
        option("no_records", type=bool, default=False, help="Write selection.parquet only, not the selected records."),
        *options_of(EmbedConfig, "image_root"), *IMAGE_LIMITS, *EXECUTOR_OPTIONS), balance),
}
