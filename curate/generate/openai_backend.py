"""The ``openai`` backend: any OpenAI-compatible chat server (``--endpoint URL --served-model NAME``).

vLLM, SGLang, ``transformers serve`` and hosted APIs speak
``POST {endpoint}/v1/chat/completions``. Images travel as base64 data URLs of images the
image gate accepts (:mod:`curate.generate.image_urls`). Calls run on a bounded thread pool with one
shared ``httpx`` client.

Retries: timeouts, connection errors, 429 and 5xx answers, and malformed bodies
are retried up to ``max_retries`` times with exponential backoff and jitter
(``Retry-After`` is honoured up to ``backoff_max``); other 4xx answers are final.
A request that still fails carries ``error`` (``timeout``, ``connection_error``,
``http_error:<status>``, ``bad_response``) and never raises.

Circuit breaker: every retryable failure of a call counts, every answer resets the
count; after ``max_consecutive_failures`` failures in a row (default 20) the server
is taken for down: no more calls are made, the calls in flight end with
``endpoint_down``, and :meth:`stream` raises :class:`~curate.generate.base.EndpointDown`
once the answers that did arrive have been yielded.

``n`` is never trusted: the backend counts the choices that came back and asks
for the rest (``transformers serve`` answers one choice whatever ``n`` is). Once
a server has returned fewer choices than asked, later requests are split into
calls of that size from the start and the calls of one request run in parallel.
Each call for answers ``[i, i+k)`` of a request sends ``seed =
derive_seed(sampling.seed, key, i)``, so top-up calls never repeat a seed and a
server that honours seeds gives the same answers on a rerun. Whether it does is
the server's business: vLLM and SGLang seed each request; ``transformers serve``
(5.24) calls ``torch.manual_seed`` globally when it reads a request, so its
answers repeat only with ``concurrency=1`` (concurrent calls race for the seed).
Answers are placed by sample index, whatever order the calls finish in.
"""

from __future__ import annotations

import json
import random
import threading
import time
from collections import deque
from collections.abc import Iterator, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass, field
from typing import Any

from curate.core import validate as v
from curate.core.errors import UserError
from curate.generate.base import EndpointDown, GenerationBackend, GenerationRequest, GenerationResult, PromptError
from curate.generate.base import content_parts, derive_seed, error_result
from curate.core.images import ImageError
from curate.core.limits import image_limits
from curate.generate.image_urls import data_url

DEFAULT_MAX_CONSECUTIVE_FAILURES = 20
def chat_url(endpoint: str) -> str:
    """The chat-completions URL of an endpoint given as ``http://host:port``, ``.../v1`` or the full URL."""
    url = endpoint.strip().rstrip("/")
    if not url.startswith(("http://", "https://")):
        raise UserError(f"--endpoint {endpoint}: give an http:// or https:// URL (for example http://127.0.0.1:8000/v1)")
    if url.endswith("/chat/completions"):
        return url
    if url.endswith("/v1"):
        return url + "/chat/completions"
    return url + "/v1/chat/completions"


#: HTTP statuses that say the endpoint is wrong, not the prompt: unauthorised, forbidden, no such path or method,
#: a proxy asking for credentials (redirects too: the client does not follow them).
_ENDPOINT_STATUSES = frozenset({401, 403, 404, 405, 407})


class CallFailed(Exception):
    """One HTTP call failed; ``retryable`` says whether another try may help."""

    def __init__(self, reason: str, detail: str, retryable: bool, retry_after: float | None = None,
                 endpoint_wide: bool = False) -> None:
        super().__init__(f"{reason}: {detail}")
        self.reason = reason
        self.detail = detail
        self.retryable = retryable
        self.retry_after = retry_after
        #: The endpoint itself is wrong for every call (a redirect, no such path, a refused key): not tried again
        #: in this run, but counted by the circuit breaker as a server failure.
        self.endpoint_wide = endpoint_wide


@dataclass
class _CallOutcome:
    choices: list[tuple[str, bool]] = field(default_factory=list)
    attempts: int = 0
    retry_reasons: list[str] = field(default_factory=list)
    error: str | None = None
    detail: str = ""


