"""One reward's verdict (:class:`RewardResult`) and the error and context types shared by the verifiers."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Mapping

from curate.core.errors import UserError


@dataclass(frozen=True, slots=True)
class RewardResult:
    """The score of one response.

    Attributes:
        accuracy: Verifier score in [0, 1] (0 when ``error`` is set).
        format: Format score in [0, 1] (see :mod:`curate.rewards.format`).
        reward: ``accuracy_weight * accuracy + format_weight * format`` in [0, 1]; 0 when
            ``error`` is set.
        error: ``None``, or a short reason: ``timeout``, ``verifier_error:<ExceptionName>``,
            ``verifier_crashed``, ``response_too_large``, ``answer_too_long``, …
        verifier: Name of the verifier that produced ``accuracy``.
    """

    accuracy: float
    format: float
    reward: float
    error: str | None = None
    verifier: str = ""

    def to_dict(self) -> dict[str, Any]:
        """Plain dict (JSON-ready)."""
        return {"accuracy": self.accuracy, "format": self.format, "reward": self.reward,
                "error": self.error, "verifier": self.verifier}


class RecordError(UserError, ValueError):
    """A record the verifiers cannot score (missing or malformed gold answer, bad ``reward``)."""


class UnknownAnswerType(RecordError):
    """The record's ``answer_type`` (or ``reward.verifier``) names no verifier."""


class VerifierFailure(Exception):
    """Raised inside a verifier to score 0 with a named reason (for example ``answer_too_long``)."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


@dataclass(frozen=True, slots=True)
class Context:
    """What a verifier may need beyond the response and the golds."""

    record: Mapping[str, Any]
    progress: float | None = None
    prompt_type: str = "normal"


@dataclass(frozen=True, slots=True)
class Deferred:
    """Work a verifier hands to an isolated worker process (killed on timeout).

    Attributes:
        task: ``"module:function"`` inside ``curate.rewards`` run in the worker (the sandbox pool: ``"run"``).
        args: Positional arguments (picklable; hashable ones are cached).
        post: Optional function applied in the caller to the worker's result (a float, or the
            sandbox's per-test results), giving the score.
        limit: Time limit in seconds for the worker call.
        pool: ``"verifiers"`` (the verifier worker pool) or ``"sandbox"`` (the code sandboxes,
            :mod:`curate.rewards.runtime.sandbox`).
    """

    task: str
    args: tuple
    post: Callable[[Any], float] | None = field(default=None, compare=False)
    limit: float = 5.0
    pool: str = "verifiers"


def param(params: Mapping[str, Any], name: str, default: Any) -> Any:
    """``params[name]`` or ``default`` when missing or ``None``."""
    value = params.get(name)
    return default if value is None else value


def clamp01(x: float) -> float:
    """Clamp to [0, 1]; NaN becomes 0."""
    if x != x:  # NaN
        return 0.0
    return 0.0 if x < 0.0 else 1.0 if x > 1.0 else float(x)


def where(record_id: Any) -> str:
    """``record 'id'`` for error messages (``record`` when the record has no id)."""
    return "record" if record_id is None else f"record {record_id!r}"


def parse_golds(golds: list[str], parse: Callable[[str], Any], record_id: Any, problem: str) -> set[Any]:
    """Every gold parsed by ``parse``, as a set.

    Raises:
        RecordError: a gold does not parse: ``<record>: <problem>``, with ``{gold}`` in
            ``problem`` replaced by the gold's repr.
    """
    out = set()
    for gold in golds:
        value = parse(gold)
        if value is None:
            raise RecordError(f"{where(record_id)}: " + problem.replace("{gold}", repr(gold)))
        out.add(value)
    return out


def parsed_answer_in(answer: str | None, golds: set[Any], parse: Callable[[str], Any], max_chars: int) -> float:
    """1.0 when ``answer`` (at most ``max_chars`` long) parses to one of ``golds``, else 0.0."""
    if answer is None or len(answer) > max_chars:
        return 0.0
    value = parse(answer)
    return 1.0 if value is not None and value in golds else 0.0
