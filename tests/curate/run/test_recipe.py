"""Bad recipes: one line naming the recipe line (unknown verb or option, missing input, cycle, input not made yet)."""

from __future__ import annotations

from pathlib import Path

import pytest

from curate.core.errors import UserError
from curate.run import load_recipe, plan_run, run_recipe


def _write(tmp_path: Path, text: str) -> Path:
    (tmp_path / "in.jsonl").write_text('{"id": "a", "caption": "a cat"}\n', encoding="utf-8")
    (tmp_path / "proc").mkdir(exist_ok=True)  # a processor folder: pack checks it exists when its step is planned
    path = tmp_path / "r.yaml"
    path.write_text(text.replace("IN", str(tmp_path / "in.jsonl")).replace("PROC", str(tmp_path / "proc")),
                    encoding="utf-8")
    return path


def _error(path: Path, **kw) -> str:
    with pytest.raises(UserError) as info:
        recipe = load_recipe(path, kw.pop("sets", None))
        run_recipe(recipe, path.parent / "out", dry_run=kw.pop("dry_run", True), echo=lambda s: None,
                   **kw)
    message = str(info.value)
    assert "\n" not in message
    return message


def _line_of(path: Path, needle: str) -> int:
    return next(i for i, line in enumerate(path.read_text().splitlines(), 1) if needle in line)


BASE = """inputs:
  raw: IN
steps:
  - verb: pack
    input: raw
    options:
      processor: PROC
      ctx: 64
  - verb: verify
    input: pack
"""


@pytest.mark.parametrize("edit, needle, expect", [
    (("verb: verify", "verb: verifyy"), "verifyy", "unknown verb 'verifyy'"),
    (("ctx: 64", "ctxx: 64"), "ctxx", "pack has no option 'ctxx'; did you mean 'ctx'?"),
    (("ctx: 64", "ctx: many"), "- verb: pack", "'many' is not a number of tokens"),
    (("ctx: 64", "ctx: 64\n      out: elsewhere"), "out: elsewhere", "out is set by curate run"),
    (("input: pack", "input: packk"), "input: packk", "packk"),
    (("raw: IN", "raw: /nonexistent/in.jsonl"), "raw:", "does not exist"),
    (("  - verb: verify\n    input: pack\n", "  - verb: verify\n    input: pack\n    bogus: 1\n"), "bogus",
     "unknown step key 'bogus'"),
    (("ctx: 64", "ctx: ${size}"), "ctx: ${size}", "unknown variable ${size}"),
])
def test_bad_recipe_names_the_line(tmp_path: Path, edit: tuple[str, str], needle: str, expect: str) -> None:
    path = _write(tmp_path, BASE.replace(*edit))
    message = _error(path)
    assert f"{path}:{_line_of(path, needle)}:" in message, message
    assert expect in message, message


def test_forward_reference_is_named(tmp_path: Path) -> None:
    path = _write(tmp_path, BASE.replace("input: raw", "input: verify").replace("input: pack", "input: raw"))
    message = _error(path)
    assert f"{path}:{_line_of(path, 'input: verify')}:" in message and "comes later in the recipe" in message


def test_cycle_is_named(tmp_path: Path) -> None:
    path = _write(tmp_path, """inputs: {raw: IN}
steps:
  - name: a
    verb: pack
    input: b
  - name: b
    verb: pack
    input: a
""")
    message = _error(path)
    assert f"{path}:3:" in message and "cycle (a -> b -> a)" in message


def test_input_not_made_yet_with_from(tmp_path: Path) -> None:
    path = _write(tmp_path, BASE)
    message = _error(path, start="verify", dry_run=False)
    assert f"{path}:{_line_of(path, '- verb: verify')}:" in message
    assert "has not finished yet" in message and "--from pack" in message


