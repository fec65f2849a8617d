"""The ``run`` verb: a recipe of steps, each one of the verbs below run as its own command (curate/run/)."""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Iterator
from typing import Any

import click

from curate.cli.group import cli, command
from curate.core.threads import environ
from curate.core.errors import UserError, command_line
from curate.run.plan import OptionInfo, VerbInfo


@contextlib.contextmanager
def _as_command(verb: str, argv: list[str]) -> Iterator[None]:
    """Run with sys.argv set to the step's own command (stats.json records it) and no per-verb report."""
    saved_argv = sys.argv
    sys.argv = ["curate", verb, *argv]
    try:
        with environ({"CURATE_REPORT": "0"}):  # curate run writes one report for all steps at its end
            yield
    finally:
        sys.argv = saved_argv


class ClickVerbs:
    """The verbs as the click commands define them: a recipe step maps onto their flags."""

    def _command(self, verb: str) -> click.Command:
        cmd = command(verb)
        if cmd is None:
            raise UserError(f"unknown verb {verb!r}")
        return cmd

    def describe(self, verb: str) -> VerbInfo:
        """Arguments and options of a verb, read from its click command."""
        cmd = self._command(verb)
        argument, required, options = None, False, {}
        for param in cmd.params:
            if isinstance(param, click.Argument):
                argument, required = param.name, param.required
                continue
            if not isinstance(param, click.Option) or param.name == "help":
                continue
            long = [o for o in param.opts if o.startswith("--")] or list(param.opts)
            info = OptionInfo(flag=long[0], multiple=param.multiple, is_flag=bool(param.is_flag),
                              is_path=isinstance(param.type, click.Path),
                              off_flag=param.secondary_opts[0] if param.secondary_opts else None)
            for name in {*(o.lstrip("-") for o in long), (param.name or "").replace("_", "-")}:
                if name:
                    options[name] = info
        return VerbInfo(argument=argument, argument_required=required, options=options,
                        writes_out="out" in options)

    def resolve(self, verb: str, argv: list[str]) -> dict[str, Any]:
        """Parse argv with the verb's parser: every parameter's value, defaults included."""
        cmd = self._command(verb)
        try:
            with command_line():
                ctx = cmd.make_context(verb, list(argv), resilient_parsing=False)
        except click.ClickException as exc:
            raise UserError(exc.format_message()) from None
        with ctx, command_line():
            params = dict(ctx.params)
            params.update({k.split(".", 1)[1]: v for k, v in ctx.meta.items() if k.startswith("curate.")})
        return params

    def check(self, verb: str, argv: list[str], later: list[str]) -> None:
        """Build and check a step's settings as the verb does, without running it (``later``: paths earlier steps
        will make, accepted as if they existed): the verb returns its :class:`~curate.cli.options.Prepared`, whose
        work is not run."""
        from curate.cli.options import Prepared
        from curate.core import validate

        cmd = self._command(verb)
        with _as_command(verb, argv), validate.made_later(later), command_line():
            try:
                ctx = cmd.make_context(verb, list(argv))
                ctx.meta["curate.check_only"] = True
                with ctx:
                    prepared = click.Command.invoke(cmd, ctx)  # the verb's settings alone: not its work, no report
            except click.ClickException as exc:
                raise UserError(exc.format_message()) from None
        if not isinstance(prepared, Prepared):  # a recipe verb builds its settings, then returns its work unrun
            raise TypeError(f"curate {verb} returned {type(prepared).__name__}, not Prepared: it cannot be checked")

    def invoke(self, verb: str, argv: list[str]) -> None:
        """Run ``curate VERB ARGV`` in this process, through the command line's own path."""
        with _as_command(verb, argv):
            try:
                cli.main(args=[verb, *argv], prog_name="curate", standalone_mode=False)
            except click.ClickException as exc:
                raise UserError(f"curate {verb}: {exc.format_message()}") from None


@cli.command("run")
@click.argument("recipe", type=click.Path(path_type=str))
@click.option("--out", type=click.Path(path_type=str), default=None,
              help="Run folder (default: the recipe's out:). Step N writes OUT/NN-name/.")
@click.option("--from", "start", default=None, metavar="STEP", help="First step to run; earlier ones must have finished.")
@click.option("--until", default=None, metavar="STEP", help="Last step to run.")
@click.option("--force", default=None, metavar="STEP",
              help="Run STEP again even if it finished unchanged (its folder is emptied); the steps after it follow.")
@click.option("--dry-run", is_flag=True, help="Print the plan (steps, inputs, outputs, what is skipped); run nothing.")
@click.option("--set", "sets", multiple=True, metavar="NAME=VALUE",
              help="Override a variable of the recipe's vars: (repeatable).")
@click.option("--no-report", is_flag=True, help="Do not write OUT/report/ at the end.")
def run_cmd(recipe: str, out: str | None, start: str | None, until: str | None, force: str | None, dry_run: bool,
            sets: tuple[str, ...], no_report: bool) -> None:
    """Run a recipe: an ordered list of steps, each a verb with its options.

    Steps run in order, each as its own command (same flags, checks and outputs as
    by hand) into OUT/NN-name/. A finished step whose settings and inputs are
    unchanged is skipped; a started one resumes; the first step whose settings or
    inputs changed runs again from an emptied folder, and so does every step after
    it (the run, and --dry-run, say which and why). Relative paths in the recipe are
    taken from the recipe's folder; --set values from the current folder.
    OUT/recipe.lock.yaml keeps the recipe, every step's resolved settings and the
    library versions; OUT/report/index.html shows the data.

    \b
    Examples:
      curate run recipes/llava-ov-midtraining.yaml --set models=demo-out/models --out demo-out/run
      curate run recipes/rl-selection.yaml --dry-run
      curate run recipes/llava-ov-midtraining.yaml --from pack
      curate run recipes/llava-ov-midtraining.yaml --force recaption
    """
    from curate.core.io import is_url
    from curate.core.progress import console
    from curate.run.recipe import load_recipe, parse_sets
    from curate.run.runner import out_folder, run_recipe

    if is_url(recipe):  # its steps' inputs and outputs may be in a bucket; the recipe itself is a local file
        raise UserError(f"RECIPE {recipe}: a recipe is read from this machine's disk; copy it here and run that copy")
    parsed = load_recipe(recipe, parse_sets(sets))
    folder = out_folder(parsed, out)
    run_recipe(parsed, folder, ClickVerbs(), start=start, until=until, force=force, dry_run=dry_run,
               echo=lambda line: console.print(line, markup=False, highlight=False))
    if dry_run:
        return
    console.print(f"lock: {folder}/recipe.lock.yaml")
    if not no_report:  # in a bucket too (curate.report reads a copy of the few files it needs)
        from curate.cli.report_hook import write_report_or_warn

        write_report_or_warn(folder)
