"""The click group imports a verb's module only when that verb is asked for.

``curate --help`` lists every verb from ``curate.stages.STAGES`` without importing
one; ``curate pack --help`` imports curate/verbs/pack.py alone (the group makes its command). The first tests run a
fresh ``python`` so that no other test's imports hide a stray one; the table test
asks the group for every verb of STAGES and imports every module of curate/cli, and checks STAGES against the real
commands, so the table cannot drift from them.
"""

from __future__ import annotations

import importlib
import json
import os
import pkgutil
import subprocess
import sys
from pathlib import Path

import click
import pytest
from click.testing import CliRunner

import curate.cli
from curate.cli import main
from curate.cli.group import cli, command
from curate.stages import STAGES

VERBS = {name: (spec.cli, spec.help) for name, spec in STAGES.items()}

ROOT = Path(__file__).resolve().parents[3]

#: Run `curate ARGS` through curate.cli.main in a fresh interpreter; print its output and the modules it loaded.
_PROBE = """
import contextlib, io, json, sys
from curate.cli import main
out = io.StringIO()
with contextlib.redirect_stdout(out):
    try:
        main(sys.argv[1:])
    except SystemExit as exc:
        assert exc.code in (0, None), exc.code
print(json.dumps({"out": out.getvalue(), "modules": sorted(sys.modules)}))
"""


def _probe(*args: str) -> dict:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "COLUMNS": "82"}  # help 80 wide, as in CliRunner
    proc = subprocess.run([sys.executable, "-c", _PROBE, *args], capture_output=True, text=True, env=env,
                          timeout=60, check=False)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def _loaded(modules: list[str], *prefixes: str) -> list[str]:
    return [m for m in modules if m in prefixes or m.startswith(tuple(f"{p}." for p in prefixes))]


def test_pack_help_imports_pack_and_nothing_of_the_other_stages() -> None:
    got = _probe("pack", "--help")
    assert "Usage: curate pack [OPTIONS] [INPUTS]..." in got["out"]
    modules = got["modules"]
    others = [f"curate.{p}.{m}" for p in ("cli", "verbs") for m in ("balance", "rl", "recaption", "run", "vocab",
                                                                     "report", "dedup", "pack")]
    others.remove("curate.verbs.pack")
    assert _loaded(modules, "curate.balance", "curate.rl", "curate.rewards", "curate.recaption", "curate.generate",
                   "curate.run", "curate.report", *others) == []
    assert "curate.verbs.pack" in modules
    # the flags of pack read no heavy library (curate.executors and curate.core.io import theirs where they run)
    assert _loaded(modules, "numpy", "pyarrow", "pandas", "matplotlib", "torch", "PIL") == []


def test_curate_help_imports_no_verb_and_lists_the_same_verbs_as_the_commands() -> None:
    got = _probe("--help")
    assert _loaded(got["modules"], *(f"curate.{p}.{module}" for module, _ in VERBS.values()
                                      for p in ("cli", "verbs"))) == []
    for name in VERBS:  # now every verb is real: click's own help lines
        assert command(name) is not None
    loaded = CliRunner().invoke(cli, ["--help"], prog_name="curate")
    assert loaded.exit_code == 0, loaded.output
    assert got["out"] == loaded.output
    assert "Commands:" in got["out"] and all(f"\n  {name} " in got["out"] for name in VERBS)


def test_the_table_of_verbs_matches_the_commands() -> None:
    for name in VERBS:
        command(name)
    for info in pkgutil.iter_modules(curate.cli.__path__):  # every module of curate/cli, so a new command is seen
        importlib.import_module(f"curate.cli.{info.name}")
    assert sorted(cli.commands) == sorted(VERBS), "add the verb's StageSpec to curate/stages.py (or remove it)"
    for name, cmd in cli.commands.items():
        module, first_paragraph = VERBS[name]
        assert cmd.callback is not None and cmd.callback.__module__ in (f"curate.cli.{module}",
                                                                        f"curate.verbs.{module}"), name
        listed = click.Command(name, help=first_paragraph)
        for limit in (30, 45, 60, 80, 200):
            assert listed.get_short_help_str(limit) == cmd.get_short_help_str(limit), (name, limit)


def test_every_verb_resolves_and_unknown_ones_are_suggested(capsys: pytest.CaptureFixture[str]) -> None:
    assert all(command(name) is not None and command(name).name == name for name in VERBS)
    assert command("no-such-verb") is None
    with pytest.raises(SystemExit) as exc:
        main(["pak"])
    assert exc.value.code == 2
    assert "Did you mean 'pack'?" in capsys.readouterr().err


def test_bare_curate_prints_its_help(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        main([])
    err = capsys.readouterr().err
    assert exc.value.code == 2
    assert err.startswith("Usage: curate [OPTIONS] COMMAND [ARGS]...") and "\nCommands:\n" in err
