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


def _store_meta(ctx: click.Context, param: click.Parameter, value: object) -> object:
    ctx.meta[f"curate.{param.name}"] = value
    return value


def _executor_options(fn):  # noqa: ANN001, ANN202 - click decorator
    """Flags shared by every sharded verb: executor, workers, Ray address and resources, seed."""
    fn = click.option("--cpus-per-actor", type=float, default=None, expose_value=False, callback=_store_meta,
                      help="With --executor ray: CPUs reserved per actor (default 1; more lets a CPU model use threads).")(fn)
    fn = click.option("--num-gpus", type=float, default=0.0, expose_value=False, callback=_store_meta,
                      help="With --executor ray: GPUs per actor for model-holding stages (e.g. 1, or 0.5 to share).")(fn)
    fn = click.option("--ray-address", default=None, metavar="ADDR",
                      help="Ray cluster address for --executor ray (default: RAY_ADDRESS, else a local cluster).")(fn)
    fn = click.option("--executor", type=click.Choice(["local", "ray"]), default="local", show_default=True,
                      help="Where shards run: this machine, or a Ray cluster.")(fn)
    fn = click.option("--workers", type=int, default=1, show_default=True,
                      help="Worker processes (local) or actors (ray; default there: as many as the cluster holds).")(fn)
    fn = click.option("--seed", type=int, default=0, show_default=True,
                      help="Seed of every random choice; the same seed gives the same outputs.")(fn)
    return fn


def _make_executor(executor: str, workers: int, ray_address: str | None, **kw):  # noqa: ANN003, ANN202
    """The executor of a verb's flags (Ray resources come from --num-gpus / --cpus-per-actor)."""
    from curate.executors import get_executor

    ctx = click.get_current_context(silent=True)
    if executor == "ray" and ctx is not None:
        kw.setdefault("num_gpus", ctx.meta.get("curate.num_gpus") or 0.0)
        if ctx.meta.get("curate.cpus_per_actor") is not None:
            kw.setdefault("num_cpus", ctx.meta["curate.cpus_per_actor"])
        if ctx.get_parameter_source("workers") == click.core.ParameterSource.DEFAULT:
            kw.setdefault("concurrency", None)  # fill the cluster unless --workers was given
            return get_executor(executor, workers=0, ray_address=ray_address, **kw)
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
@click.option("--energon", "energon_split", default=None, metavar="TRAIN,VAL,TEST",
              help="Also make OUT a Megatron-Energon dataset with this split of the shards, e.g. 1,0,0 "
                   "(see curate energon-prepare).")
@_executor_options
def pack_cmd(inputs: tuple[str, ...], processor: str | None, ctx: int, out: str, min_pixels: int | None,
             max_pixels: int | None, verify_fraction: float, exact: bool, lengths: str | None, plan_only: bool,
             shard_size: int, sequences_per_shard: int, trust_remote_code: bool, energon_split: str | None,
             seed: int, workers: int, executor: str, ray_address: str | None) -> None:
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
    if energon_split and not plan_only:
        from packer.energon import prepare_energon

        prepare_energon(out, split_ratio=energon_split, workers=workers)
        click.echo(f"energon dataset: {out} (.nv-meta/, split {energon_split}); check with: energon lint {out}", err=True)


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



# ---------------------------------------------------------------------------
# Concept balancing: embed, vocab embed, tag, resample, balance (curate/embed.py ... curate/balance.py)
# ---------------------------------------------------------------------------

_MODEL_HELP = ("open_clip model: ARCH:PRETRAINED (hub tag), ARCH:/path/checkpoint.{pt,safetensors} "
               "(ARCH an open_clip name or an ARCH.json beside the file), local-dir:FOLDER or hf-hub:ORG/REPO.")


def _model_options(fn):  # noqa: ANN001, ANN202 - click decorator
    """Flags shared by the verbs that run an open_clip model."""
    fn = click.option("--threads", type=int, default=None,
                      help="torch CPU threads per worker (default: cores ÷ workers; while embedding "
                           "the vocabulary, cores − 1 beside the tokenizer thread).")(fn)
    fn = click.option("--device", default="auto", show_default=True, help="auto, cpu, cuda, cuda:N or mps.")(fn)
    fn = click.option("--precision", type=click.Choice(["fp32", "bf16", "fp16"]), default="fp32", show_default=True,
                      help="Model precision; fp16 needs a GPU, bf16 is about 2× faster than fp32 on recent CPUs.")(fn)
    fn = click.option("--model", default="ViT-B-32-quickgelu:metaclip_400m", show_default=True, metavar="SPEC",
                      help=_MODEL_HELP)(fn)
    return fn


