"""Stage statistics: what came in, what was kept, dropped or errored, and why.

Every stage counts with a :class:`StageStats`, one per shard; the driver merges
them into the run's ``stats.json``. The invariant ``records_in = records_out +
Σ dropped + Σ errored`` is checked at every merge, overall and per source.
Dropped and errored records are kept as rows (id, source, kind, reason, detail)
and written to ``rejects.parquet``.
"""

from __future__ import annotations

import os
import platform
import time
from collections import Counter
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from curate.core.arrow import strings
from curate.core.history import command_line, record_run
from curate.core.io import text_of, write_json, write_parquet

#: Prefixes of ``StageStats.extra`` keys that tell how a run went rather than what it made (a backend's requests,
#: retries and seconds): left out of shard markers and ``stats.json``, recorded in ``history.json``.
HISTORY_EXTRA = ("generation.",)

__all__ = ["AccountingError", "HISTORY_EXTRA", "REJECT_SCHEMA", "StageStats", "command_line", "engine_used",
           "finish_stage", "run_header", "stage_result", "versions", "without_timings"]

REJECT_SCHEMA = pa.schema([("id", pa.string()), ("source", pa.string()), ("kind", pa.string()),
                           ("reason", pa.string()), ("detail", pa.string())])


class AccountingError(RuntimeError):
    """Records went missing: a bug, never a user error."""


def _source_entry() -> dict[str, Any]:
    return {"records_in": 0, "records_out": 0, "dropped": Counter(), "errored": Counter()}


