"""`curate run` equals the verbs by hand (same bytes), survives SIGKILL, and honours --from/--until/--dry-run."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest
import yaml

from curate.cli import cli
from curate.core.errors import UserError


def main(args: list[str]) -> None:
    """``curate ARGS`` in this process (not curate.cli.main, which keeps output locks until the process exits)."""
    cli.main(args=args, prog_name="curate", standalone_mode=False)


def _normal(path: Path) -> Any:
    """A file's content for comparison: bytes, or for JSON the content without wall times (and without
    whether the concept embeddings came from the cache, which the by-hand run filled)."""
    if path.suffix == ".json":
        def strip(v: Any) -> Any:
            if isinstance(v, dict):
                return {k: strip(x) for k, x in v.items() if k not in ("timings", "cached") and not k.endswith("seconds")}
            return [strip(x) for x in v] if isinstance(v, list) else v
        return strip(json.loads(path.read_text(encoding="utf-8")))
    return path.read_bytes()


def _tree(folder: Path) -> dict[str, Any]:
    """Every output file of a step folder; excluded: the logs of runs (journals of answers as they came, the
    history of runs and resumes), the report and the lock of a live run."""
    logs = {"_journal", "history.json", "report", ".curate.lock"}
    return {str(p.relative_to(folder)): _normal(p) for p in sorted(folder.rglob("*"))
            if p.is_file() and not logs & set(p.relative_to(folder).parts)}


def test_run_equals_verbs_by_hand_after_sigkill(recipe_run) -> None:
    assert recipe_run.killed_markers >= 1
    for name in ("01-balance", "02-recaption", "03-pack"):
        ref, got = _tree(recipe_run.ref / name), _tree(recipe_run.out / name)
        assert sorted(got) == sorted(ref), name
        different = [k for k in ref if ref[k] != got[k]]
        assert not different, f"{name}: {different}"
        assert any(k.endswith(".parquet") for k in ref) and "stats.json" in ref
    stats = json.loads((recipe_run.out / "04-verify" / "stats.json").read_text())
    assert stats["ok"] is True and stats["checked"] == [str(recipe_run.out / "03-pack")]
    # every step's stats.json records its own command line, as when run by hand
    for name, argv in recipe_run.by_hand.items():
        assert json.loads((recipe_run.out / name / "stats.json").read_text())["command"].split()[1:3] == argv[:2]


def test_lock_holds_recipe_settings_and_versions(recipe_run) -> None:
    lock = yaml.safe_load((recipe_run.out / "recipe.lock.yaml").read_text())
    assert lock["recipe_text"] == recipe_run.recipe.read_text()
    assert [s["name"] for s in lock["steps"]] == ["balance", "recaption", "pack", "verify"]
    assert lock["steps"][2]["settings"]["ctx"] == 2048
    # every flag of the verb is resolved, defaults included
    assert set(lock["steps"][2]["settings"]) >= {p.name for p in cli.commands["pack"].params if p.expose_value}
    assert lock["steps"][1]["settings"]["langs"] == "en,zh" and lock["steps"][3]["depends"] == ["pack"]
    assert lock["versions"]["pyarrow"] and lock["curate"]
    for step in lock["steps"]:
        assert step["command"].split()[:2] == ["curate", step["verb"]]


def test_dry_run_skip_refuse_from_until(recipe_run, tmp_path: Path, capsys) -> None:
    out, recipe = recipe_run.out, str(recipe_run.recipe)
    main(["run", recipe, "--out", str(out), "--dry-run"])
    text = capsys.readouterr().err
    assert text.count("skip (finished, settings unchanged)") == 4
    assert f"$ curate pack {out}/02-recaption/records.jsonl --processor" in text

    # a changed setting: the finished step and the one reading it are refused, nothing runs
    main(["run", recipe, "--out", str(out), "--dry-run", "--set", "ctx=4096"])
    text = capsys.readouterr().err
    assert "03-pack          pack       refuse (finished with other settings (ctx))" in text
    assert "refuse (finished with other settings (input from step pack))" in text
    before = (out / "03-pack" / "stats.json").read_bytes()
    with pytest.raises(UserError, match=r"recipe\.yaml:\d+: step 'pack': .* finished with other settings"):
        main(["run", recipe, "--out", str(out), "--set", "ctx=4096"])
    assert (out / "03-pack" / "stats.json").read_bytes() == before

    # --from/--until: rerun only pack into a copy, the steps around it are not touched
    copy = tmp_path / "copy"
    shutil.copytree(out, copy, ignore=shutil.ignore_patterns("report"))
    for p in (copy / "_run").iterdir():  # the copy's commands name the copy's folders
        p.write_text(p.read_text().replace(str(out), str(copy)))
    shutil.rmtree(copy / "03-pack")
    main(["run", recipe, "--out", str(copy), "--from", "pack", "--until", "pack", "--dry-run"])
    text = capsys.readouterr().err
    assert "01-balance       balance    not selected (before --from)" in text
    assert "03-pack          pack       run" in text and "04-verify        verify     not selected (after --until)" in text
    main(["run", recipe, "--out", str(copy), "--from", "pack", "--until", "pack", "--no-report"])
    text = capsys.readouterr().err
    assert "== 03-pack: running curate pack" in text and "== 04-verify" in text and "running curate verify" not in text
    assert _tree(copy / "03-pack")["plan.parquet"] == _tree(out / "03-pack")["plan.parquet"]
    assert not (copy / "report").exists()


def test_a_run_killed_in_its_second_step_leaves_no_lock_in_any_step(recipe_run) -> None:
    """Issue 36: the first step's lock is removed when it finishes, not when the command ends, so the run killed
    during step 2 (then resumed and finished) leaves no stale ``01-balance/.curate.lock``."""
    locks = sorted(str(p.relative_to(recipe_run.out)) for p in recipe_run.out.rglob(".curate.lock"))
    assert locks == []
