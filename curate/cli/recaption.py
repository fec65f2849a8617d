"""The ``recaption`` verb (curate/recaption/)."""

from __future__ import annotations

import click

from curate.cli.group import cli
from curate.cli.options import (executor_options, image_limit_options, image_limits_given, image_root_option,
                                 make_executor, print_rejects)
from curate.cli.generate_options import (
    backend_kwargs_from_flags,
    backend_options,
    sampling_dict,
    sampling_from_flags,
    sampling_options,
)
from curate.recaption.checks import TRUNCATED_POLICIES
from curate.recaption.config import DEFAULT_PROMPTS as _RECAPTION_PROMPTS


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
@click.option("--truncated", "truncated_policy", type=click.Choice(TRUNCATED_POLICIES), default="trim",
              show_default=True,
              help="Answers that hit --max-new-tokens: cut after the last complete sentence, reject, or keep.")
@click.option("--shard-size", type=int, default=1000, show_default=True, help="Records per shard.")
@image_root_option
@image_limit_options
@executor_options
def recaption_cmd(inputs: tuple[str, ...], out: str, langs: str | None, mix: str | None, prompt_en: str,
                  prompt_zh: str, truncated_policy: str, shard_size: int, image_root: str | None, seed: int,
                  workers: int, executor: str, ray_address: str | None, **flags: object) -> None:
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
    images, kept, failures by reason, mean caption length), history.json (generation
    counts, retries, timings, resumes: how the run went, apart from its results).

    \b
    Examples:
      curate recaption balanced/records/ --model ckpt/ --langs en,zh --out recaptioned/
      vllm serve Qwen/Qwen2.5-VL-7B-Instruct --port 8000
      curate recaption balanced/records/ --endpoint http://127.0.0.1:8000/v1 \\
          --served-model Qwen/Qwen2.5-VL-7B-Instruct --mix en=0.76,zh=0.24 --concurrency 64 --out recaptioned/
    """
    from curate.core.progress import console
    from curate.recaption.checks import CaptionRules
    from curate.core.results import from_stats
    from curate.recaption.config import RecaptionConfig
    from curate.recaption.results import RecaptionResult
    from curate.recaption.stage import recaption

    sampling = sampling_dict(sampling_from_flags(flags, seed=seed))
    config = RecaptionConfig(out=out, backend=backend_kwargs_from_flags(flags), langs=langs, mix=mix,
                             prompts={"en": prompt_en, "zh": prompt_zh}, sampling=sampling,
                             rules=CaptionRules(truncated=truncated_policy), seed=seed, shard_size=shard_size,
                             image_root=image_root, **image_limits_given())
    stats = recaption(list(inputs), config=config, executor=make_executor(executor, workers, ray_address))
    r = from_stats(RecaptionResult, stats)
    c = r.captions
    console.print(f"captioned {r.records_out:,} of {r.records_in:,} records: kept {c.kept:,} of "
                  f"{c.images:,} captions ({c.retried:,} retried); failed {c.failed or {}}")
    for lang, counts in r.per_lang.items():
        mean = "n/a" if counts.mean_chars is None else f"{counts.mean_chars:.0f}"
        console.print(f"  {lang}: {counts.kept:,} of {counts.images:,} kept, mean {mean} characters")
    print_rejects(r, out)
    records = stats.get("outputs", {}).get("records", "records.jsonl")  # .parquet when the records carry bytes
    console.print(f"records: {out}/{records}   captions: {out}/captions.parquet   stats: {out}/stats.json")
