"""Inputs of the RL tests that need no model: records and their responses (``--rollouts``) as JSONL files."""

from __future__ import annotations

import json
from pathlib import Path


def write_records_and_responses(tmp_path: Path, name: str, rows: list[dict],
                                responses: dict[str, str]) -> tuple[Path, Path]:
    """Write ``rows`` to ``name.jsonl`` and one response per id to ``answers.jsonl``; returns both paths."""
    records, answers = tmp_path / f"{name}.jsonl", tmp_path / "answers.jsonl"
    records.write_text("".join(json.dumps(r) + "\n" for r in rows))
    answers.write_text("".join(json.dumps({"id": k, "response": v}) + "\n" for k, v in responses.items()))
    return records, answers
