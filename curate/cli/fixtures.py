"""``python -m curate.fixtures build-all DIR``: build the tiny processor and models offline.

Writes ``DIR/processor``, ``DIR/clip`` and ``DIR/vlm`` and prints what to pass
to the stages (``--processor``, ``--model``), one ``name: value`` line each, or
one JSON object with ``--json``. The work is :func:`curate.fixtures.build.build_all`.
"""

from __future__ import annotations

import json
from pathlib import Path

import click


@click.group()
def main() -> None:
    """Build the tiny offline processor and models used by the demo and the tests."""


@main.command("build-all")
@click.argument("folder", type=click.Path(file_okay=False, path_type=Path))
@click.option("--seed", default=0, show_default=True, help="Seed of the random weights.")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object instead of lines.")
def build_all(folder: Path, seed: int, as_json: bool) -> None:
    """Build the tiny processor, CLIP and VLM into FOLDER/{processor,clip,vlm}."""
    from curate.fixtures.build import build_all as build

    result = build(folder, seed=seed)
    if as_json:
        click.echo(json.dumps(result, indent=2))
        return
    for key, value in result.items():
        click.echo(f"{key}: {value}")
