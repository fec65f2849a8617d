"""The one retry of ``curate recaption``: which captions are asked again, and the final verdict.

An answer that fails a check is asked again **once**, as the request
``<id>#<lang>#retry`` (another key, hence another seed; a rollouts file may hold
answers under that key); the retry's verdict is final, and its detail names the
first answer's reason. A failed retry call keeps the first answer's reason.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from curate.recaption.checks import CaptionCheck

RETRY = "#retry"


def retry_items(items: Sequence[Any], checks: dict[str, CaptionCheck], done: dict[str, dict[str, Any]]) -> list[Any]:
    """The items whose first answer failed a check and that have no retry answer yet."""
    return [it for it in items if it.key in checks and not checks[it.key].ok and it.key + RETRY not in done]


def final_row(item: Any, done: dict[str, dict[str, Any]], failed: dict[str, tuple[str, str]],
          checks: dict[str, CaptionCheck], recheck: Callable[[dict[str, Any], str], CaptionCheck],
          model: str) -> dict[str, Any]:
    """The captions.parquet row of one image × language: the first answer, or the retry's verdict.

    Args:
    item: the image × language (``rid``, ``source``, ``image``, ``lang``, ``key``).
    done: journaled answers by request key (first answers and retries).
    failed: backend failures by request key.
    checks: the check of every first answer in ``done``.
    recheck: checks one journaled answer in a language (the retry's).
    model: the backend's model name, recorded in the row.
    """
    row = {"id": item.rid, "source": item.source, "lang": item.lang, "image": item.image,
           "image_index": getattr(item, "index", 0), "caption": None,
           "model": model, "error": None, "detail": "", "attempts": 1, "truncated": None,
           "raw": None}
    key = item.key
    if key not in done:
        row["error"], row["detail"] = failed.get(key, ("not_generated", "no answer and no error"))
        return row
    entry, check = done[key], checks[key]
    if not check.ok and key + RETRY in done:
        first_reason = check.reason
        entry = done[key + RETRY]
        check = recheck(entry, item.lang)
        row["attempts"] = 2
        if not check.ok:
            check = CaptionCheck(check.caption, check.reason, f"{check.detail} (first answer: {first_reason})")
    elif not check.ok and key + RETRY in failed:
        row["attempts"] = 2
        err, detail = failed[key + RETRY]
        check = CaptionCheck(check.caption, check.reason, f"{check.detail} (retry failed: {err} {detail})".strip())
    row.update(raw=entry["text"], truncated=bool(entry.get("truncated")))
    if check.ok:
        row["caption"] = check.caption
    else:
        row["error"], row["detail"] = check.reason, check.detail
    return row