@dataclass
class _State:
    index: int
    request: GenerationRequest
    slots: list[tuple[str, bool] | None]
    messages: list[dict[str, Any]] | None = None
    outstanding: int = 0
    attempts: int = 0
    retry_reasons: list[str] = field(default_factory=list)
    error: str | None = None
    detail: str = ""

    def result(self) -> GenerationResult:
        filled = [s for s in self.slots if s is not None]
        return GenerationResult(key=self.request.key, responses=[t for t, _ in filled],
                                truncated=[tr for _, tr in filled], error=self.error, detail=self.detail[:500],
                                attempts=self.attempts, retries=len(self.retry_reasons),
                                retry_reasons=list(self.retry_reasons))


def _choice_text(choice: Any) -> tuple[str, bool]:
    if not isinstance(choice, dict):
        raise CallFailed("bad_response", "a choice is not an object", True)
    message = choice.get("message") or {}
    content = message.get("content") if isinstance(message, dict) else None
    if isinstance(content, list):  # some servers return content parts
        content = "".join(p.get("text", "") for p in content if isinstance(p, dict))
    if content is None:  # a failure, never stored as an empty answer; unless the model spent its whole budget
        if choice.get("finish_reason") != "length":
            raise CallFailed("bad_response", f"message content is null (finish_reason {choice.get('finish_reason')!r})",
                             True)
        content = ""
    if not isinstance(content, str):
        raise CallFailed("bad_response", "message content is not text", True)
    return content, choice.get("finish_reason") == "length"


