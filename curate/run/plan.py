"""Planning a recipe run: each step's values, its folder, and whether it runs, resumes or is skipped.

A step names a verb and that verb's options (:mod:`curate.verbs`, where each verb's options are declared once for
the command line and recipes): the planner turns the step's YAML into the verb's values (paths resolved: recipe
inputs, earlier steps, the recipe's own folder) and checks them as the command line would, then builds each step's
config without running it (:func:`check_step`), so a bad value of a later step stops the run before the first step.
"""

from __future__ import annotations

import difflib
import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from curate.core.errors import UserError, command_line
from curate.core.io import Location, dumps_json, is_url, path_exists, read_text_at, write_text_at
from curate.run.recipe import Recipe, Step, from_folder
from curate.stages import STAGES
from curate.verbs import EXECUTOR_OPTIONS, IMAGE_LIMITS, Prepared, Values, Verb, verb

#: What a step hands to the next one when it is named without a sub-path (:attr:`curate.stages.StageSpec.main_output`).
MAIN_OUTPUT = STAGES.main_outputs  # read when asked: a row added to the table is a recipe verb
RUN_DIR = "_run"
#: A run folder: local, or an object-store URL.
Folder = Path | Location
#: Options that the settings of a step list last, in their declared order (recipe.lock.yaml keeps the order the
#: command line listed them in when recipes were parsed by it: the image limits and Ray resources last).
_LISTED_LAST = tuple(o.name for o in (*IMAGE_LIMITS, *EXECUTOR_OPTIONS[4:]))


@dataclass
class PlannedStep:
    """A step with its command line and status in this run."""

    step: Step
    folder: Folder
    args: list[str]  #: the equivalent command line's arguments (shown and recorded, never parsed)
    values: Values  #: the verb's values: what its ``prepare`` builds the config from
    settings: dict[str, Any]  #: ``values`` as JSON (recorded in ``OUT/_run/NN-name.json`` and the lock)
    depends: list[str] = field(default_factory=list)  #: names of the steps it reads
    reads: list[str] = field(default_factory=list)  #: paths it reads
    upstream: dict[str, str] = field(default_factory=dict)  #: step read -> hash of its settings and upstream
    inputs: dict[str, str] = field(default_factory=dict)  #: path read that no step makes -> its size and mtime
    status: str = "run"  #: run, rerun, resume, skip, refuse, not selected
    why: str = ""

    @property
    def command(self) -> str:
        """The equivalent command line."""
        import shlex

        return shlex.join(["curate", self.step.verb, *self.args])

    def prepare(self) -> Prepared:
        """The step's config, built and checked as its verb does, and its work (not run)."""
        return verb(self.step.verb).prepare(self.values)


def _suggest(name: str, known: list[str]) -> str:
    close = difflib.get_close_matches(name, known, n=1)
    return f"did you mean {close[0]!r}? " if close else ""


def _ref(value: str, step: Step, recipe: Recipe, out: Folder, line: int,
         depends: list[str], reads: list[str]) -> list[str]:
    """Resolve a recipe input name, a step name or STEP/sub/path (added to ``reads``); others are literal paths."""
    paths = _resolve(value, step, recipe, out, line, depends)
    if paths is None:
        return [recipe.here(value)]
    reads.extend(paths)
    return paths


def _inside(rest: str, value: str, recipe: Recipe, line: int) -> None:
    """A sub-path of an input or a step stays inside it: no ``..``, nothing absolute."""
    if rest and (rest.startswith("/") or ".." in rest.replace("\\", "/").split("/")):
        raise UserError(f"{recipe.where(line)}: {value!r}: a sub-path must stay inside the input or the step's folder "
                        "(no .. and no leading /)")


def _resolve(value: str, step: Step, recipe: Recipe, out: Folder, line: int, depends: list[str]) -> list[str] | None:
    head, slash, rest = value.partition("/")
    if head in recipe.inputs or recipe.step(head) is not None:
        _inside(rest, value, recipe, line)
    if head in recipe.inputs and head not in {s.name for s in recipe.steps}:
        paths = recipe.inputs[head]
        if rest:
            if len(paths) != 1:
                raise UserError(f"{recipe.where(line)}: {value!r}: input {head!r} has several paths; "
                                "name a sub-path of a single-path input only")
            return [f"{paths[0].rstrip('/')}/{rest}"]
        return list(paths)
    target = recipe.step(head)
    if target is None:
        return None
    if target.index >= step.index:
        cycle = _cycle(recipe, step.name, out)
        if cycle:
            raise UserError(f"{recipe.where(step.line)}: steps form a cycle ({' -> '.join(cycle)}); "
                            "a step can only read the recipe's inputs and earlier steps")
        raise UserError(f"{recipe.where(line)}: step {step.name!r} reads {head!r}, which comes later in the "
                        f"recipe; move {step.name!r} after {head!r}")
    depends.append(head)
    folder = out / target.folder
    sub = rest if slash else next((c for c in MAIN_OUTPUT[target.verb] if c and path_exists(folder / c)),
                                  MAIN_OUTPUT[target.verb][0])
    return [str(folder / sub) if sub else str(folder)]


