"""Reading a recipe: YAML with line numbers, variables, inputs and an ordered list of steps.

A recipe (see ``recipes/*.yaml``)::

    vars:                                  # ${name} anywhere below; override with --set name=value
      models: demo-out/models
    out: demo-out/run                      # default of --out
    inputs:                                # named inputs: a path or a list of paths
      raw: [data/sample/records.jsonl, data/sample/llava.jsonl]
    defaults: {seed: 0, workers: 2}        # options of every step whose verb has them
    steps:
      - name: balance                      # optional, default the verb; folder OUT/01-balance
        verb: balance                      # dedup, balance, recaption, rl-filter, score, pack, verify
        input: raw                         # a recipe input, a step (its main output) or STEP/sub/path
        options: {vocab: vocab/500k.txt, model: "local-dir:${models}/clip"}

Relative paths written in a recipe are taken from the recipe file's folder (so a recipe runs from any
folder); a ``--set`` value naming a local path is taken from the current folder, where it was typed.
Every mistake raises :class:`~curate.core.errors.UserError` naming ``recipe.yaml:LINE``.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from curate.core.errors import UserError
from curate.core.io import is_url
from curate.stages import RECIPE_VERBS

#: Verbs a recipe step may run.
VERBS = RECIPE_VERBS  # the verbs a step may run (curate.stages)
_VAR = re.compile(r"\$\{([^}]*)\}")
_NAME = re.compile(r"^[A-Za-z][A-Za-z0-9_-]*$")
_TOP_KEYS = {"vars", "out", "inputs", "defaults", "steps", "description"}
_STEP_KEYS = {"name", "verb", "input", "options", "description"}
#: Bounds of a recipe (a short list of steps): its size in bytes, the values it expands to (YAML aliases counted
#: each time they are used), how deep it nests, and how long a value may grow once variables are substituted.
MAX_RECIPE_BYTES, MAX_VALUES, MAX_DEPTH, MAX_VALUE_CHARS = 1 << 20, 100_000, 32, 65_536


@dataclass(frozen=True)
class Step:
    """One step of a recipe, as written (variables substituted)."""

    index: int  #: 1-based position in the recipe
    name: str
    verb: str
    inputs: tuple[str, ...]  #: references or paths given as ``input``
    options: dict[str, Any]  #: option name (as in the CLI, without ``--``) -> value
    line: int  #: line of the step in the recipe file
    option_lines: dict[str, int] = field(default_factory=dict)
    input_line: int = 0  #: line of ``input:`` (0 when absent)

    @property
    def folder(self) -> str:
        """The step's output folder name inside OUT, ``NN-name``."""
        return f"{self.index:02d}-{self.name}"


@dataclass(frozen=True)
class Recipe:
    """A parsed recipe."""

    path: Path
    text: str
    vars: dict[str, str]
    out: str | None
    inputs: dict[str, tuple[str, ...]]
    input_lines: dict[str, int]
    steps: tuple[Step, ...]
    #: options given to every step whose verb has them (e.g. executor, workers, seed), unless the step sets them
    defaults: dict[str, Any] = field(default_factory=dict)
    default_lines: dict[str, int] = field(default_factory=dict)
    #: the recipe file's folder (absolute): relative paths written in the recipe are taken from it
    base: Path = field(default_factory=Path.cwd)

    def here(self, value: str) -> str:
        """A path written in the recipe, taken from the recipe's folder (URLs and absolute paths as they are)."""
        return local_path(value, self.base)

    def where(self, line: int) -> str:
        """``recipe.yaml:LINE`` for messages."""
        return f"{self.path}:{line}"

    def step(self, name: str) -> Step | None:
        """The step called ``name``, if any."""
        return next((s for s in self.steps if s.name == name), None)


class _LinedDict(dict):
    line = 0

    def __init__(self) -> None:
        super().__init__()
        self.key_lines: dict[Any, int] = {}


class _LinedList(list):
    line = 0
    item_lines: list[int] = []


