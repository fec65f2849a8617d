"""The ``curate`` click group; every verb module adds its commands to it."""

from __future__ import annotations

import click

from curate import __version__


@click.group(context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
@click.version_option(__version__, prog_name="curate")
def cli() -> None:
    """Prepare the training data of vision-language models.

    Stages compose through files: each reads records (JSONL, Parquet) and writes
    its outputs plus a stats.json into an output folder. Reruns resume.
    """
