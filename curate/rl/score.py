"""``curate score``: score a file of responses against RL records, sharded and resumable.

Inputs: RL records (any layout :mod:`curate.core.records` reads; ``answer``,
``answer_type``, ``prompt_type``, ``reward`` are used) and a responses file
(JSONL or Parquet with ``id`` and ``response``, several rows per id allowed,
optional ``sample``). The responses file is cut into shards; each shard is
scored with :func:`curate.rewards.registry.score_many` and written to
``scores/<shard>.parquet``; the driver merges them into

* ``OUT/scores.parquet``: ``id, sample, source, verifier, accuracy, format, reward, error``
  (one row per response, in the responses file's order; ``sample`` is the given
  one or the response's rank among those of its id);
* ``OUT/stats.json``: responses in, scored, errored per reason (``unknown_id``,
  ``bad_record``, ``record_error``, ``malformed_response``), and mean accuracy, format
  and reward with verifier errors (timeouts …) per reason, overall, per source and
  per verifier;
* ``OUT/rejects.parquet``: the responses that could not be scored, with the reason;
* ``OUT/scored.jsonl`` (``scored.parquet`` when images are bytes, as verl and LLaVA-OneVision-1.5-RL store
  them): the records with at least one scored response, in their input layout, row for row in records order
  (the same columns; image paths resolved so they still point at their images), with :data:`RECORD_COLUMNS`
  added, written by the one kept-record writer (:func:`curate.core.filters.write_kept`), so the seed's trainer
  and our reader read it as they read the input (``--no-write-records``: not written).

A response that times out or crashes its verifier is scored 0 with its error: it
counts as scored, not errored (the model's output is the problem, not the input).
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from curate.core.validate import configure
from curate.core.errors import UserError, reading_input
from curate.rewards.runtime.sandbox import announce
from curate.rl.config import ScoreConfig, score_records
from curate.executors import Executor, pending, run_stage
from curate.core.io import out_lock, write_parquet
from curate.core.records import BadRecord, Part, iter_rows, split_file
from curate.core.remote import drop_files, local_file, push_files, writing
from curate.rl.golds import GOLDS_FILE, load_golds, write_golds
from curate.core.shards import Shard, ShardContext, ShardTask, resolve_image_root
from curate.core.stats import StageStats, finish_stage, run_header

SCHEMA = pa.schema([("id", pa.string()), ("sample", pa.int32()), ("source", pa.string()), ("verifier", pa.string()),
                    ("accuracy", pa.float64()), ("format", pa.float64()), ("reward", pa.float64()),
                    ("error", pa.string())])
UNKNOWN_SOURCE = "(unknown)"
#: The columns added to each record written back (``OUT/scored.*``): its scored responses, their mean accuracy,
#: format and reward, and the rewards in sample order.
RECORD_COLUMNS = ("responses", "mean_accuracy", "mean_format", "mean_reward", "rewards")
SCORED_STEM = "scored"
_BATCH = 1024


class ScoreTask(ShardTask):
    """Scores one shard of a responses file (``shard.parts`` are row ranges of it)."""

    stage = "score"
    unit = "responses"
    reads_out = (GOLDS_FILE,)  # written by the driver before the shards run (curate.rl.golds)

    def __init__(self, records: Sequence[str], golds: str, config: ScoreConfig) -> None:
        """Score against ``records`` (read once by the driver into ``golds``) with the settings ``config``: the
        training progress, the default answer type and how model-written programs run."""
        self.records = [str(p) for p in records]
        self.progress = config.progress
        self.code = config.code  # how model-written programs run (limits, --trust-code)
        self.answer_type = config.answer_type  # the default of records that name no verifier (curate.rl.golds)
        self.layout = config.part_layout  # the RL layout the records are read in (None: detected row by row)
        self.image_root = resolve_image_root(config.image_root)  # where relative image paths start (None: each file's)
        self.golds = golds  # the run's golds file (curate.rl.golds), written from the records by the driver; a relative
        # path is in OUT (with OUT in a bucket, a node that lacks it fetches it: reads_out)
        self._by_id: dict[str, dict[str, Any]] | None = None
        self._bad: dict[str, tuple[str, str]] = {}
        self._warm = False

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "_by_id": None, "_bad": {}, "_warm": False}

    def settings(self) -> dict[str, Any]:
        """Scores depend on the records, the training progress (dynamic IoU threshold), the default
        answer type, how programs run (their limits, --trust-code, the sandbox found), the layout and the image
        root (VLM-R1's REC reward scales boxes by the image's size)."""
        return {"records": self.records, "progress": self.progress, "answer_type": self.answer_type,
                "code": self.code.identity(), **({"layout": self.layout} if self.layout else {}),
                **({"image_root": self.image_root} if self.image_root else {})}

    def setup(self) -> None:
        """Start the verifier pool (in the background) and load the golds (those of OUT with the first shard),
        once per worker."""
        if not self._warm:
            from curate.rewards.runtime.limits import warm_up
            from curate.rewards.runtime import sandbox

            sandbox.configure(self.code)
            warm_up()  # first: the pool's factory imports math-verify while the golds load
            self._warm = True
        if self._by_id is None and os.path.isabs(self.golds):
            self._by_id, self._bad = load_golds(self.golds)

    def run(self, shard: Shard, work: Path, ctx: ShardContext) -> StageStats:
        """Score the shard's responses; write ``scores/<shard>.parquet``."""
        from curate.rewards.registry import score_many

        self.setup()
        if self._by_id is None:
            self._by_id, self._bad = load_golds(ctx.local(self.golds))
        assert self._by_id is not None
        stats = StageStats()
        rows: list[dict[str, Any]] = []
        pending: list[tuple[int, dict[str, Any], str]] = []

        def flush() -> None:
            results = score_many([(rec, text) for _, rec, text in pending], progress=self.progress,
                                 on_record_error="result")
            for (i, rec, _), result in zip(pending, results):
                row = rows[i]
                row.update(verifier=result.verifier, accuracy=result.accuracy, format=result.format,
                           reward=result.reward, error=result.error)
                if result.error and result.error.startswith("record_error"):
                    stats.error(row["id"], row["source"], "record_error", result.error)
                else:
                    stats.kept(row["source"])
            ctx.progress(len(pending))
            pending.clear()

        for part in shard.parts:
            for row_no, raw, problem in _response_rows(part):
                if problem == "blank":
                    continue
                rid = str(raw.get("id")) if isinstance(raw, dict) and raw.get("id") is not None else f"row:{row_no}"
                rec = self._by_id.get(rid)
                bad = self._bad.get(rid)  # a row that was no record keeps its source
                source = str(rec.get("source")) if rec else bad[1] if bad and bad[1] else UNKNOWN_SOURCE
                stats.seen(source)
                sample = raw.get("sample") if isinstance(raw, dict) else None
                wide = isinstance(sample, int) and not -(1 << 63) <= sample < 1 << 63  # the column is int64
                row = {"id": rid, "sample": sample if isinstance(sample, int) and not wide else None, "source": source,
                       "verifier": None, "accuracy": 0.0, "format": 0.0, "reward": 0.0, "error": None}
                rows.append(row)
                text = raw.get("response") if isinstance(raw, dict) else None
                if wide:
                    problem = f"sample {sample} is not a 64-bit integer"
                if problem is not None or not isinstance(text, str):
                    row["error"] = "malformed_response"
                    stats.error(rid, source, "malformed_response",
                                f"{Path(part.path).name} row {row_no + 1}: {problem or 'no response text'}")
                elif rec is None:
                    reason = "bad_record" if bad else "unknown_id"
                    row["error"] = f"{reason}: {bad[0]}" if bad else reason
                    stats.error(rid, source, reason, row["error"])
                else:
                    pending.append((len(rows) - 1, rec, text))
                    if len(pending) >= _BATCH:
                        flush()
        if pending:
            flush()
        write_parquet(work / "scores" / f"{shard.id}.parquet", pa.Table.from_pylist(rows, schema=SCHEMA))
        return stats


