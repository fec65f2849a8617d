"""The ``curate`` command line: one click group, one thin verb per stage.

Each verb parses its flags and calls one function that holds the logic; tests
and executors call those functions directly. ``group.py`` holds the click group,
``options.py`` the flags the verbs share, and one module per role holds the verbs
(they register themselves on the group when imported here). This package is the
only place in curate that imports click.
"""

from __future__ import annotations

import sys

import click

from curate.cli import balance, pack, recaption, rl, vocab  # noqa: F401  (registers the verbs)
from curate.cli.group import cli
from curate.core.errors import UserError

__all__ = ["cli", "main"]


def main(argv: list[str] | None = None) -> None:
    """Entry point of the ``curate`` console script: user errors print one line and exit 2."""
    try:
        cli.main(args=argv, prog_name="curate", standalone_mode=False)
    except UserError as exc:
        click.secho(f"error: {exc}", fg="red", err=True)
        sys.exit(exc.exit_code)
    except click.exceptions.Abort:
        click.echo("aborted", err=True)
        sys.exit(130)
    except click.ClickException as exc:
        exc.show()
        sys.exit(exc.exit_code)
    except click.exceptions.Exit as exc:
        sys.exit(exc.exit_code)
