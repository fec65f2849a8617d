"""Click flags shared by the verbs that generate (``curate rl-filter``, ``curate recaption``).

Usage in a verb::

    @cli.command("recaption")
    @backend_options
    @sampling_options(temperature=0.7, max_new_tokens=512)
    def recaption_cmd(..., **flags):
        backend_kwargs = backend_kwargs_from_flags(flags)   # → make_backend(**backend_kwargs)
        sampling = sampling_from_flags(flags)               # → SamplingParams

Backend flags default to None so that :func:`curate.generate.make_backend` can
tell which ones the user gave (and refuse, say, ``--device`` with ``--endpoint``);
the backends own the defaults shown in ``--help``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import click

from curate.core.errors import UserError
from curate.generate.base import SamplingParams
from curate.generate.checks import DTYPES, check_sampling

BACKEND_FLAGS = ("model", "endpoint", "served_model", "rollouts", "rollouts_version", "device", "dtype",
                 "batch_size", "trust_remote_code", "concurrency", "timeout", "max_retries", "api_key",
                 "max_consecutive_failures")
SAMPLING_FLAGS = ("temperature", "top_p", "max_new_tokens", "seed")


def backend_options(fn: Callable[..., Any]) -> Callable[..., Any]:
    """Add the backend flags (``--model``/``--endpoint``/``--rollouts`` and their settings)."""
    opts = [
        click.option("--model", metavar="CKPT", default=None,
                     help="Local checkpoint folder (transformers backend: AutoProcessor + AutoModelForImageTextToText)."),
        click.option("--endpoint", metavar="URL", default=None,
                     help="OpenAI-compatible server (vLLM, SGLang, transformers serve), e.g. http://127.0.0.1:8000/v1."),
        click.option("--served-model", metavar="NAME", default=None,
                     help="Model name to request from --endpoint (default: the server's only model)."),
        click.option("--rollouts", metavar="FILE", default=None, type=click.Path(path_type=str),
                     help="JSONL/Parquet of answers generated elsewhere (id, response, [truncated, version, sample]); "
                          "a local file or a bucket URL."),
        click.option("--rollouts-version", metavar="V", default=None,
                     help="Version to read from --rollouts when it holds several (default: the latest, natural order)."),
        click.option("--device", default=None, metavar="DEV",
                     help="--model device: auto, cpu, cuda or cuda:N.  [default: auto]"),
        click.option("--dtype", type=click.Choice(DTYPES), default=None,
                     help="--model weights dtype (auto: bfloat16 on CUDA, float32 on CPU; float64: answers independent of "
                          "the batch).  [default: auto]"),
        click.option("--batch-size", type=int, default=None,
                     help="--model: prompts per generate call (rows = prompts x samples).  [default: 8]"),
        click.option("--trust-remote-code", is_flag=True, default=None,
                     help="--model: allow checkpoints that ship their own modelling code."),
        click.option("--concurrency", type=int, default=None,
                     help="--endpoint: calls in flight at once.  [default: 8]"),
        click.option("--timeout", type=float, default=None,
                     help="--endpoint: seconds per call before it counts as a timeout.  [default: 600]"),
        click.option("--max-retries", type=int, default=None,
                     help="--endpoint: retries of a call that timed out, lost its connection or got 429/5xx.  [default: 5]"),
        click.option("--max-consecutive-failures", type=int, default=None,
                     help="--endpoint: failed calls in a row after which the server is taken for down and the "
                          "run stops (resumable).  [default: 20]"),
        click.option("--api-key", default=None, envvar="CURATE_API_KEY", show_envvar=True,
                     help="--endpoint: bearer token, if the server needs one."),
    ]
    for opt in reversed(opts):
        fn = opt(fn)
    return fn


def sampling_options(*, temperature: float = 1.0, top_p: float = 1.0,
                     max_new_tokens: int = 1024) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Add ``--temperature``, ``--top-p`` and ``--max-new-tokens`` with a verb's own defaults."""

    def deco(fn: Callable[..., Any]) -> Callable[..., Any]:
        fn = click.option("--max-new-tokens", type=int, default=max_new_tokens, show_default=True,
                          help="Longest answer in tokens; longer answers are cut and counted as truncated.")(fn)
        fn = click.option("--top-p", type=float, default=top_p, show_default=True, help="Nucleus sampling mass.")(fn)
        fn = click.option("--temperature", type=float, default=temperature, show_default=True,
                          help="Sampling temperature (0: greedy).")(fn)
        return fn

    return deco


def backend_kwargs_from_flags(flags: dict[str, Any]) -> dict[str, Any]:
    """The :func:`curate.generate.make_backend` keyword arguments from a verb's flags.

    Unset flags (None, or False for ``--trust-remote-code``) are left out; the API
    key (which may come from the environment) is passed only with ``--endpoint``.
    """
    out = {k: flags.get(k) for k in BACKEND_FLAGS if flags.get(k) is not None}
    if out.get("trust_remote_code") is False:
        out.pop("trust_remote_code")
    if not out.get("endpoint"):
        out.pop("api_key", None)
    return out


def sampling_from_flags(flags: dict[str, Any], *, seed: int | None = None) -> SamplingParams:
    """:class:`SamplingParams` from ``--temperature``, ``--top-p``, ``--max-new-tokens`` and ``--seed``.

    Raises:
        UserError: a value out of range, named by its flag.
    """
    check_sampling({k: flags[k] for k in ("temperature", "top_p", "max_new_tokens")})
    try:
        return SamplingParams(temperature=float(flags["temperature"]), top_p=float(flags["top_p"]),
                              max_new_tokens=int(flags["max_new_tokens"]),
                              seed=int(seed if seed is not None else flags.get("seed", 0)))
    except ValueError as exc:
        name = str(exc).split(" ", 1)[0]
        raise UserError(f"--{name.replace('_', '-')}: {exc}") from None


def sampling_dict(sampling: SamplingParams) -> dict[str, Any]:
    """The ``sampling`` setting of a step's config (its seed is the step's ``--seed``)."""
    return {"temperature": sampling.temperature, "top_p": sampling.top_p, "max_new_tokens": sampling.max_new_tokens}
