"""Verbs of RL data: ``score``, ``serve-rewards``, ``rl-filter`` (curate/rewards/, curate/rl/)."""

from __future__ import annotations

from typing import Any

import click

from curate.cli.group import cli
from curate.cli.generate_options import backend_from_flags, backend_options
from curate.cli.options import (Prepared, config_options, executor_options, image_limit_options, image_limits_given,
                                image_root_option, make_executor)
from curate.rl.config import RlFilterConfig, ScoreConfig, ServeRewardsConfig
from curate.core.settings import build_config

_CODE_FLAGS = ("code_cpu_seconds", "code_wall_seconds", "code_memory_mb", "trust_code")


def _code_options(f):  # type: ignore[no-untyped-def]
    """The flags of model-written code: the limits' ceilings (records may only lower them) and --trust-code."""
    f = click.option("--trust-code", is_flag=True, default=False,
                     help="Run model-written programs even where no sandbox can start (bubblewrap missing): "
                          "WITHOUT isolation from this machine. Recorded in stats.json. Default: such "
                          "responses score 0 with error sandbox_unavailable.")(f)
    f = click.option("--code-memory-mb", type=int, default=None,
                     help="Memory (address space) of one test's process, MB [default: 512, or CURATE_CODE_MEMORY_MB].")(f)
    f = click.option("--code-wall-seconds", type=float, default=None,
                     help="Wall seconds of one response's program over all its tests [default: 10].")(f)
    return click.option("--code-cpu-seconds", type=float, default=None,
                        help="CPU seconds of one response's program over all its tests [default: 5]; "
                             "a record's reward.parameters may lower these limits, never raise them.")(f)


def _code(flags: dict) -> object:
    """The :class:`CodeSandbox` of the code flags (popped from ``flags``), over the environment's defaults."""
    from curate.rewards.runtime.sandbox import CodeSandbox

    given = {name: flags.pop(name, None) for name in _CODE_FLAGS}
    return CodeSandbox.from_env(cpu_seconds=given["code_cpu_seconds"], wall_seconds=given["code_wall_seconds"],
                                memory_mb=given["code_memory_mb"], trust_code=True if given["trust_code"] else None)


@cli.command("score")
@click.option("--records", "records", multiple=True, required=True, type=click.Path(path_type=str),
              help="RL records (JSONL/JSON/Parquet, any layout) holding answer, answer_type, prompt_type. Repeatable.")
@config_options(ScoreConfig, "responses", "out", "preset", "layout", "reward_method", "progress", "shard_size",
                "answer_type", "write_records")
@image_root_option
@_code_options
@executor_options
def score_cmd(records: tuple[str, ...], out: str, workers: int, executor: str, ray_address: str | None,
              **settings: Any) -> Prepared:
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
    from curate.core.progress import console
    from curate.core.stats import from_stats
    from curate.rl.config import ScoreResult
    from curate.rl.score import score

    config = build_config(ScoreConfig, settings, out=out, code=_code(settings))
    runner = make_executor(executor, workers, ray_address)

    def run() -> None:
        stats = score(list(records), config, executor=runner)
        r = from_stats(ScoreResult, stats)
        mean = "n/a" if r.overall.mean_reward is None else f"{r.overall.mean_reward:.3f}"
        console.print(f"scored {r.scored:,} of {r.responses_in:,} responses; mean reward {mean}; "
                      f"errored {r.errored or {}}")
        stats_file = f"stats: {out}/stats.json"
        console.print(f"scores: {out}/scores.parquet   " + (f"records: {out}/{stats['scored_file']}   "
                                                            if stats.get("scored_file") else "") + stats_file)

    return Prepared(config, run)


@cli.command("serve-rewards")
@config_options(ServeRewardsConfig, "host", "port", "workers", "pool_workers", "deadline", "token", "max_body_mb",
                "header_timeout", "body_timeout", "max_connections", "max_queued", "log_level")
@_code_options
def serve_rewards_cmd(**settings: Any) -> None:
    """Serve the reward verifiers over HTTP for RL trainers.

    \b
    GET  /health
    POST /score  {"items": [{"record": {...}, "response": "..."}, ...], "progress": null}
              -> {"results": [{"accuracy", "format", "reward", "error", "verifier"}, ...]}
    POST /openrlhf  OpenRLHF's remote reward protocol (--remote_rm_url http://HOST:PORT/openrlhf):
              {"query": [...], "prompts": [...], "labels": [...]} -> {"rewards", "scores", "extra_logs"}
              labels: records {"answer", "answer_type", ...} (or their JSON), or bare golds with
              ?answer_type=TYPE in the URL
    A malformed request gets HTTP 422 with a readable message. Items a request has not
    finished after --deadline seconds score 0 with error "deadline".
    """
    from curate.rl.serve import serve

    config = build_config(ServeRewardsConfig, settings, code=_code(settings))
    if config.pool_capped is not None:
        click.echo(f"--pool-workers {config.pool_capped}: capped at {config.pool_workers}, the cores this process may use",
                   err=True)
    click.echo(f"serving rewards on http://{config.host}:{config.port} (POST /score, POST /openrlhf, GET /health); "
               "Ctrl-C to stop", err=True)
    serve(config)


@cli.command("rl-filter")
@click.argument("inputs", nargs=-1, required=True, type=click.Path(path_type=str))
@config_options(RlFilterConfig, "out")
@backend_options
@config_options(RlFilterConfig, "preset", "layout", "reward_method", "temperature", "top_p", "max_new_tokens", "n",
                "pass_threshold", "min_gap", "band", "min_reward_std", "thresholds", "prompt_style", "templates",
                "progress", "shard_size", "answer_type")
@image_root_option
@image_limit_options
@_code_options
@executor_options
def rl_filter_cmd(inputs: tuple[str, ...], out: str, workers: int, executor: str, ray_address: str | None,
                  **settings: Any) -> Prepared:
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
    from curate.core.progress import console
    from curate.core.stats import from_stats
    from curate.rl.filter import rl_filter
    from curate.rl.config import RlFilterResult

    backend = backend_from_flags(settings)
    config = build_config(RlFilterConfig, settings, out=out, backend=backend, code=_code(settings),
                          **image_limits_given())
    runner = make_executor(executor, workers, ray_address)

    def run() -> None:
        stats = rl_filter(list(inputs), config, executor=runner)
        r = from_stats(RlFilterResult, stats)
        o = r.overall
        fmt = lambda v: "n/a" if v is None else f"{v:.3f}"  # noqa: E731
        console.print(f"kept {r.kept:,} of {r.records_in:,} prompts; dropped {r.dropped or {}}; errored {r.errored or {}}")
        console.print(f"mean reward {fmt(o.mean_reward)}, pass@1 {fmt(o.mean_pass_at_1)}, "
                      f"pass@N {fmt(o.mean_pass_at_n)}, truncation {fmt(o.truncation_rate)}")
        console.print(f"kept: {out}/{stats.get('kept_file', 'kept.jsonl')}   report: {out}/rl_filter.png   stats: {out}/stats.json")

    return Prepared(config, run)