def _step_refs(step: Step, recipe: Recipe) -> set[str]:
    names = {s.name for s in recipe.steps}
    values: list[str] = list(step.inputs)
    for v in step.options.values():
        values.extend(str(x) for x in (v if isinstance(v, list) else [v]) if isinstance(x, str))
    return {v.partition("/")[0] for v in values if v.partition("/")[0] in names}


def _cycle(recipe: Recipe, start: str, out: Folder) -> list[str]:
    """A cycle through ``start`` in the steps' references, or []."""
    graph = {s.name: _step_refs(s, recipe) for s in recipe.steps}

    def walk(node: str, trail: list[str]) -> list[str]:
        for nxt in sorted(graph.get(node, ())):
            if nxt == start:
                return trail + [nxt]
            if nxt not in trail:
                found = walk(nxt, trail + [nxt])
                if found:
                    return found
        return []

    return walk(start, [start])


def _option_value(name: str, value: Any, info: Any, resolve_path: Any, base: Path) -> tuple[Any, list[str]] | None:
    """A recipe option's value for the verb (text, a list of texts for a repeatable option, a bool for a flag) and
    its command-line spelling; None when it leaves the option at its default (``null``, an off flag)."""
    if value is None or value is False and info.off_flag is None and info.is_flag:
        return None
    if info.is_flag:
        if not isinstance(value, bool):
            raise ValueError(f"is an on/off flag: write {name}: true or false")
        return value, [info.flag if value else info.off_flag]
    values = value if isinstance(value, list) else [value]
    if any(isinstance(v, (dict, list)) for v in values):
        raise ValueError("must be a value or a list of values")
    strs = ["true" if v is True else "false" if v is False else str(v) for v in values]
    if info.path:
        strs = [p for s in strs for p in resolve_path(s)]
    else:  # a model or processor given as a folder (also local-dir:PATH) is taken from the recipe's folder
        strs = [from_folder(s, base) if isinstance(v, str) else s for s, v in zip(strs, values)]
    if info.multiple:
        return strs, [a for s in strs for a in (info.flag, s)]
    if len(strs) != 1 and not isinstance(value, list):
        raise ValueError("takes one value")
    return ",".join(strs), [info.flag, ",".join(strs)]


def _listed(values: Values, spec: Verb, given: list[str]) -> dict[str, Any]:
    """``values`` in the order the settings of a step have always been listed: the options given, in the recipe's
    order, then the argument, then the others as declared; the image limits and Ray resources last."""
    declared = [o.name for o in ((spec.argument,) if spec.argument else ())] + [o.name for o in spec.options]
    argument = [spec.argument.name] if spec.argument else []
    order = list(dict.fromkeys([*[n for n in given if n not in argument], *argument, *declared]))
    order = [n for n in order if n not in _LISTED_LAST] + [n for n in order if n in _LISTED_LAST]
    return {n: values[n] for n in order}