def _response_rows(part: Part) -> Iterator[tuple[int, Any, str | None]]:
    """The raw rows of a part of the responses file; a damaged file is one line naming it, not ``--out``."""
    with reading_input(part.path):
        yield from iter_rows(part)


def plan_response_shards(responses: str | os.PathLike[str], shard_size: int) -> list[Shard]:
    """Shards of a responses file (JSONL or Parquet), ``shard_size`` rows each."""
    path = Path(responses)
    if not path.is_file():
        raise UserError(f"{path}: responses file not found")
    if path.suffix.lower() not in (".jsonl", ".parquet", ".pq"):
        raise UserError(f"{path}: responses must be .jsonl or .parquet with columns id and response")
    if path.suffix.lower() != ".jsonl":
        try:
            names = pq.ParquetFile(path).schema_arrow.names
        except Exception as exc:  # noqa: BLE001 - pyarrow raises several types for a file that is not Parquet
            raise UserError(f"{path}: not a readable Parquet file ({type(exc).__name__}: {str(exc)[:160]})") from None
        missing = {"id", "response"} - set(names)
        if missing:
            raise UserError(f"{path}: responses need the columns id and response (missing {', '.join(sorted(missing))})")
    parts: list[Part] = split_file(path, shard_size)
    return [Shard(i, (p,)) for i, p in enumerate(parts)]


