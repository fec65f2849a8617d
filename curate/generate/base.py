"""The generation backend interface shared by ``curate rl-filter`` and ``curate recaption``.

A caller builds :class:`GenerationRequest` objects (canonical messages with
``<image>`` placeholders, absolute image paths, ``n`` samples, sampling
settings) and passes them, a shard at a time, to
:meth:`GenerationBackend.generate` (results in request order) or
:meth:`GenerationBackend.stream` (results as they complete, for callers that
store each answer as soon as it arrives). A backend never raises for a failing
request: the :class:`GenerationResult` carries an ``error`` reason instead.

Error reasons are short stable strings:

* ``prompt_error:<what>``: the request itself is unusable (``image_count``,
  ``empty``, ``role``, ``ends_with_assistant``, ``template``);
* an image refused by the image gate: its reason (:data:`curate.core.images.REASONS`: ``missing_image``,
  ``truncated``, ``not_an_image``, ...), the same reason every other stage gives the same file;
* ``http_error:<status>``, ``timeout``, ``connection_error``, ``bad_response``
  (OpenAI-compatible servers, after the retries);
* ``generation_error:<Exception>`` (local model);
* ``no_rollouts`` (rollouts file).

Transient failures (:func:`is_transient`: timeouts, lost connections, 429 and 5xx
answers, malformed bodies, after the backend's retries) say nothing about the
prompt: stages never journal them as answers, and a shard that has any is not
complete, so a rerun asks again. A server that fails ``max_consecutive_failures``
calls in a row raises :class:`EndpointDown` (the circuit breaker): the run stops
early with one line and everything answered so far is kept for the rerun.

Seeds: :func:`derive_seed` turns the request's ``sampling.seed`` and ``key``
(plus a sample index) into independent seeds, so a request's answers depend on
neither its position nor the other requests of its batch.
"""

from __future__ import annotations

import hashlib
import threading
import time
from abc import ABC, abstractmethod
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from curate.core.errors import UserError
from curate.core.records import IMAGE_TOKEN

ROLES = ("system", "user", "assistant")
#: Failures of the server, not of the prompt: asked again on a rerun (so is every ``http_error:STATUS``).
TRANSIENT_ERRORS = ("timeout", "connection_error", "bad_response", "endpoint_down")


def is_transient(reason: str | None) -> bool:
    """Whether a result's error is the server's (asked again on a rerun), not the prompt's: a time-out, a lost
    connection, a malformed answer (not JSON, no choices, null content), and every HTTP status but 200 (a 4xx
    as well as a 5xx: a refused key, a wrong path or a redirect is never stored as the prompt's answer)."""
    return reason is not None and (reason in TRANSIENT_ERRORS or reason.startswith("http_error:"))


class EndpointDown(UserError):
    """The circuit breaker tripped: the endpoint failed too many calls in a row."""

    exit_code = 3


@dataclass(frozen=True)
class SamplingParams:
    """How to sample.

    Attributes:
        temperature: Softmax temperature; 0 means greedy (all samples identical).
        top_p: Nucleus sampling mass in (0, 1].
        max_new_tokens: Longest answer in tokens; an answer that reaches it is ``truncated``.
        seed: Base seed; combined with the request key (see :func:`derive_seed`).
    """

    temperature: float = 1.0
    top_p: float = 1.0
    max_new_tokens: int = 1024
    seed: int = 0

    def __post_init__(self) -> None:
        if not self.temperature >= 0:
            raise ValueError(f"temperature must be >= 0, got {self.temperature}")
        if not 0 < self.top_p <= 1:
            raise ValueError(f"top_p must be in (0, 1], got {self.top_p}")
        if self.max_new_tokens < 1:
            raise ValueError(f"max_new_tokens must be >= 1, got {self.max_new_tokens}")


@dataclass(frozen=True)
class GenerationRequest:
    """One prompt to answer ``n`` times.

    Attributes:
        key: Stable identity of the prompt (the record id, plus a salt such as the
            language if one record yields several prompts). Seeds derive from it;
            the rollouts backend looks answers up by it.
        messages: Canonical messages ``[{"role", "content"}]``; every ``<image>`` in
            a content string stands for the next entry of ``images`` (when there are
            images but no placeholders, the images go first in the first user turn).
            The last message must be a user (or system) turn: the backend adds the
            assistant's generation prompt.
        images: Absolute image paths.
        n: Number of answers wanted.
        sampling: Sampling settings.
    """

    key: str
    messages: Sequence[dict[str, str]]
    images: Sequence[str] = ()
    n: int = 1
    sampling: SamplingParams = field(default_factory=SamplingParams)

    def __post_init__(self) -> None:
        if self.n < 1:
            raise ValueError(f"n must be >= 1, got {self.n}")


