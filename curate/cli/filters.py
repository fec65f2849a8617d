"""The verbs of filter stages (:class:`curate.core.filters.RecordFilter`), each made from its ``StageSpec`` row.

A row of :data:`curate.stages.STAGES` with ``filter=`` (and ``cli="filters"``) gets a verb here, made from
:func:`curate.verbs.filters.filter_verb` (its options: its inputs, ``--out``, the filter's own settings,
``--shard-size``, ``--image-root`` and the executor's). Nothing about a filter is written here by hand.
"""

from __future__ import annotations

import click

from curate.cli.group import cli
from curate.cli.options import verb_command
from curate.stages import STAGES, StageSpec
from curate.verbs.filters import filter_verb


def add_verb(spec: StageSpec) -> click.Command:
    """Make the verb of filter stage ``spec`` and add it to the ``curate`` group."""
    return verb_command(filter_verb(spec), cli, __name__)


for _spec in STAGES.values():  # the filter stages of the table (a row added later gets its verb when asked for)
    if _spec.filter is not None and _spec.name not in cli.commands:
        add_verb(_spec)
