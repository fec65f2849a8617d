"""Every input layout through pack, verify and PackedDataset: the same shards as the same data as files."""

from __future__ import annotations

from pathlib import Path

import pytest

from packer.loader import PackedDataset
from packer.pack import pack
from packer.verify import verify_pack
from tests._fixtures.formats import Layouts

LAYOUTS = ("hf", "cauldron", "img2dataset", "wds")


@pytest.fixture(scope="module")
def packed_layouts(layouts: Layouts, tiny_processor_dir: Path, tmp_path_factory: pytest.TempPathFactory,
                   ) -> dict[str, tuple[Path, dict]]:
    root = tmp_path_factory.mktemp("packed-layouts")
    done = {}
    for name in ("files", *LAYOUTS):
        out = root / name
        stats = pack([getattr(layouts, name)], out=out, ctx=1024, processor=str(tiny_processor_dir), seed=5,
                     shard_size=5, sequences_per_shard=3, verify_fraction=0.5, plot=False)
        done[name] = (out, stats)
    return done


@pytest.mark.parametrize("name", LAYOUTS)
def test_layout_packs_to_the_same_shards_as_files(packed_layouts: dict, layouts: Layouts, name: str) -> None:
    base, base_stats = packed_layouts["files"]
    out, stats = packed_layouts[name]
    assert stats["records_in"] == len(layouts.items) and stats["records_packed"] == base_stats["records_packed"] == len(layouts.items)
    tars = sorted(p.name for p in (base / "shards").glob("*.tar"))
    assert tars and tars == sorted(p.name for p in (out / "shards").glob("*.tar"))
    for tar in tars:
        assert (out / "shards" / tar).read_bytes() == (base / "shards" / tar).read_bytes(), tar


@pytest.mark.parametrize("name", ("files", "wds"))
def test_layout_verifies_and_loads(packed_layouts: dict, layouts: Layouts, tiny_processor_dir: Path, name: str) -> None:
    out, _ = packed_layouts[name]
    report = verify_pack(out, processor=str(tiny_processor_dir))
    assert not report.problems, report.problems
    assert report.records == len(layouts.items)
    by_id = {it["id"]: it for it in layouts.items}
    seen = []
    for item in PackedDataset(out / "shards", str(tiny_processor_dir)):
        seen.extend(item["ids"])
    assert sorted(seen) == sorted(by_id)


@pytest.mark.parametrize("name", LAYOUTS)
def test_tar_members_are_referenced_and_parquet_cells_copied(packed_layouts: dict, layouts: Layouts,
                                                            name: str) -> None:
    """Pack's store keeps where a tar member is (``[offset, size]``; the writer seeks to it again) and
    copies a Parquet cell's bytes (a row group can only be read whole, so reading cells again from the
    input would read a row group per sample of each output shard)."""
    import pyarrow as pa

    out, _ = packed_layouts[name]
    rows = [r for p in sorted((out / "_records").glob("*.arrow"))
            for r in pa.ipc.open_file(pa.memory_map(str(p))).read_all().to_pylist()]
    assert len(rows) == len(layouts.items)
    by_id = {it["id"]: it["bytes"] for it in layouts.items}
    for r in rows:
        if name == "wds":
            span = r["image_spans"][0]
            assert r["image_bytes"] == [None] and len(span) == 2, r["id"]
            with open(r["images"][0], "rb") as fh:
                fh.seek(span[0])
                assert fh.read(span[1]) == by_id[r["id"]]
        else:
            assert r["image_bytes"] == [by_id[r["id"]]] and r["image_spans"] == [[]] and r["images"] == [""], r["id"]
