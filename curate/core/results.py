"""Typed views of what a stage returns: the verbs read attributes, never string keys.

A stage function returns the content of its ``stats.json`` (a JSON document
users and tools read); each stage also has a frozen dataclass holding the
figures its verb reports, built by :func:`from_stats` in one place. Nested
sections are dataclasses too (``field`` types that are dataclasses are built
from the nested mapping).
"""

from __future__ import annotations

import dataclasses
import types
import typing
from collections.abc import Mapping
from typing import Any, TypeVar

R = TypeVar("R")


def from_stats(cls: type[R], stats: Mapping[str, Any]) -> R:
    """``cls`` from the matching keys of ``stats`` (missing ones keep the field's default).

    A field whose type is a dataclass is built from the nested mapping; the
    full document is kept in a field named ``stats`` when ``cls`` has one.
    """
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
            value = from_stats(target, value)  # type: ignore[arg-type]
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
