"""Click flags shared by the verbs that generate (``curate rl-filter``, ``curate recaption``), made from their settings.

Usage in a verb::

    @cli.command("recaption")
    @backend_options
    @config_options(RecaptionConfig, "temperature", "top_p", "max_new_tokens")
    def recaption_cmd(..., **flags):
        config = RecaptionConfig(backend=backend_from_flags(flags), ...)

The backend flags are the fields of :class:`curate.generate.settings.BackendSettings` (where their help is written),
plus ``--api-key``, which also reads ``CURATE_API_KEY``, and ``--trust-remote-code``, a flag left None when not given. :func:`curate.cli.options.setting_option` offers a setting that
:func:`curate.cli.options.config_options` cannot make (a repeatable option, an environment variable) with the
flag and help of its field.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

from curate.cli.options import config_options, setting_option
from curate.generate.settings import API_KEY_VAR, BackendSettings

#: The parameter names of the backend flags (the fields of :class:`BackendSettings`).
BACKEND_FLAGS = tuple(f.name for f in dataclasses.fields(BackendSettings))


def backend_options(fn: Callable[..., Any]) -> Callable[..., Any]:
    """Add the backend flags (``--model``/``--endpoint``/``--rollouts`` and their settings)."""
    fn = setting_option(BackendSettings, "api_key", default=None, envvar=API_KEY_VAR, show_envvar=True)(fn)
    fn = config_options(BackendSettings, "concurrency", "timeout", "max_retries", "max_consecutive_failures")(fn)
    fn = setting_option(BackendSettings, "trust_remote_code", is_flag=True, default=None)(fn)
    return config_options(BackendSettings, "model", "endpoint", "served_model", "rollouts", "rollouts_version",
                          "device", "dtype", "batch_size")(fn)


def backend_from_flags(flags: dict[str, Any]) -> BackendSettings:
    """The :class:`BackendSettings` of a verb's backend flags, taken out of ``flags``."""
    return BackendSettings(**{name: flags.pop(name) for name in BACKEND_FLAGS if name in flags})
