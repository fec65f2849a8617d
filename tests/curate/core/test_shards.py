"""The shard contract with a real stage: markers, resume, settings, accounting, workers."""

from __future__ import annotations

import io
import json
import multiprocessing
import os
import threading
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import webdataset as wds
from PIL import Image

from curate.core.errors import UserError
from curate.core.records import expand_inputs, split_file
from curate.core.shards import (Shard, ShardContext, ShardTask, execute_shard, inputs_fingerprint, marker_path,
                                 plan_shards, readable_records)
from curate.core.stats import StageStats
from curate.executors import get_executor, run_stage
import curate.core.shards as splits


class LengthTask(ShardTask):
    """A small real stage: keeps records whose caption is long enough, with a seeded score."""

    stage = "lengths"

    def __init__(self, min_chars: int, log: str | None = None, fail_setup: bool = False,
                 fail_shard: int | None = None, hold: str | None = None) -> None:
        self.min_chars = min_chars
        self.log = log
        self.fail_setup, self.fail_shard = fail_setup, fail_shard
        self.hold = hold  # a slow worker: once its file is written, it says so (HOLD.held) and waits for HOLD

    def setup(self) -> None:
        if self.fail_setup:
            raise UserError("setup failed: the model file is missing")

    def settings(self) -> dict:
        return {"min_chars": self.min_chars}

    def run(self, shard: Shard, work: Path, ctx: ShardContext) -> StageStats:
        if shard.index == self.fail_shard:
            raise UserError(f"shard {shard.id} cannot be processed")
        if self.log:
            with open(self.log, "a") as fh:
                fh.write(shard.id + "\n")
        stats = StageStats()
        rng = ctx.rng(shard)
        ids, scores = [], []
        for rec in readable_records(shard, stats, ctx):
            text = rec["messages"][-1]["content"]
            if len(text) < self.min_chars:
                stats.drop(rec["id"], rec["source"], "too_short")
                continue
            stats.kept(rec["source"])
            ids.append(rec["id"])
            scores.append(float(rng.random()))
        pq.write_table(pa.table({"id": ids, "score": scores}), work / "out" / f"{shard.id}.parquet"
                       if (work / "out").mkdir(parents=True, exist_ok=True) is None else None)
        if self.hold is not None:
            Path(self.hold + ".held").touch()
            deadline = time.monotonic() + 60
            while not Path(self.hold).exists() and time.monotonic() < deadline:
                time.sleep(0.01)
        return stats


def make_input(tmp_path: Path, n: int = 23) -> Path:
    lines = []
    for i in range(n):
        if i % 7 == 3:
            lines.append('{"id": "broken"')
        else:
            lines.append(json.dumps({"id": f"r{i}", "source": "a" if i % 2 else "b", "caption": "x" * (i % 5),
                                     "image": "x.jpg"}))
    path = tmp_path / "in.jsonl"
    path.write_text("\n".join(lines) + "\n")
    return path


def test_run_accounts_for_every_record_and_resumes(tmp_path: Path) -> None:
    src = make_input(tmp_path)
    shards = plan_shards([src], shard_size=5)
    assert [len(s) for s in shards] == [5, 5, 5, 5, 3]
    out = tmp_path / "out"
    log = tmp_path / "calls.txt"
    stats = run_stage(LengthTask(2, str(log)), shards, out, seed=1)
    assert stats.records_in == 23
    assert stats.errored["malformed_json"] == 3 and stats.errored["invalid_field"] == 4
    assert stats.records_in == stats.records_out + sum(stats.dropped.values()) + sum(stats.errored.values())
    assert sorted(stats.per_source) == ["a", "b", "in"]  # malformed lines are counted under the file stem
    first = {p.name: p.read_bytes() for p in sorted((out / "out").iterdir())}
    assert len(first) == 5
    # a rerun runs nothing
    run_stage(LengthTask(2, str(log)), shards, out, seed=1)
    assert log.read_text().split() == [s.id for s in shards]
    # a lost marker (as after a kill between rename and marker) redoes only that shard, same bytes
    marker_path(out, "lengths", "000002").unlink()
    (out / "out" / "000002.parquet").unlink()
    run_stage(LengthTask(2, str(log)), shards, out, seed=1)
    assert log.read_text().split()[-1] == "000002"
    assert {p.name: p.read_bytes() for p in sorted((out / "out").iterdir())} == first
    # rejects are written with their reasons
    rejects = stats.rejects_table().to_pylist()
    assert {r["reason"] for r in rejects} == {"malformed_json", "too_short", "invalid_field"}  # empty captions


