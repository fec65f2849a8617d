"""The ``dedup`` verb (curate/dedup/): its options and work are curate/verbs/dedup.py's."""

from __future__ import annotations

from curate.cli.group import cli
from curate.cli.options import verb_command
from curate.verbs.dedup import VERBS

for _verb in VERBS.values():
    verb_command(_verb, cli, __name__)