def _threads_for(threads: int | None, workers: int) -> int | None:
    import os

    if threads is not None or workers <= 1:
        return threads
    return max(1, (os.cpu_count() or 1) // workers)


@cli.command("embed")
@click.argument("inputs", nargs=-1, required=True, type=click.Path(path_type=str))
@click.option("--out", required=True, type=click.Path(path_type=str), help="Output folder.")
@_model_options
@click.option("--batch-size", type=int, default=64, show_default=True, help="Images per forward pass.")
@click.option("--decode-threads", type=int, default=None,
              help="Threads decoding images while the model runs (default: cores, at most 8).")
@click.option("--shard-size", type=int, default=5000, show_default=True, help="Records per shard (one .npy each).")
@_executor_options
def embed_cmd(inputs: tuple[str, ...], out: str, model: str, precision: str, device: str, threads: int | None,
              batch_size: int, decode_threads: int | None, shard_size: int, seed: int, workers: int, executor: str,
              ray_address: str | None) -> None:
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
    from curate.embed import embed
    from curate.progress import console

    r = embed(list(inputs), out=out, model=model, precision=precision, device=device, batch_size=batch_size,
              shard_size=shard_size, decode_threads=decode_threads, threads=_threads_for(threads, workers),
              executor=_make_executor(executor, workers, ray_address), seed=seed)
    console.print(f"[bold]embedded[/bold] {r['records_embedded']:,} of {r['records_in']:,} records "
                  f"({r['images_embedded']:,} images, {r['dim']}-d) in {r['shards']} shards")
    if r["dropped"] or r["errored"]:
        console.print(f"dropped {r['dropped']}  errored {r['errored']}  → {out}/rejects.parquet")
    console.print(f"embeddings: {out}/embeddings/   stats: {out}/stats.json")


@vocab_group.command("embed")
@click.option("--vocab", required=True, type=click.Path(path_type=str), help="Vocabulary file (one concept per line).")
@click.option("--out", required=True, type=click.Path(path_type=str),
              help="Output .npy (V×D float16, vocabulary line order); a .json beside it says what it holds.")
@_model_options
@click.option("--template", default=None, metavar="TEXT",
              help="Prompt template with {} for the concept, e.g. 'a photo of {}' (default: the bare concept).")
@click.option("--scripts", type=click.Choice(["auto", "latin", "latin,cjk", "all"]), default="auto",
              show_default=True,
              help="Entries to embed by script; auto = what the tokenizer reads (CLIP's BPE: latin only). "
                   "The others get zero rows and are never tagged.")
@click.option("--batch-size", type=int, default=1024, show_default=True, help="Texts per forward pass.")
@click.option("--cache-dir", type=click.Path(path_type=str), default=None,
              help="Cache folder (default: $CURATE_CACHE/concepts or ~/.cache/curate/concepts).")
@_executor_options
def vocab_embed_cmd(vocab: str, out: str, model: str, precision: str, device: str, threads: int | None,
                    template: str | None, scripts: str, batch_size: int, cache_dir: str | None, seed: int,
                    workers: int, executor: str, ray_address: str | None) -> None:
    """Embed a concept vocabulary with the model's text tower (cached, resumable).

    The cache key is the model fingerprint + the vocabulary's hash + template +
    scripts: a second run only copies the cached matrix. A killed run resumes at
    the first unfinished chunk of 16,384 entries.

    \b
    Example:
      curate vocab embed --vocab vocab/500k.txt --template 'a photo of {}' --out concepts.npy
    """
    from curate.progress import console
    from curate.vocab_embed import embed_vocab, sidecar_path

    sharded = executor == "ray" or workers > 1  # else: here, tokenizing beside the model in a thread
    r = embed_vocab(vocab, out=out, model=model, template=template, precision=precision, device=device,
                    batch_size=batch_size, scripts=scripts, cache_dir=cache_dir, threads=threads,
                    executor=_make_executor(executor, workers, ray_address) if sharded else None)
    skipped = ", ".join(f"{n:,} {s}" for s, n in r["skipped"].items()) or "none"
    console.print(f"[bold]{'reused' if r['cached'] else 'embedded'}[/bold] {r['embedded']:,} of {r['rows']:,} "
                  f"concepts ({r['dim']}-d; skipped: {skipped}) in {r['seconds']:.1f}s")
    console.print(f"concepts: {out} (+ {sidecar_path(out)})   cache: {r['cache_dir']}")


@cli.command("tag")
@click.option("--embeddings", required=True, type=click.Path(path_type=str),
              help="Embeddings folder: curate embed's OUT (or OUT/embeddings), or clip-retrieval's "
                   "(img_emb/ + metadata/).")
@click.option("--concepts", required=True, type=click.Path(path_type=str),
              help="Concept matrix from curate vocab embed.")
@click.option("--top-k", type=int, default=5, show_default=True, help="Concepts per record.")
@click.option("--out", required=True, type=click.Path(path_type=str), help="Output folder.")
@click.option("--index", type=click.Choice(["flat", "ivf"]), default="flat", show_default=True,
              help="flat = exact inner product; ivf = FAISS IVF (prints recall@K against exact search).")
@click.option("--nlist", type=int, default=None,
              help="IVF lists (default: 4·√V rounded to a power of 2, e.g. 2,048 for 500K concepts).")
@click.option("--nprobe", type=int, default=16, show_default=True, help="IVF lists searched per query.")
@click.option("--recall-sample", type=int, default=1000, show_default=True,
              help="Embeddings (seeded sample) used to measure IVF recall@K.")
@click.option("--id-column", default=None,
              help="Id column of clip-retrieval metadata (default: id, key, image_path or url).")
@_executor_options
def tag_cmd(embeddings: str, concepts: str, top_k: int, out: str, index: str, nlist: int | None, nprobe: int,
            recall_sample: int, id_column: str | None, seed: int, workers: int, executor: str,
            ray_address: str | None) -> None:
    """Tag every embedding with its top-K nearest concepts (FAISS).

    Writes OUT/tags.parquet (id, source, concepts list<int32> = vocabulary line − 1,
    scores list<float32>, best first), per-file parts in OUT/tags/ and OUT/stats.json.
    Zero concept rows (entries the encoder could not read) are never returned.

    \b
    Examples:
      curate tag --embeddings emb/ --concepts concepts.npy --top-k 5 --out tagged/
      curate tag --embeddings clip_retrieval_out/ --concepts concepts.npy --index ivf --nlist 4096 --out tagged/
    """
    from curate.progress import console
    from curate.tag import tag

    r = tag(embeddings, concepts, out=out, top_k=top_k, index=index, nlist=nlist, nprobe=nprobe,
            recall_sample=recall_sample, id_column=id_column, executor=_make_executor(executor, workers, ray_address),
            seed=seed)
    console.print(f"[bold]tagged[/bold] {r['records_tagged']:,} records with their top {top_k} of "
                  f"{r['concepts_embedded']:,} concepts ({r['embedding_files']} embedding files, {r['layout']} layout)")
    console.print(f"tags: {out}/tags.parquet   stats: {out}/stats.json")


@cli.command("resample")
@click.option("--tags", required=True, type=click.Path(path_type=str), help="tags.parquet from curate tag.")
@click.option("--target", type=int, default=None, help="Records to draw (with replacement beyond the pool).")
@click.option("--fraction", type=float, default=None, help="Target as a fraction of the tagged records (>1: copies).")
@click.option("--out", required=True, type=click.Path(path_type=str), help="Output folder.")
@click.option("--mode", type=click.Choice(["inverse", "metaclip"]), default="inverse", show_default=True,
              help="inverse = weights from inverse concept frequency; metaclip = keep with p = t / max(count, t).")
@click.option("--t", "t", type=int, default=20000, show_default=True, help="MetaCLIP's threshold (--mode metaclip).")
@click.option("--weighting", type=click.Choice(["mean", "max", "sum"]), default="mean", show_default=True,
              help="How a record's K inverse frequencies combine into its weight.")
@click.option("--temperature", type=float, default=1.0, show_default=True,
              help="Exponent τ in freq^-τ: 1 fully inverse, 0 uniform.")
@click.option("--use-k", type=int, default=None,
              help="Use only each record's J best tags for frequencies and weights (default: all K).")
@click.option("--records", multiple=True, type=click.Path(path_type=str),
              help="Input record files/folders; the selected records are written to OUT/records/ in their layout. "
                   "Repeatable.")
@click.option("--vocab", type=click.Path(path_type=str), default=None,
              help="Vocabulary, to name the top concepts in stats.json.")
@click.option("--seed", type=int, default=0, show_default=True, help="Seed of the draw.")
def resample_cmd(tags: str, target: int | None, fraction: float | None, out: str, mode: str, t: int, weighting: str,
                 temperature: float, use_k: int | None, records: tuple[str, ...], vocab: str | None,
                 seed: int) -> None:
    """Draw a concept-balanced selection of the tagged records.

    Record weight = mean (or max, sum) over its concepts of freq^-τ; the target is
    drawn without replacement ∝ weight, or with replacement (copies) past the pool.
    Writes OUT/selection.parquet (id, source, copies, weight), OUT/records/ (with
    --records), OUT/balance.png (frequency vs rank, before/after) and OUT/stats.json.

    \b
    Examples:
      curate resample --tags tagged/tags.parquet --fraction 0.3 --records data/ --out balanced/
      curate resample --tags tagged/tags.parquet --mode metaclip --t 20000 --out balanced/
    """
    from curate.progress import console
    from curate.resample import resample

    r = resample(tags, out=out, target=target, fraction=fraction, seed=seed, mode=mode, t=t, weighting=weighting,
                 temperature=temperature, use_k=use_k, records=list(records) or None, vocab=vocab)
    b = r["balance"]
    console.print(f"[bold]selected[/bold] {r['records_selected']:,} of {r['pool']:,} tagged records "
                  f"({r['copies_total']:,} copies); concepts covered {b['concepts_covered_before']:,} → "
                  f"{b['concepts_covered_after']:,}, top-1% share {b['head_share_before']:.3f} → "
                  f"{b['head_share_after']:.3f}")
    if "records_written" in r:
        console.print(f"records: {out}/records/ ({r['records_written']['records']:,} written)")
    console.print(f"selection: {out}/selection.parquet   plot: {out}/balance.png   stats: {out}/stats.json")


@cli.command("balance")
@click.argument("inputs", nargs=-1, required=True, type=click.Path(path_type=str))
@click.option("--vocab", required=True, type=click.Path(path_type=str),
              help="Concept vocabulary (e.g. vocab/500k.txt).")
@click.option("--out", required=True, type=click.Path(path_type=str), help="Output folder (all steps).")
@_model_options
@click.option("--batch-size", type=int, default=64, show_default=True, help="Images per forward pass.")
@click.option("--template", default=None, metavar="TEXT", help="Concept prompt template, e.g. 'a photo of {}'.")
@click.option("--scripts", type=click.Choice(["auto", "latin", "latin,cjk", "all"]), default="auto",
              show_default=True, help="Vocabulary entries to embed by script (auto: what the tokenizer reads).")
@click.option("--cache-dir", type=click.Path(path_type=str), default=None,
              help="Concept embedding cache (default: $CURATE_CACHE/concepts or ~/.cache/curate/concepts).")
@click.option("--top-k", type=int, default=5, show_default=True, help="Concepts per record.")
@click.option("--index", type=click.Choice(["flat", "ivf"]), default="flat", show_default=True, help="FAISS index.")
@click.option("--nlist", type=int, default=None, help="IVF lists (default: 4·√V rounded to a power of 2).")
@click.option("--nprobe", type=int, default=16, show_default=True, help="IVF lists searched per query.")
@click.option("--target", type=int, default=None, help="Records to draw.")
@click.option("--fraction", type=float, default=None, help="Target as a fraction of the tagged records (default 0.5).")
@click.option("--mode", type=click.Choice(["inverse", "metaclip"]), default="inverse", show_default=True,
              help="Resampling rule.")
@click.option("--t", "t", type=int, default=20000, show_default=True, help="MetaCLIP's threshold (--mode metaclip).")
@click.option("--weighting", type=click.Choice(["mean", "max", "sum"]), default="mean", show_default=True,
              help="How a record's K inverse frequencies combine.")
@click.option("--temperature", type=float, default=1.0, show_default=True, help="Exponent τ in freq^-τ.")
@click.option("--use-k", type=int, default=None, help="Resample on each record's J best tags only (default: all K).")
@click.option("--shard-size", type=int, default=5000, show_default=True, help="Records per embedding shard.")
@click.option("--no-records", is_flag=True, help="Write selection.parquet only, not the selected records.")
@_executor_options
def balance_cmd(inputs: tuple[str, ...], vocab: str, out: str, model: str, precision: str, device: str,
                threads: int | None, batch_size: int, template: str | None, scripts: str, cache_dir: str | None,
                top_k: int, index: str, nlist: int | None, nprobe: int, target: int | None, fraction: float | None,
                mode: str, t: int, weighting: str, temperature: float, use_k: int | None, shard_size: int,
                no_records: bool, seed: int,
                workers: int, executor: str, ray_address: str | None) -> None:
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
    """
    from curate.balance import balance, summary_lines
    from curate.progress import console

    r = balance(list(inputs), out=out, vocab=vocab, model=model, precision=precision, device=device,
                batch_size=batch_size, template=template, scripts=scripts, cache_dir=cache_dir, top_k=top_k,
                index=index, nlist=nlist, nprobe=nprobe, target=target, fraction=fraction, mode=mode, t=t,
                weighting=weighting, temperature=temperature, use_k=use_k, shard_size=shard_size,
                threads=_threads_for(threads, workers), executor=_make_executor(executor, workers, ray_address),
                seed=seed, write_records=not no_records)
    for line in summary_lines(r, out):
        console.print(line)


@cli.command("energon-prepare")
@click.argument("out", type=click.Path(path_type=str))
@click.option("--split-ratio", default="1,0,0", show_default=True, metavar="TRAIN,VAL,TEST",
              help="Weights of the train/val/test splits; whole shards are assigned, in shard order.")
@click.option("--workers", type=int, default=1, show_default=True, help="Processes indexing the tars.")
def energon_prepare_cmd(out: str, split_ratio: str, workers: int) -> None:
    """Make a curate pack output folder a Megatron-Energon dataset (writes OUT/.nv-meta/).

    Runs Energon's own preparation on OUT/shards/*.tar (index, .info.json, split.yaml)
    and writes a dataset.yaml + sample_loader.py that load each packed sequence as
    one packer.energon.PackedSequenceSample; train with packer.energon.PackedTaskEncoder.
    Rerunning rewrites the metadata.

    \b
    Examples:
      curate energon-prepare packed/
      curate energon-prepare packed/ --split-ratio 98,1,1
      energon lint packed/ --split-parts train
    """
    from curate.progress import console

    try:
        from packer.energon import prepare_energon
    except ImportError as exc:
        raise UserError(f"energon-prepare needs megatron-energon ({exc}); install it: pip install 'curate[energon]'") from None
    r = prepare_energon(out, split_ratio=split_ratio, workers=workers)
    splits = ", ".join(f"{k}: {' '.join(v) or '-'}" for k, v in r["splits"].items())
    console.print(f"[bold]energon dataset[/bold] {r['path']}: {r['sequences']:,} packed sequences in {r['shards']} "
                  f"shards ({splits})")
    console.print(f"metadata: {r['path']}/.nv-meta/ ({', '.join(r['files'])})")


@cli.command("score")
@click.option("--records", "records", multiple=True, required=True, type=click.Path(path_type=str),
              help="RL records (JSONL/JSON/Parquet, any layout) holding answer, answer_type, prompt_type. Repeatable.")
@click.option("--responses", required=True, type=click.Path(path_type=str),
              help="Responses to score: JSONL or Parquet with id and response (several per id allowed, optional sample).")
@click.option("--out", required=True, type=click.Path(path_type=str), help="Output folder.")
@click.option("--progress", type=float, default=None,
              help="Training progress in [0, 1] for the dynamic IoU threshold of detection rewards.")
@click.option("--shard-size", type=int, default=20_000, show_default=True, help="Responses per shard.")
@_executor_options
def score_cmd(records: tuple[str, ...], responses: str, out: str, progress: float | None, shard_size: int,
              seed: int, workers: int, executor: str, ray_address: str | None) -> None:
    """Score model responses with the rule-based verifiers (curate.rewards).

    Writes OUT/scores.parquet (id, sample, source, verifier, accuracy, format, reward,
    error) and OUT/stats.json broken down per source and per verifier. Responses
    whose id has no record are kept with the error unknown_id.

    \b
    Example:
      curate score --records data/sample/rl/prompts.jsonl --responses rollouts.jsonl --out scored/
    """
    from curate.progress import console
    from curate.score import score

    stats = score(list(records), responses, out, progress=progress, seed=seed, shard_size=shard_size,
                  executor=_make_executor(executor, workers, ray_address))
    o = stats["overall"]
    mean = "n/a" if o["mean_reward"] is None else f"{o['mean_reward']:.3f}"
    console.print(f"scored {stats['scored']:,} of {stats['responses_in']:,} responses; mean reward {mean}; "
                  f"errored {stats['errored'] or {}}")
    console.print(f"scores: {out}/scores.parquet   stats: {out}/stats.json")


@cli.command("serve-rewards")
@click.option("--host", default="127.0.0.1", show_default=True, help="Interface to bind (0.0.0.0 to accept remote trainers).")
@click.option("--port", type=int, default=8000, show_default=True)
@click.option("--workers", type=int, default=1, show_default=True, help="Server processes.")
@click.option("--pool-workers", type=int, default=None,
              help="Verifier worker processes per server process (time-limited verifiers; default: CPUs, at most 4).")
@click.option("--log-level", default="warning", show_default=True,
              type=click.Choice(["critical", "error", "warning", "info", "debug"]))
def serve_rewards_cmd(host: str, port: int, workers: int, pool_workers: int | None, log_level: str) -> None:
    """Serve the reward verifiers over HTTP for RL trainers.

    \b
    GET  /health
    POST /score  {"items": [{"record": {...}, "response": "..."}, ...], "progress": null}
              -> {"results": [{"accuracy", "format", "reward", "error", "verifier"}, ...]}
    A malformed request gets HTTP 422 with a readable message.
    """
    from curate.serve_rewards import serve

    click.echo(f"serving rewards on http://{host}:{port} (POST /score, GET /health); Ctrl-C to stop", err=True)
    serve(host, port, workers=workers, pool_workers=pool_workers, log_level=log_level)


def _band(value: str | None) -> tuple[float, float] | None:
    if value is None:
        return None
    try:
        lo, hi = (float(x) for x in value.split(","))
    except ValueError:
        raise UserError(f"--band must be LO,HI (two numbers), got {value!r}") from None
    return lo, hi


from curate.generate.options import (  # noqa: E402 - shared flags of the generating verbs
    backend_kwargs_from_flags,
    backend_options,
    sampling_from_flags,
    sampling_options,
)


@cli.command("rl-filter")
@click.argument("inputs", nargs=-1, required=True, type=click.Path(path_type=str))
@click.option("--out", required=True, type=click.Path(path_type=str), help="Output folder.")
@backend_options
@sampling_options(temperature=1.0, max_new_tokens=1024)
@click.option("--n", "n", type=int, default=16, show_default=True, help="Answers sampled per prompt (N of pass@N).")
@click.option("--pass-threshold", type=float, default=None,
              help="A sample passes when its accuracy reaches this (default 1.0; e.g. 0.5 for IoU rewards).")
@click.option("--min-gap", type=float, default=None,
              help="Keep only prompts with pass@N - pass@1 at least this (default 0.0).")
@click.option("--band", default=None, metavar="LO,HI",
              help="Keep prompts whose mean reward is strictly inside (LO, HI) (default 0.0,0.6, as the "
                   "LLaVA-OneVision-1.5-RL filter).")
@click.option("--thresholds", type=click.Path(path_type=str), default=None,
              help="YAML/JSON with per-source thresholds (band, min_gap, pass_threshold, metric, inclusive, filter).")
@click.option("--prompt-style", type=click.Choice(["normal", "think"]), default=None,
              help="Force a prompt style (default: each record's prompt_type; normal = answer-only).")
@click.option("--templates", type=click.Path(path_type=str), default=None,
              help="YAML/JSON {normal: ..., think: ...} prompt templates containing {problem}.")
@click.option("--progress", "train_progress", type=float, default=None,
              help="Training progress in [0, 1] for the dynamic IoU threshold of detection rewards.")
@click.option("--shard-size", type=int, default=1000, show_default=True, help="Prompts per shard.")
@_executor_options
def rl_filter_cmd(inputs: tuple[str, ...], out: str, n: int, pass_threshold: float | None, min_gap: float | None,
                  band: str | None, thresholds: str | None, prompt_style: str | None, templates: str | None,
                  train_progress: float | None, shard_size: int, seed: int, workers: int, executor: str,
                  ray_address: str | None, **flags: object) -> None:
    """Keep the RL prompts a model solves sometimes but not reliably.

    Samples --n answers per prompt from the model (--model ckpt/, --endpoint URL, or
    --rollouts FILE), scores them with the rule verifiers (curate.rewards), and keeps
    a prompt when its mean reward is inside --band and pass@N - pass@1 >= --min-gap.
    Answers are stored as they arrive: a rerun after a crash only asks for the rest.

    \b
    Outputs in OUT: kept.jsonl, rollouts.parquet, prompts.parquet, rejects.parquet,
    stats.json (per source: kept, dropped by reason, mean reward, pass@1, pass@N,
    response length, truncation, format failures, reflection words), rl_filter.png.

    \b
    Examples:
      curate rl-filter data/sample/rl/prompts.jsonl --model ckpt/ --n 16 --out rl/
      curate rl-filter prompts.jsonl --endpoint http://127.0.0.1:8000/v1 --served-model Qwen2.5-VL-7B --out rl/
      curate rl-filter prompts.jsonl --rollouts answers.jsonl --band 0.1,0.9 --out rl/
    """
    from curate.progress import console
    from curate.rl_filter import rl_filter

    sampling = sampling_from_flags(flags, seed=seed)
    stats = rl_filter(list(inputs), out, backend=backend_kwargs_from_flags(flags), n=n,
                      sampling={"temperature": sampling.temperature, "top_p": sampling.top_p,
                                "max_new_tokens": sampling.max_new_tokens},
                      prompt_style=prompt_style, templates=templates, thresholds=thresholds,
                      pass_threshold=pass_threshold, min_gap=min_gap, band=_band(band), progress=train_progress,
                      seed=seed, shard_size=shard_size, executor=_make_executor(executor, workers, ray_address))
    o = stats["overall"]
    fmt = lambda v: "n/a" if v is None else f"{v:.3f}"  # noqa: E731
    console.print(f"kept {stats['kept']:,} of {stats['records_in']:,} prompts; dropped {stats['dropped'] or {}}; "
                  f"errored {stats['errored'] or {}}")
    console.print(f"mean reward {fmt(o['mean_reward'])}, pass@1 {fmt(o['mean_pass_at_1'])}, "
                  f"pass@N {fmt(o['mean_pass_at_n'])}, truncation {fmt(o['truncation_rate'])}")
    console.print(f"kept: {out}/kept.jsonl   report: {out}/rl_filter.png   stats: {out}/stats.json")


# ---------------------------------------------------------------------------
# Recaptioning (curate/recaption.py, curate/caption_checks.py)
# ---------------------------------------------------------------------------

from curate.recaption import DEFAULT_PROMPTS as _RECAPTION_PROMPTS  # noqa: E402


@cli.command("recaption")
@click.argument("inputs", nargs=-1, required=True, type=click.Path(path_type=str))
@click.option("--out", required=True, type=click.Path(path_type=str), help="Output folder.")
@backend_options
@sampling_options(temperature=0.7, top_p=0.9, max_new_tokens=512)
@click.option("--langs", default=None, metavar="LANGS",
              help="Caption every image in each of these languages (comma-separated: en, zh).  [default: en,zh]")
@click.option("--mix", default=None, metavar="LANG=W,...",
              help="Instead: one caption per image, its language drawn with these weights (seeded, keyed on the "
                   "record id), e.g. en=0.76,zh=0.24 as LLaVA-OneVision-1.5's 65M/20M split.")
@click.option("--prompt-en", default=_RECAPTION_PROMPTS["en"], show_default=True, metavar="TEXT",
              help="English prompt ('<image>\\n' is put in front unless it holds <image>).")
@click.option("--prompt-zh", default=_RECAPTION_PROMPTS["zh"], show_default=True, metavar="TEXT",
              help="Chinese prompt ('<image>\\n' is put in front unless it holds <image>).")
@click.option("--truncated", "truncated_policy", type=click.Choice(["trim", "drop", "keep"]), default="trim",
              show_default=True,
              help="Answers that hit --max-new-tokens: cut after the last complete sentence, reject, or keep.")
@click.option("--shard-size", type=int, default=1000, show_default=True, help="Records per shard.")
@_executor_options
def recaption_cmd(inputs: tuple[str, ...], out: str, langs: str | None, mix: str | None, prompt_en: str,
                  prompt_zh: str, truncated_policy: str, shard_size: int, seed: int, workers: int, executor: str,
                  ray_address: str | None, **flags: object) -> None:
    """Write new English and Chinese captions for the images of records.

    Each record's first image gets one caption per language (or one language drawn
    per record with --mix) from --model ckpt/, --endpoint URL or --rollouts FILE
    (keys <id>#<lang>, retries <id>#<lang>#retry). Every caption is cleaned of chat
    artefacts (<think> blocks, "Sure! Here is a caption:", Markdown, quotes) and
    checked: language (Latin words or Han characters >= 70% of its units), empty,
    garbled, refusal, repetition, too short (< 3 units). A failing caption is asked
    again once with another seed, then recorded with its reason. Records without
    an image are dropped (no_image). Answers are journaled as they arrive: a rerun
    after a crash never asks for them again.

    \b
    Outputs in OUT: captions.parquet (id, source, lang, image, caption, model, error,
    detail, attempts, truncated, raw), records.jsonl (one canonical record per kept
    caption, id <id>#<lang>), rejects.parquet, stats.json (per source and language:
    images, kept, failures by reason, mean caption length; generation counts).

    \b
    Examples:
      curate recaption balanced/records/ --model ckpt/ --langs en,zh --out recaptioned/
      vllm serve Qwen/Qwen2.5-VL-7B-Instruct --port 8000
      curate recaption balanced/records/ --endpoint http://127.0.0.1:8000/v1 \\
          --served-model Qwen/Qwen2.5-VL-7B-Instruct --mix en=0.76,zh=0.24 --concurrency 64 --out recaptioned/
    """
    from curate.caption_checks import CaptionRules
    from curate.progress import console
    from curate.recaption import recaption

    sampling = sampling_from_flags(flags, seed=seed)
    stats = recaption(list(inputs), out, backend=backend_kwargs_from_flags(flags), langs=langs, mix=mix,
                      prompts={"en": prompt_en, "zh": prompt_zh},
                      sampling={"temperature": sampling.temperature, "top_p": sampling.top_p,
                                "max_new_tokens": sampling.max_new_tokens},
                      rules=CaptionRules(truncated=truncated_policy), seed=seed, shard_size=shard_size,
                      executor=_make_executor(executor, workers, ray_address))
    c = stats["captions"]
    console.print(f"captioned {stats['records_out']:,} of {stats['records_in']:,} records: kept {c['kept']:,} of "
                  f"{c['images']:,} captions ({c['retried']:,} retried); failed {c['failed'] or {}}")
    for lang, r in stats["per_lang"].items():
        mean = "n/a" if r["mean_chars"] is None else f"{r['mean_chars']:.0f}"
        console.print(f"  {lang}: {r['kept']:,} of {r['images']:,} kept, mean {mean} characters")
    if stats["dropped"] or stats["errored"]:
        console.print(f"dropped {stats['dropped'] or {}}  errored {stats['errored'] or {}}  → {out}/rejects.parquet")
    console.print(f"records: {out}/records.jsonl   captions: {out}/captions.parquet   stats: {out}/stats.json")
