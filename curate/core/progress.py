"""Progress display for long work: a rich bar on a terminal, sparse log lines with rate and ETA elsewhere; how much
is said (``curate --quiet`` / ``--verbose``); other libraries' progress bars kept out of it.

The level lives in the environment (``CURATE_VERBOSITY``: -1 quiet, 0 normal, 1 verbose) so that worker processes
and a recipe's steps say as much as their driver.
"""

from __future__ import annotations

import os
import sys
import time
from types import TracebackType

from rich.console import Console
from rich.progress import (BarColumn, MofNCompleteColumn, Progress, SpinnerColumn, TextColumn,
                           TimeElapsedColumn, TimeRemainingColumn)

QUIET, NORMAL, VERBOSE = -1, 0, 1
_LEVEL_ENV = "CURATE_VERBOSITY"
#: Seconds between two log lines outside a terminal, per level.
LOG_EVERY = {NORMAL: 30.0, VERBOSE: 5.0}


def verbosity() -> int:
    """How much is said: :data:`QUIET` (errors only), :data:`NORMAL` or :data:`VERBOSE`."""
    try:
        return max(QUIET, min(VERBOSE, int(os.environ.get(_LEVEL_ENV, "0"))))
    except ValueError:
        return NORMAL


#: Console for progress and summaries (stderr, so stdout stays parseable); silent with ``--quiet``.
console = Console(stderr=True, highlight=False, soft_wrap=True, quiet=verbosity() == QUIET)


def set_verbosity(level: int) -> None:
    """Say less (:data:`QUIET`: errors only), as usual or more (:data:`VERBOSE`: the libraries' own progress bars
    and log lines, progress lines every 5 s), here and in the processes started from here."""
    os.environ[_LEVEL_ENV] = str(level)
    console.quiet = level == QUIET
    silence_libraries(level)


def silence_libraries(level: int | None = None) -> None:
    """Keep other libraries' progress bars (transformers' ``Loading weights``, huggingface_hub's downloads) out of
    curate's output unless :data:`VERBOSE`; with :data:`QUIET` their warnings too. A variable the user set wins."""
    level = verbosity() if level is None else level
    if level >= VERBOSE:
        for key in _SET_HERE:  # set by a quieter level before: the libraries speak again
            os.environ.pop(key, None)
        _SET_HERE.clear()
        return
    _set_default("HF_HUB_DISABLE_PROGRESS_BARS", "1")  # read by huggingface_hub, and by transformers
    if level == QUIET:
        _set_default("TRANSFORMERS_VERBOSITY", "error")
    if os.environ["HF_HUB_DISABLE_PROGRESS_BARS"] != "1":
        return
    if "huggingface_hub" in sys.modules:  # imported already: the variable was read
        from huggingface_hub.utils import disable_progress_bars

        disable_progress_bars()
    if "transformers" in sys.modules:
        from transformers.utils import logging as transformers_logging

        transformers_logging.disable_progress_bar()
        if level == QUIET:
            transformers_logging.set_verbosity_error()


_SET_HERE: set[str] = set()


def _set_default(key: str, value: str) -> None:
    """Set an environment variable the user did not set, remembering that it was set here."""
    if key not in os.environ:
        os.environ[key] = value
        _SET_HERE.add(key)


def note(line: str) -> None:
    """A line for the user on stderr, as it is (no markup), unless ``--quiet``."""
    if verbosity() != QUIET:
        print(line, file=sys.stderr)


def duration(seconds: float) -> str:
    """``42s``, ``3m05s``, ``2h07m``."""
    s = max(0, int(round(seconds)))
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m{s % 60:02d}s"
    return f"{s // 3600}h{s % 3600 // 60:02d}m"


def _rate(per_second: float) -> str:
    if per_second >= 100:
        return f"{per_second:,.0f}"
    return f"{per_second:.3g}"


def log_line(desc: str, done: int, total: int, unit: str, elapsed: float) -> str:
    """A progress line for logs: count, share, elapsed time, rate and the time left at that rate, e.g.
    ``embed concepts: 311,296/500,000 concepts (62%) 31s, 10,042 concepts/s, eta 19s``."""
    share = f" ({100 * done / total:.0f}%)" if total else ""
    line = f"{desc}: {done:,}/{total:,} {unit}{share} {duration(elapsed)}"
    if done and elapsed > 0:
        rate = done / elapsed
        line += f", {_rate(rate)} {unit}/s"
        if total > done:
            line += f", eta {duration((total - done) / rate)}"
    return line


class StageProgress:
    """Progress of one step over a known number of items (records or shards).

    On a terminal this is a rich progress bar; otherwise (CI logs, pipes) it prints a line with the rate and the
    time left at most every ``log_every`` seconds (30, 5 with ``--verbose``) and one at the end; nothing with
    ``--quiet``.
    """

    def __init__(self, desc: str, total: int, *, unit: str = "records", log_every: float | None = None,
                 enabled: bool = True) -> None:
        self.desc, self.total, self.unit = desc, total, unit
        self.done = 0
        level = verbosity()
        self._enabled = enabled and level != QUIET
        self._tty = console.is_terminal
        self._log_every = LOG_EVERY.get(level, LOG_EVERY[NORMAL]) if log_every is None else log_every
        self._t0 = time.perf_counter()
        self._last_log = self._t0
        self._bar: Progress | None = None
        self._task = None

    def __enter__(self) -> StageProgress:
        if self._enabled and self._tty:
            self._bar = Progress(SpinnerColumn(), TextColumn("[bold]{task.description}"), BarColumn(),
                                 MofNCompleteColumn(), TextColumn(self.unit), TimeElapsedColumn(),
                                 TextColumn("eta"), TimeRemainingColumn(), console=console, transient=False)
            self._bar.__enter__()
            self._task = self._bar.add_task(self.desc, total=self.total)
        return self

    def advance(self, n: int = 1) -> None:
        """Mark ``n`` more items done."""
        self.done += n
        if self._bar is not None:
            self._bar.update(self._task, advance=n)
        elif self._enabled:
            now = time.perf_counter()
            if now - self._last_log >= self._log_every:
                self._last_log = now
                print(log_line(self.desc, self.done, self.total, self.unit, now - self._t0), file=sys.stderr)

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        if self._bar is not None:
            self._bar.__exit__(exc_type, exc, tb)
        elif self._enabled and exc is None:
            elapsed = time.perf_counter() - self._t0
            rate = f", {_rate(self.done / elapsed)} {self.unit}/s" if self.done and elapsed > 0 else ""
            print(f"{self.desc}: {self.done:,}/{self.total:,} {self.unit} done in {elapsed:.1f}s{rate}",
                  file=sys.stderr)
