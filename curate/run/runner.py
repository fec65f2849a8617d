"""Running a recipe: plan, write ``recipe.lock.yaml``, run the steps in order through the verbs.

Each step is its verb (:mod:`curate.verbs`: the config built from the step's values, as ``curate VERB`` builds it
from its flags, and the stage's work), run in this process with its output in ``OUT/NN-name/``. A finished step (its
``stats.json`` present, settings and inputs unchanged) is skipped; a started one resumes as the
verb does; the first step whose settings or inputs changed (or ``--force STEP``) runs again from an
emptied folder, and so does every step after it.
"""

from __future__ import annotations

import contextlib
import hashlib
import shutil
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import yaml

from curate import __version__
from curate.core.errors import UserError, command_line
from curate.core.io import Location, as_path, dumps_json, is_url, let_go, out_lock, path_exists, url_fs, write_text_at
from curate.core.stats import versions
from curate.run.plan import (MAIN_OUTPUT, Folder, PlannedStep, record_path, check_ready, plan_run, plan_step,
                             upstream_of, write_record)
from curate.run.recipe import Recipe

LOCK_NAME = "recipe.lock.yaml"


def out_folder(recipe: Recipe, out: str | None) -> Path | Location:
    """``--out``, else the recipe's ``out:``.

    Raises:
        UserError: neither is given.
    """
    chosen = out or recipe.out
    if not chosen:
        raise UserError(f"{recipe.path}: no output folder; pass --out OUT or add out: to the recipe")
    return as_path(chosen)


def summary(planned: list[PlannedStep]) -> str | None:
    """One line naming the step the run starts again from and why, what it keeps; None when nothing reruns."""
    again = [p for p in planned if p.status == "rerun"]
    if not again:
        return None
    kept = [p.step.name for p in planned if p.status == "skip"]
    first = again[0]
    return (f"rerunning from step {first.step.name!r} ({first.why}): "
            f"{', '.join(p.step.name for p in planned if p.status in ('run', 'rerun'))}"
            + (f"; keeping {', '.join(kept)} (finished, unchanged)" if kept else ""))


def plan_lines(recipe: Recipe, planned: list[PlannedStep], out: Folder) -> list[str]:
    """The plan as text: one block per step (status, reads, writes, command)."""
    lines = [f"recipe {recipe.path} -> {out}/ ({len(planned)} steps)"]
    line = summary(planned)
    if line:
        lines.append(line)
    for p in planned:
        status = p.status if not p.why else f"{p.status} ({p.why})"
        lines.append(f"{p.step.folder:<16} {p.step.verb:<10} {status}")
        lines.append(f"    reads:  {', '.join(_maybe(r) for r in p.reads) or '-'}")
        lines.append(f"    writes: {p.folder}/")
        lines.append(f"    $ {p.command}")
    return lines


def _maybe(read: str) -> str:
    """A step's main output as the plan names it before the step ran: the file it will be, or its alternative."""
    head, _, name = read.rpartition("/")
    for outputs in MAIN_OUTPUT.values():
        if len(outputs) > 1 and name == outputs[0] and not path_exists((Location(head) if is_url(head) else Path(head)) / name):
            return f"{read} (or {head}/{outputs[1]} when the records carry image bytes)"
    return read


def lock_content(recipe: Recipe, planned: list[PlannedStep], out: Folder) -> dict[str, Any]:
    """What ``recipe.lock.yaml`` holds: the recipe, its variables, every step's resolved settings, versions."""
    return {
        "recipe": str(recipe.path),
        "recipe_sha256": hashlib.sha256(recipe.text.encode("utf-8")).hexdigest(),
        "out": str(out),
        "curate": __version__,
        "versions": versions(),
        "vars": dict(recipe.vars),
        "inputs": {k: list(v) for k, v in recipe.inputs.items()},
        "steps": [{"name": p.step.name, "verb": p.step.verb, "folder": str(p.folder), "depends": p.depends,
                   "command": p.command, "settings": p.settings} for p in planned],
        "recipe_text": recipe.text,
    }


def write_lock(recipe: Recipe, planned: list[PlannedStep], out: Folder) -> Folder:
    """Write ``OUT/recipe.lock.yaml`` (atomically)."""
    path = out / LOCK_NAME
    write_text_at(path, yaml.safe_dump(lock_content(recipe, planned, out), sort_keys=False, allow_unicode=True,
                                       width=120))
    return path


def _replan(planned: list[PlannedStep], i: int, recipe: Recipe, out: Folder) -> None:
    """Plan step ``i`` again now that the steps it reads have finished (e.g. records.parquet, not .jsonl)."""
    fresh = plan_step(planned[i].step, recipe, out)
    fresh.status, fresh.why = planned[i].status, planned[i].why
    fresh.upstream = upstream_of(fresh, {p.step.name: p for p in planned}, out)
    planned[i] = fresh