@dataclass
class GenerationResult:
    """The answers to one request.

    Attributes:
        key: The request's key.
        responses: Answer texts (``n`` of them on success; on error, those obtained
            before the failure, possibly none; a rollouts file may hold fewer than ``n``).
        truncated: Per answer, whether it stopped at ``max_new_tokens`` instead of
            ending by itself (``finish_reason == "length"`` for servers).
        error: None on success, else a stable reason (see the module docstring).
        detail: Human-readable detail of the error ('' on success).
        attempts: Backend calls made for this request (HTTP calls, generate calls).
        retries: Failed calls that were retried.
        retry_reasons: The reason of each retried failure, in order.
    """

    key: str
    responses: list[str] = field(default_factory=list)
    truncated: list[bool] = field(default_factory=list)
    error: str | None = None
    detail: str = ""
    attempts: int = 0
    retries: int = 0
    retry_reasons: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        """True when the request succeeded."""
        return self.error is None


def derive_seed(seed: int, key: str, *salt: int | str, bits: int = 63) -> int:
    """A seed for ``(seed, key, *salt)``: stable across runs, machines and batchings.

    Args:
        seed: Base seed (``--seed``).
        key: Request key.
        *salt: More components (for example the sample index).
        bits: Size of the result (63 for torch generators, 31 for servers).

    Returns:
        An integer in ``[0, 2**bits)``.
    """
    text = "\x1f".join([str(int(seed)), str(key), *map(str, salt)])
    digest = hashlib.blake2b(text.encode("utf-8"), digest_size=8).digest()
    return int.from_bytes(digest, "little") % (1 << bits)


class PromptError(ValueError):
    """A request whose messages cannot be turned into a prompt; ``reason`` is stable."""

    def __init__(self, reason: str, detail: str = "") -> None:
        super().__init__(detail or reason)
        self.reason = reason
        self.detail = detail


def content_parts(
    request: GenerationRequest, image_part: Callable[[int], dict[str, Any]]
) -> list[dict[str, Any]]:
    """Turn canonical messages into chat messages whose content is a list of parts.

    Args:
        request: The request.
        image_part: Builds the part of image ``i`` (for example ``{"type": "image"}``).

    Returns:
        Messages ``[{"role", "content": [parts]}]`` with text parts ``{"type": "text", "text"}``.

    Raises:
        PromptError: empty messages, an unknown role, a trailing assistant turn, or
            a number of placeholders that differs from the number of images.
    """
    messages = list(request.messages)
    if not messages:
        raise PromptError("prompt_error:empty", "no messages")
    for m in messages:
        if not isinstance(m, dict) or m.get("role") not in ROLES or not isinstance(m.get("content"), str):
            raise PromptError("prompt_error:role", f"bad message {str(m)[:80]}")
    if messages[-1]["role"] == "assistant":
        raise PromptError("prompt_error:ends_with_assistant", "the last message is an assistant turn")
    placeholders = sum(m["content"].count(IMAGE_TOKEN) for m in messages)
    n_images = len(request.images)
    if placeholders == 0 and n_images:
        first_user = next((i for i, m in enumerate(messages) if m["role"] == "user"), None)
        if first_user is None:
            raise PromptError("prompt_error:image_count", f"{n_images} images but no user turn")
        m = messages[first_user]
        messages[first_user] = {"role": m["role"], "content": IMAGE_TOKEN * n_images + m["content"]}
    elif placeholders != n_images:
        raise PromptError("prompt_error:image_count", f"{placeholders} <image> placeholders for {n_images} images")
    out: list[dict[str, Any]] = []
    counter = 0
    for m in messages:
        parts: list[dict[str, Any]] = []
        for j, piece in enumerate(m["content"].split(IMAGE_TOKEN)):
            if j > 0:
                parts.append(image_part(counter))
                counter += 1
            if piece:
                parts.append({"type": "text", "text": piece})
        out.append({"role": m["role"], "content": parts})
    return out


