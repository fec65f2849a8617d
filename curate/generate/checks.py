"""Checks of the generation settings, run when a step's config is built (before any model loads)."""

from __future__ import annotations

import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from curate.core import validate as v
from curate.core.limits import MAX_THREADS
from curate.core.errors import UserError

#: Options each backend takes (beside the one of ``model``/``endpoint``/``rollouts`` that names it).
BACKEND_OPTIONS = {
    "transformers": {"device", "dtype", "batch_size", "trust_remote_code", "chat_template_kwargs", "max_image_pixels",
                     "max_image_bytes", "max_prompt_tokens"},
    "openai": {"api_key", "concurrency", "timeout", "max_retries", "backoff", "backoff_max", "n_per_call",
               "send_seed", "extra_body", "max_image_pixels", "max_image_bytes",
               "max_consecutive_failures"},
    "rollouts": {"rollouts_version"},
}
DTYPES = ("auto", "float32", "bfloat16", "float16", "float64")
#: Bounds of flags whose cost grows with their value: answer tokens, prompts per generate call, retries of a call.
MAX_NEW_TOKENS, MAX_BATCH, MAX_RETRIES = 1 << 17, 4096, 100


def backend_kind(model: str | None = None, endpoint: str | None = None, served_model: str | None = None,
                 rollouts: str | None = None, **options: Any) -> str:
    """``transformers``, ``openai`` or ``rollouts``: the backend these settings name; checks them.

    Raises:
        UserError: none or several of model/endpoint/rollouts, an option of another backend,
            or an option out of range (named by its flag).
    """
    chosen = [name for name, value in (("--model", model), ("--endpoint", endpoint), ("--rollouts", rollouts))
              if value]
    if len(chosen) != 1:
        what = "none was given" if not chosen else f"got {' and '.join(chosen)}"
        raise UserError(f"give exactly one of --model ckpt/, --endpoint URL or --rollouts FILE ({what})")
    kind = {"--model": "transformers", "--endpoint": "openai", "--rollouts": "rollouts"}[chosen[0]]
    options = {k: val for k, val in options.items() if val is not None}
    if served_model is not None and kind != "openai":
        raise UserError("--served-model goes with --endpoint")
    wrong = sorted(set(options) - BACKEND_OPTIONS[kind])
    if wrong:
        flags = ", ".join("--" + w.replace("_", "-") for w in wrong)
        raise UserError(f"{flags} cannot be used with {chosen[0]} (the {kind} backend)")
    v.at_least("--batch-size", options.get("batch_size"), 1)
    v.at_most("--batch-size", options.get("batch_size"), MAX_BATCH, "prompts per generate call")
    v.at_least("--concurrency", options.get("concurrency"), 1)
    v.at_most("--concurrency", options.get("concurrency"), MAX_THREADS, "a thread per call in flight")
    v.above("--timeout", options.get("timeout"), 0)
    v.at_least("--max-retries", options.get("max_retries"), 0)
    v.at_most("--max-retries", options.get("max_retries"), MAX_RETRIES)
    v.at_least("--max-consecutive-failures", options.get("max_consecutive_failures"), 1)
    if "dtype" in options:
        v.one_of("--dtype", options["dtype"], DTYPES)
    if kind == "openai" and not str(endpoint).startswith(("http://", "https://")):
        raise UserError(f"--endpoint {endpoint}: give an http(s) URL such as http://127.0.0.1:8000/v1")
    if kind == "transformers" and "://" not in str(model) and not Path(str(model)).is_dir():
        raise UserError(f"--model {model}: no such checkpoint folder; give a local checkpoint folder")
    if kind == "rollouts" and "://" not in str(rollouts) and not Path(str(rollouts)).is_file():
        raise UserError(f"--rollouts {rollouts}: no such file")
    return kind


def check_backend(backend: Mapping[str, Any]) -> None:
    """Check :func:`curate.generate.make_backend` keyword arguments (see :func:`backend_kind`)."""
    backend_kind(**dict(backend))


def check_sampling(sampling: Mapping[str, Any] | None) -> None:
    """``temperature`` (finite, >= 0), ``top_p`` (in (0, 1]) and ``max_new_tokens`` (>= 1), named by flag."""
    s = dict(sampling or {})
    unknown = sorted(set(s) - {"temperature", "top_p", "max_new_tokens", "seed"})
    if unknown:
        raise UserError(f"sampling: unknown setting(s) {', '.join(unknown)}")
    t = s.get("temperature")
    if t is not None and not (math.isfinite(t) and t >= 0):
        raise UserError(f"--temperature must be a finite number >= 0 (0: greedy), got {t}")
    p = s.get("top_p")
    if p is not None and not 0 < p <= 1:
        raise UserError(f"--top-p must be within (0, 1], got {p}")
    v.at_least("--max-new-tokens", s.get("max_new_tokens"), 1)
    v.at_most("--max-new-tokens", s.get("max_new_tokens"), MAX_NEW_TOKENS, "an answer's length; the model's context "
              "is far shorter")