@dataclass
class StageStats:
    """Counts for one shard (or, merged, one run) of one stage."""

    records_in: int = 0
    records_out: int = 0
    dropped: Counter = field(default_factory=Counter)
    errored: Counter = field(default_factory=Counter)
    per_source: dict[str, dict[str, Any]] = field(default_factory=dict)
    timings: dict[str, float] = field(default_factory=dict)
    extra: dict[str, Any] = field(default_factory=dict)
    rejects: list[tuple[str, str, str, str, str]] = field(default_factory=list)
    reject_blocks: list[pa.Table] = field(default_factory=list)
    """Rejects listed as columns (:meth:`reject_columns`), in order after the rows of ``rejects``."""

    def _src(self, source: str) -> dict[str, Any]:
        entry = self.per_source.get(source)
        if entry is None:
            entry = self.per_source[source] = _source_entry()
        return entry

    def seen(self, source: str, n: int = 1) -> None:
        """Count ``n`` records coming in."""
        self.records_in += n
        self._src(source)["records_in"] += n

    def kept(self, source: str, n: int = 1) -> None:
        """Count ``n`` records going out."""
        self.records_out += n
        self._src(source)["records_out"] += n

    def drop(self, rid: str, source: str, reason: str, detail: str = "") -> None:
        """Record a record removed on purpose (a filter decision)."""
        self.dropped[reason] += 1
        self._src(source)["dropped"][reason] += 1
        self.rejects.append((rid, source, "dropped", reason, detail[:500]))

    def drop_unlisted(self, source: str, reason: str, n: int) -> None:
        """Count ``n`` records of ``source`` removed on purpose without listing them in the rejects.

        For decisions over many records at once (e.g. resampling's ``not_selected``),
        where one rejects row per record would cost more than it tells.
        """
        self.dropped[reason] += n
        self._src(source)["dropped"][reason] += n

    def error(self, rid: str, source: str, reason: str, detail: str = "") -> None:
        """Record a record that could not be processed (bad input, failing model call...)."""
        self.errored[reason] += 1
        self._src(source)["errored"][reason] += 1
        self.rejects.append((rid, source, "errored", reason, detail[:500]))

    def seen_many(self, counts: Mapping[str, int]) -> None:
        """Count records coming in, ``{source: n}`` at once (bulk form of :meth:`seen`)."""
        for source, n in counts.items():
            if n:
                self.seen(source, int(n))

    def kept_many(self, counts: Mapping[str, int]) -> None:
        """Count records going out, ``{source: n}`` at once (bulk form of :meth:`kept`)."""
        for source, n in counts.items():
            if n:
                self.kept(source, int(n))

    def reject_many(self, kind: str, reason: str, ids: Sequence[str], sources: Sequence[str],
                    details: Sequence[str] | str = "") -> None:
        """Record many dropped (``kind="dropped"``) or errored records with one reason (bulk form).

        ``details`` is one string for all of them or one per record.
        """
        if kind not in ("dropped", "errored"):
            raise ValueError(f"kind must be dropped or errored, got {kind!r}")
        if not len(ids):
            return
        counter = self.dropped if kind == "dropped" else self.errored
        counter[reason] += len(ids)
        for source, n in Counter(sources).items():
            self._src(source)[kind][reason] += n
        texts = [details[:500]] * len(ids) if isinstance(details, str) else [d[:500] for d in details]
        self.rejects.extend(zip(ids, sources, [kind] * len(ids), [reason] * len(ids), texts))

    def reject_columns(self, kind: str, reason: str, ids: pa.Array, sources: pa.Array,
                       details: pa.Array | str = "") -> None:
        """Columnar form of :meth:`reject_many`: the rows stay one Arrow block, no Python object per record.

        Args:
            kind: ``dropped`` or ``errored``.
            reason: the reason of every row.
            ids: the rejected ids (strings).
            sources: their sources (strings, same length).
            details: one string for all of them, or a string array (each cut to 500 characters).
        """
        if kind not in ("dropped", "errored"):
            raise ValueError(f"kind must be dropped or errored, got {kind!r}")
        n = len(ids)
        if not n:
            return
        counter = self.dropped if kind == "dropped" else self.errored
        counter[reason] += n
        for entry in pc.value_counts(sources).to_pylist():
            self._src(entry["values"])[kind][reason] += entry["counts"]
        text = (pa.repeat(pa.scalar(details[:500], pa.string()), n) if isinstance(details, str)
                else pc.utf8_slice_codeunits(details.cast(pa.string()), 0, 500))
        self.reject_blocks.append(pa.table([ids.cast(pa.string()), sources.cast(pa.string()),
                                            pa.repeat(pa.scalar(kind, pa.string()), n),
                                            pa.repeat(pa.scalar(reason, pa.string()), n), text],
                                           schema=REJECT_SCHEMA))

    def _append_rejects(self, other: StageStats) -> None:
        """Add ``other``'s rejects after this one's, keeping their order (rows before blocks)."""
        if self.reject_blocks and other.rejects:
            self.reject_blocks.append(_rows_table(other.rejects))
        else:
            self.rejects.extend(other.rejects)
        self.reject_blocks.extend(other.reject_blocks)

    @contextmanager
    def timer(self, step: str) -> Iterator[None]:
        """Add the wall time of a block to ``timings[step]``."""
        t0 = time.perf_counter()
        try:
            yield
        finally:
            self.timings[step] = self.timings.get(step, 0.0) + time.perf_counter() - t0

    def check(self) -> None:
        """Raise :class:`AccountingError` unless in = out + dropped + errored, overall and per source."""
        def balance(entry: dict[str, Any] | StageStats, label: str) -> None:
            get = entry.get if isinstance(entry, dict) else lambda k: getattr(entry, k)
            total = get("records_out") + sum(get("dropped").values()) + sum(get("errored").values())
            if get("records_in") != total:
                raise AccountingError(f"{label}: records_in {get('records_in')} != out + dropped + errored {total}")
        balance(self, "overall")
        for source, entry in self.per_source.items():
            balance(entry, f"source {source}")

    def merge(self, other: StageStats) -> StageStats:
        """Add another shard's counts into this one (in place) and return self."""
        self.records_in += other.records_in
        self.records_out += other.records_out
        self.dropped.update(other.dropped)
        self.errored.update(other.errored)
        for source, entry in other.per_source.items():
            mine = self._src(source)
            mine["records_in"] += entry["records_in"]
            mine["records_out"] += entry["records_out"]
            mine["dropped"].update(entry["dropped"])
            mine["errored"].update(entry["errored"])
        for step, seconds in other.timings.items():
            self.timings[step] = self.timings.get(step, 0.0) + seconds
        for key, value in other.extra.items():
            if isinstance(value, (int, float)) and not isinstance(value, bool) and isinstance(self.extra.get(key, 0), (int, float)):
                self.extra[key] = self.extra.get(key, 0) + value
            elif key not in self.extra:
                self.extra[key] = value
        self._append_rejects(other)
        return self

    def then(self, nxt: StageStats) -> StageStats:
        """Compose with the next step of a stage, whose input is exactly this step's output.

        The result counts ``records_in`` of this step, ``records_out`` of the next,
        and the drops and errors of both.

        Raises:
            AccountingError: the next step did not see exactly this step's output.
        """
        if nxt.records_in != self.records_out:
            raise AccountingError(f"next step saw {nxt.records_in} records, previous gave {self.records_out}")
        result = StageStats(records_in=self.records_in, records_out=nxt.records_out,
                            dropped=self.dropped + nxt.dropped, errored=self.errored + nxt.errored,
                            timings=dict(self.timings), extra=dict(self.extra), rejects=list(self.rejects),
                            reject_blocks=list(self.reject_blocks))
        result._append_rejects(nxt)
        for key, value in nxt.timings.items():
            result.timings[key] = result.timings.get(key, 0.0) + value
        result.extra.update(nxt.extra)
        for source in sorted(set(self.per_source) | set(nxt.per_source)):
            a = self.per_source.get(source, _source_entry())
            b = nxt.per_source.get(source, _source_entry())
            if b["records_in"] != a["records_out"]:
                raise AccountingError(f"source {source}: next step saw {b['records_in']}, previous gave {a['records_out']}")
            result.per_source[source] = {"records_in": a["records_in"], "records_out": b["records_out"],
                                         "dropped": a["dropped"] + b["dropped"], "errored": a["errored"] + b["errored"]}
        result.check()
        return result

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready counts (rejects excluded: they go to ``rejects.parquet``)."""
        return {
            "records_in": self.records_in,
            "records_out": self.records_out,
            "dropped": dict(sorted(self.dropped.items())),
            "errored": dict(sorted(self.errored.items())),
            "per_source": {
                s: {"records_in": e["records_in"], "records_out": e["records_out"],
                    "dropped": dict(sorted(e["dropped"].items())), "errored": dict(sorted(e["errored"].items()))}
                for s, e in sorted(self.per_source.items())
            },
            "timings": {k: round(v, 6) for k, v in sorted(self.timings.items())},
            **({"extra": self.extra} if self.extra else {}),
        }

    @staticmethod
    def history_free(counts: dict[str, Any]) -> dict[str, Any]:
        """:meth:`to_dict`'s content without what depends on how the run went: ``timings`` (wall seconds) and
        the :data:`HISTORY_EXTRA` counters. What a shard's marker holds, so a resumed run writes the same bytes."""
        out = {k: v for k, v in counts.items() if k != "timings"}
        if "extra" in counts:
            extra = {k: v for k, v in counts["extra"].items() if not k.startswith(HISTORY_EXTRA)}
            if extra:
                out["extra"] = extra
            else:
                del out["extra"]
        return out

    @classmethod
    def from_dict(cls, data: dict[str, Any], rejects: Iterable[tuple[str, str, str, str, str]] = ()) -> StageStats:
        """Inverse of :meth:`to_dict`."""
        stats = cls(records_in=data["records_in"], records_out=data["records_out"],
                    dropped=Counter(data["dropped"]), errored=Counter(data["errored"]),
                    timings=dict(data.get("timings", {})), extra=dict(data.get("extra", {})),
                    rejects=list(rejects))
        for source, entry in data.get("per_source", {}).items():
            stats.per_source[source] = {"records_in": entry["records_in"], "records_out": entry["records_out"],
                                        "dropped": Counter(entry["dropped"]), "errored": Counter(entry["errored"])}
        return stats

    def rejects_table(self) -> pa.Table:
        """The dropped and errored records as a table (id, source, kind, reason, detail), one chunk."""
        table = _rows_table(self.rejects)
        if self.reject_blocks:
            table = pa.concat_tables([table, *self.reject_blocks]).combine_chunks()
        return table


