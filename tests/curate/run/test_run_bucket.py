"""A run folder in a bucket (``--out s3://...``): statuses, step records and the lock file go through fsspec.

The verbs' own writing into buckets is tested with the verbs; here the run's planning reads and
writes its files in a real S3-compatible server (moto) on loopback.
"""

from __future__ import annotations

import json
from pathlib import Path

from curate.core.io import as_path
from curate.run import load_recipe, plan_run
from curate.run.plan import write_record
from curate.run.runner import clear_step, write_lock


def test_run_folder_in_a_bucket(bucket: str, tmp_path: Path) -> None:
    import s3fs

    (tmp_path / "in.jsonl").write_text('{"id": "a", "caption": "a cat"}\n')
    (tmp_path / "proc").mkdir()  # a processor folder: pack checks it exists when its step is planned
    recipe_path = tmp_path / "r.yaml"
    recipe_path.write_text(f"vars: {{ctx: 64}}\ninputs: {{raw: {tmp_path / 'in.jsonl'}}}\nsteps:\n"
                           f"  - {{verb: pack, input: raw, options: {{processor: {tmp_path / 'proc'}, ctx: '${{ctx}}'}}}}\n"
                           "  - {verb: verify, input: pack}\n")  # steps are checked as their verbs check them
    out = as_path(f"{bucket}/run")
    fs = s3fs.S3FileSystem(skip_instance_cache=True)
    inner = str(out).removeprefix("s3://")

    planned = plan_run(load_recipe(recipe_path), out)
    assert [p.status for p in planned] == ["run", "run"]
    assert planned[0].settings["out"] == f"{bucket}/run/01-pack" and planned[1].args == [f"{bucket}/run/01-pack"]
    write_lock(load_recipe(recipe_path), planned, out)
    assert b"recipe_text:" in fs.cat_file(f"{inner}/recipe.lock.yaml")

    for p in planned:  # as if both steps had run
        write_record(out, p)
        fs.pipe_file(f"{inner}/{p.step.folder}/stats.json", json.dumps({"stage": p.step.verb}).encode())
    assert [p.status for p in plan_run(load_recipe(recipe_path), out)] == ["skip", "skip"]
    changed = plan_run(load_recipe(recipe_path, {"ctx": "128"}), out)
    assert [p.status for p in changed] == ["rerun", "rerun"]
    assert changed[0].why == "settings changed: ctx" and changed[1].why == "after step 'pack', which reruns"
    fs.pipe_file(f"{inner}/02-verify/_shards/x.json", b"{}")  # started, not finished
    fs.rm(f"{inner}/02-verify/stats.json")
    fs.invalidate_cache()
    assert [p.status for p in plan_run(load_recipe(recipe_path), out)] == ["skip", "resume"]
    clear_step(out, changed[0])  # a step run again starts from an empty prefix, its record forgotten
    fs.invalidate_cache()
    assert not fs.exists(f"{inner}/01-pack") and not fs.exists(f"{inner}/_run/01-pack.json")
    assert fs.exists(f"{inner}/_run/02-verify.json")
