"""Typed results of ``curate pack`` (see :mod:`curate.core.results`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from curate.core.results import Counts


@dataclass(frozen=True)
class PackResult(Counts):
    """``curate pack``: records packed into sequences, fill, padding, the compute balance if asked."""

    records_packed: int = 0
    bins: int = 0
    lower_bound_bins: int = 0
    fill_ratio: float = 0.0
    padding_reduction: float | None = None
    sequences: int | None = None
    balance: dict[str, Any] | None = None
