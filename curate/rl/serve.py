"""HTTP service for the reward verifiers (FastAPI + uvicorn).

Endpoints:

- ``GET /health``: ``{"status": "ok", "verifiers": [...], "answer_types": [...],
  "workers": n, "counters": {...}}``.
- ``POST /score``: body ``{"items": [{"record": {...}, "response": "..."}, ...],
  "progress": null}`` (``progress``, optional, is the training fraction for the dynamic IoU
  threshold); answer ``{"results": [{"accuracy", "format", "reward", "error", "verifier"}, ...]}``
  in the order of the items, equal to :func:`curate.rewards.registry.score` on each item.
- ``POST /openrlhf`` (alias ``POST /get_reward``): OpenRLHF's remote reward protocol,
  body ``{"query": [...], "prompts": [...], "labels": [...]}`` (other keys ignored), optional
  URL parameters ``answer_type``/``prompt_type``/``progress`` for bare-gold labels; answer
  ``{"rewards": [...], "scores": [...], "extra_logs": {"accuracy": [...], "format": [...],
  "verifier_error": [...]}, "results": [...]}`` (see :mod:`curate.rewards.trainers.openrlhf`).
  A label that cannot be scored scores 0 there (a training run must not stop on one row).

Every request has a deadline (``deadline`` seconds, ``serve-rewards --deadline``, default
300): items it has not finished by then score 0 with ``error: "deadline"`` (HTTP 200), so a
batch of looping programs costs the trainer the deadline, never the sum of the limits.

Guards at the door (:mod:`curate.rl.guard`, before a request reaches the application): headers must
arrive within ``--header-timeout`` seconds (default 10) and a body within ``--body-timeout`` (60),
else HTTP 408; at most ``--max-connections`` open connections (512; past it the oldest one still
sending headers is closed, else the new one gets 503); at most ``--max-queued`` scoring requests in
progress (64; more get HTTP 503 with ``Retry-After``); the token checked on the headers, before a
thread, the work queue or the body; ``/health`` answered on the event loop, outside the work queue.
The event loop's own errors (``accept()`` out of file descriptors, for one) are one line per kind
every 10 seconds, never a traceback per connection.

Guards in the application: a request body larger than ``--max-body-mb`` (default 64) gets HTTP 413 (FastAPI's own
body limit: a declared length is refused before the body is read, a streamed one once it
passes the limit); with a token (``--token`` or ``CURATE_REWARD_TOKEN``, required when
``--host`` is not a loopback address) every request without ``Authorization: Bearer TOKEN``
(or ``?token=TOKEN`` in the URL, for clients such as OpenRLHF's that cannot set headers) gets
HTTP 401 before its body is read. Model-written programs run in the code sandboxes, at most
``--pool-workers`` at once (capped at the cores), under the ``--code-*`` limits.

A malformed body, or a record that cannot be scored (unknown ``answer_type``, missing
gold …), gets HTTP 422 with ``{"detail": "<one readable line>", "errors": [...]}``.
Requests run in a thread pool (64 threads), so concurrent requests are served in
parallel: the time-limited verifiers run in the shared worker processes, the code
verifier in its own sandboxes. For more CPU parallelism on the inline verifiers, run
several server processes (``workers`` > 1).
"""

from __future__ import annotations

import hmac
import json
import os
import threading
from contextlib import asynccontextmanager
from typing import Any, AsyncIterator

from fastapi import FastAPI, Query, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from pydantic import BaseModel, ConfigDict, Field
from starlette.requests import ClientDisconnect

from curate.core.validate import configure
from curate.rewards.counters import counters
from curate.rewards.registry import VERIFIERS, answer_types, score_many
from curate.rewards.trainers.openrlhf import ProtocolError, openrlhf_rewards
from curate.rewards.runtime import limits, sandbox
from curate.rewards.runtime.deadline import deadline_in
from curate.rl import guard
from curate.rl.config import DEFAULT_MAX_BODY_MB, TOKEN_VAR, ServeRewardsConfig

MAX_ITEMS = 100_000
THREADS = 64
DEFAULT_DEADLINE = 300.0
MAX_BODY_VAR = "CURATE_REWARD_MAX_BODY_MB"  # how serve() tells its server processes --max-body-mb


class Item(BaseModel):
    """One response to score against one record."""

    model_config = ConfigDict(extra="forbid")
    record: dict[str, Any]
    response: str


