"""The install split: requirements files pinned, pyproject.toml's dependencies and extras naming the same packages,
`make test` installing every optional stage (docs/install.md)."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _name(requirement: str) -> str:
    """A requirement's package with its extras, normalised: ``Moto[server]==5`` -> ``moto[server]``."""
    match = re.match(r"\s*([A-Za-z0-9][A-Za-z0-9._-]*)(\[[^\]]*\])?", requirement)
    assert match, requirement
    return re.sub(r"[-_.]+", "-", match.group(1)).lower() + (match.group(2) or "").replace(" ", "")


def _lines(path: Path) -> list[str]:
    return [line.split("#", 1)[0].strip() for line in path.read_text().splitlines()
            if line.split("#", 1)[0].strip()]


def _pins(path: Path) -> dict[str, str]:
    """The pinned packages of a requirements file (``-r`` includes left out)."""
    pins = {}
    for line in _lines(path):
        if line.startswith("-r "):
            continue
        assert re.fullmatch(r"[^=<>~!]+==[0-9][^=<>~!,; ]*", line), f"{path.name}: {line!r} is not pinned with =="
        pins[_name(line)] = line
    return pins


def _pyproject() -> dict:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]


def test_runtime_is_requirements_txt() -> None:
    assert {_name(d) for d in _pyproject()["dependencies"]} == set(_pins(ROOT / "requirements.txt"))


def test_each_optional_stage_is_an_extra() -> None:
    extras = _pyproject()["optional-dependencies"]
    files = sorted((ROOT / "requirements").glob("*.txt"))
    assert files
    for path in files:
        assert path.stem in extras, f"requirements/{path.name} has no extra [{path.stem}] in pyproject.toml"
        assert {_name(d) for d in extras[path.stem]} == set(_pins(path)), path.name


def test_tests_install_everything() -> None:
    dev = ROOT / "requirements-dev.txt"
    included = {line.split(None, 1)[1] for line in _lines(dev) if line.startswith("-r ")}
    assert included == {"requirements.txt", *(f"requirements/{p.name}" for p in (ROOT / "requirements").glob("*.txt"))}
    assert {_name(d) for d in _pyproject()["optional-dependencies"]["dev"]} == set(_pins(dev))


def test_no_package_is_pinned_twice() -> None:
    seen: dict[str, str] = {}
    for path in [ROOT / "requirements.txt", ROOT / "requirements-dev.txt", *(ROOT / "requirements").glob("*.txt")]:
        for name in _pins(path):
            bare = name.split("[")[0]
            assert bare not in seen, f"{bare} in {seen.get(bare)} and {path.name}"
            seen[bare] = path.name


def test_demo_installs_the_runtime_only() -> None:
    make = (ROOT / "Makefile").read_text()
    demo = re.search(r"^demo: (.+)$", make, re.M)
    assert demo and demo.group(1).split() == ["setup-run"]
    runtime = make.split("$(VENV)/.runtime:", 1)[1].split("\n\n", 1)[0]
    assert "requirements.txt" in runtime and "requirements-dev.txt" not in runtime and "--quiet" not in make
