"""Parquet records that hold images carry the ``datasets`` features: ``load_dataset("parquet")`` gives PIL images."""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from PIL import Image

from curate.core.threads import environ
from curate.core.formats.containers import CONTAINERS
from curate.core.formats.writeback import IMAGE_STRUCT, with_hf_features, write_records


def _png(size: tuple[int, int], color: str) -> bytes:
    buf = io.BytesIO()
    Image.new("RGB", size, color).save(buf, format="PNG")
    return buf.getvalue()


def _load(path: Path, cache: Path) -> Any:
    with environ({"HF_DATASETS_OFFLINE": "1", "HF_HUB_OFFLINE": "1"}):
        import datasets

        return datasets.load_dataset("parquet", data_files=str(path), split="train", cache_dir=str(cache))


def test_records_with_image_bytes_load_as_images(tmp_path: Path) -> None:
    rows = [{"id": "a", "images": [_png((32, 24), "red"), _png((8, 8), "blue")], "score": 0.5, "n": 3,
             "messages": [{"role": "user", "content": "<image><image> two"}]},
            {"id": "b", "images": [_png((16, 16), "green")], "score": 1.0, "n": 1,
             "messages": [{"role": "user", "content": "<image> one"}, {"role": "assistant", "content": "ok"}]}]
    name = write_records(tmp_path, "records", rows)
    assert name == "records.parquet"
    meta = json.loads(pq.read_schema(tmp_path / name).metadata[b"huggingface"])
    assert meta["info"]["features"]["images"] == {"feature": {"_type": "Image"}, "_type": "List"}
    assert meta["info"]["features"]["score"] == {"dtype": "float64", "_type": "Value"}

    ds = _load(tmp_path / name, tmp_path / "hf-cache")
    first = ds[0]
    assert [type(im).__name__ for im in first["images"]] == ["PngImageFile", "PngImageFile"]
    assert [im.size for im in first["images"]] == [(32, 24), (8, 8)]
    assert first["images"][0].convert("RGB").getpixel((0, 0)) == (255, 0, 0)
    assert ds[1]["messages"] == rows[1]["messages"] and ds[1]["n"] == 1 and ds[1]["id"] == "b"


def test_parquet_written_back_gets_features_for_its_new_columns(tmp_path: Path) -> None:
    """A Parquet input with image structs (no id column) written back: ``id`` added, the features made again."""
    src = tmp_path / "in.parquet"
    table = pa.table({"image": pa.array([{"bytes": _png((10, 20), "white"), "path": None}], type=IMAGE_STRUCT),
                      "caption": ["a white box"]})
    pq.write_table(table, src)
    assert pq.read_schema(src).metadata is None  # no features in the input
    dest = tmp_path / "out.parquet"
    CONTAINERS["parquet"].write_back(dest, [{"image": {"bytes": _png((10, 20), "white"), "path": None},
                                 "caption": "a white box", "id": "in.parquet:0"}], src)
    features = json.loads(pq.read_schema(dest).metadata[b"huggingface"])["info"]["features"]
    assert features == {"image": {"_type": "Image"}, "caption": {"dtype": "string", "_type": "Value"},
                        "id": {"dtype": "string", "_type": "Value"}}
    row = _load(dest, tmp_path / "hf-cache")[0]
    assert row["image"].size == (10, 20) and row["id"] == "in.parquet:0"


@pytest.mark.parametrize("table, has", [
    (pa.table({"id": ["a"], "caption": ["x"]}), False),  # no images: left alone
    (pa.table({"image": pa.array([None], type=IMAGE_STRUCT), "m": pa.array([{1: "a"}], pa.map_(pa.int64(),
                                                                                               pa.string()))}), False),
])
def test_tables_without_images_or_with_unmapped_columns_get_no_features(table: pa.Table, has: bool) -> None:
    assert (b"huggingface" in (with_hf_features(table).schema.metadata or {})) is has
