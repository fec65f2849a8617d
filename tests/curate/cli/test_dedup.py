"""``curate dedup`` in a recipe, before ``balance``, which reads its records (its one-line mistakes are in test_mistakes.py)."""

from __future__ import annotations

import json
from pathlib import Path

from curate.cli import cli


RECIPE = """\
inputs:
  pairs: [{records}, {extra}]
steps:
  - name: dedup
    verb: dedup
    input: pairs
    options: {{prefer: copies-half}}
  - name: balance
    verb: balance
    input: dedup
    options: {{vocab: {vocab}, match: text, text-field: caption, mode: metaclip, t: 2}}
"""


def test_recipe_runs_dedup_before_balance(dedup_world, tmp_path: Path) -> None:
    vocab = tmp_path / "vocab.txt"
    vocab.write_text("astronaut\ncamera\ncoffee\nchina\nclock\nhubble_deep_field\nflower\n", encoding="utf-8")
    recipe = tmp_path / "recipe.yaml"
    recipe.write_text(RECIPE.format(records=dedup_world.inputs[0], extra=dedup_world.inputs[1], vocab=vocab))
    out = tmp_path / "run"
    cli.main(args=["run", str(recipe), "--out", str(out), "--no-report"], prog_name="curate", standalone_mode=False)
    dd = json.loads((out / "01-dedup" / "stats.json").read_text())
    bal = json.loads((out / "02-balance" / "stats.json").read_text())
    assert dd["dropped"] and bal["records_in"] == dd["records_out"]
    assert bal["command"].split()[2] == str(out / "01-dedup" / "records")
