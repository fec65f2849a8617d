"""Verbs of RL data: ``score``, ``serve-rewards``, ``rl-filter`` (curate/rewards/, curate/rl/)."""

from __future__ import annotations

import click

from curate.cli.group import cli
from curate.cli.options import (executor_options, image_limit_options, image_limits_given, image_root_option,
                                 make_executor)
from curate.core.errors import UserError
from curate.cli.generate_options import (  # shared flags of the generating verbs
    backend_kwargs_from_flags,
    backend_options,
    sampling_dict,
    sampling_from_flags,
    sampling_options,
)
from curate.rl.config import DEFAULT_MAX_BODY_MB, LOG_LEVELS, PROMPT_STYLES, TOKEN_VAR

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


_answer_type_option = click.option(
    "--answer-type", default=None, metavar="TYPE",
    help="answer_type of the records that name no verifier (no answer_type, no reward.verifier), e.g. math for a "
         "set of problem/answer rows; default: such records are errored, each named.")


@cli.command("score")
@click.option("--records", "records", multiple=True, required=True, type=click.Path(path_type=str),
              help="RL records (JSONL/JSON/Parquet, any layout) holding answer, answer_type, prompt_type. Repeatable.")
@click.option("--responses", required=True, type=click.Path(path_type=str),
              help="Responses to score: JSONL or Parquet with id and response (several per id allowed, optional sample).")
@click.option("--out", required=True, type=click.Path(path_type=str), help="Output folder.")
@click.option("--progress", type=float, default=None,
              help="Training progress in [0, 1] for the dynamic IoU threshold of detection rewards.")
@click.option("--shard-size", type=int, default=20_000, show_default=True, help="Responses per shard.")
@_answer_type_option
@_code_options
@executor_options
def score_cmd(out: str, workers: int, executor: str, ray_address: str | None, **settings: object) -> None:
    """Score model responses with the rule-based verifiers (curate.rewards).

    Writes OUT/scores.parquet (id, sample, source, verifier, accuracy, format, reward,
    error) and OUT/stats.json broken down per source and per verifier. Responses
    whose id has no record are kept with the error unknown_id.

    \b
    Example:
      curate score --records data/sample/rl/prompts.jsonl --responses rollouts.jsonl --out scored/
    """
    from curate.core.progress import console
    from curate.core.results import from_stats
    from curate.rl.config import ScoreConfig
    from curate.rl.results import ScoreResult
    from curate.rl.score import score

    config = ScoreConfig(out=out, code=_code(settings), **settings)  # type: ignore[arg-type]  (the flags are the config's fields)
    r = from_stats(ScoreResult, score(config=config, executor=make_executor(executor, workers, ray_address)))
    mean = "n/a" if r.overall.mean_reward is None else f"{r.overall.mean_reward:.3f}"
    console.print(f"scored {r.scored:,} of {r.responses_in:,} responses; mean reward {mean}; "
                  f"errored {r.errored or {}}")
    console.print(f"scores: {out}/scores.parquet   stats: {out}/stats.json")


@cli.command("serve-rewards")
@click.option("--host", default="127.0.0.1", show_default=True, help="Interface to bind (0.0.0.0 to accept remote trainers, with --token).")
@click.option("--port", type=int, default=8000, show_default=True)
@click.option("--workers", type=int, default=1, show_default=True, help="Server processes.")
@click.option("--pool-workers", type=int, default=None,
              help="Verifier worker processes, and code sandboxes, per server process (default and most: the "
                   "cores the process may use).")
@click.option("--deadline", type=float, default=300.0, show_default=True,
              help="Seconds per request; items unfinished by then score 0 with error 'deadline'.")
@click.option("--token", default=None, metavar="SECRET",
              help=f"Bearer token every request must carry (Authorization: Bearer SECRET, or ?token=SECRET for "
                   f"clients that cannot set headers); default: {TOKEN_VAR}. Required with a --host other than loopback.")
@click.option("--max-body-mb", type=float, default=DEFAULT_MAX_BODY_MB, show_default=True,
              help="Largest request body; larger ones get HTTP 413.")
@click.option("--log-level", default="warning", show_default=True,
              type=click.Choice(LOG_LEVELS))
@_code_options
def serve_rewards_cmd(**settings: object) -> None:
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
    from curate.rl.config import ServeRewardsConfig
    from curate.rl.serve import serve

    config = ServeRewardsConfig(code=_code(settings), **settings)  # type: ignore[arg-type]  (the flags are the config's fields)
    if config.pool_capped is not None:
        click.echo(f"--pool-workers {config.pool_capped}: capped at {config.pool_workers}, the cores this process may use",
                   err=True)
    click.echo(f"serving rewards on http://{config.host}:{config.port} (POST /score, POST /openrlhf, GET /health); "
               "Ctrl-C to stop", err=True)
    serve(config)


def _band(value: str | None) -> tuple[float, float] | None:
    if value is None:
        return None
    try:
        lo, hi = (float(x) for x in value.split(","))
    except ValueError:
        raise UserError(f"--band must be LO,HI (two numbers), got {value!r}") from None
    return lo, hi


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
@click.option("--prompt-style", type=click.Choice(PROMPT_STYLES), default=None,
              help="Force a prompt style (default: each record's prompt_type; normal = answer-only).")
@click.option("--templates", type=click.Path(path_type=str), default=None,
              help="YAML/JSON {normal: ..., think: ...} prompt templates containing {problem}.")
@click.option("--progress", "train_progress", type=float, default=None,
              help="Training progress in [0, 1] for the dynamic IoU threshold of detection rewards.")
@click.option("--shard-size", type=int, default=1000, show_default=True, help="Prompts per shard.")
@_answer_type_option
@image_root_option
@image_limit_options
@_code_options
@executor_options
def rl_filter_cmd(inputs: tuple[str, ...], out: str, n: int, pass_threshold: float | None, min_gap: float | None,
                  band: str | None, thresholds: str | None, prompt_style: str | None, templates: str | None,
                  train_progress: float | None, shard_size: int, answer_type: str | None, image_root: str | None,
                  seed: int, workers: int, executor: str, ray_address: str | None, **flags: object) -> None:
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
    from curate.core.results import from_stats
    from curate.rl.config import RlFilterConfig
    from curate.rl.results import RlFilterResult
    from curate.rl.filter import rl_filter

    config = RlFilterConfig(out=out, backend=backend_kwargs_from_flags(flags), n=n,
                            sampling=sampling_dict(sampling_from_flags(flags, seed=seed)), prompt_style=prompt_style,
                            templates=templates, thresholds=thresholds, pass_threshold=pass_threshold,
                            min_gap=min_gap, band=_band(band), progress=train_progress, seed=seed,
                            shard_size=shard_size, image_root=image_root, answer_type=answer_type,
                            code=_code(flags), **image_limits_given())
    r = from_stats(RlFilterResult, rl_filter(list(inputs), config=config,
                                             executor=make_executor(executor, workers, ray_address)))
    o = r.overall
    fmt = lambda v: "n/a" if v is None else f"{v:.3f}"  # noqa: E731
    console.print(f"kept {r.kept:,} of {r.records_in:,} prompts; dropped {r.dropped or {}}; errored {r.errored or {}}")
    console.print(f"mean reward {fmt(o.mean_reward)}, pass@1 {fmt(o.mean_pass_at_1)}, "
                  f"pass@N {fmt(o.mean_pass_at_n)}, truncation {fmt(o.truncation_rate)}")
    console.print(f"kept: {out}/kept.jsonl   report: {out}/rl_filter.png   stats: {out}/stats.json")
