"""Inputs and outputs in object storage, against a real S3 server (moto) on 127.0.0.1."""

from __future__ import annotations

import multiprocessing
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from curate.recaption.config import RecaptionConfig
from curate.core.errors import UserError
from curate.core.records import read_records
from packer.loader import PackedDataset
from packer.pack import pack
from packer.verify import verify_pack
from tests._fixtures.formats import Layouts

SAME = ("shards/*.tar", "lengths/*.parquet", "_records/*.arrow", "plan.parquet", "lengths.parquet")
#: The same outputs for the same data read from a bucket and from disk (the ``_records`` store names each input).
SAME_DATA = tuple(p for p in SAME if not p.startswith("_records"))


def _fs():
    import s3fs

    return s3fs.S3FileSystem(skip_instance_cache=True)


def _upload(bucket: str, layouts: Layouts) -> dict[str, str]:
    fs = _fs()
    fs.put_file(str(layouts.hf), f"{bucket}/in/hf.parquet")
    for tar in sorted(layouts.wds_dir.glob("*.tar")):
        fs.put_file(str(tar), f"{bucket}/in/wds/{tar.name}")
    return {"hf": f"{bucket}/in/hf.parquet", "wds": f"{bucket}/in/wds/{{00000..00001}}.tar"}


def _objects(url: str, patterns=SAME) -> dict[str, bytes]:
    fs = _fs()
    inner = url[len("s3://"):]
    return {p[len(inner) + 1:]: fs.cat_file(p) for pat in patterns for p in sorted(fs.glob(f"{inner}/{pat}"))}


def _local(folder: Path, patterns=SAME) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for pat in patterns for p in sorted(folder.glob(pat))}


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("CURATE_CACHE", str(tmp_path / "cache"))
    return tmp_path / "cache"


def test_records_read_from_a_bucket(bucket: str, layouts: Layouts) -> None:
    urls = _upload(bucket, layouts)
    for name, url in urls.items():
        recs = list(read_records([url]))
        assert [r["images"] for r in recs] == [[it["bytes"]] for it in layouts.items], name
    assert len(list(read_records([f"{bucket}/in"]))) == 2 * len(layouts.items)  # a prefix is a folder
    fs = _fs()
    fs.put(str(layouts.files.parent) + "/", f"{bucket}/files/", recursive=True)  # JSONL + images as objects
    recs = list(read_records([f"{bucket}/files/records.jsonl"]))
    assert all(r["images"][0].startswith(f"{bucket}/files/images/") for r in recs)


def test_pack_verify_and_load_in_a_bucket(bucket: str, layouts: Layouts, tiny_processor_dir: Path, cache: Path,
                                          tmp_path: Path) -> None:
    urls = _upload(bucket, layouts)
    kw = dict(ctx=1024, processor=str(tiny_processor_dir), seed=2, shard_size=5, sequences_per_shard=3,
              verify_fraction=0.0, plot=False)
    remote = pack([urls["hf"]], out=f"{bucket}/packed", **kw)
    local = pack([layouts.hf], out=tmp_path / "local", **kw)
    assert remote["records_packed"] == local["records_packed"] == len(layouts.items)
    objects = _objects(f"{bucket}/packed", SAME_DATA)
    assert objects and objects == _local(tmp_path / "local", SAME_DATA)
    assert _fs().exists(f"{bucket}/packed/stats.json")
    report = verify_pack(f"{bucket}/packed", processor=str(tiny_processor_dir))
    assert not report.problems and report.records == len(layouts.items)
    # nothing of the run stays on this machine: the staging folder and verify's copies are empty
    assert report.shards > 1 and not [p for p in cache.rglob("*") if p.is_file() and p.suffix in (".tar", ".json",
                                                                                                   ".parquet", ".arrow")
                                      and "remote" in p.parts]
    assert not list((cache / "reading").glob("*"))
    ids = [i for item in PackedDataset(f"{bucket}/packed/shards", str(tiny_processor_dir)) for i in item["ids"]]
    assert sorted(ids) == sorted(it["id"] for it in layouts.items)
    _fs().put(str(layouts.files.parent) + "/", f"{bucket}/files/", recursive=True)  # images as objects by path
    pack([f"{bucket}/files/records.jsonl"], out=f"{bucket}/packed-files", **kw)
    pack([layouts.files], out=tmp_path / "local-files", **kw)
    assert _objects(f"{bucket}/packed-files", ("shards/*.tar",)) == _local(tmp_path / "local-files", ("shards/*.tar",))


