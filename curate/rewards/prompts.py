"""The prompts RL sampling sends: the templates by prompt style, and the user turn of a record.

Shared by ``curate rl-filter`` (what it samples) and the trainer adapters
(:mod:`curate.rewards.trainers.kept`: the trainer's prompt is the one the filter measured), so it sits
on the rewards floor, below both.
"""

from __future__ import annotations

import hashlib
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


Templates = dict[str, "str | list[str]"]


def load_templates(path: str | os.PathLike[str] | None) -> Templates:
    """The prompt templates: defaults, overridden by a JSON or YAML file ``{normal: ..., think: ...}``; a style's
    value may be a list of templates, a pool one is drawn from per prompt (:func:`template_for`: V-Triune draws its
    chain-of-thought instruction from a pool of sentences, ``verl/utils/dataset/rl_dataset.py`` lines 255-259)."""
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
        pool = value if isinstance(value, list) else [value]
        if not pool or not all(isinstance(v, str) and "{problem}" in v for v in pool):
            raise UserError(f"--templates {path}: template {key!r} must be a string containing {{problem}}, or a "
                            "non-empty list of such strings (a pool, one drawn per prompt)")
        templates[key] = value
    return templates


def template_for(templates: Templates, style: str, key: str, seed: int = 0) -> str:
    """The template of ``style`` for the prompt ``key``: the one given, or one of a pool drawn from ``seed`` and
    the prompt's id (the same prompt gets the same template in every run, shard and worker with that seed)."""
    value = templates[style]
    if isinstance(value, str):
        return value
    digest = int.from_bytes(hashlib.blake2b(f"{seed}\x00{key}".encode(), digest_size=8).digest(), "big")
    return value[digest % len(value)]


def prompt_style_of(rec: dict[str, Any], prompt_style: str | None, templates: Templates) -> str:
    """The prompt style of a record: ``prompt_style`` (``--prompt-style``), else its ``prompt_type``, else normal."""
    style = prompt_style or str(rec.get("prompt_type") or "normal").lower()
    return style if style in templates else "normal"


def prompt_text(rec: dict[str, Any], templates: Templates, style: str, seed: int = 0) -> str:
    """The user turn rl-filter sends for a canonical record (also the trainer's prompt, see
    :mod:`curate.rewards.trainers.kept`): the problem, with ``<image>`` placeholders put in
    front when it has images but none, inside the template of ``style`` (a record marked ``prompt_ready``, a
    verl row's prompt, as it stands; a pool's template drawn by :func:`template_for` from ``seed``)."""
    problem = rec.get("problem")
    if not isinstance(problem, str):
        problem = next((m["content"] for m in rec["messages"] if m["role"] == "user"), "")
    if rec["images"] and IMAGE_TOKEN not in problem:
        problem = IMAGE_TOKEN * len(rec["images"]) + "\n" + problem
    if rec.get("prompt_ready"):  # a trainer's own prompt (verl's chat prompt): its instruction is in it already
        return problem
    return template_for(templates, style, str(rec.get("id")), seed).replace("{problem}", problem)
