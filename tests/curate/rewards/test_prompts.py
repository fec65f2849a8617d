"""The prompt templates: a pool of templates per style, one drawn per prompt from the seed and the prompt's id."""

from __future__ import annotations

from pathlib import Path

import pytest

from curate.core.errors import UserError
from curate.rewards.prompts import load_templates, prompt_text, template_for


def test_a_pool_draws_one_template_per_prompt_the_same_every_time(tmp_path: Path) -> None:
    path = tmp_path / "pool.yaml"
    path.write_text("think:\n  - '{problem} Think step by step, then answer in <answer></answer>.'\n"
                    "  - '{problem} Reason first in <think></think>; answer in <answer></answer>.'\n")
    templates = load_templates(path)
    assert isinstance(templates["think"], list) and isinstance(templates["normal"], str)
    ids = [f"p{i}" for i in range(200)]
    drawn = [template_for(templates, "think", i, seed=3) for i in ids]
    assert set(drawn) == set(templates["think"])  # both are used
    assert drawn == [template_for(templates, "think", i, seed=3) for i in ids]  # the same draw every time
    assert drawn != [template_for(templates, "think", i, seed=4) for i in ids]  # another seed, another draw
    rec = {"id": "p7", "images": [], "messages": [{"role": "user", "content": "2+2?"}]}
    assert prompt_text(rec, templates, "think", 3) == drawn[7].replace("{problem}", "2+2?")


def test_a_pool_with_a_template_without_the_problem_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text("think: ['{problem} ok', 'no problem here']\n")
    with pytest.raises(UserError, match="non-empty list of such strings"):
        load_templates(path)
