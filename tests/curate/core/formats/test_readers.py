"""Readers of image bytes (datasets structs, img2dataset columns, WebDataset tars) and their bad input."""

from __future__ import annotations

import io
import json
import tarfile
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import webdataset as wds

from curate.core.errors import UserError
from curate.core.formats.containers import expand_braces
from curate.core.records import BadRecord, read_records
from packer.pack import pack
from tests._fixtures.formats import IMAGE_STRUCT, Layouts, write_tgz


def _reasons(path) -> dict[str, str]:
    return {r.id: r.reason for r in read_records([path]) if isinstance(r, BadRecord)}


def test_expand_braces() -> None:
    assert expand_braces("s/{00008..00011}.tar") == [f"s/{i:05d}.tar" for i in range(8, 12)]
    assert expand_braces("{a,b}/{1..2}.tar") == ["a/1.tar", "a/2.tar", "b/1.tar", "b/2.tar"]
    assert expand_braces("plain.tar") == ["plain.tar"]


def test_every_layout_reads_the_same_records(layouts: Layouts) -> None:
    by_id = {it["id"]: it for it in layouts.items}
    for name in ("hf", "cauldron", "img2dataset", "wds"):
        recs = list(read_records([getattr(layouts, name)]))
        assert [r["id"] for r in recs] == [it["id"] for it in layouts.items], name
        for r in recs:
            it = by_id[r["id"]]
            assert r["images"] == [it["bytes"]] and r["source"] == it["source"], name
            assert r["messages"][-1] == {"role": "assistant", "content": it["caption"]}, name
            assert r["messages"][0]["content"].count("<image>") == 1
    i2d = next(iter(read_records([layouts.img2dataset])))
    assert i2d["url"].startswith("https://") and "jpg" not in i2d  # extra columns kept, bytes not duplicated
    tar = next(iter(read_records([layouts.wds])))
    assert tar["url"].startswith("https://")  # the json metadata is kept


def test_bad_parquet_images(tmp_path: Path, layouts: Layouts) -> None:
    good = layouts.items[0]["bytes"]
    structs = [{"bytes": good, "path": "a.jpg"}, {"bytes": None, "path": None}, {"bytes": b"", "path": None},
               {"bytes": b"definitely not an image", "path": "x.jpg"}]
    table = pa.table({"id": [f"r{i}" for i in range(4)], "image": pa.array(structs, type=IMAGE_STRUCT),
                      "caption": ["a cat"] * 4})
    pq.write_table(table, tmp_path / "hf.parquet")
    assert _reasons(tmp_path / "hf.parquet") == {"r1": "missing_image", "r2": "empty_file"}  # empty: as an empty file
    i2d = pa.table({"key": ["k0", "k1"], "caption": ["x", "y"], "jpg": pa.array([good, None], type=pa.binary())})
    pq.write_table(i2d, tmp_path / "i2d.parquet")
    assert _reasons(tmp_path / "i2d.parquet") == {"k1": "missing_image"}
    odd = pa.table({"id": ["s0"], "caption": ["x"], "png": ["not bytes"]})
    pq.write_table(odd, tmp_path / "odd.parquet")
    (bad,) = [r for r in read_records([tmp_path / "odd.parquet"])]
    assert bad.reason == "invalid_image_column" and "'png'" in bad.detail
    stray = pa.table({"id": ["t0"], "caption": ["x"], "picture": pa.array([good], type=pa.binary())})
    pq.write_table(stray, tmp_path / "stray.parquet")  # never silently caption-only
    (bad,) = [r for r in read_records([tmp_path / "stray.parquet"])]
    assert bad.reason == "invalid_image_column" and "'picture'" in bad.detail


def _tar(path: Path, groups: list[dict]) -> None:
    with wds.TarWriter(str(path)) as sink:
        for g in groups:
            sink.write(g)