def test_missing_bucket_is_one_line_before_work(s3_server: str, tiny_processor_dir: Path, layouts: Layouts,
                                                cache: Path) -> None:
    with pytest.raises(UserError, match="s3://no-such-bucket-here"):
        pack([layouts.hf], out="s3://no-such-bucket-here/out", processor=str(tiny_processor_dir))
    with pytest.raises(UserError, match="s3://no-such-bucket-here/in.parquet"):
        list(read_records(["s3://no-such-bucket-here/in.parquet"]))


@pytest.mark.slow
def test_balance_in_a_bucket(bucket: str, layouts: Layouts, tiny_clip_spec: str, cache: Path, tmp_path: Path) -> None:
    from curate.balance.pipeline import balance

    urls = _upload(bucket, layouts)
    vocab = tmp_path / "vocab.txt"
    vocab.write_text("\n".join(sorted({w.lower() for it in layouts.items for w in it["caption"].split()})) + "\n")
    kw = dict(vocab=vocab, model=tiny_clip_spec, top_k=2, fraction=0.5, shard_size=5, seed=3)
    balance([urls["hf"]], out=f"{bucket}/bal", cache_dir=tmp_path / "c1", **kw)
    balance([layouts.hf], out=tmp_path / "bal", cache_dir=tmp_path / "c2", **kw)
    pats = ("embeddings/*", "tags.parquet", "selection.parquet")
    assert _objects(f"{bucket}/bal", pats) == _local(tmp_path / "bal", pats)
    table = pq.read_table(_fs().open(f"{bucket}/bal/records/hf.parquet"))
    assert table.num_rows == pq.read_table(tmp_path / "bal" / "records" / "hf.parquet").num_rows > 0


