"""The reward server's front door: what a connection may cost before the application sees a request.

:class:`GuardedProtocol` is uvicorn's HTTP protocol with, per connection:

- a **header timeout**: the request line and headers must arrive within ``header_timeout``
  seconds of the connection (or of its first byte, for a later request on a kept-alive
  connection), else the connection gets HTTP 408 and is closed; a head above
  :data:`MAX_HEAD_BYTES` gets HTTP 431;
- the **token** checked on the head, before the application, a thread or the body: a request
  without it gets HTTP 401 and the connection is closed;
- a **body timeout**: the body must arrive within ``body_timeout`` seconds of the head (HTTP 408);
- a **cap on open connections** (``max_connections``, brought under the open-file limit): a
  new connection past it closes the oldest connection still sending its head, and when every
  connection has sent one the new one gets HTTP 503 with ``Retry-After``;
- a **cap on queued work** (``max_queued``): a scoring request (``POST /score``, ``/openrlhf``,
  ``/get_reward``) arriving while that many are in progress gets HTTP 503 with ``Retry-After``
  at once; ``/health`` is never queued.

:func:`quiet_loop_errors` keeps the event loop's error reports (``accept()`` failing with
``EMFILE``, for one) to one line per kind per :data:`REPORT_EVERY` seconds. The limits reach the
server processes through the environment (:func:`environ`, :meth:`Limits.from_env`).
"""

from __future__ import annotations

import asyncio
import hmac
import json
import logging
import os
import resource
import threading
import time
from dataclasses import dataclass
from typing import Any
from urllib.parse import parse_qs

from uvicorn.protocols.http.auto import AutoHTTPProtocol

MAX_HEAD_BYTES = 16 * 1024
RETRY_AFTER = 5
REPORT_EVERY = 10.0
#: File descriptors kept free of connections (logs, imports), and per verifier worker and sandbox pair.
SPARE_FILES, SPARE_PER_WORKER = 48, 8
#: Connections the kernel may hold waiting for ``accept()`` (fewer when the open-file limit is low).
BACKLOG = 2048
WORK_PATHS = frozenset((b"/score", b"/openrlhf", b"/get_reward"))
ENV = {"header_timeout": "CURATE_REWARD_HEADER_TIMEOUT", "body_timeout": "CURATE_REWARD_BODY_TIMEOUT",
       "max_connections": "CURATE_REWARD_MAX_CONNECTIONS", "max_queued": "CURATE_REWARD_MAX_QUEUED",
       "token": "CURATE_REWARD_TOKEN"}
_log = logging.getLogger("curate.serve")


