"""Typed views of what a stage returns: the verbs read attributes, never string keys.

A stage function returns the content of its ``stats.json`` (a JSON document
users and tools read); each stage also has a frozen dataclass holding the
figures its verb reports, built by :func:`from_stats` in one place. Nested
sections are dataclasses too (``field`` types that are dataclasses are built
from the nested mapping).
"""

from __future__ import annotations

import dataclasses
import os
import types
import typing
from collections.abc import Mapping
from pathlib import Path
from typing import Any, TypeVar

from curate.core.errors import UserError

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
    from curate.core.io import read_json

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