def _rows_table(rows: Sequence[tuple[str, str, str, str, str]]) -> pa.Table:
    cols = list(zip(*rows)) if rows else [[], [], [], [], []]
    return pa.table([strings(c) for c in cols], schema=REJECT_SCHEMA)


#: Engines (``ray``) that ran shards in this process since the last :func:`finish_stage`.
_ENGINES: set[str] = set()


def engine_used(name: str) -> None:
    """Note that ``name`` (``ray``) ran shards of the stage being run: :func:`versions` lists it until the stage's
    :func:`finish_stage` (an installed library that ran nothing is not part of how the outputs were made)."""
    _ENGINES.add(name)


def versions() -> dict[str, str]:
    """Versions of Python and the libraries that shape outputs (Ray only when it ran shards: :func:`engine_used`)."""
    from importlib import metadata  # here: its import is for the run's header only

    out = {"python": platform.python_version()}
    for dist in ("curate", "torch", "open_clip_torch", "transformers", "tokenizers", "faiss-cpu",
                 "numpy", "pyarrow", "webdataset", "pillow", "math-verify", "ray"):
        if dist == "ray" and dist not in _ENGINES:  # installed is not used
            continue
        try:
            out[dist] = metadata.version(dist)
        except metadata.PackageNotFoundError:
            continue
    return out