def _folder(out: Path) -> dict[str, bytes]:
    return {p.relative_to(out).as_posix(): p.read_bytes() for p in sorted(out.rglob("*")) if p.is_file()}


def test_a_rerun_leaves_a_live_worker_of_a_killed_run_its_work_folder(tmp_path: Path) -> None:
    """A worker of a killed driver may still be writing a shard as the rerun starts (it stops within a second, or
    ends its shard). The rerun waits for it rather than remove its work folder under it (the worker would then
    mark its shard done listing only the files it wrote after that, and a later rerun would trust that marker);
    the work folders of dead processes still go."""
    shards = plan_shards([make_input(tmp_path)], shard_size=5)
    straight, out, go, log = tmp_path / "straight", tmp_path / "out", tmp_path / "go", tmp_path / "calls.txt"
    run_stage(LengthTask(2), shards, straight, seed=1)
    dead = multiprocessing.get_context("fork").Process(target=os._exit, args=(0,))
    dead.start()
    dead.join()
    for owner in (dead.pid, os.getpid()):  # left by a dead worker, and by this process's own earlier run
        left = out / ".tmp" / "lengths" / f"000001.{owner}.0badc0de" / "out" / "000001.parquet"
        left.parent.mkdir(parents=True)
        left.write_bytes(b"half")
    half_marker = out / "_shards" / "lengths" / ".000002.json.k1ll3d.tmp"  # a marker a killed process was writing
    half_marker.parent.mkdir(parents=True, exist_ok=True)
    half_marker.write_text('{"files": [')
    worker = multiprocessing.get_context("fork").Process(target=execute_shard,
                                                         args=(LengthTask(2, hold=str(go)), shards[0], out, 1))
    worker.start()
    deadline = time.monotonic() + 60
    while not Path(f"{go}.held").exists() and worker.is_alive() and time.monotonic() < deadline:
        time.sleep(0.01)
    assert Path(f"{go}.held").exists(), "the worker did not start its shard"
    threading.Timer(0.5, go.touch).start()  # the worker ends its shard while the rerun has started
    run_stage(LengthTask(2, str(log)), shards, out, seed=1)
    worker.join(timeout=60)
    assert worker.exitcode == 0
    got, want = _folder(out), _folder(straight)
    assert sorted(got) == sorted(want)  # nothing is left in .tmp, no half-written marker
    assert got == want  # the worker's marker lists its files
    assert log.read_text().split() == [s.id for s in shards[1:]]  # shard 0 is the worker's, done once


def test_other_settings_are_refused(tmp_path: Path) -> None:
    shards = plan_shards([make_input(tmp_path)], shard_size=10)
    run_stage(LengthTask(2), shards, tmp_path / "o", seed=0)
    with pytest.raises(UserError, match="other settings"):
        run_stage(LengthTask(3), shards, tmp_path / "o", seed=0)
    with pytest.raises(UserError, match="seed"):
        run_stage(LengthTask(2), shards, tmp_path / "o", seed=5)