def _compose(text: str, path: Path) -> Any:
    try:
        node = yaml.compose(text, Loader=yaml.SafeLoader)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        line = mark.line + 1 if mark is not None else 1
        raise UserError(f"{path}:{line}: not valid YAML ({getattr(exc, 'problem', exc)}); fix the recipe") from None
    except RecursionError:
        raise UserError(f"{path}: not a recipe (mappings or lists nested too deep)") from None
    if node is None:
        raise UserError(f"{path}:1: the recipe is empty; give it inputs and steps (see recipes/)")
    loader = yaml.SafeLoader("")
    made = [0]  # values built, aliases counted each time they are used: a billion laughs stops early

    def value(n: yaml.Node, depth: int = 0) -> Any:
        made[0] += 1
        if made[0] > MAX_VALUES or depth > MAX_DEPTH:
            what = f"more than {MAX_VALUES:,} values" if made[0] > MAX_VALUES else f"nesting deeper than {MAX_DEPTH}"
            raise UserError(f"{path}:{n.start_mark.line + 1}: the recipe expands to {what} (YAML aliases?); "
                            "a recipe is a short list of steps")
        if isinstance(n, (yaml.MappingNode, yaml.SequenceNode)):
            return _walk(n, depth)
        try:
            return loader.construct_object(n, deep=True)
        except (yaml.YAMLError, ValueError, OverflowError) as exc:  # a timestamp or number out of range, a bad tag
            raise UserError(f"{path}:{n.start_mark.line + 1}: not a usable YAML value ({str(exc)[:120]})") from None

    def _walk(n: yaml.Node, depth: int) -> Any:
        if isinstance(n, yaml.MappingNode):
            out = _LinedDict()
            out.line = n.start_mark.line + 1
            for k, v in n.value:
                key = value(k, depth + 1)
                if not isinstance(key, (str, int, float, bool)) and key is not None:
                    raise UserError(f"{path}:{k.start_mark.line + 1}: a key must be a name, not a "
                                    f"{type(key).__name__}")
                if key in out:
                    raise UserError(f"{path}:{k.start_mark.line + 1}: key {_short(key)} is given twice; keep one")
                out[key] = value(v, depth + 1)
                out.key_lines[key] = k.start_mark.line + 1
            return out
        items = _LinedList(value(v, depth + 1) for v in n.value)
        items.line = n.start_mark.line + 1
        items.item_lines = [v.start_mark.line + 1 for v in n.value]
        return items

    return value(node)


def _short(text: Any, limit: int = 80) -> str:
    """``repr`` of a value for a message, cut to ``limit`` characters."""
    shown = repr(text)
    return shown if len(shown) <= limit else shown[:limit] + f"... ({len(shown):,} characters)"


def _known(variables: dict[str, str]) -> str:
    names = sorted(variables)
    listed = ", ".join(_short(n, 40)[1:-1] for n in names[:20])
    return (listed + (f" and {len(names) - 20} more" if len(names) > 20 else "")) or "none"


def _substitute(value: Any, variables: dict[str, str], path: Path, line: int) -> Any:
    """Replace ``${name}`` in every string of ``value`` (messages name the line of the string)."""
    if isinstance(value, str):
        def repl(m: re.Match[str]) -> str:
            name = m.group(1).strip()
            if name not in variables:
                raise UserError(f"{path}:{line}: unknown variable ${{{_short(name, 60)[1:-1]}}} (known: "
                                f"{_known(variables)}); define it under vars: or pass --set NAME=VALUE")
            return variables[name]
        result = _VAR.sub(repl, value)
        if len(result) > MAX_VALUE_CHARS:
            raise UserError(f"{path}:{line}: a value grows to {len(result):,} characters once variables are "
                            f"substituted (the limit is {MAX_VALUE_CHARS:,}); check the vars: that refer to others")
        return result
    if isinstance(value, _LinedDict):
        out = _LinedDict()
        out.line, out.key_lines = value.line, value.key_lines
        for k, v in value.items():
            out[k] = _substitute(v, variables, path, value.key_lines.get(k, line))
        return out
    if isinstance(value, _LinedList):
        items = _LinedList(_substitute(v, variables, path, n) for v, n in zip(value, value.item_lines))
        items.line, items.item_lines = value.line, value.item_lines
        return items
    return value


def _line(obj: Any, key: Any = None, default: int = 1) -> int:
    if key is not None and isinstance(obj, _LinedDict):
        return obj.key_lines.get(key, obj.line or default)
    return getattr(obj, "line", default) or default


def _paths(value: Any, where: str, what: str) -> tuple[str, ...]:
    items = value if isinstance(value, list) else [value]
    if not items or not all(isinstance(v, (str, int, float)) and str(v) for v in items):
        raise UserError(f"{where}: {what} must be a path, a name or a list of them")
    return tuple(str(v) for v in items)


def local_path(value: str, base: Path) -> str:
    """``value`` joined to ``base`` when it is a relative local path (not a URL, not absolute, not empty)."""
    if not value or is_url(value) or os.path.isabs(os.path.expanduser(value)):
        return os.path.expanduser(value) if value.startswith("~") else value
    return os.path.normpath(os.path.join(base, value))


