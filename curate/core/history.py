"""``OUT/history.json``: how an output folder came to be, kept apart from ``stats.json``.

``stats.json`` is a function of the inputs, the settings and the seed: a run that was
killed and resumed writes the same bytes as a run that went straight through. What
depends on the run's history goes here instead, per stage:

* ``runs``: one entry per finished invocation into the folder (when it finished, the
  command, the wall time per step, how many shards it found already done, e.g. by a
  killed run), and ``resumes``: the invocations that found shards done;
* ``generation``: backend counters (requests, attempts, retries per reason, errors per
  reason, seconds) summed over the last execution of every shard;
* ``unanswered``: requests that failed on the server's side in the last invocation
  (asked again by a rerun), and the server's learned ``choices_per_call``, if any.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from curate.core.io import read_json, write_json
from curate.core.shards import is_complete, marker_path
from curate.core.stats import command_line

HISTORY = "history.json"
#: Backend description keys that a run learns (they depend on the history, not on the settings).
LEARNED = ("choices_per_call",)


def split_extra(extra: dict[str, Any], prefix: str = "generation.") -> dict[str, Any]:
    """The ``prefix``-ed counters of merged ``StageStats.extra``, without the prefix, sorted."""
    return {k[len(prefix):]: v for k, v in sorted(extra.items()) if k.startswith(prefix)}


def without_learned(described: dict[str, Any]) -> dict[str, Any]:
    """A backend description without what the run learned (:data:`LEARNED`)."""
    return {k: v for k, v in described.items() if k not in LEARNED}


def shards_done(out: Path, stage: str, shards: Sequence[Any]) -> int:
    """How many of ``shards`` are complete in ``out`` already (call before running the stage)."""
    return sum(is_complete(marker_path(Path(out), stage, s.id)) for s in shards)


def record_run(out: Path, stage: str, *, timings: dict[str, float], shards: int, reused: int,
               **figures: Any) -> dict[str, Any]:
    """Append this invocation to ``OUT/history.json`` under ``stage`` and set its ``figures``; return the entry.

    Args:
        out: The output folder.
        stage: The stage name (one section per stage).
        timings: Wall seconds per step of this invocation.
        shards: Shards of the run.
        reused: Shards found complete when this invocation started (:func:`shards_done`).
        **figures: Counters of the run's history (``generation``, ``unanswered``...).
    """
    path = Path(out) / HISTORY
    try:
        data = read_json(path) if path.exists() else {}
    except (OSError, ValueError):
        data = {}  # a torn or foreign file: history is a record, never a reason to fail a run
    entry = data.get(stage) if isinstance(data.get(stage), dict) else {}
    runs = list(entry.get("runs", [])) + [{"finished": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                                           "command": command_line(), "shards": shards, "shards_reused": reused,
                                           "timings": {k: round(v, 6) for k, v in sorted(timings.items())}}]
    entry = {**entry, **figures, "runs": runs, "resumes": sum(1 for r in runs if r.get("shards_reused"))}
    data[stage] = entry
    write_json(path, data)
    return entry
