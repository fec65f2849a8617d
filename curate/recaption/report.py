"""The counts of ``curate recaption``'s ``stats.json``: per caption language and per source."""

from __future__ import annotations

from collections import Counter
from typing import Any


def caption_report(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Counts over captions.parquet rows: images, kept, failures by reason, mean length, retries."""
    kept = [r for r in rows if r["error"] is None]
    chars = [len(r["caption"]) for r in kept]
    return {
        "images": len(rows),
        "kept": len(kept),
        "failed": dict(sorted(Counter(r["error"] for r in rows if r["error"] is not None).items())),
        "mean_chars": round(sum(chars) / len(chars), 1) if chars else None,
        "attempts": sum(int(r["attempts"]) for r in rows),
        "retried": sum(int(r["attempts"]) > 1 for r in rows),
        "kept_after_retry": sum(int(r["attempts"]) > 1 for r in kept),
        "truncated": sum(bool(r["truncated"]) for r in rows),
    }
