"""``serve-rewards`` (curate/rewards/, curate/rl/): the RL family's one command that is not a verb of values
(``score`` and ``rl-filter`` are made from curate/verbs/rl.py by the group)."""

from __future__ import annotations

from typing import Any

import click

from curate.cli.group import cli
from curate.cli.options import config_options, options
from curate.core.settings import build_config
from curate.rl.config import ServeRewardsConfig
from curate.verbs.rl import CODE_FLAGS, CODE_OPTIONS, code_of


@cli.command("serve-rewards")
@config_options(ServeRewardsConfig, "host", "port", "workers", "pool_workers", "deadline", "token", "max_body_mb",
                "header_timeout", "body_timeout", "max_connections", "max_queued", "log_level")
@options(*CODE_OPTIONS)
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

    config = build_config(ServeRewardsConfig, {k: x for k, x in settings.items() if k not in CODE_FLAGS},
                          code=code_of(settings))
    if config.pool_capped is not None:
        click.echo(f"--pool-workers {config.pool_capped}: capped at {config.pool_workers}, the cores this process may use",
                   err=True)
    click.echo(f"serving rewards on http://{config.host}:{config.port} (POST /score, POST /openrlhf, GET /health); "
               "Ctrl-C to stop", err=True)
    serve(config)
