"""The shape of the code base: every module imports, no import cycles, floors that import only downwards, click only in the CLI.

The import graph is built from the source (``ast``): an edge ``a → b`` for every
``import b`` / ``from b import x`` in module ``a`` that names a module of
``curate`` or ``packer`` (``from pkg import sub`` names the submodule). Imports
at module level make the import-time graph, which must be acyclic; imports inside
functions (deferred to keep start-up fast) are checked too, so that no package
leans on a deferred import to hide a circle; imports under ``if TYPE_CHECKING``
(annotations only) are not imports at run time and are left out.
"""

from __future__ import annotations

import ast
import functools
import importlib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("curate", "packer")
#: Process entry points run as scripts or in fresh interpreters, never imported by the library.
ENTRY_POINTS = {"curate.fixtures.__main__", "curate.__main__"}


def _module_name(path: Path) -> str:
    rel = path.relative_to(ROOT).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _modules() -> dict[str, Path]:
    return {_module_name(p): p for pkg in PACKAGES for p in sorted((ROOT / pkg).rglob("*.py"))}


MODULES = _modules()


def _resolve(name: str) -> str | None:
    """The module of ``curate``/``packer`` that a dotted name refers to (longest known prefix)."""
    parts = name.split(".")
    while parts:
        candidate = ".".join(parts)
        if candidate in MODULES:
            return candidate
        parts.pop()
    return None


@functools.lru_cache(maxsize=None)
def _tree(path: Path) -> ast.Module:
    return ast.parse(path.read_text(encoding="utf-8"))


@functools.lru_cache(maxsize=None)
def _imports(module: str, path: Path) -> list[tuple[str, bool, ast.AST]]:
    """``(imported module, at module level, node)`` for every import of a package module in ``module``."""
    tree = _tree(path)
    typing_only = {id(n) for s in ast.walk(tree) if isinstance(s, ast.If) and "TYPE_CHECKING" in ast.unparse(s.test)
                   for n in ast.walk(s)}
    top = {id(n) for n in tree.body} | {id(n) for s in tree.body if isinstance(s, (ast.If, ast.Try))
                                        for n in ast.walk(s)}
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    found = []
    for node in ast.walk(tree):
        if id(node) in typing_only:
            continue  # annotations only: never imported at run time
        names: list[str] = []
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")
                anchor = anchor[:len(anchor) - (node.level - 1)]
                base = ".".join(anchor + ([base] if base else []))
            names = [f"{base}.{a.name}" if f"{base}.{a.name}" in MODULES else base for a in node.names]
        for name in names:
            target = _resolve(name) if name.split(".")[0] in PACKAGES else None
            if target and target != module:
                found.append((target, id(node) in top, node))
    return found


def _find_cycle(edges: dict[str, set[str]]) -> list[str] | None:
    """One cycle of the graph as a list of modules, or None."""
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        stack.append(node)
        for nxt in sorted(edges.get(node, ())):
            if state.get(nxt) == 1:
                return stack[stack.index(nxt):] + [nxt]
            if nxt not in state:
                cycle = visit(nxt)
                if cycle:
                    return cycle
        stack.pop()
        state[node] = 2
        return None

    for node in sorted(edges):
        if node not in state:
            cycle = visit(node)
            if cycle:
                return cycle
    return None


@functools.lru_cache(maxsize=None)
def _graph(module_level_only: bool) -> dict[str, set[str]]:
    edges: dict[str, set[str]] = {m: set() for m in MODULES}
    for module, path in MODULES.items():
        for target, at_top, _ in _imports(module, path):
            if at_top or not module_level_only:
                # importing a package's own submodule from its __init__ is how a package exposes its parts
                if not target.startswith(module + "."):
                    edges[module].add(target)
    return edges


def test_every_module_imports() -> None:
    """Each module of curate and packer imports on its own (entry-point scripts excepted)."""
    failures = []
    for module in MODULES:
        if module in ENTRY_POINTS:
            continue
        try:
            importlib.import_module(module)
        except Exception as exc:  # noqa: BLE001 - report every module that fails
            failures.append(f"{module}: {type(exc).__name__}: {exc}")
    assert not failures, "\n".join(failures)


@pytest.mark.parametrize("module_level_only", [True, False], ids=["import-time", "with-deferred-imports"])
def test_no_import_cycles(module_level_only: bool) -> None:
    """The import graph of curate and packer has no cycle."""
    cycle = _find_cycle(_graph(module_level_only))
    assert cycle is None, "import cycle: " + " → ".join(cycle or [])