def rank_within_id(ids: pa.Array | pa.ChunkedArray) -> np.ndarray:
    """The rank of every row among the rows of its id, in row order (0, 1, ... per id), on columns.

    One stable sort brings each id's rows together in row order; a row's rank is its
    distance from the first row of its run.
    """
    n = len(ids)
    if n == 0:
        return np.zeros(0, np.int64)
    order = pc.sort_indices(ids).to_numpy()  # stable
    ordered = ids.take(pa.array(order))
    starts = np.ones(n, dtype=bool)
    if n > 1:
        same = pc.fill_null(pc.equal(ordered.slice(1), ordered.slice(0, n - 1)), False)
        starts[1:] = ~np.asarray(same.to_numpy(zero_copy_only=False) if isinstance(same, pa.Array)
                                 else same.combine_chunks().to_numpy(zero_copy_only=False))
    position = np.arange(n)
    first = np.maximum.accumulate(np.where(starts, position, 0))
    rank = np.empty(n, np.int64)
    rank[order] = position - first
    return rank


def _scored_mask(table: pa.Table) -> pa.Array:
    """The rows of a scores table that were scored (a verifier error such as a timeout is scored 0): not an
    unscorable response (no verifier, an error) nor a record error."""
    err = table.column("error").combine_chunks()
    unscorable = pc.and_(pc.is_null(table.column("verifier").combine_chunks()), pc.is_valid(err))
    record_error = pc.fill_null(pc.starts_with(err, "record_error"), False)
    return pc.invert(pc.or_(unscorable, record_error))


def per_record(table: pa.Table) -> dict[str, dict[str, Any]]:
    """The :data:`RECORD_COLUMNS` of each id with a scored response in the scores ``table`` (``rewards`` in sample
    order)."""
    scored = table.filter(_scored_mask(table)).select(["id", "sample", "accuracy", "format", "reward"])
    scored = scored.sort_by([("id", "ascending"), ("sample", "ascending")])
    agg = scored.group_by("id", use_threads=False).aggregate(
        [([], "count_all"), ("accuracy", "mean"), ("format", "mean"), ("reward", "mean"), ("reward", "list")]).to_pydict()
    return {rid: {"responses": agg["count_all"][i], "mean_accuracy": agg["accuracy_mean"][i],
                  "mean_format": agg["format_mean"][i], "mean_reward": agg["reward_mean"][i],
                  "rewards": agg["reward_list"][i]} for i, rid in enumerate(agg["id"])}


def write_scored_records(records: Sequence[str], table: pa.Table, out: Path, *, layout: str | None = None,
                         image_root: str | None = None) -> tuple[str, int]:
    """``OUT/scored.jsonl`` (or ``.parquet``): the records with a scored response, in their input layout, row for
    row in records order, with :data:`RECORD_COLUMNS` added; returns the file name and the rows written.

    The records are read again on the driver, one row at a time, to a scratch file of their lines (image paths
    resolved, bytes kept: :func:`curate.core.filters.kept_line`); an id given by several rows is written once,
    from its last row, the one its responses were scored against (:func:`curate.rl.golds.load_golds`).
    """
    from curate.core.filters import kept_line, write_kept
    from curate.core.shards import plan_shards

    figures = per_record(table)
    scratch = out / f"_{SCORED_STEM}_rows.jsonl"
    last: dict[str, int] = {}
    lines = 0
    with open(scratch, "w", encoding="utf-8") as fh:
        for shard in plan_shards(records, 1 << 30, layout=layout, image_root=image_root):
            for raw, rec in shard.read(with_raw=True):
                if isinstance(rec, BadRecord) or rec["id"] not in figures:
                    continue
                fh.write(kept_line(raw, rec) + "\n")
                last[rec["id"]] = lines
                lines += 1
    order = sorted(last.values())
    ids = {at: rid for rid, at in last.items()}

    def annotate(j: int, row: dict[str, Any]) -> None:
        row.update(figures[ids[order[j]]])

    try:
        name = write_kept(out, SCORED_STEM, [scratch], take=[order], annotate=annotate)
    finally:
        scratch.unlink(missing_ok=True)
    return name, len(order)