class OpenAIBackend(GenerationBackend):
    """Generate through an OpenAI-compatible ``/v1/chat/completions`` server.

    Args:
        endpoint: Base URL (``http://host:port``, ``http://host:port/v1`` or the full chat URL).
        served_model: ``model`` field of each call (omitted if None: servers that
            serve one model accept that).
        api_key: Bearer token, if the server wants one.
        concurrency: Calls in flight at once.
        timeout: Seconds per call (connect, read, write).
        max_retries: Retries of a failing call before the request fails.
        backoff: First backoff in seconds; doubles at each retry (with jitter).
        backoff_max: Longest wait between two tries.
        n_per_call: Most choices asked in one call (None: ``n``, lowered once a
            server is seen returning fewer; 1: never send ``n``).
        send_seed: Send a per-call ``seed`` (servers that reject it: set False).
        extra_body: More JSON fields for every call (for example ``{"top_k": 20}`` for vLLM).
        max_image_pixels, max_image_bytes: the image gate's limits (:class:`curate.core.images.ImageLimits`;
            None: its defaults).
        max_consecutive_failures: Failed calls in a row after which the server is taken for down.
    """

    name = "openai"

    def __init__(self, endpoint: str, *, served_model: str | None = None, api_key: str | None = None,
                 concurrency: int = 8, timeout: float = 600.0, max_retries: int = 5, backoff: float = 1.0,
                 backoff_max: float = 60.0, n_per_call: int | None = None, send_seed: bool = True,
                 extra_body: dict[str, Any] | None = None, max_image_pixels: int | None = None,
                 max_image_bytes: int | None = None,
                 max_consecutive_failures: int = DEFAULT_MAX_CONSECUTIVE_FAILURES) -> None:
        super().__init__()
        import httpx

        v.at_least("--max-consecutive-failures", max_consecutive_failures, 1)
        self.max_consecutive_failures = max_consecutive_failures
        self._failures_in_a_row = 0
        self._down: str | None = None  # why the breaker tripped
        v.at_least("--concurrency", concurrency, 1)
        v.at_least("--max-retries", max_retries, 0)
        v.above("--timeout", timeout, 0)
        v.at_least("n_per_call", n_per_call, 1)
        self.endpoint = endpoint
        self.url = chat_url(endpoint)
        self.served_model = served_model
        self.concurrency, self.timeout, self.max_retries = concurrency, timeout, max_retries
        self.backoff, self.backoff_max, self.send_seed = backoff, backoff_max, send_seed
        self.extra_body = dict(extra_body or {})
        self.max_image_pixels = max_image_pixels
        self.limits = image_limits(max_image_bytes, max_image_pixels)
        self._n_cap = n_per_call
        self._n_cap_fixed = n_per_call is not None
        self._lock = threading.Lock()
        self._jitter = random.Random()  # timing only: never affects answers
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self._client = httpx.Client(
            timeout=httpx.Timeout(timeout),
            limits=httpx.Limits(max_connections=concurrency, max_keepalive_connections=concurrency),
            headers=headers,
        )
        self._pool = ThreadPoolExecutor(max_workers=concurrency, thread_name_prefix="curate-openai")

    def describe(self) -> dict[str, Any]:
        """Backend, endpoint, served model, concurrency and retry settings."""
        return {"backend": self.name, "endpoint": self.endpoint, "model": self.served_model or self.endpoint,
                "concurrency": self.concurrency, "max_retries": self.max_retries, "timeout": self.timeout,
                "choices_per_call": self._n_cap}

    @property
    def choices_per_call(self) -> int | None:
        """Choices a call is known to return at most (None until a server under-delivers)."""
        return self._n_cap

    # -- one HTTP call -----------------------------------------------------------

    def _payload(self, state: _State, offset: int, k: int) -> dict[str, Any]:
        sp = state.request.sampling
        body: dict[str, Any] = {
            "messages": state.messages,
            "temperature": sp.temperature,
            "top_p": sp.top_p,
            "max_tokens": sp.max_new_tokens,
            **self.extra_body,
        }
        if self.served_model:
            body["model"] = self.served_model
        if k > 1:
            body["n"] = k
        if self.send_seed:
            body["seed"] = derive_seed(sp.seed, state.request.key, offset, bits=31)
        return body

    def _post(self, body: dict[str, Any]) -> list[tuple[str, bool]]:
        import httpx

        try:
            resp = self._client.post(self.url, json=body)
        except httpx.TimeoutException as exc:
            raise CallFailed("timeout", f"{type(exc).__name__} after {self.timeout:g} s", True) from None
        except httpx.TransportError as exc:
            raise CallFailed("connection_error", f"{type(exc).__name__}: {exc}", True) from None
        status = resp.status_code
        if status != 200:
            text = resp.text[:300].replace("\n", " ")
            retryable = status == 429 or status >= 500
            retry_after = None
            if retryable and resp.headers.get("retry-after", "").strip().replace(".", "", 1).isdigit():
                retry_after = float(resp.headers["retry-after"])
            endpoint_wide = 300 <= status < 400 or status in _ENDPOINT_STATUSES
            raise CallFailed(f"http_error:{status}", text, retryable, retry_after, endpoint_wide)
        try:
            data = resp.json()
        except (json.JSONDecodeError, ValueError):
            raise CallFailed("bad_response", f"not JSON: {resp.text[:120]!r}", True) from None
        choices = data.get("choices") if isinstance(data, dict) else None
        if not isinstance(choices, list) or not choices:
            raise CallFailed("bad_response", f"no choices in {str(data)[:160]}", True)
        if all(isinstance(c, dict) and isinstance(c.get("index"), int) for c in choices):
            choices = sorted(choices, key=lambda c: c["index"])
        return [_choice_text(c) for c in choices]

    def _delay(self, retry: int, retry_after: float | None) -> float:
        base = min(self.backoff_max, self.backoff * (2**retry))
        delay = base / 2 + self._jitter.uniform(0, base / 2)  # "equal jitter"
        if retry_after is not None:
            delay = max(delay, min(retry_after, self.backoff_max))
        return delay

    def _call(self, state: _State, offset: int, k: int) -> _CallOutcome:
        """Ask for answers ``[offset, offset+k)`` of a request, retrying as configured."""
        out = _CallOutcome()
        body = self._payload(state, offset, k)
        for attempt in range(self.max_retries + 1):
            if self._down is not None:
                out.error, out.detail = "endpoint_down", self._down
                return out
            out.attempts += 1
            try:
                out.choices = self._post(body)
                self._count(None)
                return out
            except CallFailed as exc:
                self._count(exc)
                # final, out of retries, or another call of this request already failed
                if not exc.retryable or attempt == self.max_retries or state.error is not None:
                    out.error, out.detail = exc.reason, exc.detail
                    return out
                out.retry_reasons.append(exc.reason)
                time.sleep(self._delay(attempt, exc.retry_after))
        return out  # pragma: no cover - the loop always returns

    def _count(self, failure: CallFailed | None) -> None:
        """The circuit breaker's count: retryable failures in a row (an answer, or a 4xx, resets it)."""
        with self._lock:
            if failure is None or not (failure.retryable or failure.endpoint_wide):
                self._failures_in_a_row = 0
                return
            self._failures_in_a_row += 1
            if self._failures_in_a_row >= self.max_consecutive_failures and self._down is None:
                self._down = (f"{self._failures_in_a_row} calls in a row failed, the last with {failure.reason} "
                              f"({failure.detail[:120]})")

    # -- scheduling ----------------------------------------------------------------

    def _chunks(self, offset: int, count: int) -> list[tuple[int, int]]:
        cap = self._n_cap or count
        return [(o, min(cap, offset + count - o)) for o in range(offset, offset + count, cap)]

    def _prepare(self, state: _State) -> None:
        urls: dict[int, str] = {}

        def image_part(i: int) -> dict[str, Any]:
            return {"type": "image_url", "image_url": {"url": urls[i]}}

        for i, path in enumerate(state.request.images):
            urls[i] = data_url(path, self.limits)
        state.messages = content_parts(state.request, image_part)

    def _start(self, index: int, request: GenerationRequest) -> tuple[_State, GenerationResult | None]:
        state = _State(index=index, request=request, slots=[None] * request.n)
        try:
            self._prepare(state)
        except PromptError as exc:
            return state, error_result(request, exc.reason, exc.detail)
        except ImageError as exc:
            return state, error_result(request, exc.reason, exc.detail)
        return state, None

    def _stream(self, requests: Sequence[GenerationRequest]) -> Iterator[tuple[int, GenerationResult]]:
        todo = iter(enumerate(requests))
        ready: deque[tuple[_State, int, int]] = deque()  # calls waiting for a free slot
        inflight: dict[Future[_CallOutcome], tuple[_State, int, int]] = {}
        exhausted = False
        try:
            while True:
                while len(inflight) < self.concurrency:
                    if ready:
                        state, offset, k = ready.popleft()
                        if state.error is not None:  # a sibling call failed: skip the rest
                            state.outstanding -= 1
                            if state.outstanding == 0:
                                yield state.index, state.result()
                            continue
                        inflight[self._pool.submit(self._call, state, offset, k)] = (state, offset, k)
                        continue
                    if exhausted:
                        break
                    nxt = next(todo, None)
                    if nxt is None:
                        exhausted = True
                        break
                    state, failed = self._start(*nxt)
                    if failed is not None:
                        yield nxt[0], failed
                        continue
                    chunks = self._chunks(0, state.request.n)
                    state.outstanding = len(chunks)
                    ready.extend((state, o, k) for o, k in chunks)
                if not inflight:
                    if ready:
                        continue
                    return
                done, _ = wait(list(inflight), return_when=FIRST_COMPLETED)
                for fut in done:
                    state, offset, k = inflight.pop(fut)
                    yield from self._finish_call(state, offset, k, fut.result(), ready)
                if self._down is not None:
                    for fut in wait(list(inflight)).done:  # they stop at their next try
                        state, offset, k = inflight.pop(fut)
                        yield from (item for item in self._finish_call(state, offset, k, fut.result(), ready)
                                    if item[1].error is None)
                    raise EndpointDown(f"--endpoint {self.endpoint}: the server looks down ({self._down}); "
                                       "stopped early, every answer so far is kept: rerun the same command "
                                       "when the server is up")
        finally:
            for fut in inflight:
                fut.cancel()

    def _finish_call(self, state: _State, offset: int, k: int, outcome: _CallOutcome,
                     ready: deque[tuple[_State, int, int]]) -> Iterator[tuple[int, GenerationResult]]:
        state.outstanding -= 1
        state.attempts += outcome.attempts
        state.retry_reasons.extend(outcome.retry_reasons)
        if outcome.error is not None:
            if state.error is None:
                state.error, state.detail = outcome.error, outcome.detail
        else:
            got = outcome.choices[:k]
            for j, choice in enumerate(got):
                state.slots[offset + j] = choice
            if len(got) < k:
                with self._lock:
                    if not self._n_cap_fixed:
                        self._n_cap = len(got) if self._n_cap is None else min(self._n_cap, len(got))
                if state.error is None:
                    more = self._chunks(offset + len(got), k - len(got))
                    state.outstanding += len(more)
                    ready.extend((state, o, kk) for o, kk in more)
        if state.outstanding == 0:
            yield state.index, state.result()

    def close(self) -> None:
        """Stop the threads and close the HTTP connections."""
        self._pool.shutdown(wait=True, cancel_futures=True)
        self._client.close()