@dataclass(frozen=True)
class Limits:
    """What one connection and the server's queue may hold (see the module docstring)."""

    header_timeout: float
    body_timeout: float
    max_connections: int
    max_queued: int
    token: str | None

    @classmethod
    def from_env(cls) -> Limits:
        """The limits :func:`environ` gave this process (``ServeRewardsConfig``'s defaults for the ones it did not:
        the settings are declared there once)."""
        import dataclasses

        from curate.rl.config import ServeRewardsConfig

        raw = {name: os.environ.get(var) for name, var in ENV.items()}
        kinds = {"header_timeout": float, "body_timeout": float, "max_connections": int, "max_queued": int}
        defaults = {f.name: f.default for f in dataclasses.fields(ServeRewardsConfig) if f.name in kinds}
        given = {name: kinds[name](value) for name, value in raw.items() if value and name in kinds}
        return cls(**{**defaults, **given}, token=raw["token"] or None)

    def connections(self) -> int:
        """``max_connections``, under this process's open-file limit (see :meth:`room`)."""
        return self.room()[0]

    def room(self) -> tuple[int, int]:
        """``(connections, backlog)`` this process's open-file limit (raised to its ceiling first) leaves room for.

        The event loop accepts up to ``backlog`` connections at a time before any of them is seen here, so
        the connections, that burst and the spare descriptors (:data:`SPARE_FILES`, :data:`SPARE_PER_WORKER`)
        together stay under the limit: ``accept()`` does not run out of descriptors.
        """
        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        if soft != hard:
            try:
                resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
                soft = hard
            except (ValueError, OSError):
                pass
        if soft == resource.RLIM_INFINITY:
            return self.max_connections, BACKLOG
        from curate.rewards.runtime.limits import pool_size

        free = max(32, soft - SPARE_FILES - SPARE_PER_WORKER * pool_size())
        backlog = max(16, min(BACKLOG, free // 2))
        return max(16, min(self.max_connections, free - backlog)), backlog


def environ(limits: Limits) -> dict[str, str]:
    """The variables that make :meth:`Limits.from_env` give ``limits`` in the server processes."""
    out = {ENV[name]: str(getattr(limits, name)) for name in ("header_timeout", "body_timeout", "max_connections",
                                                             "max_queued")}
    if limits.token:
        out[ENV["token"]] = limits.token
    return out


class _State:
    """This process's connections that are still sending a head (oldest first) and its queued work."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.limits: Limits | None = None
        self.cap = 0
        self.open: dict[GuardedProtocol, None] = {}
        self.heads: dict[GuardedProtocol, None] = {}
        self.queued = 0

    def current(self) -> Limits:
        if self.limits is None:
            self.limits = Limits.from_env()
            self.cap = self.limits.connections()
        return self.limits


_state = _State()


def queued() -> int:
    """Scoring requests in progress in this process (for ``/health``)."""
    return _state.queued


def configure(limits: Limits | None) -> None:
    """Use ``limits`` in this process from now on (None: :meth:`Limits.from_env` again)."""
    _state.limits = limits
    if limits is not None:
        _state.cap = limits.connections()


def _reply(status: int, reason: str, detail: str, extra: tuple[tuple[str, str], ...] = ()) -> bytes:
    body = json.dumps({"detail": detail}).encode()
    head = [f"HTTP/1.1 {status} {reason}", "content-type: application/json", f"content-length: {len(body)}",
            "connection: close"] + [f"{k}: {v}" for k, v in extra]
    return ("\r\n".join(head) + "\r\n\r\n").encode() + body


BUSY = _reply(503, "Service Unavailable", "the server is at its limit of queued requests: retry later",
              (("retry-after", str(RETRY_AFTER)),))
FULL = _reply(503, "Service Unavailable", "the server is at its limit of open connections: retry later",
              (("retry-after", str(RETRY_AFTER)),))
UNAUTHORIZED = _reply(401, "Unauthorized", "missing or wrong bearer token: send Authorization: Bearer TOKEN",
                      (("www-authenticate", "Bearer"),))
SLOW_HEAD = _reply(408, "Request Timeout", "the request's headers did not arrive in time")
SLOW_BODY = _reply(408, "Request Timeout", "the request's body did not arrive in time")
BIG_HEAD = _reply(431, "Request Header Fields Too Large", "the request's headers are too large")


def token_given(target: bytes, headers: list[tuple[bytes, bytes]]) -> bytes:
    """The bearer token a request carries: ``Authorization: Bearer``, else ``?token=`` in its target."""
    for name, value in headers:
        if name == b"authorization" and value[:7].lower() == b"bearer ":
            return value[7:].strip()
    query = target.partition(b"?")[2]
    return (parse_qs(query).get(b"token") or [b""])[0]


def _head_end(head: bytearray, start: int) -> int:
    """Where the blank line ending a request head starts (-1: not yet); bare ``\\n`` line ends count too."""
    ends = [i for i in (head.find(b"\r\n\r\n", start), head.find(b"\n\n", start)) if i >= 0]
    return min(ends) if ends else -1


def _parse_head(head: bytes) -> tuple[bytes, bytes, list[tuple[bytes, bytes]]]:
    lines = [line.rstrip(b"\r") for line in head.split(b"\n")]
    parts = lines[0].split(b" ")
    method, target = (parts[0], parts[1]) if len(parts) >= 2 else (b"", b"")
    headers = []
    for line in lines[1:]:
        name, sep, value = line.partition(b":")
        if sep:
            headers.append((name.strip().lower(), value.strip()))
    return method, target, headers


class GuardedProtocol(AutoHTTPProtocol):  # type: ignore[misc, valid-type]
    """Uvicorn's HTTP protocol behind the limits of :class:`Limits` (see the module docstring)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._limits = _state.current()
        self._refused = False
        self._head = bytearray()
        self._in_head = True
        self._counted = False
        self._timer: asyncio.TimerHandle | None = None
        self._body_pending = False

    # -- connections
    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        with _state.lock:
            if len(_state.open) >= _state.cap:
                victim = next(iter(_state.heads), None)
            else:
                victim = self
            if victim is None:
                self._refused = True
            else:
                _state.open[self] = None
                _state.heads[self] = None
        if self._refused:
            transport.write(FULL)
            transport.close()
            return
        if victim is not self:
            victim._drop(SLOW_HEAD)
        super().connection_made(transport)
        self._start_timer(self._limits.header_timeout, SLOW_HEAD)

    def connection_lost(self, exc: Exception | None) -> None:
        if self._refused:
            return
        self._cancel_timer()
        with _state.lock:
            _state.open.pop(self, None)
            _state.heads.pop(self, None)
            self._uncount()
        super().connection_lost(exc)

    def _drop(self, reply: bytes) -> None:
        """Answer ``reply`` (unless a response has begun) and close the connection."""
        with _state.lock:
            _state.heads.pop(self, None)
        transport = getattr(self, "transport", None)
        if transport is None or transport.is_closing():
            return
        if self.cycle is None or not getattr(self.cycle, "response_started", False):
            transport.write(reply)
        transport.close()

    def _start_timer(self, seconds: float, reply: bytes) -> None:
        self._cancel_timer()
        self._timer = self.loop.call_later(seconds, self._drop, reply)

    def _cancel_timer(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def _uncount(self) -> None:  # under _state.lock
        if self._counted:
            self._counted = False
            _state.queued -= 1

    # -- requests
    def data_received(self, data: bytes) -> None:
        if self._refused:
            return
        if not self._in_head or (self.cycle is not None and not self.cycle.response_complete):
            super().data_received(data)
            self._check_body()
            return
        if not self._head:
            with _state.lock:
                _state.heads[self] = None
            if self._timer is None:
                self._start_timer(self._limits.header_timeout, SLOW_HEAD)
        start = max(0, len(self._head) - 3)
        self._head += data
        end = _head_end(self._head, start)
        if end < 0:
            if len(self._head) > MAX_HEAD_BYTES:
                self._drop(BIG_HEAD)
            return
        if end > MAX_HEAD_BYTES:
            self._drop(BIG_HEAD)
            return
        method, target, headers = _parse_head(bytes(self._head[:end]))
        if self._limits.token and not hmac.compare_digest(token_given(target, headers),
                                                          self._limits.token.encode("utf-8")):
            self._drop(UNAUTHORIZED)
            return
        busy = False
        with _state.lock:
            _state.heads.pop(self, None)
            if method == b"POST" and target.partition(b"?")[0] in WORK_PATHS:
                if _state.queued >= self._limits.max_queued:
                    busy = True
                else:
                    _state.queued += 1
                    self._counted = True
        if busy:
            self._drop(BUSY)
            return
        self._in_head = False
        whole, self._head = bytes(self._head), bytearray()
        self._cancel_timer()
        self._body_pending = any(n in (b"content-length", b"transfer-encoding") and v not in (b"0",)
                                 for n, v in headers)
        if self._body_pending:
            self._start_timer(self._limits.body_timeout, SLOW_BODY)
        super().data_received(whole)
        self._check_body()

    def _check_body(self) -> None:
        if self._body_pending and self.cycle is not None and not self.cycle.more_body:
            self._body_pending = False
            self._cancel_timer()

    def on_response_complete(self) -> None:
        with _state.lock:
            self._uncount()
        self._cancel_timer()
        self._body_pending = False
        self._in_head = True
        super().on_response_complete()


class _Reports:
    """When each kind of loop error was last reported, and how many since."""

    def __init__(self) -> None:
        self.last: dict[str, float] = {}
        self.skipped: dict[str, int] = {}


def quiet_loop_errors(loop: asyncio.AbstractEventLoop) -> None:
    """Report the loop's errors as one line per kind per :data:`REPORT_EVERY` seconds, without tracebacks."""
    reports = _Reports()

    def handler(_loop: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
        message = str(context.get("message") or "event loop error")
        exc = context.get("exception")
        now = time.monotonic()
        if now - reports.last.get(message, -REPORT_EVERY) < REPORT_EVERY:
            reports.skipped[message] = reports.skipped.get(message, 0) + 1
            return
        skipped = reports.skipped.pop(message, 0)
        reports.last[message] = now
        more = f" ({skipped} more like it since the last report)" if skipped else ""
        _log.warning("serve-rewards: %s%s%s", message, f": {exc}" if exc is not None else "", more)

    loop.set_exception_handler(handler)