def looks_local(value: str, base: Path) -> bool:
    """Whether a value given where a path or a name may stand (``--model``, a ``--set`` value) is a local path
    relative to ``base``: it starts with ``./``, ``../`` or ``~``, or it (or its folder) exists there. A hub id such as
    ``Qwen/Qwen2-VL-2B-Instruct`` is not, unless a folder of that name is there."""
    if not value or is_url(value) or os.path.isabs(value):
        return False
    if value.startswith(("./", "../", "~")) or value in (".", ".."):
        return True
    full = base / value
    return full.exists() or ("/" in value.rstrip("/") and full.parent.is_dir() and full.parent != base)


def _spec_parts(value: str) -> tuple[str, str]:
    """``local-dir:PATH`` or ``ARCH:PATH`` (a model spec) as (``prefix:``, PATH); a plain value as ('', value)."""
    head, colon, rest = value.partition(":")
    if colon and "://" not in value and re.fullmatch(r"[A-Za-z][\w.-]*", head) and len(head) > 1:
        return head + ":", rest
    return "", value


def from_folder(value: str, base: Path) -> str:
    """A value that may name a local path (``--model``, ``--processor``, a ``--set`` value; also after a
    ``local-dir:`` or ``ARCH:`` prefix) made absolute from ``base`` when :func:`looks_local`; others unchanged."""
    prefix, rest = _spec_parts(value)
    if looks_local(rest, base):
        return prefix + local_path(rest, base)
    return value


def parse_sets(pairs: tuple[str, ...] | list[str]) -> dict[str, str]:
    """``--set name=value`` pairs as a dict (a pair without ``=`` is a UserError)."""
    out: dict[str, str] = {}
    for pair in pairs:
        name, eq, value = pair.partition("=")
        if not eq or not name.strip():
            raise UserError(f"--set {pair!r}: expected NAME=VALUE, e.g. --set models=demo-out/models")
        out[name.strip()] = value
    return out


def load_recipe(path: str | Path, overrides: dict[str, str] | None = None) -> Recipe:
    """Read and check a recipe's structure (verbs and references are checked by the planner).

    Args:
        path: the recipe file (YAML).
        overrides: ``--set`` values replacing the recipe's ``vars``.

    Raises:
        UserError: unreadable file, bad YAML, unknown key, bad name, unknown variable.
    """
    path = Path(path)
    try:
        if path.exists() and not path.is_file():  # a folder, a FIFO or a device: never read (a FIFO would block)
            raise UserError(f"{path}: not a regular file; give a recipe YAML file")
        if path.stat().st_size > MAX_RECIPE_BYTES:
            raise UserError(f"{path}: {path.stat().st_size:,} bytes; a recipe is a short YAML file (at most "
                            f"{MAX_RECIPE_BYTES:,} bytes)")
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise UserError(f"{path}: cannot read the recipe ({exc.strerror or exc}); check the path") from None
    except UnicodeDecodeError:
        raise UserError(f"{path}: not a recipe (not UTF-8 text); give a YAML file (see recipes/)") from None
    doc = _compose(text, path)
    if not isinstance(doc, _LinedDict):
        raise UserError(f"{path}:1: a recipe is a mapping with inputs: and steps: (see recipes/)")
    _known_keys(doc, _TOP_KEYS, path, "key", "a recipe has")
    raw_vars = doc.get("vars") or _LinedDict()
    if not isinstance(raw_vars, dict):
        raise UserError(f"{path}:{_line(doc, 'vars')}: vars must be a mapping name: value")
    variables = {str(k): "" if v is None else str(v) for k, v in raw_vars.items()}
    for name in overrides or {}:
        if name not in variables:
            known = ", ".join(sorted(variables)) or "none"
            raise UserError(f"--set {name}=...: {path} has no variable {name!r} (its vars: {known})")
    here = Path.cwd()  # a --set value typed on the command line names paths from the current folder
    variables.update({k: from_folder(v, here) for k, v in (overrides or {}).items()})
    base = path.resolve().parent
    variables = _resolve_vars(variables, path, raw_vars)
    body = {k: _substitute(v, variables, path, _line(doc, k)) for k, v in doc.items() if k != "vars"}

    raw_inputs = body.get("inputs") or _LinedDict()
    if not isinstance(raw_inputs, dict):
        raise UserError(f"{path}:{_line(doc, 'inputs')}: inputs must be a mapping name: path (or list of paths)")
    inputs: dict[str, tuple[str, ...]] = {}
    input_lines: dict[str, int] = {}
    for name, value in raw_inputs.items():
        where = f"{path}:{_line(raw_inputs, name)}"
        if not isinstance(name, str) or not _NAME.match(name):
            raise UserError(f"{where}: input name {name!r} must start with a letter (letters, digits, - and _)")
        inputs[name] = tuple(local_path(p, base) for p in _paths(value, where, f"input {name!r}"))
        input_lines[name] = _line(raw_inputs, name)

    raw_steps = body.get("steps")
    if not isinstance(raw_steps, list) or not raw_steps:
        raise UserError(f"{path}:{_line(doc, 'steps')}: steps must be a non-empty list of steps (see recipes/)")
    steps: list[Step] = []
    for i, raw in enumerate(raw_steps, 1):
        line = raw_steps.item_lines[i - 1]
        steps.append(_step(raw, i, line, path, inputs, steps))
    raw_defaults = body.get("defaults") or _LinedDict()
    if not isinstance(raw_defaults, dict):
        raise UserError(f"{path}:{_line(doc, 'defaults')}: defaults must be a mapping option: value")
    defaults = {str(k).lstrip("-"): v for k, v in raw_defaults.items()}
    default_lines = {str(k).lstrip("-"): _line(raw_defaults, k) for k in raw_defaults}
    out = body.get("out")
    return Recipe(defaults=defaults, default_lines=default_lines, path=path, text=text, vars=variables,
                  out=None if out is None else local_path(str(out), base), inputs=inputs,
                  input_lines=input_lines, steps=tuple(steps), base=base)


