"""The typed result of ``curate dedup`` (see :mod:`curate.core.results`)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from curate.core.results import Counts


@dataclass(frozen=True)
class DedupResult(Counts):
    """``curate dedup``: records kept, copies removed by kind, benchmark overlap, records written."""

    records_out: int = 0
    duplicates: dict[str, int] = field(default_factory=dict)
    benchmark_overlap: dict[str, Any] | None = None
    records_written: dict[str, Any] | None = None
