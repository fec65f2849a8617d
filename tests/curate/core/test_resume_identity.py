"""A killed and resumed run leaves the same bytes as a straight run in EVERY file of its folder but one.

``history.json`` (wall times, resumes: docs/resume.md) is the one file documented to differ. This is
the local shard contract's test (``run_stage``, ``execute_shard``'s markers, ``finish_stage``, the
report written after the verb, the plot), on ``curate pack``, killed in each of its two sharded steps (counting,
then writing tars). One test per mechanism, not per verb: every sharded verb resumes through this contract (balance's
steps: ``test_pipeline.py``). The generating stages' journals and counters: ``test_stats_reproducible.py``; a bucket:
``test_remote.py::test_sigkill_while_packing_into_a_bucket_then_rerun``.
"""

from __future__ import annotations

import json
import multiprocessing
import os
import signal
from pathlib import Path

import pytest

from curate.cli import cli
from tests._fixtures.formats import Layouts

#: The one file of an output folder that differs between a straight and a resumed run.
HISTORY = "history.json"


def _curate(args: list[str]) -> None:
    """``curate ARGS`` in this process, the report hook included (not ``curate.cli.main``: it keeps locks)."""
    cli.main(args=args, prog_name="curate", standalone_mode=False)


def _killed_at_marker(args: list[str], stage: str, nth: int) -> None:
    """Run ``curate ARGS`` and SIGKILL this process as it is about to write the ``nth`` marker of ``stage``: that
    shard's outputs are in place, its marker is not (the contract's worst moment); no cleanup of any kind."""
    import curate.core.shards as shards

    written = shards.write_json
    seen = []

    def write_json(path, content) -> None:  # noqa: ANN001
        if Path(path).parent.name == stage and Path(path).name[0].isdigit():
            seen.append(path)
            if len(seen) == nth:
                os.kill(os.getpid(), signal.SIGKILL)
        written(path, content)

    shards.write_json = write_json
    _curate(args)


def files(folder: Path) -> dict[str, bytes]:
    """Every file under ``folder`` (hidden ones and the report included) but ``history.json``, by relative path."""
    return {p.relative_to(folder).as_posix(): p.read_bytes() for p in sorted(folder.rglob("*"))
            if p.is_file() and p.name != HISTORY}


@pytest.mark.parametrize("stage", ["lengths", "write"])  # pack's two sharded steps: counting, then writing tars
def test_killed_and_resumed_pack_equals_a_straight_run_file_for_file(stage: str, layouts: Layouts,
                                                                    tiny_processor_dir: Path, tmp_path: Path,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    def args(out: Path) -> list[str]:
        return ["pack", str(layouts.files), "--processor", str(tiny_processor_dir), "--ctx", "1024",
                "--shard-size", "2", "--sequences-per-shard", "2", "--seed", "3", "--workers", "1",
                "--out", str(out)]  # one process: the kill below is the run's own

    out, straight = tmp_path / "out", tmp_path / "straight"  # both runs into the same --out: pages name it
    monkeypatch.setenv("CURATE_REPORT", "1")  # the report every verb writes at its end (the suite turns it off)
    monkeypatch.setenv("CURATE_CACHE", str(tmp_path / "cache-straight"))  # own caches: no counts reused across
    _curate(args(out))
    out.rename(straight)
    monkeypatch.setenv("CURATE_CACHE", str(tmp_path / "cache-resumed"))
    child = multiprocessing.get_context("fork").Process(target=_killed_at_marker, args=(args(out), stage, 3))
    child.start()
    child.join(timeout=120)
    assert child.exitcode == -signal.SIGKILL, "the run was not killed"
    assert not (out / "stats.json").exists() and len(list((out / "_shards" / stage).glob("0*.json"))) == 2
    _curate(args(out))
    resumed = out

    want, got = files(straight), files(resumed)
    assert sorted(got) == sorted(want)
    assert [rel for rel in want if want[rel] != got[rel]] == []
    assert not [p for p in resumed.rglob(".tmp*") if p.is_file()] and not list((resumed / "shards").glob(".*"))
    for part in ("stats.json", "report/index.html", "report/stage.html", "packing.png", f"_shards/{stage}/000000.json",
                 "shards/000000.tar", "shards/000002.tar"):
        assert part in want, part  # the comparison covered what used to differ
    # what differs is in history.json: the wall times of each invocation (two into the resumed folder)
    runs = json.loads((resumed / HISTORY).read_text())["pack"]["runs"]
    assert len(runs) == 1 and runs[0]["timings"][stage] > 0  # the killed run never finished: no entry
    assert "timings" not in json.loads((resumed / "stats.json").read_text())