def test_graph_sees_a_cycle() -> None:
    """The cycle finder finds one (so the test above can fail)."""
    assert _find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert _find_cycle({"a": {"b"}, "b": set()}) is None
    assert _graph(False)["curate.balance.tag"] >= {"curate.core.shards", "curate.balance.index"}


def test_only_the_cli_imports_click() -> None:
    """click is imported by curate.cli alone (the library is plain functions)."""
    offenders = []
    for module, path in MODULES.items():
        if module == "curate.cli" or module.startswith("curate.cli."):
            continue
        for node in ast.walk(_tree(path)):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else (
                [node.module or ""] if isinstance(node, ast.ImportFrom) else [])
            if any(n == "click" or n.startswith("click.") for n in names):
                offenders.append(f"{module}:{node.lineno}")
    assert not offenders, f"click imported outside curate.cli: {offenders}"


def _private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")


def test_no_private_names_across_modules() -> None:
    """No module imports, or reaches through a module for, another module's private (``_name``) names."""
    offenders = []
    for module, path in MODULES.items():
        module_aliases: dict[str, str] = {}  # local name -> package module it refers to
        for target, _, node in _imports(module, path):
            for alias in node.names:  # type: ignore[attr-defined]
                if isinstance(node, ast.ImportFrom):
                    full = f"{node.module}.{alias.name}"
                    if full in MODULES:
                        module_aliases[alias.asname or alias.name] = full
                    elif _private(alias.name):  # a private submodule is fine, a private name is not
                        offenders.append(f"{module}:{node.lineno} imports {target}.{alias.name}")
                elif alias.asname:
                    module_aliases[alias.asname] = target
        for node in ast.walk(_tree(path)):
            if (isinstance(node, ast.Attribute) and _private(node.attr) and isinstance(node.value, ast.Name)
                    and node.value.id in module_aliases):
                offenders.append(f"{module}:{node.lineno} uses {module_aliases[node.value.id]}.{node.attr}")
    assert not offenders, "\n".join(offenders)


#: The floors of the house, lowest first. A module may import its own floor and the floors below it, never one
#: above: the shared core knows no stage, only the CLI (and the fixtures' command, which builds through the CLI)
#: sits on top. The verb table ``curate.stages`` is data at the bottom: it names every stage's modules as
#: strings and imports no module of curate (checked below), so the core may read it (error names, from_stats).
#: A package not listed here fails the test until it is given a floor.
FLOORS: tuple[tuple[str, ...], ...] = (
    ("curate", "curate.core", "curate.stages"),
    ("curate.executors", "curate.models"),
    ("curate.rewards", "curate.generate"),
    ("curate.balance", "curate.dedup", "curate.recaption", "curate.rl", "packer"),
    ("curate.report", "curate.run", "curate.verbs"),
    ("curate.cli", "curate.fixtures", "curate.__main__"),
)


def _floor(module: str) -> int:
    """The floor of ``module``: that of the longest package prefix listed in FLOORS."""
    best, floor = "", -1
    for level, packages in enumerate(FLOORS):
        for package in packages:
            if (module == package or module.startswith(package + ".")) and len(package) > len(best):
                best, floor = package, level
    return floor


def test_every_module_has_a_floor() -> None:
    """Each module of curate and packer belongs to a floor (a new package is placed on purpose)."""
    assert not [m for m in MODULES if _floor(m) < 0]


def test_no_lower_floor_imports_a_higher_one() -> None:
    """No module imports (at import time or deferred) a module of a higher floor."""
    upward = sorted(f"{a} (floor {_floor(a)}) imports {b} (floor {_floor(b)})"
                    for a, targets in _graph(False).items() for b in targets if _floor(b) > _floor(a))
    assert not upward, "\n".join(upward)


def test_the_verb_table_imports_no_module_of_curate() -> None:
    """``curate.stages`` stays a table of names: it imports no module of curate or packer (so it may sit on the
    lowest floor); the stages it names are imported by ``Ref.load`` when asked for."""
    assert not _graph(False)["curate.stages"]


def test_floor_check_sees_an_upward_import() -> None:
    """The floor check can fail: the core importing a stage, or a stage the CLI, goes up."""
    assert _floor("curate.core.io") < _floor("curate.balance.tag") < _floor("curate.cli.group")
    assert _floor("packer.plan") == _floor("curate.rl.filter") > _floor("curate.rewards.registry")
