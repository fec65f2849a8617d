"""Stage statistics: what came in, what was kept, dropped or errored, and why.

Every stage counts with a :class:`StageStats`, one per shard; the driver merges
them into the run's ``stats.json``. The invariant ``records_in = records_out +
Σ dropped + Σ errored`` is checked at every merge, overall and per source.
Dropped and errored records are kept as rows (id, source, kind, reason, detail)
and written to ``rejects.parquet``.

Also the rest of a stage's accounting, in sections: ``history.json`` (wall times and resumes, the one file a
resumed run writes differently: :func:`record_run`) and the typed results of ``stats.json`` (:class:`Counts`,
:func:`from_stats`).
"""

from __future__ import annotations

import dataclasses
import functools
import os
import platform
import shlex
import sys
import time
import types
import typing
from collections import Counter
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from curate.core.errors import UserError
from curate.core.io import read_json, text_of, write_json, write_parquet

if TYPE_CHECKING:  # pyarrow loads where rejects become a table: a stage's config, which declares its result, loads without it
    import pyarrow as pa


#: Prefixes of ``StageStats.extra`` keys that tell how a run went rather than what it made (a backend's requests,
#: retries and seconds): left out of shard markers and ``stats.json``, recorded in ``history.json``.
HISTORY_EXTRA = ("generation.",)



@functools.cache
def reject_schema() -> pa.Schema:
    """The columns of ``rejects.parquet``: id, source, kind, reason, detail (all strings)."""
    import pyarrow as pa

    return pa.schema([("id", pa.string()), ("source", pa.string()), ("kind", pa.string()),
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
        import pyarrow as pa
        import pyarrow.compute as pc

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
                                           schema=reject_schema()))

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
        import pyarrow as pa

        table = _rows_table(self.rejects)
        if self.reject_blocks:
            table = pa.concat_tables([table, *self.reject_blocks]).combine_chunks()
        return table


def _rows_table(rows: Sequence[tuple[str, str, str, str, str]]) -> pa.Table:
    import pyarrow as pa

    from curate.core.columns import strings

    cols = list(zip(*rows)) if rows else [[], [], [], [], []]
    return pa.table([strings(c) for c in cols], schema=reject_schema())


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
    left out of it and appended to ``history.json`` (:func:`curate.core.stats.record_run`), the
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


# ``OUT/history.json``: how an output folder came to be, kept apart from ``stats.json``.
# 
# Every file of an output folder is a function of the inputs, the settings and the seed: a run
# that was killed and resumed writes the same bytes as a run that went straight through
# (``stats.json``, the shards' markers, the report). ``history.json`` is the one file that
# differs: what depends on the run's history goes here instead, per stage:
# 
# * ``runs``: one entry per finished invocation into the folder (when it finished, the
#   command, the wall time per step: the ``timings`` every stage reports, moved here by
#   :func:`curate.core.stats.finish_stage`; for ``recaption`` and ``rl-filter`` also how many
#   shards it found already done, e.g. by a killed run), and ``resumes``: the invocations that
#   found shards done;
# * ``generation``: backend counters (requests, attempts, retries per reason, errors per
#   reason, seconds) summed over the shards the last invocation ran (a shard's marker keeps
#   none of them: they depend on how often it was asked);
# * ``unanswered``: requests that failed on the server's side in the last invocation
#   (asked again by a rerun), and the server's learned ``choices_per_call``, if any;
# * per run, its ``operational`` settings (:data:`OPERATIONAL`).
# 
# **Operational settings** change how a run goes, never what it writes: how many requests
# are in flight, time-outs and retries, the batch size and device of a local model, what a
# server was found to return per call, rows a rollouts file had to skip. They are recorded
# here, per run, and left out of the settings that key a resume (:func:`backend_identity`),
# so a killed run can be resumed with another ``--concurrency`` or ``--timeout``, while a
# change of model, ``--n``, sampling or prompts is still refused. Every generating stage
# (``recaption``, ``rl-filter``) uses this one notion.
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


