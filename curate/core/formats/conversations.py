"""The conversation of a row in each text layout (:func:`curate.core.formats.rows.text_layout`).

* ``messages`` (OpenAI: ``role``, ``content`` as text or content parts) and ``conversations`` (LLaVA:
  ``from``, ``value``), possibly stored as a JSON string in a Parquet column;
* a caption (``caption``, its aliases, or the run's ``--text-field``): ``<image>`` and
  :data:`CAPTION_PROMPT`, then the caption;
* ``problem`` (RL sets) and ``question`` (VQA sets) with their answer; a multiple-choice VQA row with its
  options lettered and the letter as answer (:mod:`curate.core.answers`).
"""

from __future__ import annotations

import json
from typing import Any

from curate.core.answers import annotator_answers, choice_question, multiple_choice
from curate.core.formats.jsontext import JsonRefused, parse_json
from curate.core.formats.rows import RecordInvalid, as_text, caption_text

IMAGE_TOKEN = "<image>"
CAPTION_PROMPT = "Describe the image."
_ROLE_MAP = {"human": "user", "user": "user", "gpt": "assistant", "assistant": "assistant",
             "system": "system", "model": "assistant", "bot": "assistant"}


def _content_text(content: Any, field: str) -> str:
    """Flatten OpenAI-style content parts (text / image) to text with <image> placeholders."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = []
        for part in content:
            if isinstance(part, str):
                parts.append(part)
            elif isinstance(part, dict) and part.get("type") == "text":
                parts.append(as_text(part.get("text", ""), field))
            elif isinstance(part, dict) and part.get("type") in ("image", "image_url"):
                parts.append(IMAGE_TOKEN)
            else:
                raise RecordInvalid("invalid_field", f"{field} has a content part that is neither text nor image")
        return "".join(parts)
    if content is None:
        return ""
    raise RecordInvalid("invalid_field", f"{field} content must be a string, got {type(content).__name__}")


def messages_of(raw: dict[str, Any], layout: str, caption: bool) -> list[dict[str, str]]:
    """The conversation of a row whose text comes from ``layout`` (:func:`~curate.core.formats.rows.text_layout`;
    ``caption``: the field is read as a caption)."""
    if layout == "messages":
        turns, role_key, text_key = raw["messages"], "role", "content"
    elif layout == "conversations":
        turns, role_key, text_key = raw["conversations"], "from", "value"
    elif caption:
        caption = caption_text(raw[layout], layout)
        if not caption:
            raise RecordInvalid("invalid_field", f"{layout} is empty")
        prompt = f"{IMAGE_TOKEN}\n{CAPTION_PROMPT}" if raw.get("image") or raw.get("images") else CAPTION_PROMPT
        return [{"role": "user", "content": prompt}, {"role": "assistant", "content": caption}]
    elif layout == "question":
        question = as_text(raw["question"], "question")
        try:
            choice = multiple_choice(raw)
        except ValueError as exc:
            raise RecordInvalid("invalid_field", str(exc)) from None
        if choice is not None:  # multiple choice (ScienceQA, AI2D, A-OKVQA): options lettered, the letter answers
            options, letter = choice
            return [{"role": "user", "content": choice_question(raw, question, options)},
                    {"role": "assistant", "content": letter}]
        return [{"role": "user", "content": question}, {"role": "assistant", "content": _vqa_answer(raw)}]
    else:  # problem
        problem = as_text(raw["problem"], "problem")
        answer = raw.get("answer", "")
        structured = isinstance(answer, list) and answer and not isinstance(answer[0], (str, int, float))
        if isinstance(answer, dict) or structured:  # a detection list of boxes: its JSON text
            answer = json.dumps(answer, ensure_ascii=False)
        answer_text = answer[0] if isinstance(answer, list) and answer else answer
        return [{"role": "user", "content": problem},
                {"role": "assistant", "content": as_text(answer_text if answer_text is not None else "", "answer")}]
    if isinstance(turns, str):  # Parquet users often store the conversation as a JSON string
        try:
            turns = parse_json(turns)
        except JsonRefused as exc:
            reason = "invalid_field" if exc.reason == "malformed_json" else exc.reason
            raise RecordInvalid(reason, f"messages is a string but not usable JSON: {exc.detail}") from None
    if not isinstance(turns, list) or not turns:
        raise RecordInvalid("invalid_field", "messages/conversations must be a non-empty list")
    out = []
    for i, turn in enumerate(turns):
        if not isinstance(turn, dict):
            raise RecordInvalid("invalid_field", f"turn {i} is not an object")
        role = _ROLE_MAP.get(str(turn.get(role_key, turn.get("role", ""))).lower())
        if role is None:
            raise RecordInvalid("invalid_field", f"turn {i} has unknown role {turn.get(role_key)!r}")
        text = _content_text(turn.get(text_key, turn.get("content")), f"turn {i}")
        out.append({"role": role, "content": text})
    return out


def _vqa_answer(raw: dict[str, Any]) -> str:
    """The answer of a VQA row: ``answer`` (POPE, GQA), else the first of ``answers``, a list of strings
    (TextVQA, DocVQA) or of ``{"answer": ...}`` annotations (VQAv2); its annotators' other answers stay in the
    record as ``answers``.

    Raises:
        RecordInvalid: ``invalid_field`` when the row has no answer.
    """
    answer = raw.get("answer")
    if answer is None or answer == "" or answer == []:
        answer = next(iter(annotator_answers(raw)), None)
    if isinstance(answer, (list, tuple)):
        answer = next((a for a in answer if a not in (None, "")), None)
    if isinstance(answer, dict):
        answer = answer.get("answer")
    if answer is None or answer == "":
        raise RecordInvalid("invalid_field", "question has no answer (answer or answers)")
    return as_text(answer, "answer").strip()
