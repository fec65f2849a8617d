"""The prompts RL sampling sends: the templates by prompt style, and the user turn of a record.

Shared by ``curate rl-filter`` (what it samples) and the trainer adapters
(:mod:`curate.rewards.trainers.kept`: the trainer's prompt is the one the filter measured), so it sits
on the rewards floor, below both.
"""

from __future__ import annotations

import json
import os
from typing import Any

from curate.core.errors import UserError
from curate.core.records import IMAGE_TOKEN
from curate.core.remote import local_file

#: Prompt templates by style; ``{problem}`` is the record's problem text (with its ``<image>`` placeholders).
DEFAULT_TEMPLATES = {
    "normal": "{problem}\nPut ONLY your final answer within <answer></answer>.",
    "think": ("{problem}\nFirst think through the problem step by step inside <think></think>, then give the "
              "final answer inside <answer></answer>. Use exactly one <think> block followed by one <answer> block."),
}


def load_templates(path: str | os.PathLike[str] | None) -> dict[str, str]:
    """The prompt templates: defaults, overridden by a JSON or YAML file ``{normal: ..., think: ...}``."""
    templates = dict(DEFAULT_TEMPLATES)
    if path is None:
        return templates
    p = local_file(path, "--templates")  # a local file, or a bucket's object (a cached copy)
    assert p is not None
    if not p.is_file():
        raise UserError(f"--templates {path}: no such file")
    text = p.read_text(encoding="utf-8")
    try:
        data = json.loads(text) if p.suffix.lower() == ".json" else __import__("yaml").safe_load(text)
    except Exception as exc:  # JSON and YAML raise different types
        raise UserError(f"--templates {path}: cannot parse ({exc})") from None
    if not isinstance(data, dict) or not set(data) <= set(DEFAULT_TEMPLATES):
        raise UserError(f"--templates {path}: expected a mapping with keys normal and/or think")
    for key, value in data.items():
        if not isinstance(value, str) or "{problem}" not in value:
            raise UserError(f"--templates {path}: template {key!r} must be a string containing {{problem}}")
        templates[key] = value
    return templates


def prompt_style_of(rec: dict[str, Any], prompt_style: str | None, templates: dict[str, str]) -> str:
    """The prompt style of a record: ``prompt_style`` (``--prompt-style``), else its ``prompt_type``, else normal."""
    style = prompt_style or str(rec.get("prompt_type") or "normal").lower()
    return style if style in templates else "normal"


def prompt_text(rec: dict[str, Any], templates: dict[str, str], style: str) -> str:
    """The user turn rl-filter sends for a canonical record (also the trainer's prompt, see
    :mod:`curate.rewards.trainers.kept`): the problem, with ``<image>`` placeholders put in
    front when it has images but none, inside the template of ``style`` (a record marked ``prompt_ready``, a
    verl row's prompt, as it stands)."""
    problem = rec.get("problem")
    if not isinstance(problem, str):
        problem = next((m["content"] for m in rec["messages"] if m["role"] == "user"), "")
    if rec["images"] and IMAGE_TOKEN not in problem:
        problem = IMAGE_TOKEN * len(rec["images"]) + "\n" + problem
    if rec.get("prompt_ready"):  # a trainer's own prompt (verl's chat prompt): its instruction is in it already
        return problem
    return templates[style].replace("{problem}", problem)