def plan_step(step: Step, recipe: Recipe, out: Folder) -> PlannedStep:
    """The values of one step, converted and checked as the command line checks its verb's flags.

    Raises:
        UserError: an unknown option, a bad value, a missing input or a forward reference,
            naming the recipe line.
    """
    spec = verb(step.verb)
    depends: list[str] = []
    folder = out / step.folder
    args: list[str] = []
    given: dict[str, Any] = {}
    reads: list[str] = []
    option_reads: list[str] = []
    positional: list[str] = []
    writes_out = spec.option("out") is not None
    if step.inputs:
        if spec.argument is None:
            raise UserError(f"{recipe.where(step.line)}: {step.verb} takes no input:; give its inputs as options "
                            f"({', '.join(o.flag[2:] for o in spec.options if o.path and o.name != 'out')})")
        for value in step.inputs:
            paths = _ref(value, step, recipe, out, step.input_line or step.line, depends, reads)
            if paths == [recipe.here(value)] and paths[0] not in reads and not is_url(value) and not Path(paths[0]).exists():
                raise UserError(f"{recipe.where(step.input_line or step.line)}: step {step.name!r} reads {value!r}: no such file, "
                                f"recipe input ({', '.join(recipe.inputs) or 'none'}) or earlier step")
            args.extend(paths)
            positional.extend(paths)
        if not spec.argument.multiple and len(positional) != 1:
            raise UserError(f"{recipe.where(step.input_line or step.line)}: step {step.name!r}: {step.verb} reads one "
                            f"input, not {len(positional)}")
        given[spec.argument.name] = positional if spec.argument.multiple else positional[0]
    elif spec.argument is not None and spec.argument.required:
        raise UserError(f"{recipe.where(step.line)}: step {step.name!r} needs an input: (a recipe input or an "
                        "earlier step)")
    named = {n.replace("_", "-") for n in step.options}
    defaults = {n: v for n, v in recipe.defaults.items()
                if spec.option(n) is not None and n.replace("_", "-") not in named}
    lines = {**{n: recipe.default_lines.get(n, step.line) for n in defaults}, **step.option_lines}
    for name, value in {**defaults, **step.options}.items():
        line = lines.get(name, step.line)
        key = name.replace("_", "-")
        if key == "out" and writes_out:
            raise UserError(f"{recipe.where(line)}: out is set by curate run (OUT/{step.folder}); remove it")
        opt = spec.option(key)
        if opt is None:
            raise UserError(f"{recipe.where(line)}: {step.verb} has no option {name!r}; "
                            f"{_suggest(key, list(spec.by_key))}see curate {step.verb} --help")

        def resolve_path(v: str, _line: int = line) -> list[str]:
            paths = _ref(v, step, recipe, out, _line, depends, reads)
            option_reads.extend(paths)
            return paths

        try:
            made = _option_value(name, value, opt, resolve_path, recipe.base)
        except ValueError as exc:
            raise UserError(f"{recipe.where(line)}: option {name!r} of {step.verb} {exc}") from None
        if made is not None:
            given.setdefault(opt.name, made[0])
            args.extend(made[1])
    if writes_out:
        given["out"] = str(folder)
        args.extend(["--out", str(folder)])
    try:
        values = spec.values(given)
    except UserError as exc:
        raise UserError(f"{recipe.where(step.line)}: step {step.name!r}: {exc}") from None
    stamps = {**_external(positional, out), **_external(option_reads, out, True)}
    settings = json.loads(json.dumps(_listed(values, spec, list(given)), default=str))
    return PlannedStep(step=step, folder=folder, args=args, values=values, settings=settings,
                       depends=sorted(set(depends)), reads=reads, inputs=stamps)


def portable(obj: Any, out: Folder | str) -> Any:
    """``obj`` (JSON-ready) with the run folder's path written ``$OUT``: a run folder moved or copied elsewhere
    keeps its finished steps."""
    text, where = json.dumps(obj, sort_keys=True), json.dumps(str(out).rstrip("/"))[1:-1]
    return json.loads(re.sub(re.escape(where) + r'(?=[/"])', "$OUT", text)) if where else obj


def upstream_of(p: PlannedStep, by_name: dict[str, PlannedStep], out: Folder) -> dict[str, str]:
    """For each step ``p`` reads: a hash of that step's settings (its folder as ``$OUT``) and of what it read."""
    return {d: digest({"settings": portable(deciding(by_name[d].settings), out), "upstream": by_name[d].upstream})
            for d in p.depends}


def deciding(settings: dict[str, Any]) -> dict[str, Any]:
    """A step's settings less those that decide only where and how fast it runs (``OPERATIONAL_FLAGS``: workers,
    executor...), which never change its bytes: a run resumed on a machine with other cores keeps its steps."""
    from curate.core.settings import OPERATIONAL_FLAGS

    return {k: v for k, v in settings.items() if k not in OPERATIONAL_FLAGS}


def digest(obj: Any) -> str:
    """A short hash of a JSON-ready object."""
    import hashlib

    return hashlib.sha256(json.dumps(obj, sort_keys=True).encode()).hexdigest()[:16]


def record_path(out: Folder, planned: PlannedStep) -> Folder:
    """``OUT/_run/NN-name.json``: the settings and inputs a step last ran with."""
    return out / RUN_DIR / f"{planned.step.folder}.json"


