"""Verbs of concept balancing: ``embed``, ``tag``, ``match``, ``resample``, ``balance`` (curate/balance/): their
options and work are curate/verbs/balance.py's."""

from __future__ import annotations

import click

from curate.cli.group import VerbCommand, cli
from curate.cli.options import verb_command
from curate.core.errors import UserError
from curate.verbs.balance import VERBS


class _TagCommand(VerbCommand):
    """``tag``, which sends ``--match text`` (its former text mode) to ``curate match`` in one line."""

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        if any(a == "--match" or a.startswith("--match=") for a in args):
            raise UserError("tag --match: matching records' text is its own verb: "
                            "curate match RECORDS... --vocab VOCAB --out OUT (tag reads embeddings only)")
        return super().parse_args(ctx, args)


for _name, _verb in VERBS.items():
    verb_command(_verb, cli, __name__, cls=_TagCommand if _name == "tag" else None)