def _summaries(table: pa.Table) -> dict[str, Any]:
    """Means and error counts overall, per source and per verifier, computed on columns (group_by)."""
    err = table.column("error").combine_chunks()
    verifier = table.column("verifier").combine_chunks()
    scored = _scored_mask(table)
    has_error = pc.and_(scored, pc.fill_null(pc.greater(pc.utf8_length(err), 0), False))
    kind = pc.if_else(has_error, pc.list_element(pc.split_pattern(pc.fill_null(err, ""), ":", max_splits=1), 0),
                      pa.scalar(None, pa.string()))
    cols = {"all": pa.array(["all"] * table.num_rows, pa.string()),
            "source": table.column("source").combine_chunks().cast(pa.string()),
            "verifier": pc.fill_null(verifier.cast(pa.string()), "(none)"),
            "scored": scored.cast(pa.int64()), "kind": kind}
    for key in ("accuracy", "format", "reward"):
        cols[key] = pc.if_else(scored, pc.fill_null(table.column(key).combine_chunks().cast(pa.float64()), 0.0), 0.0)
    t = pa.table(cols)
    errors_of = t.filter(pc.is_valid(kind))

    def grouped(key: str) -> dict[str, dict[str, Any]]:
        agg = t.group_by(key).aggregate([([], "count_all"), ("scored", "sum"), ("accuracy", "sum"),
                                         ("format", "sum"), ("reward", "sum")]).to_pydict()
        errs: dict[str, dict[str, int]] = {}
        if errors_of.num_rows:
            e = errors_of.group_by([key, "kind"]).aggregate([([], "count_all")]).to_pydict()
            for k, kd, c in zip(e[key], e["kind"], e["count_all"]):
                errs.setdefault(k, {})[kd] = c
        out = {}
        for i, k in enumerate(agg[key]):
            n = agg["scored_sum"][i]
            out[k] = {"responses": agg["count_all"][i], "scored": n,
                      **{f"mean_{m}": (agg[f"{m}_sum"][i] / n if n else None) for m in ("accuracy", "format", "reward")},
                      "verifier_errors": dict(sorted(errs.get(k, {}).items()))}
        return dict(sorted(out.items()))

    empty = {"responses": 0, "scored": 0, "mean_accuracy": None, "mean_format": None, "mean_reward": None,
             "verifier_errors": {}}
    return {"overall": grouped("all").get("all", empty), "per_source": grouped("source"),
            "per_verifier": grouped("verifier")}


def score(inputs: Sequence[str | os.PathLike[str]], config: ScoreConfig | None = None, *,
          executor: Executor | None = None, **settings: Any) -> dict[str, Any]:
    """Score ``config.responses`` against the RL records of ``inputs`` into ``config.out``; returns the stats
    written to ``stats.json``.

    Args:
        inputs: The RL records files or folders (``--records``), checked by :func:`score_records`.
        config: The settings (see :class:`ScoreConfig`).
        executor: An executor (default: local, one worker).
        **settings: fields of :class:`ScoreConfig` (``out=``, ``responses=``...), instead of or over ``config``.
    """
    config = configure(ScoreConfig, config, **settings)
    records = score_records(inputs)
    with writing(config.out) as folder:  # a bucket: shards stream there (curate.core.remote)
        return _score(records, config, folder, executor)


def _score(records: Sequence[Any], config: ScoreConfig, out: Path, executor: Executor | None) -> dict[str, Any]:
    """:func:`score` into the local folder ``out``."""
    responses = config.responses
    seed, shard_size = config.seed, config.shard_size
    shards = plan_response_shards(local_file(responses, "--responses"), shard_size)  # type: ignore[arg-type]
    task = ScoreTask([str(p) if p.is_remote else str(p.path.resolve()) for p in records], GOLDS_FILE, config)
    announce(config.code)  # one line when programs would be refused, or run without a sandbox
    with out_lock(out):  # the golds are written by this run only (the lock is re-entrant: run_stage takes it too)
        if pending(task, shards, out):  # the records are read once here, not once per worker
            write_golds(task.records, out / GOLDS_FILE, config.answer_type, config.part_layout, task.image_root)
            push_files(out, [GOLDS_FILE])  # --out in a bucket: workers on other nodes fetch it (reads_out)
        stats = run_stage(task, shards, out, executor=executor, seed=seed, desc="score responses")
        (out / GOLDS_FILE).unlink(missing_ok=True)  # the workers' copy of the records is done with
        drop_files(out, [GOLDS_FILE])
    tables = [pq.read_table(out / "scores" / f"{s.id}.parquet") for s in shards]
    table = pa.concat_tables(tables) if tables else SCHEMA.empty_table()
    # number the samples of each id in file order where the file gives none
    table = table.set_column(1, "sample", pc.coalesce(table.column("sample").combine_chunks(),
                                                      pa.array(rank_within_id(table.column("id")), pa.int32())))
    write_parquet(out / "scores.parquet", table)
    written = write_scored_records(task.records, table, out, layout=config.part_layout,
                                   image_root=task.image_root) if config.write_records else None
    counts = stats.to_dict()
    header = run_header("score", seed=seed, settings={**task.settings(), "responses": str(responses),
                                                      **({"preset": config.preset} if config.preset else {})})
    result = {**header, "responses_in": counts["records_in"], "scored": counts["records_out"],
              "errored": counts["errored"], **_summaries(table),
              **({"scored_file": written[0], "scored_records": written[1]} if written else {}),
              "timings": counts["timings"]}
    return finish_stage(out, result, stats)
