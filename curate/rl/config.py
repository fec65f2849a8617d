"""The settings of the RL verbs (``rl-filter``, ``score``, ``serve-rewards``), checked on construction.

A verb builds one of these from its flags and passes it down; every
``__post_init__`` refuses a bad value with one line naming the flag before any
model loads, any response is read or any port is bound. The choices the CLI
offers (``PROMPT_STYLES``, ``LOG_LEVELS``) are defined once, here or in the
module they belong to.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from curate.core import validate as v
from curate.core.errors import UserError
from curate.core.location import Location, locations
from curate.core.record_limits import ImageReading
from curate.generate.checks import check_backend, check_sampling
from curate.rewards.format import PROMPT_TYPES
from curate.rewards.runtime.sandbox import CodeSandbox
from curate.rl.selection import load_thresholds

PathLike = str | os.PathLike[str]

PROMPT_STYLES = PROMPT_TYPES  # --prompt-style: normal (answer only) or think
LOG_LEVELS = ("critical", "error", "warning", "info", "debug")
TOKEN_VAR = "CURATE_REWARD_TOKEN"  # serve-rewards --token, when not given on the command line
DEFAULT_MAX_BODY_MB = 64.0
LOOPBACK = ("127.0.0.1", "::1", "localhost")
MAX_N = 1024  #: --n at most (pass@N of RL filters is taken over 8 to 32 answers)


def _progress(value: float | None) -> None:
    if value is not None and not 0.0 <= value <= 1.0:
        raise UserError(f"--progress must be a training fraction within [0, 1], got {value}")


@dataclass(frozen=True)
class RlFilterConfig(ImageReading):
    """Settings of ``curate rl-filter`` (see :func:`curate.rl.filter.rl_filter`).

    Attributes:
        out: Output folder.
        backend: :func:`curate.generate.make_backend` keyword arguments.
        n: Answers sampled per prompt.
        sampling: ``temperature``, ``top_p``, ``max_new_tokens`` (the seed is ``seed``).
        prompt_style: Force ``normal`` or ``think`` (default: each record's ``prompt_type``).
        templates: YAML/JSON prompt templates file.
        thresholds: YAML/JSON per-source thresholds file.
        pass_threshold, min_gap, band: Default selection thresholds (None: the built-ins).
        progress: Training progress in [0, 1] for the dynamic IoU threshold.
        seed: Seed of the sampling.
        shard_size: Prompts per shard.
        plot: Write ``rl_filter.png``.
        answer_type: The ``answer_type`` of records that name no verifier (default: they are errored).
        image_root: Folder (or bucket prefix) relative image paths start from (default: each input file's own).
        code: How model-written programs run: the limits' ceilings and ``--trust-code``.
        max_image_bytes, max_image_pixels, max_images: What one prompt may cost in images
            (:class:`curate.core.record_limits.ImageReading`).
    """

    out: Location | PathLike
    backend: Mapping[str, Any] = field(default_factory=dict)
    n: int = 16
    sampling: Mapping[str, Any] | None = None
    prompt_style: str | None = None
    templates: Location | PathLike | None = None
    thresholds: Location | PathLike | None = None
    pass_threshold: float | None = None
    min_gap: float | None = None
    band: tuple[float, float] | None = None
    progress: float | None = None
    seed: int = 0
    shard_size: int = 1000
    plot: bool = True
    image_root: Location | PathLike | None = None
    answer_type: str | None = None
    code: CodeSandbox = field(default_factory=CodeSandbox.from_env)

    def __post_init__(self) -> None:
        locations(self, {"out": "--out", "templates": "--templates", "thresholds": "--thresholds",
                         "image_root": "--image-root"})
        v.out_dir("--out", self.out)
        v.in_dir("--image-root", self.image_root)
        self.check_image_reading()
        _answer_type(self.answer_type)
        v.at_least("--n", self.n, 1)
        v.at_most("--n", self.n, MAX_N, "answers sampled, held and scored per prompt")
        if self.prompt_style is not None:
            v.one_of("--prompt-style", self.prompt_style, PROMPT_STYLES)
        v.in_file("--templates", self.templates)
        v.within("--pass-threshold", self.pass_threshold, 0.0, 1.0)
        v.finite("--min-gap", self.min_gap)
        if self.band is not None:
            lo, hi = self.band
            v.finite("--band", lo)
            v.finite("--band", hi)
            if self.thresholds is None and not lo < hi:
                raise UserError(f"--band {lo},{hi}: give LO,HI with LO < HI, e.g. 0.0,0.6")
        _progress(self.progress)
        v.at_least("--shard-size", self.shard_size, 1)
        self.selection()
        check_sampling(self.sampling)
        check_backend(self.backend)

    def selection(self) -> tuple[Any, dict[str, Any]]:
        """The default and per-source :class:`curate.rl.selection.Thresholds` (reads ``thresholds``)."""
        return load_thresholds(self.thresholds, {"pass_threshold": self.pass_threshold, "min_gap": self.min_gap,
                                                 "band": list(self.band) if self.band else None})


@dataclass(frozen=True)
class ScoreConfig:
    """Settings of ``curate score`` (see :func:`curate.rl.score.score`); ``code``: how programs run."""

    records: Sequence[Location | PathLike]
    responses: Location | PathLike
    out: Location | PathLike
    progress: float | None = None
    seed: int = 0
    shard_size: int = 20_000
    answer_type: str | None = None
    code: CodeSandbox = field(default_factory=CodeSandbox.from_env)

    def __post_init__(self) -> None:
        _answer_type(self.answer_type)
        if isinstance(self.records, (str, os.PathLike)):
            object.__setattr__(self, "records", (self.records,))
        locations(self, {"records": "--records", "responses": "--responses", "out": "--out"})
        if not self.records:
            raise UserError("--records: give at least one RL records file")
        for path in self.records:
            v.in_path("--records", path)
        v.in_file("--responses", self.responses)
        v.out_dir("--out", self.out)
        _progress(self.progress)
        v.at_least("--shard-size", self.shard_size, 1)


@dataclass(frozen=True)
class ServeRewardsConfig:
    """Settings of ``curate serve-rewards`` (see :func:`curate.rl.serve.serve`).

    ``token`` (else :data:`TOKEN_VAR`) is the bearer token every request must carry; it is required
    when ``host`` is not a loopback address. ``max_body_mb``: larger request bodies get HTTP 413.
    ``pool_workers`` above the cores this process may use is brought down to them (:attr:`pool_capped`
    says from what). ``code``: how programs run.
    """

    host: str = "127.0.0.1"
    port: int = 8000
    workers: int = 1
    pool_workers: int | None = None
    log_level: str = "warning"
    deadline: float | None = None
    token: str | None = field(default=None, repr=False)
    max_body_mb: float = DEFAULT_MAX_BODY_MB
    code: CodeSandbox = field(default_factory=CodeSandbox.from_env)
    pool_capped: int | None = field(default=None, init=False)

    def __post_init__(self) -> None:
        from curate.core.threads import available_cpus

        if not self.host:
            raise UserError("--host: give an interface to bind, e.g. 127.0.0.1 or 0.0.0.0")
        if not 1 <= self.port <= 65535:
            raise UserError(f"--port {self.port}: a TCP port is between 1 and 65535")
        v.at_least("--workers", self.workers, 1)
        v.at_least("--pool-workers", self.pool_workers, 1)
        v.one_of("--log-level", self.log_level, LOG_LEVELS)
        v.above("--deadline", self.deadline, 0)
        v.above("--max-body-mb", self.max_body_mb, 0)
        if self.token is None and os.environ.get(TOKEN_VAR):
            object.__setattr__(self, "token", os.environ[TOKEN_VAR])
        if self.token is not None and (len(self.token) < 16 or any(c.isspace() for c in self.token)):
            raise UserError("--token: give at least 16 characters without spaces, e.g. the output of "
                            "python -c 'import secrets; print(secrets.token_urlsafe())'")
        if self.token is None and not is_loopback(self.host):
            raise UserError(f"--host {self.host} accepts connections from other machines: give a bearer token "
                            f"(--token or {TOKEN_VAR}) that clients send, or bind 127.0.0.1")
        cores = available_cpus()
        if self.pool_workers is not None and self.pool_workers > cores:
            object.__setattr__(self, "pool_capped", self.pool_workers)
            object.__setattr__(self, "pool_workers", cores)


def is_loopback(host: str) -> bool:
    """Whether ``host`` names this machine only (127.0.0.0/8, ::1, localhost)."""
    import ipaddress

    if host.strip().lower() in LOOPBACK:
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def _answer_type(answer_type: str | None) -> None:
    """``--answer-type``: a name the verifiers know (:func:`curate.rewards.answer_types`)."""
    if answer_type is not None:
        from curate.rewards import answer_types

        v.one_of("--answer-type", answer_type, answer_types())
