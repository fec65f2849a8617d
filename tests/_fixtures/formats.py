"""Session fixtures: the same small image-text set written in every input layout curate reads.

* ``files``: images as files + ``records.jsonl`` (the baseline);
* ``hf``: Parquet as the ``datasets`` library lays out an ``Image`` feature (struct ``{bytes, path}``)
  with the LLaVA ``conversations`` around it and an extra column;
* ``cauldron``: Parquet with ``images`` (list of image structs) and ``texts`` ({user, assistant} turns);
* ``img2dataset``: Parquet with ``key``, ``caption``, ``url``, ``status`` and raw bytes in ``jpg``;
* ``wds``: two tars written by ``webdataset.TarWriter`` (``KEY.jpg`` + ``KEY.txt`` + ``KEY.json``).

All layouts hold the same ids, sources, captions and image bytes, so every stage must give the same
outputs for each of them as for the files.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

#: The Image feature of the ``datasets`` library, as it appears in a Parquet schema.
IMAGE_STRUCT = pa.struct([("bytes", pa.binary()), ("path", pa.string())])
N_RECORDS = 12


@dataclass(frozen=True)
class Layouts:
    """Paths of each layout and what every record holds."""

    root: Path
    files: Path
    hf: Path
    cauldron: Path
    img2dataset: Path
    wds: str  # a brace pattern over two tars
    wds_dir: Path
    items: list[dict]  # id, source, caption, name, bytes


def _items(sample_data: Path) -> list[dict]:
    names = sorted(p.name for p in (sample_data / "images").iterdir()
                   if p.suffix in (".jpg", ".png") and "x" not in p.stem.split("_")[-1])[:6]
    items = []
    for i in range(N_RECORDS):
        name = names[i % len(names)]
        items.append({"id": f"rec-{i:03d}", "source": "alpha" if i % 3 else "beta",
                      "caption": f"Picture number {i} shows {name.split('.')[0]} in some detail.",
                      "name": name, "bytes": (sample_data / "images" / name).read_bytes()})
    return items


def write_layouts(root: Path, items: list[dict]) -> Layouts:
    """Write ``items`` in every layout under ``root``."""
    root.mkdir(parents=True, exist_ok=True)
    img_dir = root / "files" / "images"
    img_dir.mkdir(parents=True)
    with open(root / "files" / "records.jsonl", "w", encoding="utf-8") as fh:
        for it in items:
            (img_dir / f"{it['id']}-{it['name']}").write_bytes(it["bytes"])
            fh.write(json.dumps({"id": it["id"], "source": it["source"], "images": [f"images/{it['id']}-{it['name']}"],
                                 "conversations": [{"from": "human", "value": "<image>\nDescribe the image."},
                                                   {"from": "gpt", "value": it["caption"]}]}) + "\n")
    hf = pa.table({
        "id": [it["id"] for it in items], "source": [it["source"] for it in items],
        "image": pa.array([{"bytes": it["bytes"], "path": it["name"]} for it in items], type=IMAGE_STRUCT),
        "conversations": [[{"from": "human", "value": "<image>\nDescribe the image."},
                           {"from": "gpt", "value": it["caption"]}] for it in items],
        "data_source": [it["source"] for it in items],
    })
    pq.write_table(hf, root / "hf.parquet", row_group_size=5)
    cauldron = pa.table({
        "id": [it["id"] for it in items], "source": [it["source"] for it in items],
        "images": pa.array([[{"bytes": it["bytes"], "path": None}] for it in items], type=pa.list_(IMAGE_STRUCT)),
        "texts": [[{"user": "<image>\nDescribe the image.", "assistant": it["caption"], "source": it["source"]}]
                  for it in items],
    })
    pq.write_table(cauldron, root / "cauldron.parquet")
    i2d = pa.table({
        "key": [it["id"] for it in items], "source": [it["source"] for it in items],
        "caption": [it["caption"] for it in items], "url": [f"https://example.com/{it['name']}" for it in items],
        "status": ["success"] * len(items), "jpg": pa.array([it["bytes"] for it in items], type=pa.binary()),
    })
    pq.write_table(i2d, root / "img2dataset.parquet")
    import webdataset as wds

    wds_dir = root / "wds"
    wds_dir.mkdir()
    half = (len(items) + 1) // 2
    for t, chunk in enumerate((items[:half], items[half:])):
        with wds.TarWriter(str(wds_dir / f"{t:05d}.tar")) as sink:
            for it in chunk:
                ext = it["name"].rsplit(".", 1)[-1]
                sink.write({"__key__": it["id"], ext: it["bytes"], "txt": it["caption"],
                            "json": {"source": it["source"], "url": f"https://example.com/{it['name']}"}})
    return Layouts(root, root / "files" / "records.jsonl", root / "hf.parquet", root / "cauldron.parquet",
                   root / "img2dataset.parquet", str(wds_dir / "{00000..00001}.tar"), wds_dir, items)


@pytest.fixture(scope="session")
def layouts(sample_data: Path, tmp_path_factory: pytest.TempPathFactory) -> Layouts:
    """The same records in every layout (read-only)."""
    return write_layouts(tmp_path_factory.mktemp("layouts"), _items(sample_data))


def write_tgz(path: Path, n: int) -> Path:
    """A gzipped WebDataset tar of ``n`` pairs ``k{i}.jpg`` (bytes ``\\xff\\xd8\\xff image {i}``) and ``k{i}.txt``
    (``caption {i}``)."""
    import io
    import tarfile

    with tarfile.open(path, "w:gz") as tar:
        for i in range(n):
            for ext, data in (("jpg", b"\xff\xd8\xff image %d" % i), ("txt", b"caption %d" % i)):
                info = tarfile.TarInfo(f"k{i}.{ext}")
                info.size = len(data)
                tar.addfile(info, io.BytesIO(data))
    return path
