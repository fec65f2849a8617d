"""``curate score``: score a file of responses against a file of RL records.

:func:`score_files` reads the records (any layout :mod:`curate.records` reads; RL fields
such as ``answer``/``answer_type``/``prompt_type``/``reward`` are kept) and a responses
file (JSONL or Parquet with columns ``id`` and ``response``, several rows per id allowed,
optional ``sample``), scores every response, and writes

- ``OUT/scores.parquet``: ``id``, ``sample``, ``verifier``, ``accuracy``, ``format``,
  ``reward``, ``error`` (one row per response, in the responses file's order; ``sample``
  is the given one or the response's rank among those of its id);
- ``OUT/stats.json``: responses in / scored / errored by reason, and the mean accuracy,
  format and reward with the errors per reason, overall, per source and per verifier.

A response whose id has no record, whose record could not be read, or whose record
cannot be scored (unknown ``answer_type``, malformed gold …), is kept in
``scores.parquet`` with its error (``unknown_id``, ``bad_record: <reason>``,
``record_error: …``) and counted as errored; it never stops the run.
"""

from __future__ import annotations

import json
import time
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from curate.errors import UserError
from curate.rewards.registry import score_many
from curate.rewards.result import RewardResult

BATCH = 2048
SCHEMA = pa.schema([("id", pa.string()), ("sample", pa.int32()), ("verifier", pa.string()), ("accuracy", pa.float64()),
                    ("format", pa.float64()), ("reward", pa.float64()), ("error", pa.string())])


def read_responses(path: str | Path) -> list[tuple[str, int | None, str]]:
    """``(id, sample or None, response)`` rows of a JSONL or Parquet responses file."""
    path = Path(path)
    if not path.is_file():
        raise UserError(f"{path}: responses file not found")
    rows: list[tuple[str, int | None, str]] = []
    if path.suffix.lower() in (".parquet", ".pq"):
        table = pq.read_table(path)
        missing = {"id", "response"} - set(table.column_names)
        if missing:
            raise UserError(f"{path}: responses need the columns id and response (missing {', '.join(sorted(missing))})")
        ids = table.column("id").to_pylist()
        texts = table.column("response").to_pylist()
        samples = table.column("sample").to_pylist() if "sample" in table.column_names else [None] * len(ids)
        return [(str(i), s, t if isinstance(t, str) else "") for i, s, t in zip(ids, samples, texts)]
    with open(path, encoding="utf-8") as fh:
        for n, line in enumerate(fh, 1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except ValueError:
                raise UserError(f"{path}:{n}: not valid JSON; write one object per line") from None
            if not isinstance(row, dict) or "id" not in row or "response" not in row:
                raise UserError(f"{path}:{n}: a response row needs 'id' and 'response'")
            sample = row.get("sample")
            rows.append((str(row["id"]), int(sample) if isinstance(sample, int) else None,
                         row["response"] if isinstance(row["response"], str) else ""))
    return rows


def _summary() -> dict[str, Any]:
    return {"responses": 0, "scored": 0, "accuracy_sum": 0.0, "format_sum": 0.0, "reward_sum": 0.0,
            "errors": Counter()}


def _add(entry: dict[str, Any], result: RewardResult) -> None:
    entry["responses"] += 1
    if result.error is not None and result.error.startswith(("record_error", "bad_record", "unknown_id")):
        entry["errors"][result.error.split(":")[0]] += 1
        return
    entry["scored"] += 1
    entry["accuracy_sum"] += result.accuracy
    entry["format_sum"] += result.format
    entry["reward_sum"] += result.reward
    if result.error is not None:
        entry["errors"][result.error.split(":")[0] if result.error.startswith("verifier_error") else result.error] += 1


def _finish(entry: dict[str, Any]) -> dict[str, Any]:
    n = entry["scored"]
    return {"responses": entry["responses"], "scored": n,
            "mean_accuracy": entry["accuracy_sum"] / n if n else None,
            "mean_format": entry["format_sum"] / n if n else None,
            "mean_reward": entry["reward_sum"] / n if n else None,
            "errors": dict(sorted(entry["errors"].items()))}


def score_files(records: str | Path, responses: str | Path, out: str | Path, *, progress: float | None = None) -> dict:
    """Score ``responses`` against ``records`` into ``out`` (see the module docstring).

    Returns the content written to ``stats.json``.
    """
    from curate.io import write_json, write_parquet
    from curate.records import BadRecord, read_records
    from curate.stats import run_header

    t0 = time.monotonic()
    by_id: dict[str, dict] = {}
    bad_records = Counter()
    bad_ids: dict[str, str] = {}
    for rec in read_records([records]):
        if isinstance(rec, BadRecord):
            bad_records[rec.reason] += 1
            bad_ids[rec.id] = rec.reason
            continue
        by_id[str(rec["id"])] = rec
    rows = read_responses(responses)
    rank: dict[str, int] = defaultdict(int)
    ids, samples, results = [], [], []
    for start in range(0, len(rows), BATCH):
        chunk = rows[start : start + BATCH]
        known = [(i, by_id[rid], text) for i, (rid, _, text) in enumerate(chunk) if rid in by_id]
        scored = dict(zip([k[0] for k in known], score_many([(r, t) for _, r, t in known], progress=progress,
                                                            on_record_error="result")))
        for i, (rid, sample, _) in enumerate(chunk):
            ids.append(rid)
            samples.append(sample if sample is not None else rank[rid])
            rank[rid] += 1
            missing = f"bad_record: {bad_ids[rid]}" if rid in bad_ids else "unknown_id"
            results.append(scored.get(i, RewardResult(0.0, 0.0, 0.0, missing, "")))
    table = pa.table([pa.array(ids, pa.string()), pa.array(samples, pa.int32()),
                      pa.array([r.verifier for r in results], pa.string()),
                      pa.array([r.accuracy for r in results], pa.float64()),
                      pa.array([r.format for r in results], pa.float64()),
                      pa.array([r.reward for r in results], pa.float64()),
                      pa.array([r.error for r in results], pa.string())], schema=SCHEMA)
    overall, per_source, per_verifier = _summary(), defaultdict(_summary), defaultdict(_summary)
    for rid, result in zip(ids, results):
        rec = by_id.get(rid)
        _add(overall, result)
        _add(per_source[str(rec.get("source", "")) if rec else "(unknown)"], result)
        _add(per_verifier[result.verifier or "(none)"], result)
    stats = {
        **run_header("score", settings={"records": str(records), "responses": str(responses), "progress": progress}),
        "records": len(by_id), "bad_records": dict(bad_records),
        "records_without_responses": len(set(by_id) - set(ids)),
        **_finish(overall),
        "per_source": {k: _finish(v) for k, v in sorted(per_source.items())},
        "per_verifier": {k: _finish(v) for k, v in sorted(per_verifier.items())},
        "timings": {"total_s": round(time.monotonic() - t0, 3)},
    }
    out = Path(out)
    write_parquet(out / "scores.parquet", table)
    write_json(out / "stats.json", stats)
    return stats