def test_bad_tars_and_accounting(tmp_path: Path, layouts: Layouts, tiny_processor_dir: Path,
                                 monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CURATE_CACHE", str(tmp_path / "cache"))
    good = layouts.items[0]["bytes"]
    folder = tmp_path / "tars"
    folder.mkdir()
    _tar(folder / "a.tar", [
        {"__key__": "ok1", "jpg": good, "txt": "a cat"},
        {"__key__": "noimg", "txt": "no image here"},
        {"__key__": "notext", "jpg": good, "json": {"url": "u"}},
        {"__key__": "chat", "png": good, "json": {"conversations": [{"from": "human", "value": "<image>\nWhat?"},
                                                                    {"from": "gpt", "value": "A cat."}]}},
        {"__key__": "badbytes", "jpg": b"\x00\x01 not a jpeg", "txt": "broken"},
    ])
    _tar(tmp_path / "full.tar", [{"__key__": f"t{i}", "jpg": good, "txt": f"cap {i}"} for i in range(3)])
    data = (tmp_path / "full.tar").read_bytes()
    with tarfile.open(tmp_path / "full.tar") as tar:
        last = [m for m in tar.getmembers() if m.name.startswith("t2.")][0]
    (folder / "b.tar").write_bytes(data[: last.offset_data + last.size // 2])  # cut inside the last group
    reasons = _reasons(folder)
    assert reasons == {"noimg": "incomplete_group", "notext": "incomplete_group", "t2": "truncated_tar"}
    stats = pack([folder], out=tmp_path / "out", ctx=1024, processor=str(tiny_processor_dir), seed=0,
                 shard_size=3, sequences_per_shard=2, verify_fraction=0.0, plot=False)
    assert stats["records_in"] == 8 and stats["records_packed"] == 4  # ok1, chat, t0, t1
    dropped, errored = stats["dropped"], stats["errored"]
    n_drop = sum(dropped.values()) if isinstance(dropped, dict) else dropped
    n_err = sum(errored.values()) if isinstance(errored, dict) else errored
    assert stats["records_in"] == stats["records_packed"] + n_drop + n_err
    rejects = pq.read_table(tmp_path / "out" / "rejects.parquet").to_pylist()
    assert {r["id"]: r["reason"] for r in rejects} == {**reasons, "badbytes": "not_an_image"}
    errors = stats["errored"]
    flat = json.dumps(errors)
    assert "not_an_image" in flat and "truncated_tar" in flat and "incomplete_group" in flat


def test_unreadable_inputs_are_one_line_errors(tmp_path: Path) -> None:
    with pytest.raises(UserError, match="no such file"):
        list(read_records([str(tmp_path / "shards/{0..3}.tar")]))
    (tmp_path / "x.txt").write_text("hello")
    with pytest.raises(UserError, match="unsupported input type"):
        list(read_records([tmp_path / "x.txt"]))


def test_parquet_written_by_the_datasets_library(tmp_path: Path, layouts: Layouts) -> None:
    datasets = pytest.importorskip("datasets")
    assert datasets.Image().pa_type == IMAGE_STRUCT  # the fixtures' layout is the library's own
    items = layouts.items[:3]
    features = datasets.Features({"id": datasets.Value("string"), "image": datasets.Image(),
                                  "conversations": [{"from": datasets.Value("string"), "value": datasets.Value("string")}]})
    ds = datasets.Dataset.from_dict({
        "id": [it["id"] for it in items], "image": [{"bytes": it["bytes"], "path": it["name"]} for it in items],
        "conversations": [[{"from": "human", "value": "<image>\nWhat is shown?"}, {"from": "gpt", "value": it["caption"]}]
                          for it in items]}, features=features)
    ds.to_parquet(str(tmp_path / "train.parquet"))
    recs = list(read_records([tmp_path / "train.parquet"]))
    assert [r["images"] for r in recs] == [[it["bytes"]] for it in items]
    assert [r["messages"][1]["content"] for r in recs] == [it["caption"] for it in items]


def test_text_columns_of_image_text_sets_are_captions(tmp_path: Path, layouts: Layouts) -> None:
    """A Hugging Face text-to-image Parquet (image struct + ``text``), a LAION-style img2dataset Parquet
    (``key``, ``TEXT``, ``jpg``) and a tar whose JSON holds ``text`` all read as caption records."""
    items = layouts.items[:2]
    hf = pa.table({"image": pa.array([{"bytes": it["bytes"], "path": it["name"]} for it in items], IMAGE_STRUCT),
                   "text": [it["caption"] for it in items]})
    pq.write_table(hf, tmp_path / "hf.parquet")
    laion = pa.table({"key": ["000001", "000002"], "TEXT": [it["caption"] for it in items],
                      "jpg": pa.array([it["bytes"] for it in items], pa.binary())})
    pq.write_table(laion, tmp_path / "laion.parquet")
    _tar(tmp_path / "shard.tar", [{"__key__": f"k{i}", "jpg": it["bytes"], "json": {"text": it["caption"], "url": "u"}}
                                  for i, it in enumerate(items)])
    for name, ids in (("hf.parquet", ["hf:0", "hf:1"]), ("laion.parquet", ["000001", "000002"]),
                      ("shard.tar", ["k0", "k1"])):
        recs = list(read_records([tmp_path / name]))
        assert not [r for r in recs if isinstance(r, BadRecord)], name
        assert [r["id"] for r in recs] == ids
        assert [r["messages"][1]["content"] for r in recs] == [it["caption"] for it in items]
        assert [r["images"][0] for r in recs] == [it["bytes"] for it in items] or name == "shard.tar"
        assert all(r["messages"][0]["content"].startswith("<image>\n") for r in recs)


def test_every_container_is_in_the_one_table(tmp_path: Path) -> None:
    """Suffixes, the split cache and writing back all come from the registry; a .tgz comes back as Parquet."""
    from curate.core.filters import write_kept
    from curate.core.formats.containers import ACCEPTED, CONTAINERS, SUFFIXES
    from curate.core.records import input_format
    from curate.core.shards import SCANNED

    assert set(SUFFIXES.values()) == set(CONTAINERS) and all(s in ACCEPTED for s in SUFFIXES)
    assert SCANNED == {name for name, c in CONTAINERS.items() if c.cached_split}
    assert input_format(tmp_path / "a.TAR.GZ") == "tgz" and input_format(tmp_path / "b.ndjson") == "jsonl"
    tgz = write_tgz(tmp_path / "shard.tgz", 3)
    selection = pa.table({"id": ["k0", "k2"], "copies": pa.array([1, 2], pa.int32())})
    written = write_kept(tmp_path / "records", inputs=[tgz], selection=selection, workers=1)
    assert written["files"] == {"shard.parquet": 3} and written["records"] == 3
    rows = pq.read_table(tmp_path / "records" / "shard.parquet").to_pylist()
    assert [r["id"] for r in rows] == ["k0", "k2", "k2#2"] and rows[0]["images"][0]["bytes"] == b"\xff\xd8\xff image 0"
