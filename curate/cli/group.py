"""The ``curate`` click group; every verb module adds its commands to it."""

from __future__ import annotations

import click

from curate import __version__


class _ReportingCommand(click.Command):
    """A verb that writes its output folder's report when it finished (see curate/cli/report_hook.py)."""

    def invoke(self, ctx: click.Context):  # noqa: ANN201 - whatever the verb returns
        result = super().invoke(ctx)
        from curate.cli.report_hook import report_after

        report_after(self.name or "", ctx.params)
        return result


class _Group(click.Group):
    command_class = _ReportingCommand


@click.group(cls=_Group, context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
@click.version_option(__version__, prog_name="curate")
def cli() -> None:
    """Prepare the training data of vision-language models.

    Stages compose through files: each reads records (JSONL, Parquet) and writes
    its outputs plus a stats.json into an output folder. Reruns resume.
    """