def test_bad_yaml_and_sets(tmp_path: Path) -> None:
    path = _write(tmp_path, BASE.replace("ctx: 64", "ctx: [64"))
    assert f"{path}:" in _error(path) and "not valid YAML" in _error(path)
    path = _write(tmp_path, "vars: {n: 64}\n" + BASE.replace("ctx: 64", "ctx: ${n}"))
    assert "no variable 'm'" in _error(path, sets={"m": "1"})
    recipe = load_recipe(path, {"n": "128"})
    planned = plan_run(recipe, tmp_path / "out")
    assert planned[0].settings["ctx"] == 128 and planned[0].args[-4:] == ["--ctx", "128", "--out",
                                                                          str(tmp_path / "out" / "01-pack")]
    assert planned[1].args == [str(tmp_path / "out" / "01-pack")] and planned[1].depends == ["pack"]


def test_unknown_from_until(tmp_path: Path) -> None:
    path = _write(tmp_path, BASE)
    assert "has no step 'nope'" in _error(path, start="nope")
    assert "comes after --until" in _error(path, start="verify", until="pack")


@pytest.mark.parametrize("name, steps", [("llava-ov-midtraining", ["dedup", "balance", "recaption", "pack", "verify"]),
                                         ("rl-selection", ["rl-filter", "score"])])
def test_shipped_recipes_plan_on_the_bundled_data(name: str, steps: list[str], tmp_path: Path, monkeypatch) -> None:
    root = Path(__file__).resolve().parents[3]
    monkeypatch.chdir(tmp_path)  # any folder: the recipes name ../data/sample and ../vocab/ from their own folder
    for model in ("clip", "vlm", "processor"):  # the steps' settings are checked: their model folders must exist
        (tmp_path / "models" / model).mkdir(parents=True)
    lines: list[str] = []
    recipe = load_recipe(root / "recipes" / f"{name}.yaml", {"models": str(tmp_path / "models")})
    planned = run_recipe(recipe, tmp_path / "out", dry_run=True, echo=lines.append)
    assert [p.step.verb for p in planned] == steps and all(p.status == "run" for p in planned)
    assert not (tmp_path / "out").exists()  # a dry run writes nothing
    for p in planned[1:]:
        assert p.depends == [planned[0].step.name] or p.depends == [planned[planned.index(p) - 1].step.name]
    assert sum(line.startswith("    $ curate ") for line in lines) == len(steps)
    assert planned[0].reads == [str(root / "data" / "sample" / p) for p in
                                (["records.jsonl", "llava.jsonl", "captions.jsonl"] if len(steps) == 5
                                 else ["rl/prompts.jsonl"])]
    assert recipe.out == str(root / "demo-out" / ("run" if len(steps) == 5 else "rl"))


def test_defaults_apply_to_the_steps_whose_verb_has_them(tmp_path: Path) -> None:
    path = _write(tmp_path, "defaults:\n  seed: 7\n  sample: 3\n" + BASE.replace("ctx: 64", "ctx: 64\n      seed: 1"))
    planned = plan_run(load_recipe(path), tmp_path / "out")
    assert planned[0].settings["seed"] == 1  # the step's own value wins
    assert planned[1].settings["seed"] == 7 and planned[1].settings["sample"] == 3  # verify has both flags
    assert "--sample" not in planned[0].args  # pack has no --sample
    path = _write(tmp_path, "defaults:\n  sead: 7\n" + BASE)
    message = _error(path)
    assert f"{path}:2:" in message and "default 'sead' is an option of none" in message


def test_a_bad_value_of_a_later_step_is_refused_before_the_first_runs(tmp_path: Path) -> None:
    """Issue 36: every step's settings are checked as its verb checks them before the first step runs, naming the
    option's line (the later step reads what the first makes: its paths are taken as made)."""
    path = _write(tmp_path, BASE.replace("  - verb: verify\n    input: pack\n",
                                         "  - verb: verify\n    input: pack\n    options:\n      sample: -3\n"))
    message = _error(path, dry_run=False)
    assert f"{path}:{_line_of(path, 'sample: -3')}: step 'verify':" in message and "--sample" in message, message
    assert not (tmp_path / "out" / "01-pack").exists()  # nothing ran


def test_a_sub_path_may_not_leave_the_step_folder(tmp_path: Path) -> None:
    path = _write(tmp_path, BASE.replace("    input: pack\n", "    input: pack/../../../../etc\n"))
    message = _error(path)
    assert f"{path}:{_line_of(path, 'pack/../')}:" in message and "must stay inside" in message, message
