"""The settings every generating verb shares (``recaption``, ``rl-filter``), declared once.

:class:`BackendSettings` holds the backend flags (``--model``/``--endpoint``/``--rollouts`` and their options); a
verb's config takes it as its ``backend`` and keeps :meth:`BackendSettings.kwargs`. The sampling settings
(``--temperature``, ``--top-p``, ``--max-new-tokens``) are fields of each verb's config, made by
:func:`temperature_setting`, :func:`top_p_setting` and :func:`max_new_tokens_setting` so that their help is
written here once while each verb keeps its own default.

Backend settings default to None so that :func:`curate.generate.make_backend` can tell which ones were given (and
refuse, say, ``--device`` with ``--endpoint``); the backends own the defaults the help states.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, fields
from typing import Any

from curate.core.settings import setting
from curate.generate.checks import DTYPES

#: The environment variable ``--api-key`` falls back on.
API_KEY_VAR = "CURATE_API_KEY"


@dataclass(frozen=True)
class BackendSettings:
    """Which generation backend a verb asks, and its options (:func:`curate.generate.make_backend`)."""

    model: str | None = setting(
        None, metavar="CKPT",
        help="Local checkpoint folder (transformers backend: AutoProcessor + AutoModelForImageTextToText).")
    endpoint: str | None = setting(
        None, metavar="URL",
        help="OpenAI-compatible server (vLLM, SGLang, transformers serve), e.g. http://127.0.0.1:8000/v1.")
    served_model: str | None = setting(
        None, metavar="NAME", help="Model name to request from --endpoint (default: the server's only model).")
    rollouts: str | os.PathLike[str] | None = setting(
        None, metavar="FILE",
        help="JSONL/Parquet of answers generated elsewhere (id, response, [truncated, version, sample]); "
             "a local file or a bucket URL.")
    rollouts_version: str | None = setting(
        None, metavar="V",
        help="Version to read from --rollouts when it holds several (default: the latest, natural order).")
    device: str | None = setting(None, metavar="DEV",
                                 help="--model device: auto, cpu, cuda or cuda:N.  [default: auto]")
    dtype: str | None = setting(
        None, choices=DTYPES,
        help="--model weights dtype (auto: bfloat16 on CUDA, float32 on CPU; float64: answers independent of "
             "the batch).  [default: auto]")
    batch_size: int | None = setting(
        None, help="--model: prompts per generate call (rows = prompts x samples).  [default: 8]")
    #: Offered by hand: a flag whose unset value is None (so a recipe records ``null``, as it always has).
    trust_remote_code: bool | None = setting(None, cli=False,
                                             help="--model: allow checkpoints that ship their own modelling code.")
    concurrency: int | None = setting(None, help="--endpoint: calls in flight at once.  [default: 8]")
    timeout: float | None = setting(
        None, help="--endpoint: seconds per call before it counts as a timeout.  [default: 600]")
    max_retries: int | None = setting(
        None, help="--endpoint: retries of a call that timed out, lost its connection or got 429/5xx.  [default: 5]")
    max_consecutive_failures: int | None = setting(
        None, help="--endpoint: failed calls in a row after which the server is taken for down and the "
                   "run stops (resumable).  [default: 20]")
    #: Offered with :data:`API_KEY_VAR` as its fallback (:data:`curate.verbs.generate.BACKEND_OPTIONS`).
    api_key: str | None = setting(None, cli=False, help="--endpoint: bearer token, if the server needs one.")

    def kwargs(self) -> dict[str, Any]:
        """The :func:`curate.generate.make_backend` keyword arguments: the settings given (not None, and
        ``trust_remote_code`` only when true); the API key (which may come from the environment) only with an
        endpoint."""
        out = {f.name: getattr(self, f.name) for f in fields(self) if getattr(self, f.name) is not None}
        if out.get("trust_remote_code") is False:
            out.pop("trust_remote_code")
        if not out.get("endpoint"):
            out.pop("api_key", None)
        return out


def temperature_setting(default: float) -> Any:
    """The ``temperature`` field of a generating verb's config, with that verb's default."""
    return setting(default, help="Sampling temperature (0: greedy).")


def top_p_setting(default: float) -> Any:
    """The ``top_p`` field of a generating verb's config, with that verb's default."""
    return setting(default, help="Nucleus sampling mass.")


def max_new_tokens_setting(default: int) -> Any:
    """The ``max_new_tokens`` field of a generating verb's config, with that verb's default."""
    return setting(default, tokens=True,
                   help="Longest answer in tokens (512, 1k...); longer answers are cut and counted as truncated.")


def sampling_of(config: Any) -> dict[str, Any]:
    """The :class:`~curate.generate.base.SamplingParams` fields of a generating verb's config (its seed first)."""
    return {"seed": config.seed, "temperature": config.temperature, "top_p": config.top_p,
            "max_new_tokens": config.max_new_tokens}


def backend_of(backend: BackendSettings | Any) -> dict[str, Any]:
    """A config's ``backend`` as :func:`curate.generate.make_backend` keyword arguments (a mapping is kept as is)."""
    return backend.kwargs() if isinstance(backend, BackendSettings) else dict(backend or {})
