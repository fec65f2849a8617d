"""The ``recaption`` verb (curate/recaption/)."""

from __future__ import annotations

from typing import Any

import click

from curate.cli.group import cli
from curate.cli.generate_options import backend_from_flags, backend_options
from curate.cli.options import (Prepared, config_options, executor_options, image_limit_options, image_limits_given,
                                image_root_option, make_executor, print_rejects)
from curate.recaption.checks import CaptionRules
from curate.recaption.config import RecaptionConfig
from curate.core.settings import build_config


@cli.command("recaption")
@click.argument("inputs", nargs=-1, required=True, type=click.Path(path_type=str))
@config_options(RecaptionConfig, "out")
@backend_options
@config_options(RecaptionConfig, "temperature", "top_p", "max_new_tokens", "langs", "mix", "prompt_en", "prompt_zh")
@config_options(CaptionRules, "truncated")
@config_options(RecaptionConfig, "shard_size")
@image_root_option
@image_limit_options
@executor_options
def recaption_cmd(inputs: tuple[str, ...], out: str, truncated: str, workers: int, executor: str,
                  ray_address: str | None, **settings: Any) -> Prepared:
    """Write new captions (English and Chinese, or any language) for every image of records.

    Every image of a record gets one caption per language (or one language drawn
    per record with --mix) from --model ckpt/, --endpoint URL or --rollouts FILE
    (keys <id>#<lang>, <id>#2#<lang> for a record's second image..., retries
    <key>#retry): each caption is a single-image pair. --langs takes any ISO 639-1
    code py3langid identifies (fr, de, ja...). Every caption is cleaned of chat
    artefacts (<think> blocks, "Sure! Here is a caption:", Markdown, quotes) and
    checked: language (en, zh: Latin words or Han characters >= 70% of its units;
    others: py3langid identifies the language asked), empty,
    garbled, refusal, repetition, too short (< 3 units). A failing caption is asked
    again once with another seed, then recorded with its reason. Records without
    an image are dropped (no_image). Answers are journaled as they arrive: a rerun
    after a crash never asks for them again.

    \b
    Outputs in OUT: captions.parquet (id, source, lang, image, image_index, caption, model, error,
    detail, attempts, truncated, raw), records.jsonl (one canonical record per kept
    caption, id <id>#<lang> or <id>#<n>#<lang>), rejects.parquet, stats.json (per source and language:
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
    from curate.core.stats import from_stats
    from curate.recaption.config import RecaptionResult
    from curate.recaption.stage import recaption

    backend = backend_from_flags(settings)
    config = build_config(RecaptionConfig, settings, out=out, backend=backend, rules=CaptionRules(truncated=truncated),
                          **image_limits_given())
    runner = make_executor(executor, workers, ray_address)

    def run() -> None:
        stats = recaption(list(inputs), config, executor=runner)
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

    return Prepared(config, run)
