"""Diagnostic worker tasks for tests and benchmarks of :mod:`curate.rewards.runtime.limits`.

They exercise the real worker pool: a task that sleeps past its limit, one that kills
its own worker, one that raises, one that allocates memory.
"""

from __future__ import annotations

import os
import signal
import time


def echo(value: float) -> float:
    """Return ``value``."""
    return float(value)


def sleep(seconds: float) -> float:
    """Sleep, then return ``seconds``."""
    time.sleep(seconds)
    return float(seconds)


def spin(seconds: float) -> float:
    """Busy-loop for ``seconds`` (ignores signals a sleep would not)."""
    end = time.monotonic() + seconds
    n = 0
    while time.monotonic() < end:
        n += 1
    return float(seconds)


def crash() -> float:
    """Kill the worker process running this task."""
    os.kill(os.getpid(), signal.SIGKILL)
    return 0.0


def fail() -> float:
    """Raise ``ZeroDivisionError``."""
    return 1 / 0


def allocate(megabytes: int) -> float:
    """Allocate and touch ``megabytes`` MB; return the size."""
    block = bytearray(megabytes * 1024 * 1024)
    block[::4096] = b"x" * len(block[::4096])
    return float(len(block) // (1024 * 1024))


def pid() -> float:
    """The worker's process id."""
    return float(os.getpid())