class GenerationStats:
    """Running totals of a backend (thread-safe); :meth:`as_dict` is flat and summable.

    Counted per finished request: ``requests``, ``responses``, ``truncated``,
    ``attempts``, ``retries`` and ``errors`` (with per-reason entries
    ``retries.<reason>`` and ``errors.<reason>``), and ``seconds`` spent in
    ``generate``/``stream``.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.counts: Counter = Counter()
        self.seconds = 0.0

    def add(self, result: GenerationResult) -> None:
        """Count one finished request."""
        with self._lock:
            c = self.counts
            c["requests"] += 1
            c["responses"] += len(result.responses)
            c["truncated"] += sum(bool(t) for t in result.truncated)
            c["attempts"] += result.attempts
            c["retries"] += result.retries
            for reason in result.retry_reasons:
                c[f"retries.{reason}"] += 1
            if result.error is not None:
                c["errors"] += 1
                c[f"errors.{result.error}"] += 1

    def add_time(self, seconds: float) -> None:
        """Add wall time spent generating."""
        with self._lock:
            self.seconds += seconds

    def as_dict(self, prefix: str = "") -> dict[str, float]:
        """Flat counts (``{prefix}requests``, ``{prefix}errors.timeout``, ...), sorted."""
        with self._lock:
            out: dict[str, float] = {f"{prefix}{k}": v for k, v in sorted(self.counts.items())}
            out[f"{prefix}seconds"] = round(self.seconds, 6)
            for base in ("requests", "responses", "truncated", "attempts", "retries", "errors"):
                out.setdefault(f"{prefix}{base}", 0)
            return dict(sorted(out.items()))

    def reset(self) -> dict[str, float]:
        """Return :meth:`as_dict` and start again from zero (per-shard figures)."""
        with self._lock:
            snapshot = {k: v for k, v in self.counts.items()}
            seconds = self.seconds
            self.counts = Counter()
            self.seconds = 0.0
        tmp = GenerationStats()
        tmp.counts.update(snapshot)
        tmp.seconds = seconds
        return tmp.as_dict()


class GenerationBackend(ABC):
    """A way to answer prompts: a local model, a server, or a file of stored answers.

    Subclasses implement :meth:`_stream` and :meth:`describe`; :meth:`generate` and
    :meth:`stream` add the bookkeeping. Use as a context manager or call :meth:`close`.
    """

    #: Short backend name (``transformers``, ``openai``, ``rollouts``).
    name: str = "backend"

    def __init__(self) -> None:
        self.stats = GenerationStats()

    @abstractmethod
    def _stream(self, requests: Sequence[GenerationRequest]) -> Iterator[tuple[int, GenerationResult]]:
        """Yield ``(index, result)`` for every request, in any order."""

    @abstractmethod
    def describe(self) -> dict[str, Any]:
        """What produced the answers (backend, model, settings): for ``stats.json`` and settings checks."""

    @property
    def model_name(self) -> str:
        """A short name of the model behind the backend (the ``model`` column of outputs)."""
        return str(self.describe().get("model", self.name))

    def stream(self, requests: Sequence[GenerationRequest]) -> Iterator[tuple[int, GenerationResult]]:
        """Answer requests, yielding ``(index into requests, result)`` as each one completes.

        Only a bounded number of requests is in flight at a time, so a caller that
        stores each result as it arrives loses at most those if killed.
        """
        requests = list(requests)
        seen = 0
        start = time.perf_counter()
        try:
            for index, result in self._stream(requests):
                self.stats.add(result)
                seen += 1
                yield index, result
        finally:
            self.stats.add_time(time.perf_counter() - start)
        if seen != len(requests):  # a bug in a backend, never a user error
            raise RuntimeError(f"{self.name} backend returned {seen} results for {len(requests)} requests")

    def generate(self, requests: Sequence[GenerationRequest]) -> list[GenerationResult]:
        """Answer requests; results are in the order of ``requests``."""
        requests = list(requests)
        results: list[GenerationResult | None] = [None] * len(requests)
        for index, result in self.stream(requests):
            results[index] = result
        return [r for r in results if r is not None]

    def close(self) -> None:
        """Release the model, connections or threads."""

    def __enter__(self) -> GenerationBackend:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def error_result(request: GenerationRequest, reason: str, detail: str = "", attempts: int = 0) -> GenerationResult:
    """A result that carries only an error."""
    return GenerationResult(key=request.key, error=reason, detail=detail[:500], attempts=attempts)


def summarize(results: Sequence[GenerationResult]) -> dict[str, float]:
    """Flat counts over some results, as :meth:`GenerationStats.as_dict` (without ``seconds``)."""
    stats = GenerationStats()
    for r in results:
        stats.add(r)
    out = stats.as_dict()
    out.pop("seconds", None)
    return out
