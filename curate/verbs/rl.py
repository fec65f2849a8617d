"""Verbs of RL data as functions of values: ``score``, ``rl-filter`` (curate/rewards/, curate/rl/); and the options of
model-written code that ``serve-rewards`` shares."""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

from curate.core.settings import option
from curate.rl.config import RlFilterConfig, ScoreConfig
from curate.verbs import (EXECUTOR_OPTIONS, IMAGE_LIMITS, IMAGE_ROOT, Prepared, Values, Verb, executor_of,
                          image_limits, inputs, options_of, settings)
from curate.verbs.generate import BACKEND_FLAGS, BACKEND_OPTIONS, backend_of

#: The options of model-written code: the limits' ceilings (records may only lower them) and --trust-code.
CODE_OPTIONS = (
    option("code_cpu_seconds", type=float,
           help="CPU seconds of one response's program over all its tests [default: 5]; "
                "a record's reward.parameters may lower these limits, never raise them."),
    option("code_wall_seconds", type=float, help="Wall seconds of one response's program over all its tests "
                                                  "[default: 10]."),
    option("code_memory_mb", type=int,
           help="Memory (address space) of one test's process, MB [default: 512, or CURATE_CODE_MEMORY_MB]."),
    option("trust_code", type=bool, default=False,
           help="Run model-written programs even where no sandbox can start (bubblewrap missing): "
                "WITHOUT isolation from this machine. Recorded in stats.json. Default: such "
                "responses score 0 with error sandbox_unavailable."),
)
CODE_FLAGS = tuple(o.name for o in CODE_OPTIONS)


def code_of(values: Mapping[str, Any]) -> Any:
    """The :class:`CodeSandbox` of the code options, over the environment's defaults."""
    from curate.rewards.runtime.sandbox import CodeSandbox

    return CodeSandbox.from_env(cpu_seconds=values.get("code_cpu_seconds"), wall_seconds=values.get("code_wall_seconds"),
                                memory_mb=values.get("code_memory_mb"),
                                trust_code=True if values.get("trust_code") else None)


def score(values: Values) -> Prepared:
    """Score model responses with the rule-based verifiers (curate.rewards).

    Writes OUT/scores.parquet (id, sample, source, verifier, accuracy, format, reward,
    error) and OUT/stats.json broken down per source and per verifier. Responses
    whose id has no record are kept with the error unknown_id.

    The records with a scored response are written back in the layout they came in
    (VLM-R1 JSONL, verl or LLaVA-OneVision-1.5-RL Parquet, ours): OUT/scored.jsonl, or
    scored.parquet when images are bytes; the same columns, row for row in records
    order, plus responses, mean_accuracy, mean_format, mean_reward and rewards (in
    sample order). --preset gives a seed's layout and reward (llava-ov-1.5-rl:
    its Parquet and spatial box bonus; vlm-r1-rec: VLM-R1 JSONL, REC IoU reward and
    format check; v-triune: verl Parquet, per-sample verifiers), not its sampling.

    \b
    Examples:
      curate score --records data/sample/rl/prompts.jsonl --responses rollouts.jsonl --out scored/
      curate score --records rec_train.jsonl --preset vlm-r1-rec --responses answers.jsonl --out scored/
    """
    from curate.core.settings import build_config

    out = values["out"]
    given = settings(values, "records", *CODE_FLAGS)
    config = build_config(ScoreConfig, given, code=code_of(values))
    runner = executor_of(values)
    records = list(values["records"])

    def run() -> None:
        from curate.core.progress import console
        from curate.core.stats import from_stats
        from curate.rl.config import ScoreResult
        from curate.rl.score import score as score_responses

        stats = score_responses(records, config, executor=runner.make())
        r = from_stats(ScoreResult, stats)
        mean = "n/a" if r.overall.mean_reward is None else f"{r.overall.mean_reward:.3f}"
        console.print(f"scored {r.scored:,} of {r.responses_in:,} responses; mean reward {mean}; "
                      f"errored {r.errored or {}}")
        stats_file = f"stats: {out}/stats.json"
        console.print(f"scores: {out}/scores.parquet   " + (f"records: {out}/{stats['scored_file']}   "
                                                            if stats.get("scored_file") else "") + stats_file)

    return Prepared(config, run)


def rl_filter(values: Values) -> Prepared:
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
    from curate.core.settings import build_config

    out = values["out"]
    given = settings(values, "inputs", *CODE_FLAGS, *BACKEND_FLAGS)
    config = build_config(RlFilterConfig, given, backend=backend_of(values), code=code_of(values),
                          **image_limits(values))
    runner = executor_of(values)
    records = list(values["inputs"])

    def run() -> None:
        from curate.core.progress import console
        from curate.core.stats import from_stats
        from curate.rl.filter import rl_filter as filter_prompts
        from curate.rl.config import RlFilterResult

        stats = filter_prompts(records, config, executor=runner.make())
        r = from_stats(RlFilterResult, stats)
        o = r.overall
        fmt = lambda v: "n/a" if v is None else f"{v:.3f}"  # noqa: E731
        console.print(f"kept {r.kept:,} of {r.records_in:,} prompts; dropped {r.dropped or {}}; errored {r.errored or {}}")
        console.print(f"mean reward {fmt(o.mean_reward)}, pass@1 {fmt(o.mean_pass_at_1)}, "
                      f"pass@N {fmt(o.mean_pass_at_n)}, truncation {fmt(o.truncation_rate)}")
        console.print(f"kept: {out}/{stats.get('kept_file', 'kept.jsonl')}   report: {out}/rl_filter.png   stats: {out}/stats.json")

    return Prepared(config, run)


VERBS = {
    "score": Verb("score", None, (
        option("records", type=os.PathLike, multiple=True, required=True,
               help="RL records (JSONL/JSON/Parquet, any layout) holding answer, answer_type, prompt_type. Repeatable."),
        *options_of(ScoreConfig, "responses", "out", "preset", "layout", "reward_method", "progress", "shard_size",
                    "answer_type", "write_records"),
        IMAGE_ROOT, *CODE_OPTIONS, *EXECUTOR_OPTIONS), score),
    "rl-filter": Verb("rl-filter", inputs(), (
        *options_of(RlFilterConfig, "out"), *BACKEND_OPTIONS,
        *options_of(RlFilterConfig, "preset", "layout", "reward_method", "temperature", "top_p", "max_new_tokens", "n",
                    "pass_threshold", "min_gap", "band", "min_reward_std", "thresholds", "prompt_style", "templates",
                    "progress", "shard_size", "answer_type"),
        IMAGE_ROOT, *IMAGE_LIMITS, *CODE_OPTIONS, *EXECUTOR_OPTIONS), rl_filter),
}
