"""``curate dedup`` on the command line and in a recipe: one-line mistakes, and ``balance`` reading its records."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from curate.cli import cli


def _curate(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "curate", *args], capture_output=True, text=True, timeout=120)


@pytest.mark.parametrize("args, message", [
    (["--near-threshold", "20"], "--near-threshold must be at most 11 bits"),
    (["--against-embeddings", "."], "--against-embeddings needs --against"),
    (["--prefer", "coyo,coyo"], "name each source once"),
    (["--semantic-threshold", "1.5"], "--semantic-threshold must be within"),
])
def test_mistakes_are_one_line(args: list[str], message: str, dedup_world, tmp_path: Path) -> None:
    done = _curate("dedup", str(dedup_world.inputs[0]), "--out", str(tmp_path / "out"), *args)
    assert done.returncode == 2
    assert message in done.stderr and "Traceback" not in done.stderr and len(done.stderr.strip().splitlines()) == 1


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
