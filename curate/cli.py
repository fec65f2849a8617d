"""The ``curate`` command line: one click group, one thin verb per stage.

Each verb parses its flags and calls one function that holds the logic; tests
and executors call those functions directly.
"""

from __future__ import annotations

import sys

import click

from curate import __version__
from curate.errors import UserError


@click.group(context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
@click.version_option(__version__, prog_name="curate")
def cli() -> None:
    """Prepare the training data of vision-language models.

    Stages compose through files: each reads records (JSONL, Parquet) and writes
    its outputs plus a stats.json into an output folder. Reruns resume.
    """


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


# ---------------------------------------------------------------------------
# Verbs. Each block below is one verb (or one sub-group); keep them thin.
# ---------------------------------------------------------------------------