# Typed views of what a stage returns: the verbs read attributes, never string keys.
# 
# A stage function returns the content of its ``stats.json`` (a JSON document
# users and tools read); each stage also has a frozen dataclass holding the
# figures its verb reports, built by :func:`from_stats` in one place. Nested
# sections are dataclasses too (``field`` types that are dataclasses are built
# from the nested mapping).
R = TypeVar("R")


@typing.overload
def from_stats(cls: type[R], stats: Mapping[str, Any]) -> R: ...


@typing.overload
def from_stats(cls: Mapping[str, Any] | str | os.PathLike[str]) -> Any: ...


def from_stats(cls: Any, stats: Any = None) -> Any:
    """A stage's typed result from its ``stats.json`` content.

    ``from_stats(stats)`` picks the class from ``stats["stage"]`` (:data:`curate.stages.STAGES`); ``stats`` may
    also be the path of a ``stats.json`` or of the stage's output folder. ``from_stats(cls, stats)`` builds
    ``cls``. Missing keys keep the field's default; a field whose type is a dataclass is built from the nested
    mapping; the full document is kept in a field named ``stats`` when ``cls`` has one.

    Raises:
        UserError: a path without a readable ``stats.json``, or a stage with no typed result.
    """
    if stats is None:
        stats = _read_stats(cls) if isinstance(cls, (str, os.PathLike)) else cls
        return _build(_result_class(stats), stats)
    return _build(cls, stats)


def _read_stats(path: str | os.PathLike[str]) -> Mapping[str, Any]:
    
    file = Path(path) / "stats.json" if Path(path).is_dir() else Path(path)
    if not file.is_file():
        raise UserError(f"{path}: no stats.json there; give a stage's output folder or its stats.json")
    return read_json(file)


def _result_class(stats: Mapping[str, Any]) -> type:
    from curate.stages import STAGES

    name = stats.get("stage") if isinstance(stats, Mapping) else None
    spec = STAGES.get(str(name))
    if spec is None or spec.result is None:
        known = ", ".join(n for n, s in STAGES.items() if s.result)
        raise UserError(f"stats of stage {name!r}: no typed result for it (stages with one: {known}); "
                        "read the mapping itself")
    return spec.result.load()


def _build(cls: type[R], stats: Mapping[str, Any]) -> R:
    """``cls`` from the matching keys of ``stats`` (see :func:`from_stats`)."""
    hints = typing.get_type_hints(cls)
    values: dict[str, Any] = {}
    for f in dataclasses.fields(cls):  # type: ignore[arg-type]
        if f.name == "stats":
            values["stats"] = dict(stats)
            continue
        if f.name not in stats:
            continue
        value = stats[f.name]
        kind = hints.get(f.name)
        union = typing.get_origin(kind) in (typing.Union, types.UnionType)
        target = next((a for a in typing.get_args(kind) if dataclasses.is_dataclass(a)), kind) if union else kind
        if dataclasses.is_dataclass(target) and isinstance(value, Mapping):
            value = _build(target, value)  # type: ignore[arg-type]
        values[f.name] = value
    return cls(**values)


@dataclasses.dataclass(frozen=True)
class Counts:
    """What every stage accounts for: records in = out + dropped + errored."""

    records_in: int = 0
    dropped: dict[str, int] = dataclasses.field(default_factory=dict)
    errored: dict[str, int] = dataclasses.field(default_factory=dict)

    @property
    def rejected(self) -> bool:
        """Whether any record was dropped or errored."""
        return bool(self.dropped or self.errored)

    def rejects_line(self, out: object) -> str:
        """One line for the command line: the dropped and errored records by reason, and where they are listed."""
        return f"dropped {self.dropped or {}}  errored {self.errored or {}}  → {out}/rejects.parquet"