def test_a_run_by_another_reader_is_refused_and_caches_change(tmp_path: Path,
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    """A folder (or a cross-run cache) made by a reader that read the same rows otherwise is not reused."""
    import curate.core.records
    import curate.core.shards

    shards = plan_shards([make_input(tmp_path)], shard_size=10)
    before = inputs_fingerprint(shards)
    run_stage(LengthTask(2), shards, tmp_path / "o", seed=0)
    monkeypatch.setattr(curate.core.records, "READER_VERSION", curate.core.records.READER_VERSION + 1)
    monkeypatch.setattr(curate.core.shards, "READER_VERSION", curate.core.records.READER_VERSION)
    with pytest.raises(UserError, match="the curate version that reads the records"):
        run_stage(LengthTask(2), shards, tmp_path / "o", seed=0)
    assert inputs_fingerprint(shards) != before


@pytest.mark.slow
def test_worker_processes_give_identical_outputs(tmp_path: Path) -> None:
    src = make_input(tmp_path, 40)
    shards = plan_shards([src], shard_size=6)
    a = run_stage(LengthTask(1), shards, tmp_path / "one", seed=3)
    b = run_stage(LengthTask(1), shards, tmp_path / "two", seed=3, executor=get_executor("local", workers=2))
    assert a.to_dict() | {"timings": {}} == b.to_dict() | {"timings": {}}
    for p in sorted((tmp_path / "one" / "out").iterdir()):
        assert p.read_bytes() == (tmp_path / "two" / "out" / p.name).read_bytes()


def test_plan_shards_groups_small_files(tmp_path: Path) -> None:
    for i in range(4):
        (tmp_path / f"f{i}.jsonl").write_text(json.dumps({"id": f"x{i}", "caption": "c"}) + "\n")
    shards = plan_shards([tmp_path], shard_size=3)
    assert [len(s) for s in shards] == [3, 1]
    with pytest.raises(UserError):
        plan_shards([tmp_path], shard_size=0)


def test_other_inputs_are_refused_and_unfinished_runs_can_change(tmp_path: Path) -> None:
    a = make_input(tmp_path)
    b = tmp_path / "b.jsonl"
    b.write_text(a.read_text())
    run_stage(LengthTask(2), plan_shards([a], shard_size=10), tmp_path / "o", seed=0)
    with pytest.raises(UserError, match="inputs, shard size"):
        run_stage(LengthTask(2), plan_shards([b], shard_size=10), tmp_path / "o", seed=0)
    with pytest.raises(UserError, match="inputs, shard size"):
        run_stage(LengthTask(2), plan_shards([a], shard_size=7), tmp_path / "o", seed=0)
    # a run that failed before finishing any shard does not lock the folder to its settings
    with pytest.raises(UserError, match="setup failed"):
        run_stage(LengthTask(2, fail_setup=True), plan_shards([a], shard_size=10), tmp_path / "p", seed=0)
    stats = run_stage(LengthTask(3), plan_shards([a], shard_size=10), tmp_path / "p", seed=0)
    assert stats.records_in == 23


@pytest.mark.slow
def test_worker_errors_reach_the_driver_as_themselves_and_stop_the_run(tmp_path: Path) -> None:
    src = make_input(tmp_path, 40)
    shards = plan_shards([src], shard_size=2)
    two = get_executor("local", workers=2)
    with pytest.raises(UserError, match="setup failed"):
        run_stage(LengthTask(1, fail_setup=True), shards, tmp_path / "s", seed=0, executor=two)
    with pytest.raises(UserError, match="shard 000000 cannot be processed"):
        run_stage(LengthTask(1, fail_shard=0), shards, tmp_path / "f", seed=0, executor=two)
    done = [p for p in (tmp_path / "f" / "_shards" / "lengths").glob("0*.json")]
    assert len(done) < len(shards) - 1  # queued shards were cancelled, not run to the end


def test_the_record_loop_errors_bad_rows_and_repeated_ids(tmp_path: Path) -> None:
    """readable_records: unreadable rows and repeats of an id within a shard are errored, the first kept."""
    rows = ['{"id": "a", "caption": "one", "image": "1.jpg"}', '{"id": "b"', '{"id": "a", "caption": "two", "image": "2.jpg"}',
            '{"id": "c", "caption": "three", "source": "s", "image": "3.jpg"}', '["not", "an", "object"]']
    path = tmp_path / "dup.jsonl"
    path.write_text("\n".join(rows) + "\n")
    (shard,) = plan_shards([path], 10)
    stats, seen_progress = StageStats(), []
    ctx = ShardContext(seed=0, progress=seen_progress.append)
    yielded = []
    for rec in readable_records(shard, stats, ctx):
        yielded.append(rec["messages"][-1]["content"])
        stats.kept(rec["source"])
    assert yielded == ["one", "three"]
    assert stats.records_in == len(rows) and sum(seen_progress) == len(rows) - len(yielded)
    assert stats.errored["duplicate_id"] == 1 and sum(stats.errored.values()) == 3
    assert [r[0] for r in stats.rejects if r[3] == "duplicate_id"] == ["a"]
    stats.check()  # in = out + errored, overall and per source


# A shard plan over many tars: walked in worker processes, kept in the cache, the same parts either way.
OLD = time.time() - 3600  # a tar written an hour ago: settled, so its parts are kept


def _jpeg() -> bytes:
    out = io.BytesIO()
    Image.new("RGB", (8, 8), "blue").save(out, "JPEG")
    return out.getvalue()


def _tars(folder: Path, n: int, groups: int = 7) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    jpg = _jpeg()
    for s in range(n):
        path = folder / f"{s:05d}.tar"
        with wds.TarWriter(str(path)) as sink:
            for g in range(groups + s % 3):  # tars of different sizes
                sink.write({"__key__": f"{s:05d}{g:04d}", "jpg": jpg, "txt": f"caption {s} {g}"})
        os.utime(path, (OLD, OLD))
    return folder


def _layout(shards) -> list:
    return [[(p.path, p.start, p.stop, p.offset) for p in s.parts] for s in shards]


def test_many_tars_are_walked_in_workers_and_kept(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    folder = _tars(tmp_path / "laion", 10)
    monkeypatch.setenv("CURATE_CACHE", str(tmp_path / "cache"))
    expected = [[(str(p), q.start, q.stop, q.offset) for q in split_file(p, 4)] for p in expand_inputs([folder])]
    first = plan_shards([folder], shard_size=4)  # 10 tars ≥ PARALLEL_FROM: walked in worker processes
    assert [part for shard in _layout(first) for part in shard] == [part for parts in expected for part in parts]
    assert len(list((tmp_path / "cache" / "splits").glob("*.json"))) == 10

    def no_walk(path: str, rows: int) -> list:
        raise AssertionError(f"{path} walked again")

    monkeypatch.setattr(splits, "_scan", no_walk)
    monkeypatch.setattr(splits, "PARALLEL_FROM", 100)  # walks in this process, where no_walk is seen
    assert _layout(plan_shards([folder], shard_size=4)) == _layout(first)  # from the cache alone
    # Another part size, or another reader, is another key.
    with pytest.raises(AssertionError, match="walked again"):
        plan_shards([folder], shard_size=5)
    monkeypatch.setattr(splits, "READER_VERSION", splits.READER_VERSION + 1)
    with pytest.raises(AssertionError, match="walked again"):
        plan_shards([folder], shard_size=4)


def test_workers_and_one_process_give_the_same_plan(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    folder = _tars(tmp_path / "cc3m", 9)
    monkeypatch.setenv("CURATE_CACHE", str(tmp_path / "a"))
    parallel = _layout(plan_shards([folder], shard_size=3))
    monkeypatch.setenv("CURATE_CACHE", str(tmp_path / "b"))
    monkeypatch.setattr(splits, "PARALLEL_FROM", 100)
    assert _layout(plan_shards([folder], shard_size=3)) == parallel


def test_a_changed_or_fresh_tar_is_walked_again(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    folder = _tars(tmp_path / "d", 2)
    monkeypatch.setenv("CURATE_CACHE", str(tmp_path / "cache"))
    before = _layout(plan_shards([folder], shard_size=100))
    _tars(tmp_path / "d", 1, groups=20)  # 00000.tar rewritten with more groups (its mtime set back an hour again)
    after = _layout(plan_shards([folder], shard_size=100))
    assert after != before and after[0][0][2] == 20  # the new size is part of the key
    fresh = _tars(tmp_path / "fresh", 1)
    os.utime(fresh / "00000.tar")  # modified just now: it may still be being written
    plan_shards([fresh], shard_size=100)
    assert len(list((tmp_path / "cache" / "splits").glob("*.json"))) == 3  # 2 tars, then the rewritten one


def test_tars_in_a_bucket_are_walked_in_threads_and_kept(bucket: str, tmp_path: Path,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    """Against a real S3 server (moto): the plan of a prefix of 8 tars equals the plan of the same tars on disk."""
    import s3fs

    folder = _tars(tmp_path / "wds", 8)
    s3fs.S3FileSystem(skip_instance_cache=True).put(str(folder) + "/", f"{bucket}/wds/", recursive=True)
    monkeypatch.setenv("CURATE_CACHE", str(tmp_path / "cache"))
    local = _layout(plan_shards([folder], shard_size=4))
    remote = _layout(plan_shards([f"{bucket}/wds"], shard_size=4))
    assert [[(Path(p).name, *rest) for p, *rest in shard] for shard in remote] == \
        [[(Path(p).name, *rest) for p, *rest in shard] for shard in local]
    assert all(p.startswith(f"{bucket}/wds/") for shard in remote for p, *_ in shard)

    def no_walk(path: str, rows: int) -> list:
        raise AssertionError(f"{path} walked again")

    monkeypatch.setattr(splits, "_scan", no_walk)  # threads see it too
    assert _layout(plan_shards([f"{bucket}/wds"], shard_size=4)) == remote  # objects are kept at once (ETag)


def test_stamps_of_many_objects_are_asked_in_threads_in_order(bucket: str, tmp_path: Path) -> None:
    import s3fs

    from curate.core.io import input_stamp

    fs = s3fs.S3FileSystem(skip_instance_cache=True)
    for i in range(9):
        fs.pipe(f"{bucket}/stamps/{i}.jsonl", b"x" * (i + 1))
    (tmp_path / "local.jsonl").write_text("{}\n")
    paths = [f"{bucket}/stamps/{i}.jsonl" for i in range(9)]
    paths.insert(4, str(tmp_path / "local.jsonl"))
    stamps = splits.input_stamps(paths)
    assert stamps == [input_stamp(p) for p in paths]
    assert [int(s.split("|")[0]) for s in stamps] == [1, 2, 3, 4, 3, 5, 6, 7, 8, 9]
