"""A per-call deadline for scoring (``serve-rewards --deadline``).

:func:`curate.rewards.registry.score_many` sets it for the duration of one call. Work that
has not finished when it passes scores 0 with ``error="deadline"``: items not yet
started are not started, a code sandbox gets at most the time left, and work in
the verifier worker pool is cut (:meth:`WorkerPool.run` ``until``).
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar

DEADLINE = "deadline"  #: the error of every item cut by the deadline

_UNTIL: ContextVar[float | None] = ContextVar("curate_reward_deadline", default=None)


def until() -> float | None:
    """The current deadline (``time.monotonic()`` clock), or None."""
    return _UNTIL.get()


def remaining() -> float | None:
    """Seconds left before the deadline (may be negative), or None without one."""
    t = _UNTIL.get()
    return None if t is None else t - time.monotonic()


def passed() -> bool:
    """Whether a deadline is set and has passed."""
    left = remaining()
    return left is not None and left <= 0


@contextmanager
def deadline_in(seconds: float | None) -> Iterator[float | None]:
    """Set a deadline ``seconds`` from now (None: keep the outer one) for a ``with`` block."""
    if seconds is None:
        yield _UNTIL.get()
        return
    t = time.monotonic() + seconds
    outer = _UNTIL.get()
    token = _UNTIL.set(t if outer is None else min(t, outer))
    try:
        yield _UNTIL.get()
    finally:
        _UNTIL.reset(token)