@pytest.mark.slow
def test_sigkill_while_packing_into_a_bucket_then_rerun(bucket: str, layouts: Layouts, tiny_processor_dir: Path,
                                                        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import webdataset as wds

    tar = tmp_path / "many.tar"
    with wds.TarWriter(str(tar)) as sink:
        for i in range(40):
            it = layouts.items[i % len(layouts.items)]
            sink.write({"__key__": f"k{i:04d}", it["name"].rsplit(".", 1)[-1]: it["bytes"], "txt": it["caption"]})
    fs = _fs()
    fs.put_file(str(tar), f"{bucket}/in/many.tar")
    kw = dict(processor=str(tiny_processor_dir), ctx=1024, shard_size=4, sequences_per_shard=4, seed=4,
              verify_fraction=0.0)
    monkeypatch.setenv("CURATE_CACHE", str(tmp_path / "machine-a"))
    # a forked child inherits the imported modules (no second start-up); SIGKILL it part-way
    proc = multiprocessing.get_context("fork").Process(
        target=pack, args=([f"{bucket}/in/many.tar"],), kwargs={**kw, "out": f"{bucket}/killed"}, daemon=True)
    proc.start()
    markers = f"{bucket[5:]}/killed/_shards/lengths"
    deadline = time.monotonic() + 180
    try:
        while time.monotonic() < deadline and proc.is_alive():
            fs.invalidate_cache()
            if fs.exists(markers) and sum(p.rsplit("/", 1)[-1][0].isdigit() for p in fs.ls(markers)) >= 2:
                os.kill(proc.pid, signal.SIGKILL)
                break
            time.sleep(0.05)
    finally:
        proc.join(timeout=60)
    assert proc.exitcode == -signal.SIGKILL, "the run ended before it could be killed"
    fs.invalidate_cache()
    assert not fs.exists(f"{bucket[5:]}/killed/stats.json")
    # another machine (an empty cache) finishes the run from the markers in the bucket
    for prefix, machine in (("killed", "machine-b"), ("reference", "machine-c")):  # own caches: no lengths reuse
        monkeypatch.setenv("CURATE_CACHE", str(tmp_path / machine))
        pack([f"{bucket}/in/many.tar"], out=f"{bucket}/{prefix}", **kw)
    # every object but history.json (the wall times of each invocation: docs/resume.md), stats.json included
    def everything(prefix: str) -> dict[str, bytes]:
        fs.invalidate_cache()
        inner = f"{bucket[5:]}/{prefix}"
        return {p[len(inner) + 1:]: fs.cat_file(p) for p in sorted(fs.find(inner)) if not p.endswith("/history.json")}

    killed, reference = everything("killed"), everything("reference")
    assert len(killed) > 10 and "stats.json" in killed and "_shards/lengths/000000.json" in killed
    assert sorted(killed) == sorted(reference)
    assert [k for k in killed if killed[k] != reference[k]] == []


@pytest.mark.slow
def test_ray_reads_and_writes_the_bucket(bucket: str, layouts: Layouts, tiny_processor_dir: Path, cache: Path,
                                         tmp_path: Path) -> None:
    pytest.importorskip("ray")
    from curate.executors import get_executor

    urls = _upload(bucket, layouts)
    kw = dict(ctx=1024, processor=str(tiny_processor_dir), seed=2, shard_size=4, sequences_per_shard=2,
              verify_fraction=0.0, plot=False)
    pack([urls["wds"]], out=f"{bucket}/ray", executor=get_executor("ray", workers=1), **kw)
    pack([layouts.wds], out=tmp_path / "local", **kw)
    objects = _objects(f"{bucket}/ray", SAME_DATA)
    assert objects and objects == _local(tmp_path / "local", SAME_DATA)


def test_unreachable_endpoint_is_one_line_before_work(s3_server: str, tiny_processor_dir: Path, layouts: Layouts,
                                                      tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys) -> None:
    import fsspec.config
    import s3fs

    from curate.cli import main

    closed = "http://127.0.0.1:9"
    monkeypatch.setenv("AWS_ENDPOINT_URL", closed)
    monkeypatch.setenv("FSSPEC_S3_ENDPOINT_URL", closed)
    monkeypatch.setenv("AWS_MAX_ATTEMPTS", "1")
    monkeypatch.setitem(fsspec.config.conf, "s3", {**fsspec.config.conf.get("s3", {}), "endpoint_url": closed})
    s3fs.S3FileSystem.clear_instance_cache()
    try:
        for args, url in ((["s3://some-bucket/in.parquet", "--out", str(tmp_path / "o")], "s3://some-bucket/in.parquet"),
                          ([str(layouts.hf), "--out", "s3://some-bucket/out"], "s3://some-bucket/out")):
            with pytest.raises(SystemExit) as exc:
                main(["pack", *args, "--processor", str(tiny_processor_dir)])
            err = capsys.readouterr().err.strip().splitlines()
            assert exc.value.code == 2 and len(err) == 1 and url in err[0] and "AWS_ENDPOINT_URL" in err[0], err
    finally:
        s3fs.S3FileSystem.clear_instance_cache()
    assert not (tmp_path / "o" / "_shards").exists()  # refused before any work


def test_recaption_from_and_into_a_bucket(bucket: str, layouts: Layouts, cache: Path, tmp_path: Path) -> None:
    import json

    from curate.recaption.stage import recaption

    urls = _upload(bucket, layouts)
    answers = tmp_path / "answers.jsonl"
    answers.write_text("".join(json.dumps({"id": f"{it['id']}#en", "response": f"A photograph of item {i} standing on "
                                           "a plain wooden table in soft daylight."}) + "\n"
                               for i, it in enumerate(layouts.items)))
    stats = recaption([urls["hf"]], RecaptionConfig(out=f"{bucket}/recap", backend={"rollouts": str(answers)},
                                                    langs="en"))
    assert stats["records_out"] == len(layouts.items) and stats["outputs"]["records"] == "records.parquet"
    by_id = {it["id"]: it["bytes"] for it in layouts.items}
    recs = list(read_records([f"{bucket}/recap/records.parquet"]))
    assert len(recs) == len(layouts.items) and all(r["images"] == [by_id[r["recaption_of"]]] for r in recs)


def test_a_prefix_skips_metadata_tables_and_curate_outputs(bucket: str, layouts: Layouts) -> None:
    """A prefix holding img2dataset's output (00000.tar + 00000.parquet) and a curate output (with _shards/)
    reads the tar's records once, as a local folder does."""
    fs = _fs()
    tar = sorted(layouts.wds_dir.glob("*.tar"))[0]
    fs.put_file(str(tar), f"{bucket}/i2d/{tar.name}")
    fs.put_file(str(layouts.hf), f"{bucket}/i2d/{tar.stem}.parquet")  # rows with images: read twice if not skipped
    fs.pipe_file(f"{bucket}/i2d/{tar.stem}_stats.json", b'{"count": 2, "successes": 2}')  # img2dataset's too
    fs.put_file(str(layouts.hf), f"{bucket}/i2d/packed/plan.parquet")
    fs.pipe_file(f"{bucket}/i2d/packed/_shards/lengths/000000.json", b"{}")
    from_tar = [r["id"] for r in read_records([f"{bucket}/i2d/{tar.name}"])]
    assert from_tar and [r["id"] for r in read_records([f"{bucket}/i2d"])] == from_tar
    assert len(list(read_records([f"{bucket}/i2d/packed/plan.parquet"]))) == len(layouts.items)  # named: read
