"""Progress display for long work: a rich bar on a terminal, sparse log lines elsewhere."""

from __future__ import annotations

import sys
import time
from types import TracebackType

from rich.console import Console
from rich.progress import (BarColumn, MofNCompleteColumn, Progress, SpinnerColumn, TextColumn,
                           TimeElapsedColumn, TimeRemainingColumn)

#: Console for progress and summaries (stderr, so stdout stays parseable).
console = Console(stderr=True, highlight=False, soft_wrap=True)


class StageProgress:
    """Progress of one step over a known number of items (records or shards).

    On a terminal this is a rich progress bar; otherwise (CI logs, pipes) it
    prints a line at most every ``log_every`` seconds and one at the end.
    """

    def __init__(self, desc: str, total: int, *, unit: str = "records", log_every: float = 30.0,
                 enabled: bool = True) -> None:
        self.desc, self.total, self.unit = desc, total, unit
        self.done = 0
        self._enabled = enabled
        self._tty = console.is_terminal
        self._log_every = log_every
        self._last_log = 0.0
        self._t0 = time.perf_counter()
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
                print(f"{self.desc}: {self.done}/{self.total} {self.unit} ({now - self._t0:.0f}s)", file=sys.stderr)

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        if self._bar is not None:
            self._bar.__exit__(exc_type, exc, tb)
        elif self._enabled and exc is None:
            print(f"{self.desc}: {self.done}/{self.total} {self.unit} done in {time.perf_counter() - self._t0:.1f}s",
                  file=sys.stderr)
