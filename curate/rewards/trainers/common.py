"""What every trainer adapter shares: a trainer's label or columns -> a curate record, a
trainer's completion -> the response text, and one scoring call.

A *label* (verl's ``ground_truth``, OpenRLHF's ``labels`` item, a dataset's ``answer``
column) is one of:

- a mapping with ``answer`` and any other record field (``answer_type``, ``prompt_type``,
  ``reward``, box fields such as ``image_size``) — the usual form;
- the same mapping serialised as a JSON object string (``'{"answer": "7", "answer_type": "number"}'``);
- a bare gold (a string, a number or a list of acceptable strings), whose ``answer_type``
  then comes from the adapter's defaults (a dataset column, ``extra_info``, a URL parameter).

A JSON object string counts as a label only when it has an ``answer`` key, so a structured
gold stored as a string (a ``general-code`` test list, a ``detection`` box list) stays a gold.
Arrays that come out of Parquet (numpy) are turned into plain lists first.
"""

from __future__ import annotations

import json
import logging
import re
import threading
from collections.abc import Mapping, Sequence
from typing import Any

from curate.rewards.registry import score_many
from curate.rewards.verdict import RecordError, RewardResult

logger = logging.getLogger("curate.rewards.trainers")

#: Record fields an adapter copies from dataset columns / extra info when they are present.
RECORD_FIELDS: tuple[str, ...] = (
    "id", "answer", "answer_type", "prompt_type", "reward", "image_size", "resized_size",
    "min_pixels", "max_pixels", "box_coords", "pred_coords",
)
#: End-of-turn tokens a trainer may leave at the end of a decoded response.
END_TOKENS: tuple[str, ...] = ("<|im_end|>", "<|endoftext|>", "<|eot_id|>", "<|end|>", "<|end_of_text|>",
                               "</s>", "<eos>", "<end_of_turn>", "<｜end▁of▁sentence｜>")
_SPECIAL = re.compile(r"(<\|[A-Za-z0-9_]+\|>)(?:\1)+")
_MAX_WARNINGS = 20
_warned: set[str] = set()
_warn_lock = threading.Lock()


