"""Session fixture: a small recipe (balance -> recaption -> pack -> verify) run by hand and by `curate run`.

The verbs are first run by hand (the commands written out below, not the planner's), their
folders moved to ``ref/``; then ``curate run`` runs the recipe into the same folder, is
SIGKILLed in the middle of its second step (recaption), and is run again to the end.
Tests compare the two trees and look at the report. About 40 s on 2 cores.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

from curate.core.threads import environ

RECIPE = """\
description: a small mid-training recipe for the tests
vars:
  data: {data}
  clip: {clip}
  vlm: {vlm}
  processor: {processor}
  cache: {cache}
  ctx: 2048
inputs:
  pairs: ${{data}}
steps:
  - name: balance
    verb: balance
    input: pairs
    options: {{vocab: {vocab}, model: "${{clip}}", cache-dir: "${{cache}}", top-k: 3, fraction: 0.6, seed: 3}}
  - name: recaption
    verb: recaption
    input: balance
    options:
      model: ${{vlm}}
      langs: [en, zh]
      max-new-tokens: 12
      shard-size: 2
  - name: pack
    verb: pack
    input: recaption
    options: {{processor: "${{processor}}", ctx: "${{ctx}}", sequences-per-shard: 2}}
  - name: verify
    verb: verify
    input: pack
"""


@dataclass(frozen=True)
class RecipeRun:
    """The recipe, its folder after `curate run` (killed once, then finished), and the by-hand reference."""

    recipe: Path
    out: Path
    ref: Path
    by_hand: dict[str, list[str]]  #: folder name -> the verb's command line (without "curate")
    killed_markers: int  #: recaption shards finished when the run was killed


def _subset(sample_data: Path, path: Path, n: int = 16) -> Path:
    lines = (sample_data / "records.jsonl").read_text(encoding="utf-8").splitlines()
    with open(path, "w", encoding="utf-8") as fh:
        for line in lines[:n]:
            rec = json.loads(line)
            rec["images"] = [str((sample_data / p).resolve()) for p in rec.get("images", [])]
            fh.write(json.dumps(rec, ensure_ascii=False) + "\n")
    return path


def _run_by_hand(commands: dict[str, list[str]]) -> None:
    from curate.cli import cli

    saved = sys.argv
    try:
        for argv in commands.values():
            sys.argv = ["curate", *argv]  # stats.json records the command line
            cli.main(args=argv, prog_name="curate", standalone_mode=False)
    finally:
        sys.argv = saved


@pytest.fixture(scope="session")
def recipe_run(tmp_path_factory: pytest.TempPathFactory, sample_data: Path, tiny_clip_spec: str,
               tiny_vlm_dir: Path, tiny_processor_dir: Path) -> RecipeRun:
    """See the module docstring."""
    tmp = tmp_path_factory.mktemp("recipe-run")
    data = _subset(sample_data, tmp / "pairs.jsonl")
    vocab = tmp / "vocab.txt"
    vocab.write_text("\n".join(["cat", "dog", "rocket", "astronaut", "coffee", "flower", "chart", "coin", "clock",
                                "text", "sky", "city", "sea", "tree", "car", "person", "book", "table"]) + "\n")
    cache = tmp / "cache"
    recipe = tmp / "recipe.yaml"
    recipe.write_text(RECIPE.format(data=data, clip=tiny_clip_spec, vlm=tiny_vlm_dir, processor=tiny_processor_dir,
                                    cache=cache, vocab=vocab), encoding="utf-8")
    out = tmp / "out"
    by_hand = {
        "01-balance": ["balance", str(data), "--vocab", str(vocab), "--model", tiny_clip_spec, "--cache-dir",
                       str(cache), "--top-k", "3", "--fraction", "0.6", "--seed", "3", "--out", str(out / "01-balance")],
        "02-recaption": ["recaption", str(out / "01-balance" / "records"), "--model", str(tiny_vlm_dir), "--langs",
                         "en,zh", "--max-new-tokens", "12", "--shard-size", "2", "--out", str(out / "02-recaption")],
        "03-pack": ["pack", str(out / "02-recaption" / "records.jsonl"), "--processor", str(tiny_processor_dir),
                    "--ctx", "2048", "--sequences-per-shard", "2", "--out", str(out / "03-pack")],
        "04-verify": ["verify", str(out / "03-pack")],
    }
    with environ({"CURATE_REPORT": "0"}):
        _run_by_hand(by_hand)
    ref = tmp / "ref"
    out.rename(ref)

    cmd = [sys.executable, "-m", "curate", "run", str(recipe), "--out", str(out)]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    markers = out / "02-recaption" / "_shards" / "recaption"
    deadline = time.time() + 300
    while time.time() < deadline and proc.poll() is None:
        if markers.exists() and any(p.name[0].isdigit() and p.suffix == ".json" and "rejects" not in p.name
                                    for p in markers.iterdir()):
            proc.send_signal(signal.SIGKILL)
            break
        time.sleep(0.005)
    proc.wait()
    assert proc.returncode == -signal.SIGKILL, "curate run finished before it could be killed"
    killed = sum(1 for p in markers.glob("0*.json"))
    assert (out / "01-balance" / "stats.json").exists() and not (out / "02-recaption" / "stats.json").exists()

    from curate.cli import cli

    cli.main(args=["run", str(recipe), "--out", str(out)], prog_name="curate", standalone_mode=False)
    return RecipeRun(recipe=recipe, out=out, ref=ref, by_hand=by_hand, killed_markers=killed)