class ScoreRequest(BaseModel):
    """Body of ``POST /score``."""

    model_config = ConfigDict(extra="forbid")
    items: list[Item] = Field(max_length=MAX_ITEMS)
    progress: float | None = Field(default=None, ge=0.0, le=1.0)


class OpenRLHFRequest(BaseModel):
    """Body of ``POST /openrlhf``: OpenRLHF's remote reward request."""

    model_config = ConfigDict(extra="ignore")
    query: list[str] = Field(max_length=MAX_ITEMS)
    prompts: list[str] | None = None
    labels: list[Any] | None = None


def _readable(errors: list[dict[str, Any]]) -> str:
    parts = []
    for e in errors[:5]:
        loc = ".".join(str(x) for x in e.get("loc", ()) if x != "body") or "body"
        parts.append(f"{loc}: {e.get('msg', 'invalid')}")
    more = f" (and {len(errors) - 5} more)" if len(errors) > 5 else ""
    return "; ".join(parts) + more


class TokenGuard:
    """ASGI middleware: a request without the bearer token gets 401 before its body is read.

    The door (:class:`curate.rl.guard.GuardedProtocol`) checks the token first, on the headers; this
    check stays for servers run without it (``uvicorn curate.rl.serve:app``).
    """

    def __init__(self, app: Any, token: str) -> None:
        self.app = app
        self.token = token.encode("utf-8")

    def allowed(self, scope: dict[str, Any]) -> bool:
        """Whether the request carries the token (``Authorization: Bearer`` header, else ``?token=``)."""
        given = guard.token_given(b"?" + scope.get("query_string", b""), list(scope.get("headers", ())))
        return hmac.compare_digest(given, self.token)

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "http" and not self.allowed(scope):
            body = json.dumps({"detail": "missing or wrong bearer token: send Authorization: Bearer TOKEN"}).encode()
            await send({"type": "http.response.start", "status": 401,
                        "headers": [(b"content-type", b"application/json"), (b"www-authenticate", b"Bearer"),
                                    (b"content-length", str(len(body)).encode())]})
            await send({"type": "http.response.body", "body": body})
            return
        await self.app(scope, receive, send)


class QuietDisconnects:
    """ASGI middleware: a client gone before its body arrived (or cut off by a timeout) is not an error to log."""

    def __init__(self, app: Any) -> None:
        self.app = app

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        try:
            await self.app(scope, receive, send)
        except ClientDisconnect:
            pass


def create_app(*, warm: bool = True, deadline: float | None = None, token: str | None = None,
               max_body_mb: float | None = None) -> FastAPI:
    """The FastAPI application (``warm`` starts the verifier workers, and the sandboxes, at start-up).

    ``deadline``: seconds per request (default: ``CURATE_REWARD_DEADLINE``, else 300); ``token``: the
    bearer token requests must carry (default: ``CURATE_REWARD_TOKEN``, else none); ``max_body_mb``:
    the largest request body (default: ``CURATE_REWARD_MAX_BODY_MB``, else 64).
    """
    if deadline is None:
        deadline = float(os.environ.get("CURATE_REWARD_DEADLINE", DEFAULT_DEADLINE))
    token = token or os.environ.get(TOKEN_VAR) or None
    if max_body_mb is None:
        max_body_mb = float(os.environ.get(MAX_BODY_VAR, DEFAULT_MAX_BODY_MB))

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        import asyncio

        import anyio.to_thread

        guard.quiet_loop_errors(asyncio.get_running_loop())
        # every queued scoring request has a thread at once: its deadline runs from its arrival
        limiter = anyio.to_thread.current_default_thread_limiter()
        limiter.total_tokens = max(THREADS, guard.Limits.from_env().max_queued + 8)
        if warm:
            limits.warm_up(wait=False)
            if sandbox.status()[0] == "bwrap":
                sandbox.get_pool().warm_up(wait=False)
        yield

    app = FastAPI(title="curate rewards", version="1", lifespan=lifespan, max_body_size=int(max_body_mb * 2**20))
    if token:
        app.add_middleware(TokenGuard, token=token)
    app.add_middleware(QuietDisconnects)
    fixed: dict[str, Any] = {}

    @app.exception_handler(RequestValidationError)
    async def invalid_body(request: Request, exc: RequestValidationError) -> JSONResponse:
        errors = [{k: v for k, v in e.items() if k in ("loc", "msg", "type")} for e in exc.errors()]
        return JSONResponse(status_code=422, content={"detail": _readable(errors), "errors": errors})

    @app.get("/health")
    async def health() -> dict[str, Any]:  # on the event loop: never behind queued work
        if not fixed:
            fixed.update(verifiers=sorted(VERIFIERS), answer_types=answer_types(),
                         workers=limits.get_pool().size, sandbox=sandbox.current().identity())
        return {"status": "ok", "verifiers": fixed["verifiers"], "answer_types": fixed["answer_types"],
                "workers": fixed["workers"], "counters": counters(), "deadline": deadline,
                "sandbox": fixed["sandbox"], "queued": guard.queued()}

    @app.post("/score")
    def score(body: ScoreRequest) -> Any:
        items = [(it.record, it.response) for it in body.items]
        with deadline_in(deadline):
            results = score_many(items, progress=body.progress, on_record_error="result")
        bad = [{"loc": ["items", i, "record"], "msg": r.error.split(": ", 1)[-1], "type": "record_error"}
               for i, r in enumerate(results) if r.error and r.error.startswith("record_error")]
        if bad:
            return JSONResponse(status_code=422, content={"detail": _readable(bad), "errors": bad})
        return Response(json.dumps({"results": [r.to_dict() for r in results]}), media_type="application/json")

    @app.post("/openrlhf")
    @app.post("/get_reward")
    def openrlhf(body: OpenRLHFRequest, answer_type: str | None = None, prompt_type: str | None = None,
                 progress: float | None = Query(default=None, ge=0.0, le=1.0)) -> Any:
        try:
            with deadline_in(deadline):
                out = openrlhf_rewards(body.query, body.prompts, body.labels, answer_type=answer_type,
                                       prompt_type=prompt_type, progress=progress)
        except ProtocolError as exc:
            err = {"loc": ["body"], "msg": str(exc), "type": "protocol_error"}
            return JSONResponse(status_code=422, content={"detail": str(exc), "errors": [err]})
        return Response(json.dumps(out), media_type="application/json")

    return app


