"""The table of verbs: every command, recipe step, report hook and report page reads it, and it holds every verb."""

from __future__ import annotations

import importlib
import pkgutil

import curate.cli
from curate.cli.group import cli
from curate.stages import RECIPE_VERBS, STAGES


def test_every_command_has_its_spec_and_every_spec_its_command() -> None:
    from curate.cli.group import command

    for info in pkgutil.iter_modules(curate.cli.__path__):
        importlib.import_module(f"curate.cli.{info.name}")
    for name in STAGES:
        command(name)
    assert sorted(cli.commands) == sorted(STAGES)
    for name, spec in STAGES.items():  # a verb of values is made from curate/verbs/<cli>.py, another in curate/cli/
        assert cli.commands[name].callback.__module__ in (f"curate.cli.{spec.cli}", f"curate.verbs.{spec.cli}"), name


def test_the_consumers_read_the_table() -> None:
    from curate.run.plan import MAIN_OUTPUT
    from curate.run.recipe import VERBS

    assert VERBS == RECIPE_VERBS and set(MAIN_OUTPUT) == set(RECIPE_VERBS)
    for name, spec in STAGES.items():
        if spec.view is not None:  # a report page's samples: the function exists where the spec says
            module, _, function = spec.view.partition(":")
            assert callable(getattr(importlib.import_module(f"curate.report.{module}"), function)), name
        assert not spec.plots or spec.report, name  # plots are shown by the report the verb writes


def test_each_setting_is_declared_once() -> None:
    """A verb with a settings class offers each of its settings as an option made from the field (flag,
    default, help), and no option of the verb repeats a field of that class by hand."""
    import dataclasses

    from curate.cli.options import SettingOption
    from curate.core.settings import settings_of

    for info in pkgutil.iter_modules(curate.cli.__path__):
        importlib.import_module(f"curate.cli.{info.name}")
    checked = 0
    for name, spec in STAGES.items():
        if spec.config is None:
            continue
        cls = spec.config.load()
        settings = settings_of(cls)
        assert settings, f"{name}: {spec.config} declares no setting"
        command = _command_of(cli.commands[name], settings)
        options = {p.name: p for p in command.params}
        checked += 1
        for s in settings:
            if s.name not in options:  # a verb may offer a subset (a two-mode config), never a copy
                continue
            option = options[s.name]
            assert isinstance(option, SettingOption), f"{name}: {s.flag} written by hand, not made by config_options"
            assert s.flag in option.opts, (name, s.name, option.opts)
            assert option.help == s.help, (name, s.name)
            assert s.required or option.default == s.default, (name, s.name, option.default, s.default)
        declared = {f.name for f in dataclasses.fields(cls) if "help" in f.metadata}
        fields = {f.name for f in dataclasses.fields(cls)}
        copies = sorted(n for n in options if n in fields and n not in declared)
        assert not copies, f"{name}: options {copies} repeat fields of {cls.__name__} without setting()"
    assert checked, "no verb names its settings class"


def _command_of(command, settings):  # noqa: ANN001, ANN202 - a click command and its config's settings
    """The command whose options a config declares: the verb, or for a group (``vocab``) the one subcommand that
    offers every required setting of the config (``vocab embed``: ``--vocab``)."""
    import click

    if not isinstance(command, click.Group):
        return command
    required = {s.name for s in settings if s.required}
    subs = [c for c in command.commands.values() if required <= {p.name for p in c.params}]
    assert len(subs) == 1, (command.name, [c.name for c in subs])
    return subs[0]


def test_one_row_reaches_every_consumer(monkeypatch) -> None:  # noqa: ANN001 - pytest's monkeypatch
    """A row added to the table (a filter stage: ``filter=``) is a verb, a recipe verb with its main output and
    a line of ``curate --help``, with nothing else written (tests/curate/core/test_filters.py runs it)."""
    from click.testing import CliRunner

    from curate.run.plan import MAIN_OUTPUT
    from curate.run.recipe import VERBS
    from curate.stages import StageSpec
    from tests.curate.core.test_filters import MinWords

    spec = StageSpec("min-words", "filters", "Drop records whose caption is shorter than N words.",
                     main_output=("records.jsonl", "records.parquet"), report=True, filter=MinWords)
    assert "min-words" not in RECIPE_VERBS and "min-words" not in MAIN_OUTPUT
    monkeypatch.setitem(STAGES, spec.name, spec)
    try:
        assert RECIPE_VERBS[-1] == "min-words" and "min-words" in VERBS
        assert MAIN_OUTPUT["min-words"] == spec.main_output
        listing = CliRunner().invoke(cli, ["--help"]).output
        assert "min-words" in listing and spec.help[:30] in listing
        shown = CliRunner().invoke(cli, ["min-words", "--help"]).output
        assert "--min-words" in shown and "fewer words than this" in shown and "records.jsonl" in shown
    finally:
        cli.commands.pop("min-words", None)


def test_a_spec_holds_its_config_and_result_classes_loaded_only_when_asked_for() -> None:
    """``spec.config.load()`` is the settings class (its module imported then); listing the verbs imports none."""
    import dataclasses
    import subprocess
    import sys

    code = ("import sys, curate.cli.group; from curate.stages import STAGES; "
            "print(sorted(m for m in sys.modules if m.endswith('.config')))")
    loaded = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert loaded.strip() == "[]", loaded
    for name, spec in STAGES.items():
        for ref in (spec.config, spec.result):
            if ref is not None:
                cls = ref.load()
                assert dataclasses.is_dataclass(cls) and ref == f"{cls.__module__}:{cls.__name__}", (name, ref)
