"""A shard plan over many tars: walked in worker processes, kept in the cache, the same parts either way."""

from __future__ import annotations

import io
import os
import time
from pathlib import Path

import pytest
import webdataset as wds
from PIL import Image

import curate.core.splits as splits
from curate.core.records import expand_inputs, split_file
from curate.core.shards import plan_shards

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