def plain(value: Any) -> Any:
    """``value`` with numpy arrays and scalars (from Parquet/pandas) turned into Python lists and numbers."""
    if isinstance(value, Mapping):
        return {str(k): plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [plain(v) for v in value]
    tolist = getattr(value, "tolist", None)
    if tolist is not None and type(value).__module__ == "numpy":
        return plain(tolist())
    return value


def _json_object(text: str) -> dict[str, Any] | None:
    s = text.strip()
    if not (s.startswith("{") and s.endswith("}")):
        return None
    try:
        obj = json.loads(s)
    except ValueError:
        return None
    return obj if isinstance(obj, dict) and "answer" in obj else None


def record_from_label(label: Any, defaults: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """A curate record from a trainer's label (see the module docstring).

    Args:
        label: A record mapping, its JSON string, or a bare gold.
        defaults: Fields used when the label does not set them (``None`` values are ignored).

    Returns:
        A record for :func:`curate.rewards.registry.score`.
    """
    label = plain(label)
    if isinstance(label, str):
        label = _json_object(label) or label
    record = dict(label) if isinstance(label, Mapping) else {"answer": label}
    reward = record.get("reward")
    if isinstance(reward, str):  # a reward object stored as a JSON string column
        try:
            record["reward"] = json.loads(reward)
        except ValueError:
            pass  # left as is: scoring reports "'reward' must be an object" for this record
    for key, value in (defaults or {}).items():
        if value is not None and record.get(key) is None:
            record[key] = plain(value)
    return record


def fields_of(mapping: Mapping[str, Any] | None, *, exclude: Sequence[str] = ()) -> dict[str, Any]:
    """The :data:`RECORD_FIELDS` of ``mapping`` that are set (for adapter defaults)."""
    if not isinstance(mapping, Mapping):
        return {}
    return {k: mapping[k] for k in RECORD_FIELDS if k not in exclude and mapping.get(k) is not None}


def strip_end_tokens(text: str) -> str:
    """``text`` without the end-of-turn tokens (and the white space after them) at its end."""
    out = text
    while True:
        trimmed = out.rstrip()
        token = next((t for t in END_TOKENS if trimmed.endswith(t)), None)
        if token is None:
            return out
        out = trimmed[: -len(token)]


def completion_text(completion: Any) -> str:
    """The response text of a completion: a string, a message, a list of messages (the
    assistant turns, joined) or a list of content parts (the text parts, joined)."""
    if completion is None:
        return ""
    if isinstance(completion, str):
        return strip_end_tokens(completion)
    if isinstance(completion, Mapping):
        if "role" in completion or "content" in completion:
            return completion_text(completion.get("content"))
        return str(completion.get("text", "")) if completion.get("type", "text") == "text" else ""
    if isinstance(completion, (list, tuple)):
        if any(isinstance(m, Mapping) and "role" in m for m in completion):
            turns = [m for m in completion if isinstance(m, Mapping) and m.get("role") == "assistant"]
            return "".join(completion_text(m.get("content")) for m in (turns or completion))
        return strip_end_tokens("".join(completion_text(p) for p in completion))
    return strip_end_tokens(str(completion))


def _collapse(text: str) -> str:
    return _SPECIAL.sub(r"\1", text)


def response_of(query: str, prompt: str | None) -> str:
    """The response part of ``query`` (prompt + response, as OpenRLHF sends it).

    The prompt is cut off when ``query`` starts with it; repeated special tokens (a
    processor expands one ``<|image_pad|>`` into many) are collapsed first. When the
    prompt cannot be found the whole query is judged.
    """
    if prompt:
        if query.startswith(prompt):
            return strip_end_tokens(query[len(prompt):])
        q, p = _collapse(query), _collapse(prompt)
        if q.startswith(p):
            return strip_end_tokens(q[len(p):])
        tail = p[-64:]
        at = q.rfind(tail) if tail else -1
        if at >= 0:
            return strip_end_tokens(q[at + len(tail):])
    return strip_end_tokens(query)


def progress_of(state: Any) -> float | None:
    """Training progress in [0, 1] from a trainer state with ``global_step``/``max_steps``, else ``None``."""
    step, total = getattr(state, "global_step", None), getattr(state, "max_steps", None)
    if not isinstance(step, int) or not isinstance(total, int) or total <= 0:
        return None
    return min(1.0, max(0.0, step / total))


def _warn(results: Sequence[RewardResult], records: Sequence[Mapping[str, Any]]) -> None:
    for res, rec in zip(results, records):
        if res.error and res.error.startswith("record_error"):
            with _warn_lock:
                if res.error in _warned or len(_warned) >= _MAX_WARNINGS:
                    continue
                _warned.add(res.error)
            logger.warning("curate rewards: %s (scored 0; fix the label or the dataset columns)",
                           res.error.split(": ", 1)[-1])


def format_batch(records: Sequence[Mapping[str, Any]], responses: Sequence[str]) -> list[float]:
    """The format score of ``responses[i]`` for ``records[i]``'s prompt style, without running any verifier.

    For format-only reward functions: only ``prompt_type`` is read (:func:`curate.rewards.registry.format_only`),
    so a math or code record costs no verifier call and no worker pool. A record whose
    ``prompt_type`` is invalid scores 0 with a logged warning.
    """
    from curate.rewards.registry import format_only

    if len(records) != len(responses):
        raise ValueError(f"{len(records)} records for {len(responses)} responses")
    out, failed = [], []
    for record, response in zip(records, responses):
        try:
            out.append(format_only(record, response))
        except RecordError as exc:
            out.append(0.0)
            failed.append((RewardResult(0.0, 0.0, 0.0, f"record_error: {exc}", ""), record))
    if failed:
        _warn([r for r, _ in failed], [rec for _, rec in failed])
    return out


def score_batch(records: Sequence[Mapping[str, Any]], responses: Sequence[str], *,
                progress: float | None = None) -> list[RewardResult]:
    """Score ``responses[i]`` against ``records[i]`` with :func:`curate.rewards.registry.score_many`.

    Time-limited verifiers run in curate's worker processes (never on the caller's
    thread), so this is safe from any thread. A record that cannot be scored gives a zero
    result with ``error="record_error: ..."`` and a logged warning, never an exception.
    """
    if len(records) != len(responses):
        raise ValueError(f"{len(records)} records for {len(responses)} responses")
    results = score_many(list(zip(records, responses)), progress=progress, on_record_error="result")
    _warn(results, records)
    return results
