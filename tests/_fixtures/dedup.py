"""Session fixture: a small world of real photos with planted copies for ``curate dedup`` (curate.fixtures.dupes).

``records.jsonl``: 10 photos (source ``web``), one copy of each by every kind of edit in turn (sources
``copies-<edit>``); ``extra.jsonl``: two neighbouring crops of one photo (distinct, source ``crops``), a record
without an image and one whose image is missing; ``bytes.parquet``: a row carrying a photo's bytes as a
``datasets`` image struct (source ``obelics``) and one carrying a distinct crop. Read-only.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import pytest


@dataclass(frozen=True)
class DedupWorld:
    """The world's files and what was planted: copy id -> original id, and which ids are distinct."""

    root: Path
    inputs: tuple[Path, ...]
    groups: dict[str, str]  #: every id of an image -> the id of its group (the original's)
    edits: dict[str, str]  #: copy id -> its edit
    no_image: str
    missing: str


#: Outputs of ``curate dedup`` that must be the same bytes across executors and interrupted runs.
SAME_BYTES = ("rejects.parquet", "records/*", "hashes/*.parquet", "near_pairs/*.parquet", "digests/*.parquet",
              "_shards/*/*.rejects.parquet")


def same_files(a: Path, b: Path, patterns: tuple[str, ...] = SAME_BYTES) -> int:
    """Every file matching ``patterns`` exists in both folders with the same bytes; returns how many were compared."""
    n = 0
    for pattern in patterns:
        names = sorted(p.relative_to(a) for p in a.glob(pattern))
        assert names == sorted(p.relative_to(b) for p in b.glob(pattern)), pattern
        for rel in names:
            assert (a / rel).read_bytes() == (b / rel).read_bytes(), rel
            n += 1
    return n


@pytest.fixture(scope="session")
def dedup_world(tmp_path_factory: pytest.TempPathFactory) -> DedupWorld:
    """See the module docstring."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from curate.fixtures.dupes import distinct_images, make_world

    root = tmp_path_factory.mktemp("dedup-world")
    images = distinct_images()
    records, originals, planted = make_world(root, images=images[:10], copies=1)
    groups = {o: o for o in originals}
    groups.update({p.id: p.original for p in planted})
    crops = [(name, data) for name, data in images if name.startswith("hubble_deep_field@")][:2]
    rows = []
    for k, (name, data) in enumerate(crops):
        path = root / "images" / f"crop-{k}.jpg"
        path.write_bytes(data)
        rows.append({"id": f"crop-{k}", "source": "crops", "image": f"images/crop-{k}.jpg", "caption": name})
        groups[f"crop-{k}"] = f"crop-{k}"
    rows.append({"id": "no-image", "source": "web", "messages": [{"role": "user", "content": "Say hi."},
                                                                 {"role": "assistant", "content": "Hi."}]})
    rows.append({"id": "missing", "source": "web", "image": "images/nope.jpg", "caption": "gone"})
    extra = root / "extra.jsonl"
    extra.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    third = (root / "images" / "web-00003.jpg").read_bytes()
    other = images[-1][1]
    table = pa.table({"id": ["obelics-0", "obelics-1"], "source": ["obelics", "obelics"],
                      "image": [{"bytes": third, "path": None}, {"bytes": other, "path": None}],
                      "caption": ["a photo", "another photo"]})
    pq.write_table(table, root / "bytes.parquet")
    groups["obelics-0"] = "web-00003"
    groups["obelics-1"] = "obelics-1"
    return DedupWorld(root, (records, extra, root / "bytes.parquet"), groups, {p.id: p.edit for p in planted},
                      "no-image", "missing")