def _finish_verify(p: PlannedStep) -> None:
    """``verify`` writes no folder of its own: record that it passed, as its stats.json (without its wall time:
    that is the run's history, not a result; docs/resume.md)."""
    write_text_at(p.folder / "stats.json", dumps_json({"stage": "verify", "command": p.command, "checked": p.reads,
                                                       "ok": True, "versions": versions(), "settings": p.settings}))


def clear_step(out: Folder, p: PlannedStep) -> None:
    """Empty a step's folder and forget its record before it runs again (a local folder or a bucket prefix)."""
    for target, folder in ((p.folder, True), (record_path(out, p), False)):
        if is_url(target):
            fs, inner = url_fs(str(target))
            fs.invalidate_cache()
            if fs.exists(inner):
                fs.rm(inner, recursive=folder)
        elif folder:
            if Path(target).exists():
                shutil.rmtree(target)
        else:
            Path(target).unlink(missing_ok=True)


def run_recipe(recipe: Recipe, out: Folder, *, start: str | None = None,
               until: str | None = None, force: str | None = None, dry_run: bool = False,
               echo: Callable[[str], None] = print) -> list[PlannedStep]:
    """Run (or with ``dry_run`` only print) a recipe's steps.

    Args:
        recipe: the parsed recipe.
        out: the run's folder (steps write ``OUT/NN-name/``).
        start: first step to run (``--from``); earlier steps must have finished.
        until: last step to run (``--until``).
        force: a step to run again even if it finished unchanged (``--force``); later steps follow it.
        dry_run: print the plan, run nothing, write nothing.
        echo: where progress lines go.

    Returns:
        The planned steps with their final status.

    Raises:
        UserError: a bad recipe, a refused step, a step whose input does not exist.
    """
    with command_line():  # a recipe spells options as the command line does: its messages name flags
        return _run_recipe(recipe, out, start=start, until=until, force=force, dry_run=dry_run, echo=echo)


def _run_recipe(recipe: Recipe, out: Folder, *, start: str | None, until: str | None,
                force: str | None, dry_run: bool, echo: Callable[[str], None]) -> list[PlannedStep]:
    planned = plan_run(recipe, out, start=start, until=until, force=force)
    if dry_run:
        for line in plan_lines(recipe, planned, out):
            echo(line)
        return planned
    refused = [p for p in planned if p.status == "refuse"]
    if refused:
        p = refused[0]
        raise UserError(f"{recipe.where(p.step.line)}: step {p.step.name!r}: {p.why}; "
                        f"use another --out, or delete {p.folder} to run it again")
    if not is_url(out):
        Path(out).mkdir(parents=True, exist_ok=True)
    with out_lock(str(out)):  # one curate run per folder; each step's verb also locks its own folder
        _run_steps(recipe, planned, out, echo)
    return planned


@contextlib.contextmanager
def _as_command(p: PlannedStep) -> Iterator[None]:
    """Run with ``sys.argv`` the step's equivalent command line (its stats.json records it, as by hand)."""
    saved = sys.argv
    sys.argv = ["curate", p.step.verb, *p.args]
    try:
        yield
    finally:
        sys.argv = saved


def _run_steps(recipe: Recipe, planned: list[PlannedStep], out: Folder, echo: Callable[[str], None]) -> None:
    write_lock(recipe, planned, out)
    line = summary(planned)
    if line:
        echo(line)
    for i, p in enumerate(planned):
        if p.status in ("skip", "not selected"):
            echo(f"== {p.step.folder}: {p.status} ({p.why})")
            continue
        _replan(planned, i, recipe, out)  # the steps before it made their outputs: name the right files
        p = planned[i]
        check_ready(planned, recipe, i)
        doing = {"resume": "resuming", "rerun": f"rerunning ({p.why})"}.get(p.status, "running")
        echo(f"== {p.step.folder}: {doing} {p.command}")
        if p.status == "rerun":
            clear_step(out, p)
        write_record(out, p)
        t0 = time.perf_counter()
        try:
            with _as_command(p):
                p.prepare().run()  # the config built from the step's values, then the stage's work
        except UserError as exc:  # the step's own message, led by the recipe line that made it
            raise type(exc)(f"{recipe.where(p.step.line)}: step {p.step.name!r}: {exc}") from None
        finally:
            let_go(str(p.folder))  # a finished (or failed) step's folder keeps no lock file while later steps run
        if p.step.verb == "verify":
            _finish_verify(p)
        p.status, p.why = "done", f"{time.perf_counter() - t0:.1f}s"
        write_lock(recipe, planned, out)
