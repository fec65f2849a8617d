"""The ``curate`` command line: one click group, one thin verb per stage.

Each verb parses its flags into values and hands them to its ``prepare`` (``curate/verbs/``, which
``curate run`` calls too): one typed config per step (``curate/*/config.py``, ``packer/config.py``; each
checks itself on construction) and one function that holds the logic; tests and executors call those
functions directly. ``group.py`` holds the click group and the report written after a verb,
``options.py`` makes the flags from the verbs' declared options, and one module per role registers the verbs. The group imports a verb's module only when
that verb runs (or its own ``--help`` is asked for), so ``curate pack`` never
loads what balancing or RL need. This package is the only place in curate that imports click.

:func:`main` turns every mistake into one line on stderr and a non-zero exit:
a :class:`UserError` or a usage error exits 2, an ``OSError`` (an output that
cannot be written: a file in the way, no space left, permission denied) exits 1
and names the path.
"""

from __future__ import annotations

import sys

import click

from curate.cli.errors import describe_os_error, storage_error
from curate.cli.group import cli
from curate.core.errors import UserError
from curate.core.io import held_for_command

__all__ = ["cli", "main"]


def _fail(message: str, code: int) -> None:
    click.secho(f"error: {' '.join(message.split())}", fg="red", err=True)
    sys.exit(code)


def main(argv: list[str] | None = None) -> None:
    """Entry point of the ``curate`` console script: every mistake prints one line and exits non-zero."""
    args = sys.argv[1:] if argv is None else list(argv)
    try:
        with held_for_command():  # each stage's lock on its --out is kept until the verb ends
            cli.main(args=args, prog_name="curate", standalone_mode=False)
    except UserError as exc:
        _fail(str(exc), exc.exit_code)
    except click.exceptions.Abort:
        click.echo("aborted", err=True)
        sys.exit(130)
    except click.exceptions.NoArgsIsHelpError as exc:  # a bare `curate` (or group): its help, as click shows it
        exc.show()
        sys.exit(exc.exit_code)
    except click.UsageError as exc:
        where = f" (see: {exc.ctx.command_path} --help)" if exc.ctx is not None else ""
        _fail(exc.format_message() + where, exc.exit_code)
    except click.ClickException as exc:
        _fail(exc.format_message(), exc.exit_code)
    except click.exceptions.Exit as exc:
        sys.exit(exc.exit_code)
    except OSError as exc:
        _fail(storage_error(exc, args) or describe_os_error(exc, args), 1)
    except Exception as exc:  # object storage (s3fs, gcsfs) raises its libraries' own types; anything else is a bug
        line = storage_error(exc, args)
        if line is None:
            raise
        _fail(line, 1)

