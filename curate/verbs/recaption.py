"""The ``recaption`` verb as a function of values (curate/recaption/)."""

from __future__ import annotations

from curate.recaption.checks import CaptionRules
from curate.recaption.config import RecaptionConfig
from curate.verbs import (EXECUTOR_OPTIONS, IMAGE_LIMITS, IMAGE_ROOT, Prepared, Values, Verb, executor_of,
                          image_limits, inputs, options_of, print_rejects, settings)
from curate.verbs.generate import BACKEND_FLAGS, BACKEND_OPTIONS, backend_of


def recaption(values: Values) -> Prepared:
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
    from curate.core.settings import build_config

    out = values["out"]
    given = settings(values, "inputs", "truncated", *BACKEND_FLAGS)
    config = build_config(RecaptionConfig, given, backend=backend_of(values),
                          rules=CaptionRules(truncated=values["truncated"]), **image_limits(values))
    runner = executor_of(values)
    records = list(values["inputs"])

    def run() -> None:
        from curate.core.progress import console
        from curate.core.stats import from_stats
        from curate.recaption.config import RecaptionResult
        from curate.recaption.stage import recaption as recaption_records

        stats = recaption_records(records, config, executor=runner.make())
        r = from_stats(RecaptionResult, stats)
        c = r.captions
        console.print(f"captioned {r.records_out:,} of {r.records_in:,} records: kept {c.kept:,} of "
                      f"{c.images:,} captions ({c.retried:,} retried); failed {c.failed or {}}")
        for lang, counts in r.per_lang.items():
            mean = "n/a" if counts.mean_chars is None else f"{counts.mean_chars:.0f}"
            console.print(f"  {lang}: {counts.kept:,} of {counts.images:,} kept, mean {mean} characters")
        print_rejects(r, out)
        written = stats.get("outputs", {}).get("records", "records.jsonl")  # .parquet when the records carry bytes
        console.print(f"records: {out}/{written}   captions: {out}/captions.parquet   stats: {out}/stats.json")

    return Prepared(config, run)


VERBS = {
    "recaption": Verb("recaption", inputs(), (
        *options_of(RecaptionConfig, "out"), *BACKEND_OPTIONS,
        *options_of(RecaptionConfig, "temperature", "top_p", "max_new_tokens", "langs", "mix", "prompt_en",
                    "prompt_zh"),
        *options_of(CaptionRules, "truncated"), *options_of(RecaptionConfig, "shard_size"),
        IMAGE_ROOT, *IMAGE_LIMITS, *EXECUTOR_OPTIONS), recaption),
}
