"""The ``curate`` click group: it knows every verb by name and imports a verb's module only to run it.

``curate --help`` lists the verbs from :data:`VERBS` without importing any of them;
``curate pack ...`` imports curate/cli/pack.py alone (and, through it, only what
packing needs). A verb module adds its commands to :data:`cli` when imported.
"""

from __future__ import annotations

import importlib

import click

from curate import __version__

#: Every verb: name -> (its module in curate/cli, the first paragraph of its help, as ``curate --help`` shows it).
#: A new verb goes here too; tests/curate/cli/test_lazy_verbs.py checks this table against the commands.
VERBS: dict[str, tuple[str, str]] = {
    "balance": ("balance", "Concept-balance records: embed → concept embeddings → tag → resample → report."),
    "dedup": ("dedup", "Remove exact, near and semantic duplicate records, and copies of benchmark images."),
    "embed": ("balance", "Embed the images of records with open_clip (L2-normalised, float16)."),
    "energon-prepare": ("pack", "Make a curate pack output folder a Megatron-Energon dataset (writes OUT/.nv-meta/)."),
    "pack": ("pack", "Pack records into sequences of at most --ctx tokens, as WebDataset shards."),
    "recaption": ("recaption", "Write new English and Chinese captions for the images of records."),
    "report": ("report", "Write OUT/report/: a static HTML site showing what each stage did to the data."),
    "resample": ("balance", "Draw a concept-balanced selection of the tagged records."),
    "rl-filter": ("rl", "Keep the RL prompts a model solves sometimes but not reliably."),
    "run": ("run", "Run a recipe: an ordered list of steps, each a verb with its options."),
    "score": ("rl", "Score model responses with the rule-based verifiers (curate.rewards)."),
    "serve-rewards": ("rl", "Serve the reward verifiers over HTTP for RL trainers."),
    "tag": ("balance", "Tag every embedding with its top-K nearest concepts (FAISS)."),
    "verify": ("pack", "Check a packed folder: every shard, boundary and count against its JSON and stats.json."),
    "vocab": ("vocab", "Build and embed the concept vocabulary used by curate balance."),
}


class _ReportingCommand(click.Command):
    """A verb that writes its output folder's report when it finished (see curate/cli/report_hook.py)."""

    def invoke(self, ctx: click.Context):  # noqa: ANN201 - whatever the verb returns
        result = super().invoke(ctx)
        from curate.cli.report_hook import report_after

        report_after(self.name or "", ctx.params)
        return result


class _Group(click.Group):
    """The top-level group: verbs from :data:`VERBS`, each module imported when its verb is first asked for."""

    command_class = _ReportingCommand
    _listing = False  # True while the help lists the verbs

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted({*self.commands, *VERBS})

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name not in self.commands and cmd_name in VERBS:
            if self._listing:  # a stand-in with the verb's first help paragraph: nothing imported to list it
                return click.Command(cmd_name, help=VERBS[cmd_name][1])
            importlib.import_module(f"curate.cli.{VERBS[cmd_name][0]}")  # registers its verbs on this group
        return self.commands.get(cmd_name)

    def resolve_command(self, ctx: click.Context, args: list[str]) -> tuple[str | None, click.Command | None, list[str]]:
        try:
            return super().resolve_command(ctx, args)
        except click.exceptions.NoSuchCommand as exc:  # suggest among all verbs, not only the imported ones
            raise click.exceptions.NoSuchCommand(exc.command_name, possibilities=self.list_commands(ctx),
                                                 ctx=ctx) from None

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        """click's own Commands section; verbs not imported yet are listed from :data:`VERBS`."""
        self._listing = True
        try:
            super().format_commands(ctx, formatter)
        finally:
            self._listing = False


@click.group(cls=_Group, context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
@click.version_option(__version__, prog_name="curate")
def cli() -> None:
    """Prepare the training data of vision-language models.

    Stages compose through files: each reads records (JSONL, Parquet) and writes
    its outputs plus a stats.json into an output folder. Reruns resume.
    """


def command(name: str) -> click.Command | None:
    """The click command of verb ``name`` (its module imported if it was not yet), None for an unknown verb."""
    return cli.get_command(click.Context(cli), name)
