"""Where data is, as curate.core.io says: atomic writes (a finished file appears whole under its name, a failed
one leaves nothing behind) and locations as values (local or remote, named as given, never silently turned into
a local path)."""

from __future__ import annotations

import os
import pickle
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from curate.core.errors import UserError
from curate.core.io import (Location, atomic_open, atomic_path, dumps_json, locations, shown, staging_folder, url_of,
                            write_json, write_parquet)


def test_a_failed_write_leaves_the_old_file_and_no_temporary(tmp_path: Path) -> None:
    target = tmp_path / "out" / "a.json"
    write_json(target, {"v": 1})
    with pytest.raises(RuntimeError):
        with atomic_open(target, "w") as fh:
            fh.write('{"v": 2')
            raise RuntimeError("killed half way")
    assert target.read_text() == '{\n  "v": 1\n}\n'
    assert [p.name for p in target.parent.iterdir()] == ["a.json"]
    with pytest.raises(RuntimeError):
        with atomic_path(tmp_path / "b.parquet") as tmp:
            tmp.write_bytes(b"PAR1")
            raise RuntimeError("killed")
    assert not (tmp_path / "b.parquet").exists() and not list(tmp_path.glob(".b.parquet.*"))


def test_parquet_is_written_natively_and_renamed_with_the_usual_permissions(tmp_path: Path) -> None:
    table = pa.table({"id": ["a", "b"], "n": [1, 2]})
    path = tmp_path / "t.parquet"
    write_parquet(path, table, compression="snappy")
    assert pq.read_table(path).equals(table)
    assert pq.ParquetFile(path).metadata.row_group(0).column(0).compression == "SNAPPY"
    umask = os.umask(0)
    os.umask(umask)
    assert path.stat().st_mode & 0o777 == 0o666 & ~umask
    first = path.read_bytes()
    write_parquet(path, table, compression="snappy")  # the same table: the same bytes
    assert path.read_bytes() == first and [p.name for p in tmp_path.iterdir()] == ["t.parquet"]


def test_a_location_knows_where_it_is(tmp_path: Path) -> None:
    remote, local = Location("s3://bucket/run/"), Location(tmp_path / "out")
    assert remote.is_remote and remote.url == "s3://bucket/run" and str(remote) == "s3://bucket/run"
    assert not local.is_remote and local.path == tmp_path / "out" and os.fspath(local) == str(tmp_path / "out")
    assert Location("file:///data/x").path == Path("/data/x")
    assert remote / "stats.json" == Location("s3://bucket/run/stats.json")
    assert (remote / "a.npy").parent == remote and (remote / "a.npy").name == "a.npy"
    assert local / "a" == Location(tmp_path / "out" / "a")
    with pytest.raises(TypeError, match="s3://bucket/run"):
        Path(remote)  # a bucket URL never becomes a local folder named "s3:"
    with pytest.raises(ValueError):
        _ = local.url
    assert pickle.loads(pickle.dumps(remote)) == remote
    assert dumps_json({"out": remote, "in": local}, indent=None) == \
        '{"in": "%s", "out": "s3://bucket/run"}' % (tmp_path / "out")


@dataclass(frozen=True)
class _Config:
    out: object
    inputs: object = ()
    cache: object = None

    def __post_init__(self) -> None:
        locations(self, {"out": "--out", "inputs": "--in"}, local={"cache": "--cache-dir"})


def test_configs_hold_locations_and_refuse_a_bucket_for_local_only_settings(tmp_path: Path) -> None:
    config = _Config(out="gs://b/x", inputs=["s3://b/a.jsonl", tmp_path], cache=tmp_path / "c")
    assert isinstance(config.out, Location) and config.out.is_remote
    assert config.inputs == (Location("s3://b/a.jsonl"), Location(tmp_path))
    assert config.cache == Location(tmp_path / "c") and not config.cache.is_remote
    with pytest.raises(UserError, match="^cache_dir s3://b/cache: must be a folder on this machine's disk"):
        _Config(out=tmp_path, cache="s3://b/cache")


def test_a_staging_folder_is_named_by_its_url(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CURATE_CACHE", str(tmp_path / "cache"))
    folder = staging_folder("s3://bucket/run")
    assert url_of(folder) == "s3://bucket/run"
    assert url_of(folder / "01-pack" / "shards") == "s3://bucket/run/01-pack/shards"
    assert shown(folder / "01-pack") == "s3://bucket/run/01-pack"  # what users read: the bucket, never the folder
    assert url_of(tmp_path) is None and shown(tmp_path) == str(tmp_path)
    (tmp_path / ".url").write_text("s3://elsewhere")  # only folders of the cache's staging area stand for a URL
    assert url_of(tmp_path) is None


def test_an_object_in_a_bucket_is_a_location_with_the_path_features_readers_use() -> None:
    from curate.core.io import as_path

    obj = as_path("s3://b/data/part.00.jsonl.gz/")
    assert isinstance(obj, Location) and obj.is_remote and str(obj) == "s3://b/data/part.00.jsonl.gz"
    assert (obj.name, obj.suffix, obj.stem) == ("part.00.jsonl.gz", ".gz", "part.00.jsonl")
    assert obj.parent == Location("s3://b/data") and obj.parent / "x.tar" == Location("s3://b/data/x.tar")
    assert obj.resolve() is obj and as_path(obj) is obj
    assert sorted([as_path("s3://b/2"), as_path("s3://b/10")]) == [Location("s3://b/10"), Location("s3://b/2")]
    assert isinstance(as_path("file:///tmp/a.json"), Path) and isinstance(as_path("a.json"), Path)
    assert pickle.loads(pickle.dumps(obj)) == obj and dumps_json([obj], indent=None) == '["s3://b/data/part.00.jsonl.gz"]'
    with pytest.raises(TypeError):
        os.fspath(obj)  # a place in a bucket has no local path