def _resolve_vars(raw: dict[str, str], path: Path, lines: Any) -> dict[str, str]:
    """Every variable with the variables it names substituted (in any order); a cycle is one line naming it."""
    done: dict[str, str] = {}

    def resolve(name: str, trail: list[str]) -> str:
        if name in done:
            return done[name]
        line = _line(lines, name)
        refs = {m.group(1).strip() for m in _VAR.finditer(raw[name])}
        for ref in sorted(refs):
            if ref in trail:
                cycle = " -> ".join(f"${{{n}}}" for n in [*trail[trail.index(ref):], ref])
                raise UserError(f"{path}:{line}: variables refer to each other in a cycle ({_short(cycle, 200)[1:-1]}); "
                                "give one of them a value")
            if ref in raw:
                resolve(ref, [*trail, ref])
        done[name] = _substitute(raw[name], {k: done.get(k, raw[k]) for k in raw}, path, line)
        return done[name]

    for name in raw:
        resolve(name, [name])
    return done


def _known_keys(mapping: Any, allowed: Iterable[str], path: Path, what: str, owner: str, hint: str = "") -> None:
    """A UserError naming the line of the first key of ``mapping`` not in ``allowed``."""
    for key in mapping:
        if key not in allowed:
            raise UserError(f"{path}:{_line(mapping, key)}: unknown {what} {key!r}; {owner} "
                            f"{', '.join(sorted(allowed))}{hint}")


def _step(raw: Any, index: int, line: int, path: Path, inputs: dict[str, Any], earlier: list[Step]) -> Step:
    where = f"{path}:{line}"
    if not isinstance(raw, dict):
        raise UserError(f"{where}: a step is a mapping with verb:, input: and options:")
    _known_keys(raw, _STEP_KEYS, path, "step key", "a step has", " (verb options go under options:)")
    verb = raw.get("verb")
    if verb not in VERBS:
        raise UserError(f"{path}:{_line(raw, 'verb', line)}: unknown verb {verb!r}; a step runs one of "
                        f"{', '.join(VERBS)}")
    name = str(raw.get("name") or verb)
    if not _NAME.match(name):
        raise UserError(f"{path}:{_line(raw, 'name', line)}: step name {name!r} must start with a letter "
                        "(letters, digits, - and _)")
    if name in inputs:
        raise UserError(f"{path}:{_line(raw, 'name', line)}: step name {name!r} is also an input name; rename one")
    if any(s.name == name for s in earlier):
        raise UserError(f"{path}:{_line(raw, 'name', line)}: two steps are called {name!r}; give this one a "
                        "name: of its own")
    step_inputs = () if raw.get("input") is None else _paths(raw["input"], f"{path}:{_line(raw, 'input')}", "input")
    options = raw.get("options") or _LinedDict()
    if not isinstance(options, dict):
        raise UserError(f"{path}:{_line(raw, 'options', line)}: options must be a mapping option: value")
    option_lines = {str(k): _line(options, k, line) for k in options}
    return Step(index=index, name=name, verb=verb, inputs=step_inputs,
                options={str(k).lstrip("-"): v for k, v in options.items()}, line=line,
                input_line=_line(raw, "input", line) if "input" in raw else 0,
                option_lines={str(k).lstrip("-"): v for k, v in option_lines.items()})
