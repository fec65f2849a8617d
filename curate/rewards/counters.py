"""Process-wide reward counters: calls per verifier and errors per reason (``curate.rewards.counters.counters()``)."""

from __future__ import annotations

import threading
from collections import Counter

_lock = threading.Lock()
_counts: Counter = Counter()


def count(verifier: str, error: str | None) -> None:
    """Count one call of ``verifier`` and its error reason (``verifier_error:X`` counts as ``verifier_error``)."""
    with _lock:
        _counts[f"calls:{verifier}"] += 1
        if error:
            _counts[f"error:{error.split(':')[0] if error.startswith('verifier_error') else error}"] += 1


def counters() -> dict[str, int]:
    """Process-wide counts: ``calls:<verifier>`` and ``error:<reason>``."""
    with _lock:
        return dict(_counts)
