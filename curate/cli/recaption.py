"""The ``recaption`` verb (curate/recaption/): its options and work are curate/verbs/recaption.py's."""

from __future__ import annotations

from curate.cli.group import cli
from curate.cli.options import verb_command
from curate.verbs.recaption import VERBS

for _verb in VERBS.values():
    verb_command(_verb, cli, __name__)
