"""The table of verbs: every command, recipe step, report hook and report page reads it, and it holds every verb."""

from __future__ import annotations

import importlib
import pkgutil

import curate.cli
from curate.cli.group import cli
from curate.stages import RECIPE_VERBS, STAGES


def test_every_command_has_its_spec_and_every_spec_its_command() -> None:
    for info in pkgutil.iter_modules(curate.cli.__path__):
        importlib.import_module(f"curate.cli.{info.name}")
    assert sorted(cli.commands) == sorted(STAGES)
    for name, spec in STAGES.items():
        assert cli.commands[name].callback.__module__ == f"curate.cli.{spec.cli}", name


def test_the_consumers_read_the_table() -> None:
    from curate.run.plan import MAIN_OUTPUT
    from curate.run.recipe import VERBS

    assert VERBS == RECIPE_VERBS and set(MAIN_OUTPUT) == set(RECIPE_VERBS)
    for name, spec in STAGES.items():
        if spec.view is not None:  # a report page's samples: the function exists where the spec says
            module, _, function = spec.view.partition(":")
            assert callable(getattr(importlib.import_module(f"curate.report.{module}"), function)), name
        assert not spec.plots or spec.report, name  # plots are shown by the report the verb writes
