"""The ``run`` verb: a recipe of steps, each one of the verbs (curate/verbs/) run with its values (curate/run/)."""

from __future__ import annotations

import click

from curate.cli.group import cli, write_report_or_warn
from curate.core.errors import UserError


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

    Steps run in order, each as its verb (same options, checks and outputs as
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
    run_recipe(parsed, folder, start=start, until=until, force=force, dry_run=dry_run,
               echo=lambda line: console.print(line, markup=False, highlight=False))
    if dry_run:
        return
    console.print(f"lock: {folder}/recipe.lock.yaml")
    if not no_report:  # in a bucket too (curate.report reads a copy of the few files it needs)
        write_report_or_warn(folder)