def run_header(stage: str, *, seed: int | None = None, settings: dict[str, Any] | None = None) -> dict[str, Any]:
    """The fields every ``stats.json`` starts with: stage, command, versions, seed and settings."""
    header: dict[str, Any] = {"stage": stage, "command": command_line(), "versions": versions()}
    if seed is not None:
        header["seed"] = seed
    if settings:
        header["settings"] = settings
    return header


def stage_result(stage: str, stats: StageStats, *, seed: int | None = None, settings: dict[str, Any] | None = None,
                 out_key: str = "records_out", inputs: Any = None, **extra: Any) -> dict[str, Any]:
    """The ``stats.json`` content every stage starts from: :func:`run_header`, the record counts (records in,
    out under ``out_key``, dropped and errored by reason, per source), the inputs, then the stage's own ``extra``."""
    counts = stats.to_dict()
    result: dict[str, Any] = {**run_header(stage, seed=seed, settings=settings)}
    if inputs is not None:
        result["inputs"] = [text_of(p) if isinstance(p, (str, os.PathLike)) else str(p) for p in inputs]
    result.update({"records_in": counts["records_in"], out_key: counts["records_out"], "dropped": counts["dropped"],
                   "errored": counts["errored"], "per_source": counts["per_source"]})
    result.update(extra)
    return result


def without_timings(result: Mapping[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """``result`` without its wall times, and those times: every ``timings`` key (a mapping of numbers) at the
    top level or inside nested mappings (a pipeline's ``steps``), the nested ones under their path in the
    second value (``{"wall": 3.1, "steps": {"embed": {"model": 1.2}}}``)."""
    kept: dict[str, Any] = {}
    times: dict[str, Any] = {}
    for key, value in result.items():
        if key == "timings" and isinstance(value, Mapping):
            times.update(value)
        elif isinstance(value, Mapping):
            inner, inner_times = without_timings(value)
            kept[key] = inner
            if inner_times:
                times[key] = inner_times
        else:
            kept[key] = value
    return kept, times


def finish_stage(out: str | os.PathLike[str], result: dict[str, Any], stats: StageStats | None = None) -> dict[str, Any]:
    """The last step of every stage driver: write ``OUT/rejects.parquet``, ``OUT/stats.json`` and the run's wall
    times to ``OUT/history.json``.

    Every verb ends here once its own outputs are in place, so what each finished
    run should leave behind (a report page, a notification) is one call added at
    the end of this function. ``stats.json`` is a function of the inputs, settings and seed:
    the ``timings`` of ``result`` (wall seconds, also nested ones: :func:`without_timings`) are
    left out of it and appended to ``history.json`` (:func:`curate.core.history.record_run`), the
    one file of a folder that differs between a straight and a killed-and-resumed run.

    Args:
        out: the stage's output folder.
        result: the ``stats.json`` content (starting with :func:`run_header`).
        stats: the run's merged stats; its dropped and errored rows go to
            ``rejects.parquet`` (None: the stage writes no rejects file).

    Returns:
        ``result``, unchanged (its ``timings`` included, for a caller in Python).
    """
    out = Path(out)
    if stats is not None:
        write_parquet(out / "rejects.parquet", stats.rejects_table())
    content, timings = without_timings(result)
    if timings:
        record_run(out, str(result.get("stage", "stage")), timings=timings)
    write_json(out / "stats.json", content)
    _ENGINES.clear()  # the next stage of this process lists what it used
    return result
