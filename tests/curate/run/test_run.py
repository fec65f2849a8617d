"""`curate run` equals the verbs by hand (same bytes), survives SIGKILL, and honours --from/--until/--dry-run."""

from __future__ import annotations

import json
import os
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


def test_dry_run_skip_from_until(recipe_run, tmp_path: Path, capsys) -> None:
    out, recipe = recipe_run.out, str(recipe_run.recipe)
    main(["run", recipe, "--out", str(out), "--dry-run"])
    text = capsys.readouterr().err
    assert text.count("skip (finished, settings and inputs unchanged)") == 4
    assert f"$ curate pack {out}/02-recaption/records.jsonl --processor" in text

    # a changed setting: the step reruns and the one after it too; a dry run only says so
    before = (out / "03-pack" / "stats.json").read_bytes()
    main(["run", recipe, "--out", str(out), "--dry-run", "--set", "ctx=4096"])
    text = capsys.readouterr().err
    assert "03-pack          pack       rerun (settings changed: ctx)" in text
    assert "04-verify        verify     rerun (after step 'pack', which reruns)" in text
    assert "rerunning from step 'pack' (settings changed: ctx): pack, verify; keeping balance, recaption" in text
    assert (out / "03-pack" / "stats.json").read_bytes() == before

    # --from/--until: rerun only pack into a copy, the steps around it are not touched
    copy = _copy(out, tmp_path / "copy")
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


def _copy(out: Path, copy: Path) -> Path:
    """A copy of a run folder (same bytes and modification times; its report left out)."""
    shutil.copytree(out, copy, ignore=shutil.ignore_patterns("report"))
    return copy


def _stamps(folder: Path) -> dict[str, tuple[bytes, int]]:
    return {str(p.relative_to(folder)): (p.read_bytes(), p.stat().st_mtime_ns) for p in sorted(folder.rglob("*"))
            if p.is_file()}


def test_an_edited_option_reruns_its_step_and_the_later_ones_only(recipe_run, tmp_path: Path, capsys) -> None:
    """Issue 49: edit one option of a finished run's recipe, run again: that step and the ones after it run again
    (their folders emptied first), the earlier ones are kept byte for byte, file times included; a run folder
    moved elsewhere keeps its finished steps; --force STEP reruns from a step whose settings did not change."""
    copy = _copy(recipe_run.out, tmp_path / "moved")
    recipe = tmp_path / "recipe.yaml"
    text = recipe_run.recipe.read_text(encoding="utf-8")
    recipe.write_text(text.replace("sequences-per-shard: 2", "sequences-per-shard: 3"), encoding="utf-8")
    before = {name: _stamps(copy / name) for name in ("01-balance", "02-recaption", "03-pack", "04-verify")}
    main(["run", str(recipe), "--out", str(copy), "--dry-run"])
    plan = capsys.readouterr().err
    assert "rerunning from step 'pack' (settings changed: sequences_per_shard): pack, verify; keeping balance, " \
           "recaption (finished, unchanged)" in plan, plan
    assert _stamps(copy / "03-pack") == before["03-pack"]  # a dry run changes nothing
    main(["run", str(recipe), "--out", str(copy), "--no-report"])
    log = capsys.readouterr().err
    assert "== 01-balance: skip" in log and "== 02-recaption: skip" in log
    assert "== 03-pack: rerunning (settings changed: sequences_per_shard) curate pack" in log
    assert "== 04-verify: rerunning (after step 'pack', which reruns) curate verify" in log
    for name in ("01-balance", "02-recaption"):
        assert _stamps(copy / name) == before[name], name
    after = _stamps(copy / "03-pack")
    assert "--sequences-per-shard 3" in json.loads(after["stats.json"][0])["command"]
    assert all(after[k][1] != v[1] for k, v in before["03-pack"].items() if k in after)  # every file written anew
    assert _stamps(copy / "04-verify") != before["04-verify"]
    # nothing changed since: everything is kept
    main(["run", str(recipe), "--out", str(copy), "--dry-run"])
    assert capsys.readouterr().err.count("skip (finished, settings and inputs unchanged)") == 4
    # how a step runs is not what it makes: other --workers (another machine's cores) keep every step
    fast = tmp_path / "workers.yaml"
    fast.write_text(recipe.read_text(encoding="utf-8").replace("sequences-per-shard: 3",
                                                              "sequences-per-shard: 3, workers: 3"), encoding="utf-8")
    main(["run", str(fast), "--out", str(copy), "--dry-run"])
    assert capsys.readouterr().err.count("skip (finished, settings and inputs unchanged)") == 4
    # --force names a step: it and the later ones rerun; an input file touched reruns from its first reader
    main(["run", str(recipe), "--out", str(copy), "--dry-run", "--force", "recaption"])
    plan = capsys.readouterr().err
    assert "02-recaption     recaption  rerun (--force recaption)" in plan and "01-balance       balance    skip" in plan
    assert "03-pack          pack       rerun (after step 'recaption', which reruns)" in plan
    data = Path(yaml.safe_load(text)["vars"]["data"])
    saved = data.stat()
    try:
        os.utime(data, ns=(saved.st_atime_ns, saved.st_mtime_ns + 10**9))
        main(["run", str(recipe), "--out", str(copy), "--dry-run"])
        plan = capsys.readouterr().err
        assert f"01-balance       balance    rerun (input changed: {data})" in plan
        assert plan.count("rerun (after step 'balance', which reruns)") == 3
    finally:
        os.utime(data, ns=(saved.st_atime_ns, saved.st_mtime_ns))


def test_a_run_killed_in_its_second_step_leaves_no_lock_in_any_step(recipe_run) -> None:
    """Issue 36: the first step's lock is removed when it finishes, not when the command ends, so the run killed
    during step 2 (then resumed and finished) leaves no stale ``01-balance/.curate.lock``."""
    locks = sorted(str(p.relative_to(recipe_run.out)) for p in recipe_run.out.rglob(".curate.lock"))
    assert locks == []
