"""The ``curate`` click group: it knows every verb by name and imports a verb's module only to run it.

``curate --help`` lists the verbs from :data:`curate.stages.STAGES` without importing any of them;
``curate pack ...`` imports curate/verbs/pack.py alone (and, through it, only what packing needs) and makes the
command from its options (:func:`curate.cli.options.verb_command`). The few commands that are not verbs of values
(``run``, ``report``, ``vocab build``, ``serve-rewards``, ``energon-prepare``) live in ``curate/cli/<family>.py``,
which adds them to :data:`cli` when imported.
"""

from __future__ import annotations

import importlib
import os

import click

from curate import __version__
from curate.core.errors import command_line
from curate.stages import STAGES


class VerbCommand(click.Command):
    """A verb: its callback builds its settings and returns a :class:`~curate.verbs.Prepared`, run here; a flag it
    no longer takes (``moved``: :attr:`curate.verbs.Verb.moved`) is one line saying where it went."""

    moved: tuple[tuple[str, str], ...] = ()

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        for flag, why in self.moved:
            if any(a == flag or a.startswith(f"{flag}=") for a in args):
                from curate.core.errors import UserError

                raise UserError(why)
        return super().parse_args(ctx, args)

    def invoke(self, ctx: click.Context):  # noqa: ANN201 - whatever the verb returns
        result = super().invoke(ctx)
        run = getattr(result, "run", None)  # a Prepared (curate.verbs): its settings built, now its work
        return run() if callable(run) else result


class _ReportingCommand(VerbCommand):
    """A verb that writes its output folder's report when it finished (:func:`report_after`)."""

    def invoke(self, ctx: click.Context):  # noqa: ANN201 - whatever the verb returns
        result = super().invoke(ctx)
        report_after(self.name or "", ctx.params)
        return result


def report_after(verb: str, params: dict) -> None:
    """Write the report of a verb's --out once the verb finished (``CURATE_REPORT=0`` turns it off; a failure only
    warns); see :mod:`curate.report`."""
    out = params.get("out")
    spec = STAGES.get(verb)
    if spec is None or not spec.report or not out or os.environ.get("CURATE_REPORT", "1") in ("0", "false", "no"):
        return
    from curate.core.io import path_exists

    if not path_exists(f"{str(out).rstrip('/')}/stats.json"):  # a local folder, or a prefix in a bucket
        return
    write_report_or_warn(out)


def write_report_or_warn(out: object) -> None:
    """Write OUT/report/ and print where it is; a failure only warns (the outputs are complete without it)."""
    from rich.markup import escape

    from curate.core.progress import console
    from curate.report import write_report

    try:
        index = write_report(out)
    except Exception as exc:  # noqa: BLE001 - the stage's outputs are complete; the report is a view of them
        console.print(f"[yellow]warning:[/yellow] {escape(f'report not written ({type(exc).__name__}: {exc}); try: curate report {out}')}")
        return
    console.print(f"report: {index}", markup=False, highlight=False)


class _Group(click.Group):
    """The top-level group: verbs from :data:`~curate.stages.STAGES`, each module imported when first asked for."""

    command_class = _ReportingCommand
    _listing = False  # True while the help lists the verbs

    def main(self, *args, **kwargs):  # noqa: ANN002, ANN003, ANN201 - click's own signature
        """click's ``main``, with errors naming settings by their flags (curate.core.errors)."""
        with command_line():
            return super().main(*args, **kwargs)

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted({*self.commands, *STAGES})

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name not in self.commands and cmd_name in STAGES:
            if self._listing:  # a stand-in with the verb's first help paragraph: nothing imported to list it
                return click.Command(cmd_name, help=STAGES[cmd_name].help)
            from curate.verbs import verb

            try:  # a verb of values (curate/verbs/<family>.py, or a filter stage's row): its command made here
                made = verb(cmd_name)
            except KeyError:  # a click-only command: curate/cli/<family>.py registers it
                importlib.import_module(f"curate.cli.{STAGES[cmd_name].cli}")
            else:
                from curate.cli.options import verb_command

                verb_command(made, self)
        return self.commands.get(cmd_name)

    def resolve_command(self, ctx: click.Context, args: list[str]) -> tuple[str | None, click.Command | None, list[str]]:
        try:
            return super().resolve_command(ctx, args)
        except click.exceptions.NoSuchCommand as exc:  # suggest among all verbs, not only the imported ones
            raise click.exceptions.NoSuchCommand(exc.command_name, possibilities=self.list_commands(ctx),
                                                 ctx=ctx) from None

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        """click's own Commands section; verbs not imported yet are listed from their specs."""
        self._listing = True
        try:
            super().format_commands(ctx, formatter)
        finally:
            self._listing = False


def _verbosity(ctx: click.Context, param: click.Parameter, value: bool) -> bool:
    """``--quiet`` / ``--verbose``, applied as soon as they are read (before a verb's module loads a library); without
    either, other libraries' progress bars are silenced all the same."""
    from curate.core.progress import QUIET, VERBOSE, set_verbosity, silence_libraries

    if value:
        if ctx.meta.setdefault("curate.verbosity", param.name) != param.name:
            raise click.UsageError("give --quiet or --verbose, not both")
        set_verbosity(QUIET if param.name == "quiet" else VERBOSE)
    elif "curate.verbosity" not in ctx.meta:
        silence_libraries()
    return value


@click.group(cls=_Group, context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
@click.version_option(__version__, prog_name="curate")
@click.option("--quiet", "-q", is_flag=True, is_eager=True, expose_value=False, callback=_verbosity,
              help="Print errors only: no progress, no summaries (outputs and stats.json are the same).")
@click.option("--verbose", "-v", is_flag=True, is_eager=True, expose_value=False, callback=_verbosity,
              help="Print more: progress lines every 5 s outside a terminal, other libraries' progress bars.")
def cli() -> None:
    """Prepare the training data of vision-language models.

    Stages compose through files: each reads records (JSONL, Parquet) and writes
    its outputs plus a stats.json into an output folder. Reruns resume.
    """


def command(name: str) -> click.Command | None:
    """The click command of verb ``name`` (its module imported if it was not yet), None for an unknown verb."""
    return cli.get_command(click.Context(cli), name)
