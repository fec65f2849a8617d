"""The settings of the RL verbs (``rl-filter``, ``score``, ``serve-rewards``), checked on construction.

A verb builds one of these from its flags and passes it down; every
``__post_init__`` refuses a bad value with one line naming the flag before any
model loads, any response is read or any port is bound. The choices the CLI
offers (``PROMPT_STYLES``, ``LOG_LEVELS``) are defined once, here or in the
module they belong to.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from curate.core import validate as v
from curate.core.errors import UserError
from curate.core.io import Location, as_location, locations
from curate.core.limits import ImageReading
from curate.core.formats.rl_layouts import LAYOUTS, layout_setting, METHODS as VLM_R1_METHODS
from curate.core.settings import setting
from curate.core.stats import Counts
from curate.generate.checks import check_backend, check_sampling
from curate.generate.settings import BackendSettings, backend_of, temperature_setting, top_p_setting
from curate.rewards.format import PROMPT_TYPES
from curate.rewards.runtime.sandbox import CodeSandbox
from curate.rl.presets import PRESETS, SCORING, preset_sources, preset_values
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


def _progress_setting() -> Any:
    return setting(None, help="Training progress in [0, 1] for the dynamic IoU threshold of detection rewards.")


def _answer_type_setting() -> Any:
    return setting(None, metavar="TYPE",
                   help="answer_type of the records that name no verifier (no answer_type, no reward.verifier), e.g. "
                        "math for a set of problem/answer rows; default: such records are errored, each named.")


def _layout_setting() -> Any:
    return setting("auto", choices=LAYOUTS,
                   help="Row layout of the RL records: vlm-r1 (VLM-R1's JSONL: image, conversations, accu_reward_method), "
                        "verl (verl/V-Triune Parquet: prompt, images, reward_model, extra_info), llava-ov-rl "
                        "(LLaVA-OneVision-1.5-RL's Parquet), or auto: each row's by its keys (a VLM-R1 row without "
                        "accu_reward_method reads as a plain conversation unless vlm-r1 is named).")


def _reward_method_setting() -> Any:
    return setting(None, metavar="METHOD",
                   help="With --layout vlm-r1: the accuracy reward of rows without accu_reward_method, as VLM-R1's "
                        "--reward_method (default, mcq, yes_no, all_match, map, od_ap, od_ap50, odLength, "
                        "weighted_sum; rec: its REC IoU reward). Default: default.")


def _check_layout(layout: str, reward_method: str | None) -> None:
    v.one_of("--layout", layout, LAYOUTS)
    if reward_method is not None:
        if layout != "vlm-r1":
            raise UserError(f"--reward-method {reward_method}: it is VLM-R1's; give it with --layout vlm-r1")
        v.one_of("--reward-method", reward_method, VLM_R1_METHODS)


def _preset_setting(what: str) -> Any:
    return setting(None, choices=tuple(PRESETS),
                   help=f"A seed's own settings ({what}; see docs/rl-filter.md): {', '.join(PRESETS)}. A flag given "
                        "with another value than its default wins.")


def _apply_preset(config: Any, only: tuple[str, ...] | None = None) -> None:
    """Set the settings of ``config.preset`` (checked first; with ``only``, those of these names) on the frozen
    ``config`` where the field holds its default (a flag the user gave with another value wins)."""
    if config.preset is None:
        return
    v.one_of("--preset", config.preset, tuple(PRESETS))
    defaults = {f.name: f.default for f in dataclasses.fields(config)}
    for name, value in preset_values(config.preset, only).items():
        if getattr(config, name) == defaults[name]:  # not given (or given as its default): the seed's value
            object.__setattr__(config, name, value)


def _seed_setting(what: str) -> Any:
    return setting(0, cli=False, help=f"Seed of {what} (the verb's --seed).")


def _image_root_setting() -> Any:
    return setting(None, cli=False, help="Folder (or bucket prefix) relative image paths start from (default: each "
                                         "input file's own; the verb's --image-root).")


def _band(value: tuple[float, float] | list[float] | str | None) -> tuple[float, float] | None:
    """``--band LO,HI`` as two numbers (a pair is kept)."""
    if value is None or not isinstance(value, str):
        return None if value is None else (value[0], value[1])
    try:
        lo, hi = (float(x) for x in value.split(","))
    except ValueError:
        raise UserError(f"--band must be LO,HI (two numbers), got {value!r}") from None
    return lo, hi


@dataclass(frozen=True)
class RlFilterConfig(ImageReading):
    """Settings of ``curate rl-filter`` (see :func:`curate.rl.filter.rl_filter`).

    Attributes:
        out: Output folder.
        backend: :func:`curate.generate.make_backend` keyword arguments, or the :class:`BackendSettings` of the
            flags (kept as their keyword arguments).
        n: Answers sampled per prompt.
        temperature, top_p, max_new_tokens: How answers are sampled (the seed is ``seed``).
        prompt_style: Force ``normal`` or ``think`` (default: each record's ``prompt_type``).
        templates: YAML/JSON prompt templates file.
        thresholds: YAML/JSON per-source thresholds file.
        pass_threshold, min_gap, band, min_reward_std: Default selection thresholds (None: the built-ins); ``band``
            may be ``"LO,HI"``.
        progress: Training progress in [0, 1] for the dynamic IoU threshold.
        seed: Seed of the sampling.
        shard_size: Prompts per shard.
        plot: Write ``rl_filter.png``.
        answer_type: The ``answer_type`` of records that name no verifier (default: they are errored).
        image_root: Folder (or bucket prefix) relative image paths start from (default: each input file's own).
        code: How model-written programs run: the limits' ceilings and ``--trust-code``.
        max_image_bytes, max_image_pixels, max_images: What one prompt may cost in images
            (:class:`curate.core.limits.ImageReading`).
    """

    out: Location | PathLike = setting(help="Output folder.")
    backend: BackendSettings | Mapping[str, Any] = field(default_factory=dict)
    n: int = setting(16, help="Answers sampled per prompt (N of pass@N).")
    temperature: float = temperature_setting(1.0)
    top_p: float = top_p_setting(1.0)
    max_new_tokens: int = setting(
        4096, help="Longest answer in tokens (default 4096, the LLaVA-OneVision-1.5-RL sampling length, so a thinking "
                   "answer is not cut): a longer answer is cut there, counted as truncated (per source in stats.json) "
                   "and scored as it stands, so one cut before its <answer> scores 0.")
    preset: str | None = _preset_setting("N, sampling length, temperature, layout, reward, per-source band")
    pass_threshold: float | None = setting(
        None, help="A sample passes when its accuracy reaches this (default 1.0; e.g. 0.5 for IoU rewards).")
    min_gap: float | None = setting(None, help="Keep only prompts with pass@N - pass@1 at least this (default 0.0).")
    min_reward_std: float | None = setting(
        None, help="Keep only prompts whose N rewards spread more than this (population std); 0 is DAPO's dynamic "
                   "sampling rule (std > 0: not all samples scored the same). Default: no spread rule.")
    band: tuple[float, float] | str | None = setting(
        None, metavar="LO,HI", help="Keep prompts whose mean reward is strictly inside (LO, HI) (default 0.0,0.6, as "
                                    "the LLaVA-OneVision-1.5-RL filter).")
    thresholds: Location | PathLike | None = setting(
        None, help="YAML/JSON with per-source thresholds (band, min_gap, pass_threshold, metric, inclusive, filter).")
    prompt_style: str | None = setting(
        None, choices=PROMPT_STYLES,
        help="Force a prompt style (default: each record's prompt_type; normal = answer-only).")
    templates: Location | PathLike | None = setting(
        None, help="YAML/JSON {normal: ..., think: ...} prompt templates containing {problem}.")
    progress: float | None = _progress_setting()
    shard_size: int = setting(1000, help="Prompts per shard.")
    answer_type: str | None = _answer_type_setting()
    layout: str = _layout_setting()
    reward_method: str | None = _reward_method_setting()
    seed: int = _seed_setting("the sampling")
    plot: bool = True
    image_root: Location | PathLike | None = _image_root_setting()
    code: CodeSandbox = field(default_factory=CodeSandbox.from_env)

    def __post_init__(self) -> None:
        _apply_preset(self)
        locations(self, {"out": "--out", "templates": "--templates", "thresholds": "--thresholds",
                         "image_root": "--image-root"})
        object.__setattr__(self, "backend", backend_of(self.backend))
        object.__setattr__(self, "band", _band(self.band))
        v.out_dir("--out", self.out)
        v.in_dir("--image-root", self.image_root)
        self.check_image_reading()
        _answer_type(self.answer_type)
        _check_layout(self.layout, self.reward_method)
        v.at_least("--n", self.n, 1)
        v.at_most("--n", self.n, MAX_N, "answers sampled, held and scored per prompt")
        if self.prompt_style is not None:
            v.one_of("--prompt-style", self.prompt_style, PROMPT_STYLES)
        v.in_file("--templates", self.templates)
        v.within("--pass-threshold", self.pass_threshold, 0.0, 1.0)
        v.finite("--min-gap", self.min_gap)
        v.finite("--min-reward-std", self.min_reward_std)
        if self.band is not None:
            lo, hi = self.band
            v.finite("--band", lo)
            v.finite("--band", hi)
            if self.thresholds is None and not lo < hi:
                raise UserError(f"--band {lo},{hi}: give LO,HI with LO < HI, e.g. 0.0,0.6")
        _progress(self.progress)
        v.at_least("--shard-size", self.shard_size, 1)
        self.selection()
        check_sampling({"temperature": self.temperature, "top_p": self.top_p, "max_new_tokens": self.max_new_tokens})
        check_backend(self.backend)

    @property
    def part_layout(self) -> str | None:
        """The layout the run's parts carry (:func:`curate.core.formats.rl_layouts.layout_setting`)."""
        return layout_setting(self.layout, self.reward_method)

    def selection(self) -> tuple[Any, dict[str, Any]]:
        """The default and per-source :class:`curate.rl.selection.Thresholds` (reads ``thresholds``)."""
        return load_thresholds(self.thresholds, {"pass_threshold": self.pass_threshold, "min_gap": self.min_gap,
                                                 "band": list(self.band) if self.band else None,
                                                 "min_reward_std": self.min_reward_std},
                               preset_sources(self.preset))


def score_records(inputs: Sequence[Location | PathLike] | Location | PathLike) -> tuple[Location, ...]:
    """The RL records files ``curate score`` reads (``--records``, its inputs), checked.

    Raises:
        UserError: none given, or one that does not exist.
    """
    if isinstance(inputs, (str, os.PathLike, Location)):
        inputs = (inputs,)
    records = tuple(loc for loc in (as_location(p) for p in inputs) if loc is not None)
    if not records:
        raise UserError("--records: give at least one RL records file")
    for path in records:
        v.in_path("--records", path)
    return records


@dataclass(frozen=True)
class ScoreConfig:
    """Settings of ``curate score`` (see :func:`curate.rl.score.score`; its inputs, the records, are
    :func:`score_records`); ``code``: how programs run."""

    responses: Location | PathLike = setting(
        help="Responses to score: JSONL or Parquet with id and response (several per id allowed, optional sample).")
    out: Location | PathLike = setting(help="Output folder.")
    progress: float | None = _progress_setting()
    seed: int = _seed_setting("the run")
    shard_size: int = setting(20_000, help="Responses per shard.")
    answer_type: str | None = _answer_type_setting()
    layout: str = _layout_setting()
    reward_method: str | None = _reward_method_setting()
    preset: str | None = _preset_setting("the layout and reward of its responses, with the seed's format checks "
                                         "and bonuses; not its sampling")
    write_records: bool = setting(
        True, help="Write the scored records back in their input layout, row for row (OUT/scored.jsonl, or "
                   "scored.parquet when images are bytes), with responses, mean_accuracy, mean_format, mean_reward "
                   "and rewards added.")
    image_root: Location | PathLike | None = _image_root_setting()
    code: CodeSandbox = field(default_factory=CodeSandbox.from_env)

    def __post_init__(self) -> None:
        _apply_preset(self, SCORING)
        _answer_type(self.answer_type)
        _check_layout(self.layout, self.reward_method)
        locations(self, {"responses": "--responses", "out": "--out", "image_root": "--image-root"})
        v.in_file("--responses", self.responses)
        v.out_dir("--out", self.out)
        v.in_dir("--image-root", self.image_root)
        _progress(self.progress)
        v.at_least("--shard-size", self.shard_size, 1)

    @property
    def part_layout(self) -> str | None:
        """The layout the records are read in (:func:`curate.core.formats.rl_layouts.layout_setting`)."""
        return layout_setting(self.layout, self.reward_method)


def _unprinted(declared: Any) -> Any:
    """A field left out of the config's repr (a secret)."""
    declared.repr = False
    return declared


@dataclass(frozen=True)
class ServeRewardsConfig:
    """Settings of ``curate serve-rewards`` (see :func:`curate.rl.serve.serve`).

    ``token`` (else :data:`TOKEN_VAR`) is the bearer token every request must carry; it is required
    when ``host`` is not a loopback address. ``max_body_mb``: larger request bodies get HTTP 413.
    ``pool_workers`` above the cores this process may use is brought down to them (:attr:`pool_capped`
    says from what). ``code``: how programs run.
    """

    host: str = setting("127.0.0.1", help="Interface to bind (0.0.0.0 to accept remote trainers, with --token).")
    port: int = setting(8000, help="TCP port to listen on.")
    workers: int = setting(1, help="Server processes.")
    pool_workers: int | None = setting(
        None, help="Verifier worker processes, and code sandboxes, per server process (default and most: the "
                   "cores the process may use).")
    log_level: str = setting("warning", choices=LOG_LEVELS, help="How much the server logs.")
    deadline: float | None = setting(
        300.0, help="Seconds per request; items unfinished by then score 0 with error 'deadline'.")
    token: str | None = _unprinted(setting(
        None, metavar="SECRET",
        help=f"Bearer token every request must carry (Authorization: Bearer SECRET, or ?token=SECRET for clients that "
             f"cannot set headers); default: {TOKEN_VAR}. Required with a --host other than loopback."))
    max_body_mb: float = setting(DEFAULT_MAX_BODY_MB, help="Largest request body; larger ones get HTTP 413.")
    header_timeout: float = setting(10.0, help="Seconds a connection has to send a request's headers (else 408).")
    body_timeout: float = setting(60.0, help="Seconds a request has to send its body once its headers are in "
                                             "(else HTTP 408).")
    max_connections: int = setting(
        512, help="Open connections per server process (kept under the open-file limit); past it the oldest one "
                  "still sending headers is closed, or the new one gets HTTP 503.")
    max_queued: int = setting(64, help="Scoring requests in progress per server process; more get HTTP 503 with "
                                       "Retry-After.")
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
        v.above("--header-timeout", self.header_timeout, 0)
        v.above("--body-timeout", self.body_timeout, 0)
        v.at_least("--max-connections", self.max_connections, 1)
        v.at_least("--max-queued", self.max_queued, 1)
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
    """``--answer-type``: a name the verifiers know (:func:`curate.rewards.registry.answer_types`)."""
    if answer_type is not None:
        from curate.rewards.registry import answer_types

        v.one_of("--answer-type", answer_type, answer_types())


# Typed results of ``curate rl-filter`` and ``curate score`` (see :mod:`curate.core.stats`).
@dataclass(frozen=True)
class RewardSummary:
    """Mean reward, pass@1, pass@N and truncation over prompts (or responses)."""

    mean_reward: float | None = None
    mean_pass_at_1: float | None = None
    mean_pass_at_n: float | None = None
    truncation_rate: float | None = None


@dataclass(frozen=True)
class RlFilterResult(Counts):
    """``curate rl-filter``: prompts kept, and the reward figures over all prompts."""

    kept: int = 0
    overall: RewardSummary = field(default_factory=RewardSummary)


@dataclass(frozen=True)
class ScoreResult:
    """``curate score``: responses scored, errored by reason, the mean reward."""

    responses_in: int = 0
    scored: int = 0
    errored: dict[str, int] = field(default_factory=dict)
    overall: RewardSummary = field(default_factory=RewardSummary)
