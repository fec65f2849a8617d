"""``kept.jsonl`` of ``curate rl-filter`` as a ``datasets.Dataset`` for TRL's ``GRPOTrainer``.

Each row becomes the prompt rl-filter sampled (the same template and prompt style, so the
trainer optimises what the filter measured), its images as bytes, and the columns the
reward functions of :mod:`curate.rewards.trainers.trl` read. A row that cannot be used
(malformed JSON, unknown layout, a record the verifiers cannot score, a missing or broken
image) is left out with a named reason, never an exception.
"""

from __future__ import annotations

import json
import logging
import os
from collections import Counter
from pathlib import Path
from typing import Any

from curate.core.errors import UserError
from curate.core.images import ImageError, check, read_bytes
from curate.core.records import IMAGE_TOKEN, RecordInvalid, to_canonical
from curate.rewards.registry import plan
from curate.rewards.verdict import RecordError
from curate.rewards.prompts import load_templates, prompt_style_of, prompt_text

logger = logging.getLogger("curate.rewards.trainers")
_EXTRA = ("pass_at_1", "pass_at_n", "mean_reward")


def _content(text: str) -> str | list[dict[str, Any]]:
    """A user turn's content: the text, or text and image parts where ``<image>`` stood."""
    if IMAGE_TOKEN not in text:
        return text
    parts: list[dict[str, Any]] = []
    for i, piece in enumerate(text.split(IMAGE_TOKEN)):
        if i:
            parts.append({"type": "image"})
        if piece:
            parts.append({"type": "text", "text": piece})
    return parts


def _row(raw: Any, base: Path, fallback: str, templates: dict[str, str], style: str | None) -> dict[str, Any]:
    rec = to_canonical(raw, base, fallback_id=fallback, fallback_source=Path(fallback).stem)
    plan(rec)
    images = []
    for path in rec["images"]:
        data = bytes(read_bytes(path))
        check(data, label=str(path))  # the image gate: what a trainer is handed decodes
        images.append({"bytes": data, "path": os.path.basename(path)})
    text = prompt_text(rec, templates, prompt_style_of(rec, style, templates))
    return {
        "id": rec["id"], "source": rec["source"],
        "prompt": [{"role": "user", "content": _content(text)}],
        "images": images,
        # datasets.Json stores a str as JSON text: encode every value ourselves so "5" stays "5"
        "answer": json.dumps(rec.get("answer")), "answer_type": rec.get("answer_type"),
        "prompt_type": rec.get("prompt_type"), "reward": json.dumps(rec.get("reward")),
        **{k: rec.get(k) for k in _EXTRA},
    }


def _features(with_images: bool, vlm: bool) -> Any:
    import datasets

    text = datasets.Value("string")
    content = [{"type": text, "text": text}] if vlm else text
    feats = {"id": text, "source": text, "prompt": [{"role": text, "content": content}],
             "answer": datasets.Json(), "answer_type": text, "prompt_type": text, "reward": datasets.Json(),
             **{k: datasets.Value("float64") for k in _EXTRA}}
    if with_images:
        feats["images"] = datasets.List(datasets.Image())
    return datasets.Features(feats)


def load_kept(path: Path, *, image_root: str | os.PathLike[str] | None = None,
              templates: str | os.PathLike[str] | None = None, prompt_style: str | None = None,
              skipped: list[tuple[str, str, str]] | None = None) -> Any:
    """Read ``path`` into a ``datasets.Dataset`` (see :func:`curate.rewards.trainers.trl.kept_dataset`)."""
    try:
        import datasets  # noqa: F401 - checked here for a readable error
    except ImportError:
        raise UserError("kept_dataset needs the 'datasets' package: pip install 'curate[trl]'") from None
    if not path.is_file():
        raise UserError(f"{path}: no such file; pass the kept.jsonl written by curate rl-filter")
    if prompt_style not in (None, "normal", "think"):
        raise UserError(f"prompt_style must be normal or think, got {prompt_style!r}")
    base = Path(image_root) if image_root is not None else path.parent
    tmpl = load_templates(templates)
    rows: list[dict[str, Any]] = []
    left_out: list[tuple[str, str, str]] = []
    with open(path, encoding="utf-8") as fh:
        for lineno, line in enumerate(fh, 1):
            if not line.strip():
                continue
            fallback = f"{path.name}:{lineno}"
            try:
                rows.append(_row(json.loads(line), base, fallback, tmpl, prompt_style))
            except json.JSONDecodeError as exc:
                left_out.append((fallback, "malformed_json", exc.msg))
            except RecordInvalid as exc:
                left_out.append((fallback, exc.reason, exc.detail))
            except RecordError as exc:
                left_out.append((fallback, "record_error", str(exc)))
            except ImageError as exc:
                left_out.append((fallback, exc.reason, exc.detail))
    if skipped is not None:
        skipped.extend(left_out)
    elif left_out:
        reasons = Counter(r for _, r, _ in left_out)
        logger.warning("%s: left out %d rows (%s); pass skipped=[] to get them", path, len(left_out),
                       ", ".join(f"{k}: {v}" for k, v in sorted(reasons.items())))
    with_images = any(r["images"] for r in rows)
    vlm = any(not isinstance(r["prompt"][0]["content"], str) for r in rows)
    for r in rows:
        if vlm and isinstance(r["prompt"][0]["content"], str):
            r["prompt"][0]["content"] = [{"type": "text", "text": r["prompt"][0]["content"]}]
        if not with_images:
            del r["images"]
    import datasets

    return datasets.Dataset.from_list(rows, features=_features(with_images, vlm))
