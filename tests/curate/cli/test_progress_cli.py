"""What every verb says, seen from the command line: --quiet, --verbose, progress lines with a rate, other
libraries' progress bars kept out; --workers one per core by default; --ctx 8k."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import click
import pytest

from curate.cli.group import cli, command

ROOT = Path(__file__).resolve().parents[3]
LLAVA = str(ROOT / "data" / "sample" / "llava.jsonl")


def _curate(args: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k not in ("CURATE_VERBOSITY", "HF_HUB_DISABLE_PROGRESS_BARS",
                                                             "TRANSFORMERS_VERBOSITY")}
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")])
    return subprocess.run([sys.executable, "-m", "curate", *args], env=env, cwd=cwd, capture_output=True, text=True,
                          timeout=600)


def _root() -> click.Context:
    """The context of ``curate`` itself, with the group's settings (``-h``), as the command line makes it."""
    return click.Context(cli, info_name="curate", **cli.context_settings)


def _workers(path: list[str], args: list[str]) -> int:
    """The ``--workers`` value a verb's command line gives (``path``: the verb, e.g. ``["vocab", "embed"]``)."""
    parent = _root()
    cmd = command(path[0])
    for name in path[1:]:
        assert isinstance(cmd, click.Group)
        parent = click.Context(cmd, info_name=path[0], parent=parent, **cmd.context_settings)
        cmd = cmd.get_command(parent, name)
    assert cmd is not None
    with cmd.make_context(path[-1], args, parent=parent) as ctx:
        return ctx.params["workers"]


def test_workers_default_to_the_available_cores() -> None:
    cores = len(os.sched_getaffinity(0))
    assert _workers(["dedup"], ["x", "--out", "o"]) == cores
    assert _workers(["pack"], ["x", "--out", "o", "--processor", "p"]) == cores
    assert _workers(["dedup"], ["x", "--out", "o", "--workers", "3"]) == 3
    # each worker loads a whole generating model: one by default, and the help says why
    assert _workers(["recaption"], ["x", "--out", "o", "--model", "m"]) == 1
    # a recipe's step parses its verb alone (curate run): the same defaults
    with command("recaption").make_context("recaption", ["x", "--out", "o", "--model", "m"]) as ctx:
        assert ctx.params["workers"] == 1
    with command("dedup").make_context("dedup", ["x", "--out", "o"]) as ctx:
        assert ctx.params["workers"] == cores


@pytest.mark.parametrize("verb, note", [("embed", "open_clip model"), ("recaption", "loads the whole model"),
                                        ("dedup", None)])
def test_workers_help_says_what_bounds_it(verb: str, note: str | None) -> None:
    text = " ".join(command(verb).get_help(click.Context(command(verb), info_name=verb, parent=_root())).split())
    if note:
        assert f"Memory: each worker" in text or "Memory: with a local --model each worker" in text
        assert note in text
    else:
        assert "Memory:" not in text.split("--workers", 1)[1].split("--executor")[0]
        assert "[default: one per available core]" in text


def test_quiet_and_ctx_8k(tiny_processor_dir: Path, tmp_path: Path) -> None:
    done = _curate(["-q", "pack", LLAVA, "--processor", str(tiny_processor_dir), "--ctx", "8k", "--out", "o"],
                   tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stderr == "" and done.stdout == ""
    assert json.loads((tmp_path / "o" / "stats.json").read_text())["settings"]["ctx"] == 8192


def test_progress_lines_carry_a_rate(tiny_processor_dir: Path, tmp_path: Path) -> None:
    done = _curate(["pack", LLAVA, "--processor", str(tiny_processor_dir), "--ctx", "8K", "--out", "o"], tmp_path)
    assert done.returncode == 0, done.stderr
    ends = [line for line in done.stderr.splitlines() if " done in " in line]
    assert ends and all(line.endswith("/s") for line in ends), done.stderr


def test_quiet_and_verbose_together_are_refused(tmp_path: Path) -> None:
    done = _curate(["--quiet", "--verbose", "pack", "--help"], tmp_path)
    assert done.returncode == 2 and done.stderr.strip().splitlines() == [
        "error: give --quiet or --verbose, not both (see: curate --help)"]


@pytest.mark.slow
def test_loading_bars_of_transformers_only_when_verbose(tiny_vlm_dir: Path, tmp_path: Path) -> None:
    args = ["recaption", LLAVA, "--model", str(tiny_vlm_dir), "--langs", "en", "--max-new-tokens", "4"]
    usual = _curate([*args, "--out", "usual"], tmp_path)
    assert usual.returncode == 0, usual.stderr
    assert "Loading weights" not in usual.stderr and "it/s]" not in usual.stderr
    verbose = _curate(["--verbose", *args, "--out", "verbose"], tmp_path)
    assert verbose.returncode == 0, verbose.stderr
    assert "Loading weights" in verbose.stderr