def _changed(recorded: dict[str, Any], current: dict[str, Any]) -> list[str]:
    return sorted(k for k in set(recorded) | set(current) if recorded.get(k) != current.get(k))


def _stamp(path: str) -> str:
    """What identifies the content of an input the recipe reads (not made by a step): size and modification time
    of a file, of every file of a folder; '' for a URL or a missing path (its settings still name it)."""
    if is_url(path):
        return ""
    local = Path(path)
    if local.is_file():
        st = local.stat()
        return f"{st.st_size}|{st.st_mtime_ns}"
    if local.is_dir():
        return digest(sorted((str(f.relative_to(local)), f.stat().st_size, f.stat().st_mtime_ns)
                             for f in local.rglob("*") if f.is_file()))
    return ""


def _external(paths: list[str], out: Folder, files_only: bool = False) -> dict[str, str]:
    """Stamps of the paths a step reads that no step of the run makes (its inputs, a vocabulary file...); with
    ``files_only`` folders are left out (a cache or an image root: large, or filled by the step itself)."""
    inside = str(out).rstrip("/") + "/"
    return {r: _stamp(r) for r in paths
            if not str(r).startswith(inside) and not (files_only and (is_url(r) or not Path(r).is_file()))}


def _changes(recorded: dict[str, Any], p: PlannedStep, out: Folder) -> list[str]:
    """What differs between a step's recorded run and its plan: settings by name, inputs by path."""
    if recorded["verb"] != p.step.verb:
        return [f"verb {recorded['verb']} -> {p.step.verb}"]
    old_settings = portable(deciding(recorded["settings"]), recorded.get("out") or out)
    settings = portable(deciding(p.settings), out)
    what = [f"settings changed: {', '.join(_changed(old_settings, settings))}"] if old_settings != settings else []
    old = recorded.get("upstream") or {}
    what += [f"step {d} ran with other settings" for d in sorted(set(old) | set(p.upstream))
             if old.get(d) != p.upstream.get(d)]
    old_inputs = recorded.get("inputs")
    if old_inputs is not None:  # runs recorded before inputs were stamped are compared by settings only
        what += [f"input changed: {r}" for r in sorted(set(old_inputs) | set(p.inputs))
                 if old_inputs.get(r) != p.inputs.get(r)]
    return what


def plan_run(recipe: Recipe, out: Folder, *, start: str | None = None,
             until: str | None = None, force: str | None = None) -> list[PlannedStep]:
    """Plan every step and decide its status.

    A step whose folder holds a finished run with the same verb, settings and inputs is skipped; the first step
    whose settings or inputs changed (or ``force``, a step name) reruns, and so does every selected step after
    it (its folder is emptied first); a started step resumes; a folder this recipe did not make is refused.
    Statuses: run, rerun, resume, skip, refuse, not selected; ``why`` says why.

    Raises:
        UserError: a bad step, an unknown --from/--until/--force step, a missing recipe input.
    """
    with command_line():  # a recipe spells options as the command line does: its messages name flags
        return _plan_run(recipe, out, start=start, until=until, force=force)


