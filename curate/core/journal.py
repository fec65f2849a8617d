"""Per-shard answer journals: generated answers that survive a killed run.

A stage that generates (``curate rl-filter``, ``curate recaption``) appends one
JSON line per finished request to ``OUT/_journal/<stage>/<shard>.jsonl``
(:meth:`curate.core.shards.ShardContext.journal`) as soon as the answer arrives, so a
rerun after a kill asks the backend only for what is missing. Every entry holds
at least ``key`` (the request key) and ``error`` (None for a usable answer).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from types import TracebackType
from typing import Any


def end_line(path: Path) -> None:
    """Terminate a last line cut short by a kill, so that appends start on a fresh line."""
    if not path.exists() or path.stat().st_size == 0:
        return
    with open(path, "rb+") as fh:
        fh.seek(-1, os.SEEK_END)
        if fh.read(1) != b"\n":
            fh.write(b"\n")


def read_journal(path: Path) -> dict[str, dict[str, Any]]:
    """Answers already generated for a shard, by key (a torn last line from a kill is ignored).

    Only entries without an error count; a later entry of a key replaces an earlier one.
    """
    done: dict[str, dict[str, Any]] = {}
    if not path.exists():
        return done
    with open(path, encoding="utf-8") as fh:
        for line in fh:
            try:
                entry = json.loads(line)
            except json.JSONDecodeError:
                continue
            if isinstance(entry, dict) and entry.get("error") is None and "key" in entry:
                done[entry["key"]] = entry
    return done


class JournalWriter:
    """Appends entries to a journal, one flushed JSON line each (use as a context manager).

    Args:
        path: The journal file (created if missing; a torn last line is terminated first).
    """

    def __init__(self, path: Path) -> None:
        end_line(path)
        self.path = path
        self._fh = open(path, "a", encoding="utf-8")  # noqa: SIM115 - closed by close()/__exit__

    def write(self, entry: dict[str, Any]) -> None:
        """Append one entry and flush it to the operating system."""
        self._fh.write(json.dumps(entry, ensure_ascii=False) + "\n")
        self._fh.flush()

    def close(self) -> None:
        """Close the file."""
        self._fh.close()

    def __enter__(self) -> JournalWriter:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()
