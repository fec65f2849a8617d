"""``OUT/history.json``: how an output folder came to be, kept apart from ``stats.json``.

Every file of an output folder is a function of the inputs, the settings and the seed: a run
that was killed and resumed writes the same bytes as a run that went straight through
(``stats.json``, the shards' markers, the report). ``history.json`` is the one file that
differs: what depends on the run's history goes here instead, per stage:

* ``runs``: one entry per finished invocation into the folder (when it finished, the
  command, the wall time per step: the ``timings`` every stage reports, moved here by
  :func:`curate.core.stats.finish_stage`; for ``recaption`` and ``rl-filter`` also how many
  shards it found already done, e.g. by a killed run), and ``resumes``: the invocations that
  found shards done;
* ``generation``: backend counters (requests, attempts, retries per reason, errors per
  reason, seconds) summed over the shards the last invocation ran (a shard's marker keeps
  none of them: they depend on how often it was asked);
* ``unanswered``: requests that failed on the server's side in the last invocation
  (asked again by a rerun), and the server's learned ``choices_per_call``, if any;
* per run, its ``operational`` settings (:data:`OPERATIONAL`).

**Operational settings** change how a run goes, never what it writes: how many requests
are in flight, time-outs and retries, the batch size and device of a local model, what a
server was found to return per call, rows a rollouts file had to skip. They are recorded
here, per run, and left out of the settings that key a resume (:func:`backend_identity`),
so a killed run can be resumed with another ``--concurrency`` or ``--timeout``, while a
change of model, ``--n``, sampling or prompts is still refused. Every generating stage
(``recaption``, ``rl-filter``) uses this one notion.
"""

from __future__ import annotations

import shlex
import sys
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from curate.core.io import read_json, write_json

HISTORY = "history.json"
#: Backend description keys that change how a run goes, not its outputs (see the module docstring).
OPERATIONAL = ("concurrency", "timeout", "max_retries", "choices_per_call", "batch_size", "device", "skipped_rows")


def split_extra(extra: dict[str, Any], prefix: str = "generation.") -> dict[str, Any]:
    """The ``prefix``-ed counters of merged ``StageStats.extra``, without the prefix, sorted."""
    return {k[len(prefix):]: v for k, v in sorted(extra.items()) if k.startswith(prefix)}


def operational_of(described: Mapping[str, Any]) -> dict[str, Any]:
    """The :data:`OPERATIONAL` settings of a backend description (for ``history.json``)."""
    return {k: described[k] for k in OPERATIONAL if k in described}


def backend_identity(described: Mapping[str, Any]) -> dict[str, Any]:
    """What in a backend description decides the answers: all but :data:`OPERATIONAL`.

    The endpoint is left out too when the served model is named: the server may move
    (another host or port) and still serve the same model.
    """
    identity = {k: v for k, v in described.items() if k not in OPERATIONAL}
    if identity.get("model") != identity.get("endpoint"):
        identity.pop("endpoint", None)
    return identity


def command_line() -> str:
    """The command that started this process, shell-quoted."""
    return shlex.join([sys.argv[0].rsplit("/", 1)[-1], *sys.argv[1:]])


def _rounded(timings: Mapping[str, Any]) -> dict[str, Any]:
    """Wall seconds rounded to the microsecond (nested groups, such as a pipeline's steps, kept as groups)."""
    return {k: _rounded(v) if isinstance(v, Mapping) else round(v, 6) if isinstance(v, float) else v
            for k, v in sorted(timings.items())}


def record_run(out: Path, stage: str, *, timings: Mapping[str, Any], shards: int | None = None,
               reused: int | None = None, operational: Mapping[str, Any] | None = None,
               **figures: Any) -> dict[str, Any]:
    """Append this invocation to ``OUT/history.json`` under ``stage`` and set its ``figures``; return the entry.

    Args:
        out: The output folder.
        stage: The stage name (one section per stage).
        timings: Wall seconds per step of this invocation (a group of steps may nest: ``{"steps": {...}}``).
        shards: Shards of the run (None: not recorded).
        reused: Shards found complete when this invocation started (see :func:`curate.executors.pending`).
        operational: This invocation's operational settings (:func:`operational_of`), kept with its run.
        **figures: Counters of the run's history (``generation``, ``unanswered``...).
    """
    path = Path(out) / HISTORY
    try:
        data = read_json(path) if path.exists() else {}
    except (OSError, ValueError):
        data = {}  # a torn or foreign file: history is a record, never a reason to fail a run
    if not isinstance(data, dict):
        data = {}
    entry = data.get(stage) if isinstance(data.get(stage), dict) else {}
    counts = {"shards": shards} if shards is not None else {}
    if reused is not None:
        counts["shards_reused"] = reused
    runs = list(entry.get("runs", [])) + [{"finished": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                                           "command": command_line(), **counts, "timings": _rounded(timings),
                                           **({"operational": dict(operational)} if operational else {})}]
    entry = {**entry, **figures, "runs": runs, "resumes": sum(1 for r in runs if r.get("shards_reused"))}
    data[stage] = entry
    write_json(path, data)
    return entry