def _plan_run(recipe: Recipe, out: Folder, *, start: str | None, until: str | None,
              force: str | None) -> list[PlannedStep]:
    names = [s.name for s in recipe.steps]
    for flag, name in (("--from", start), ("--until", until), ("--force", force)):
        if name is not None and name not in names:
            raise UserError(f"{flag} {name}: {recipe.path} has no step {name!r} (steps: {', '.join(names)})")
    lo = names.index(start) if start else 0
    hi = names.index(until) if until else len(names) - 1
    if lo > hi:
        raise UserError(f"--from {start} comes after --until {until} in {recipe.path}; swap them")
    if force is not None and not lo <= names.index(force) <= hi:
        raise UserError(f"--force {force}: step {force!r} is not among the steps this run selects "
                        f"({', '.join(names[lo:hi + 1])}); widen --from/--until")
    used = {v.partition("/")[0] for s in recipe.steps[lo:hi + 1] for v in s.inputs}
    for name, paths in recipe.inputs.items():
        for p in paths:
            if not is_url(p) and not Path(p).exists() and (name in used or not recipe.steps[lo:hi + 1]):
                raise UserError(f"{recipe.where(recipe.input_lines[name])}: input {name!r}: {p} does not exist; "
                                "fix the path (or --set the variable it uses)")
    for name in recipe.defaults:
        if not any(verb(v).option(name) is not None for v in {s.verb for s in recipe.steps}):
            raise UserError(f"{recipe.where(recipe.default_lines[name])}: default {name!r} is an option of none of "
                            f"the recipe's verbs ({', '.join(sorted({s.verb for s in recipe.steps}))}); remove it")
    planned = [plan_step(s, recipe, out) for s in recipe.steps]
    for p in planned[lo:hi + 1]:  # every step's settings, checked as its verb checks them, before the first runs
        check_step(p, recipe)
    by_name = {p.step.name: p for p in planned}
    for p in planned:  # a step is stale when a step it reads ran with other settings
        p.upstream = upstream_of(p, by_name, out)
    first: PlannedStep | None = None  # the first selected step that runs again: every later one follows it
    for i, p in enumerate(planned):
        if not lo <= i <= hi:
            p.status, p.why = "not selected", ("before --from" if i < lo else "after --until")
            continue
        record = record_path(out, p)
        recorded = json.loads(read_text_at(record)) if path_exists(record) else None
        finished, started = path_exists(p.folder / "stats.json"), path_exists(p.folder)
        if started and recorded is None:  # never emptied: it may be a run made by hand
            p.status, p.why = (("refuse", f"{p.folder} holds a finished run not made by this recipe") if finished
                               else ("resume", "started, not finished"))  # the verb checks its own settings
            continue
        changes = _changes(recorded, p, out) if recorded is not None else []
        if p.step.name == force and started:
            p.status, p.why = "rerun", f"--force {force}"
        elif first is not None and started:
            p.status, p.why = "rerun", f"after step {first.step.name!r}, which {first.status}s"
        elif changes and started:
            p.status, p.why = "rerun", "; ".join(changes)
        elif finished:
            p.status, p.why = "skip", "finished, settings and inputs unchanged"
        elif started:
            p.status, p.why = "resume", "started, not finished"
        else:
            p.status, p.why = "run", ""
        if first is None and p.status in ("run", "rerun"):
            first = p
    return planned


def step_where(recipe: Recipe, step: Step, message: str) -> str:
    """``recipe.yaml:LINE`` of the option a step's message names (``--ctx``...), else of the step."""
    for flag in re.findall(r"--([a-z0-9][a-z0-9-]*)", message):
        for name, line in step.option_lines.items():
            if name.replace("_", "-") == flag:
                return recipe.where(line)
        if flag in {n.replace("_", "-") for n in recipe.defaults}:
            return recipe.where(next(line for n, line in recipe.default_lines.items()
                                     if n.replace("_", "-") == flag))
    return recipe.where(step.line)


def check_step(p: PlannedStep, recipe: Recipe) -> Prepared:
    """Build a planned step's config as its verb does, without running it (paths earlier steps make are taken as
    made); the step's :class:`~curate.verbs.Prepared`, whose work is not run.

    Raises:
        UserError: a bad value, naming ``recipe.yaml:LINE`` of the option (or the step) and the step.
    """
    from curate.core import validate

    inside = str(p.folder.parent).rstrip("/") + "/"  # what earlier steps make lies in the run folder
    later = [r for r in p.reads if str(r).startswith(inside) and not path_exists(r)]
    try:
        with validate.made_later(later):
            return p.prepare()
    except UserError as exc:
        raise UserError(f"{step_where(recipe, p.step, str(exc))}: step {p.step.name!r}: {exc}") from None


def check_ready(planned: list[PlannedStep], recipe: Recipe, i: int) -> None:
    """Before step ``i`` runs: every path it reads exists (earlier steps finished).

    Raises:
        UserError: naming the recipe line of the step and the step it waits for.
    """
    p = planned[i]
    by_name = {q.step.name: q for q in planned}
    for dep in p.depends:
        q = by_name[dep]
        if not path_exists(q.folder / "stats.json"):
            raise UserError(f"{recipe.where(p.step.line)}: step {p.step.name!r} reads step {dep!r} "
                            f"({q.folder}), which has not finished yet; run without --from, or --from {dep}")
    for path in p.reads:
        if not path_exists(path):
            raise UserError(f"{recipe.where(p.step.line)}: step {p.step.name!r} reads {path}, which does not "
                            "exist; fix the recipe or run the step that makes it")


def write_record(out: Folder, p: PlannedStep) -> None:
    """Remember the settings a step runs with (``OUT/_run/NN-name.json``)."""
    write_text_at(record_path(out, p), dumps_json({"verb": p.step.verb, "command": p.command,
                                                   "settings": p.settings, "upstream": p.upstream,
                                                   "inputs": p.inputs, "out": str(out)}))
