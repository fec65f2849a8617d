"""The source of records without one: the input file's name less its shard number, else its folder's; the ids of
rows without one: the file's stem, led by that folder when the folder names the source."""

from __future__ import annotations

import io
import json
import tarfile
from pathlib import Path

import pytest
from PIL import Image

from curate.core.formats.rows import default_id_prefix, default_source
from curate.core.records import BadRecord, read_records


@pytest.mark.parametrize("path, source", [
    ("/d/coyo.jsonl", "coyo"),
    ("/d/cc12m.parquet", "cc12m"),
    ("/d/coco2017.parquet", "coco2017"),  # digits glued to a name are part of it
    ("/d/x.v2.jsonl", "x.v2"),
    ("/d/shards/laion-000123.tar", "laion"),
    ("/d/laion_7.tar", "laion"),
    ("/d/laion400m/00000.tar", "laion400m"),  # img2dataset
    ("/d/the_cauldron/vqav2/train-00000-of-00002.parquet", "vqav2"),  # Hugging Face
    ("/d/coyo/data/train-00000-of-00128.parquet", "coyo"),
    ("/data/train/0000.parquet", "train"),  # only generic folders: the nearest
    ("/a/b/c/data/train/shards/0000.tar", "shards"),  # looked for three levels up, no further
    ("/00001.tar", "00001"),
    ("s3://bucket/laion/00001.tar", "laion"),
    ("s3://bucket/00001.tar", "bucket"),
    ("gs://bucket/data/train-00001-of-00002.parquet", "bucket"),
])
def test_default_source(path: str, source: str) -> None:
    assert default_source(path) == source


@pytest.mark.parametrize("path, prefix", [
    ("/d/coyo.jsonl", "coyo"),
    ("/d/shards/laion-000123.tar", "laion-000123"),  # the file names its dataset: the stem alone
    ("/d/laion400m/00000.tar", "laion400m/00000"),
    ("/d/the_cauldron/vqav2/train-00000-of-00002.parquet", "vqav2/train-00000-of-00002"),
    ("/d/coyo/data/train-00000-of-00128.parquet", "coyo/train-00000-of-00128"),
    ("/a/b/c/data/train/shards/0000.tar", "0000"),  # no folder names it: the stem
    ("s3://bucket/laion/00001.tar", "laion/00001"),
])
def test_default_id_prefix(path: str, prefix: str) -> None:
    assert default_id_prefix(path) == prefix


def test_same_file_names_in_two_datasets_give_distinct_ids(tmp_path: Path) -> None:
    """the_cauldron's subsets each hold a ``train-00000-of-0000N.parquet`` of rows without ids."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    for subset in ("vqav2", "ocrvqa"):
        (tmp_path / subset).mkdir()
        pq.write_table(pa.table({"caption": [f"{subset} {i}" for i in range(3)],
                                 "image": [f"{i}.jpg" for i in range(3)]}),
                       tmp_path / subset / "train-00000-of-00001.parquet")
    records = list(read_records([tmp_path]))
    assert [r["id"] for r in records] == [f"{s}/train-00000-of-00001:{i}" for s in ("ocrvqa", "vqav2") for i in range(3)]
    assert [r["source"] for r in records] == ["ocrvqa"] * 3 + ["vqav2"] * 3


def test_a_relative_path_is_named_by_its_real_folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "redcaps").mkdir()
    monkeypatch.chdir(tmp_path / "redcaps")
    assert default_source("00003.jsonl") == "redcaps"


def _tar(path: Path, keys: list[str]) -> None:
    png = io.BytesIO()
    Image.new("RGB", (8, 8), "red").save(png, "PNG")
    with tarfile.open(path, "w") as tar:
        for key in keys:
            for ext, data in (("png", png.getvalue()), ("txt", f"caption {key}".encode()),
                              ("json", json.dumps({"url": "u"}).encode())):
                info = tarfile.TarInfo(f"{key}.{ext}")
                info.size = len(data)
                tar.addfile(info, io.BytesIO(data))


def test_img2dataset_shards_are_one_source_and_a_row_source_wins(tmp_path: Path) -> None:
    folder = tmp_path / "cc3m_wds"
    folder.mkdir()
    for shard in range(3):
        _tar(folder / f"{shard:05d}.tar", [f"{shard:05d}{i:04d}" for i in range(2)])
    (folder / "extra.jsonl").write_text(
        json.dumps({"id": "own", "source": "mine", "caption": "c"}) + "\n"
        + json.dumps({"id": "bad", "url": "no text"}) + "\n" + json.dumps({"id": "plain", "caption": "c"}) + "\n")
    records = list(read_records([folder]))
    sources = {r.id if isinstance(r, BadRecord) else r["id"]: r.source if isinstance(r, BadRecord) else r["source"]
               for r in records}
    assert {sources[f"{s:05d}{i:04d}"] for s in range(3) for i in range(2)} == {"cc3m_wds"}
    assert sources["own"] == "mine" and sources["plain"] == "extra"
    assert sources["bad"] == "extra" and any(isinstance(r, BadRecord) for r in records)
