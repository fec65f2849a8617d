"""The options of the verbs that generate (``rl-filter``, ``recaption``): the fields of
:class:`~curate.generate.settings.BackendSettings` (where their help is written), with ``--api-key`` also read from
:data:`~curate.generate.settings.API_KEY_VAR` and ``--trust-remote-code`` a flag left None when not given."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from curate.core.settings import SettingInfo
from curate.generate.settings import API_KEY_VAR, BackendSettings
from curate.verbs import field_option, options_of

#: The backend's options, in ``--help`` order.
BACKEND_OPTIONS: tuple[SettingInfo, ...] = (
    *options_of(BackendSettings, "model", "endpoint", "served_model", "rollouts", "rollouts_version", "device", "dtype",
                "batch_size"),
    field_option(BackendSettings, "trust_remote_code", is_flag=True),
    *options_of(BackendSettings, "concurrency", "timeout", "max_retries", "max_consecutive_failures"),
    field_option(BackendSettings, "api_key", envvar=API_KEY_VAR),
)
#: The names of the backend's options (the fields of :class:`BackendSettings`).
BACKEND_FLAGS = tuple(f.name for f in dataclasses.fields(BackendSettings))


def backend_of(values: Mapping[str, Any]) -> BackendSettings:
    """The :class:`BackendSettings` of a verb's backend options."""
    return BackendSettings(**{name: values[name] for name in BACKEND_FLAGS if name in values})
