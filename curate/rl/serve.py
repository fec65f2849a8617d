"""HTTP service for the reward verifiers (FastAPI + uvicorn).

Endpoints:

- ``GET /health``: ``{"status": "ok", "verifiers": [...], "answer_types": [...],
  "workers": n, "counters": {...}}``.
- ``POST /score``: body ``{"items": [{"record": {...}, "response": "..."}, ...],
  "progress": null}`` (``progress``, optional, is the training fraction for the dynamic IoU
  threshold); answer ``{"results": [{"accuracy", "format", "reward", "error", "verifier"}, ...]}``
  in the order of the items, equal to :func:`curate.rewards.score` on each item.
- ``POST /openrlhf`` (alias ``POST /get_reward``): OpenRLHF's remote reward protocol,
  body ``{"query": [...], "prompts": [...], "labels": [...]}`` (other keys ignored), optional
  URL parameters ``answer_type``/``prompt_type``/``progress`` for bare-gold labels; answer
  ``{"rewards": [...], "scores": [...], "extra_logs": {"accuracy": [...], "format": [...],
  "verifier_error": [...]}, "results": [...]}`` (see :mod:`curate.rewards.trainers.openrlhf`).
  A label that cannot be scored scores 0 there (a training run must not stop on one row).

Every request has a deadline (``deadline`` seconds, ``serve-rewards --deadline``, default
300): items it has not finished by then score 0 with ``error: "deadline"`` (HTTP 200), so a
batch of looping programs costs the trainer the deadline, never the sum of the limits.

A malformed body, or a record that cannot be scored (unknown ``answer_type``, missing
gold …), gets HTTP 422 with ``{"detail": "<one readable line>", "errors": [...]}``.
Requests run in a thread pool (64 threads), so concurrent requests are served in
parallel: the time-limited verifiers run in the shared worker processes, the code
verifier in its own sandboxes. For more CPU parallelism on the inline verifiers, run
several server processes (``workers`` > 1).
"""

from __future__ import annotations

import json
import os
import threading
from contextlib import asynccontextmanager
from typing import Any, AsyncIterator

from fastapi import FastAPI, Query, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from pydantic import BaseModel, ConfigDict, Field

from curate import rewards
from curate.core.validate import configure
from curate.rewards.trainers.openrlhf import ProtocolError, openrlhf_rewards
from curate.rewards.runtime import limits
from curate.rewards.runtime.deadline import deadline_in
from curate.rl.config import ServeRewardsConfig

MAX_ITEMS = 100_000
THREADS = 64
DEFAULT_DEADLINE = 300.0


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


def create_app(*, warm: bool = True, deadline: float | None = None) -> FastAPI:
    """The FastAPI application (``warm`` starts the verifier workers at start-up).

    ``deadline``: seconds per request (default: ``CURATE_REWARD_DEADLINE``, else 300).
    """
    if deadline is None:
        deadline = float(os.environ.get("CURATE_REWARD_DEADLINE", DEFAULT_DEADLINE))

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        import anyio.to_thread

        anyio.to_thread.current_default_thread_limiter().total_tokens = THREADS
        if warm:
            limits.warm_up(wait=False)
        yield

    app = FastAPI(title="curate rewards", version="1", lifespan=lifespan)

    @app.exception_handler(RequestValidationError)
    async def invalid_body(request: Request, exc: RequestValidationError) -> JSONResponse:
        errors = [{k: v for k, v in e.items() if k in ("loc", "msg", "type")} for e in exc.errors()]
        return JSONResponse(status_code=422, content={"detail": _readable(errors), "errors": errors})

    @app.get("/health")
    def health() -> dict[str, Any]:
        return {
            "status": "ok",
            "verifiers": sorted(rewards.VERIFIERS),
            "answer_types": rewards.answer_types(),
            "workers": limits.get_pool().size,
            "counters": rewards.counters(),
            "deadline": deadline,
        }

    @app.post("/score")
    def score(body: ScoreRequest) -> Any:
        items = [(it.record, it.response) for it in body.items]
        with deadline_in(deadline):
            results = rewards.score_many(items, progress=body.progress, on_record_error="result")
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
            use only), ``port``, ``workers`` (uvicorn server processes, each with its own verifier
            worker pool), ``pool_workers`` (verifier worker processes per server process; default:
            the cores the process may use), ``log_level`` and ``deadline`` (seconds per request, default 300;
            unfinished items get ``error: "deadline"``).
        **settings: Fields of :class:`ServeRewardsConfig`, instead of or over ``config``.

    Raises:
        UserError: an impossible option (checked by :class:`ServeRewardsConfig`).
    """
    config = configure(ServeRewardsConfig, config, **settings)
    host, port, workers, pool_workers, log_level, deadline = (config.host, config.port, config.workers,
                                                              config.pool_workers, config.log_level, config.deadline)
    import uvicorn

    if deadline is not None:
        os.environ["CURATE_REWARD_DEADLINE"] = repr(float(deadline))  # read by the app in every server process
    if pool_workers is not None:
        limits.configure(workers=pool_workers)
        os.environ["CURATE_REWARD_WORKERS"] = str(pool_workers)
    uvicorn.run("curate.rl.serve:app", host=host, port=port, workers=workers, log_level=log_level)