_app_lock = threading.Lock()
_app: FastAPI | None = None


def __getattr__(name: str) -> Any:
    """``curate.rl.serve.app``: the application, built on first access."""
    global _app
    if name == "app":
        with _app_lock:
            if _app is None:
                _app = create_app()
            return _app
    raise AttributeError(name)


def serve(config: ServeRewardsConfig | None = None, **settings: Any) -> None:
    """Run the reward service with uvicorn until interrupted.

    Args:
        config: The settings (see :class:`ServeRewardsConfig`): ``host`` (``127.0.0.1`` for local
            use only; any other needs ``token``), ``port``, ``workers`` (uvicorn server processes, each
            with its own verifier worker pool and sandboxes), ``pool_workers`` (verifier worker processes
            and sandboxes per server process; default and most: the cores the process may use),
            ``log_level``, ``deadline`` (seconds per request, default 300; unfinished items get
            ``error: "deadline"``), ``token``, ``max_body_mb``, the door's limits (``header_timeout``,
            ``body_timeout``, ``max_connections``, ``max_queued``: see :mod:`curate.rl.guard`) and
            ``code`` (the code sandbox's limits).
        **settings: Fields of :class:`ServeRewardsConfig`, instead of or over ``config``.

    Raises:
        UserError: an impossible option (checked by :class:`ServeRewardsConfig`).
    """
    config = configure(ServeRewardsConfig, config, **settings)
    host, port, workers, pool_workers, log_level, deadline = (config.host, config.port, config.workers,
                                                              config.pool_workers, config.log_level, config.deadline)
    import uvicorn

    # read by the app in every server process
    if deadline is not None:
        os.environ["CURATE_REWARD_DEADLINE"] = repr(float(deadline))
    if pool_workers is not None:
        limits.configure(workers=pool_workers)
        os.environ["CURATE_REWARD_WORKERS"] = str(pool_workers)
    os.environ[MAX_BODY_VAR] = repr(float(config.max_body_mb))
    if config.token:
        os.environ[TOKEN_VAR] = config.token
    door = guard.Limits(header_timeout=config.header_timeout, body_timeout=config.body_timeout,
                        max_connections=config.max_connections, max_queued=config.max_queued, token=config.token)
    os.environ.update(guard.environ(door))
    guard.configure(door)
    os.environ.update(sandbox.environ(config.code))
    sandbox.configure(config.code)
    sandbox.announce(config.code)
    uvicorn.run("curate.rl.serve:app", host=host, port=port, workers=workers, log_level=log_level,
                http=guard.GuardedProtocol, backlog=door.room()[1])
