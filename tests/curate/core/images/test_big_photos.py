"""Photos past Pillow's one-block size (12 MP and 50 MP: several blocks of memory) through dedup, embed, pack
(and verify) and recaption: every fast path has its fallback, and no stage errors a record for its size."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from curate.core.images import decode


def _jsonl(photos: dict[str, Path], folder: Path, names: list[str]) -> Path:
    path = folder / "photos.jsonl"
    path.write_text("".join(json.dumps({"id": n, "image": str(photos[n]), "caption": "A big photo."}) + "\n"
                            for n in names))
    return path


def _rejects(out: Path) -> dict[str, tuple[str, str]]:
    return {r["id"]: (r["kind"], r["reason"]) for r in pq.read_table(out / "rejects.parquet").to_pylist()}


def test_the_photos_are_past_the_boundary(big_photos: dict[str, Path]) -> None:
    sizes = {name: decode(path).size for name, path in big_photos.items()}
    assert sizes["phone-12mp.png"] == (4032, 3024) and sizes["camera-50mp.jpg"] == (8660, 5774)
    assert all(w * h * 4 > 16 * 2**20 for name, (w, h) in sizes.items() if "half" not in name)


@pytest.mark.slow
def test_dedup_hashes_big_photos(big_photos: dict[str, Path], tmp_path: Path) -> None:
    from curate.dedup.stage import dedup

    import pyarrow as pa

    names = sorted(big_photos)
    src = _jsonl(big_photos, tmp_path, names)
    cells = tmp_path / "cells.parquet"  # the same photos as Parquet bytes (decoded from views on the Arrow buffers)
    pq.write_table(pa.table({"id": [f"cell-{n}" for n in names], "caption": ["A big photo."] * len(names),
                             "image": pa.array([{"bytes": big_photos[n].read_bytes(), "path": n} for n in names],
                                               pa.struct([("bytes", pa.binary()), ("path", pa.string())]))}), cells)
    stats = dedup([src, cells], out=tmp_path / "dedup")
    rejects = _rejects(tmp_path / "dedup")
    assert stats["errored"] == {}
    # each photo twice (file, cell: the same bytes); the same 12 MP pixels in another PNG (the pixel digests of
    # multi-block images agree): one of the four 12 MP records kept; of the 50 MP photo and its half size, the
    # half is a near duplicate
    assert sorted(reason for _, reason in rejects.values()) == ["exact_duplicate"] * 5 + ["near_duplicate"], rejects
    kept = {f"{prefix}{n}" for n in names for prefix in ("", "cell-")} - rejects.keys()
    assert len(kept) == 2 and sum("12mp" in k for k in kept) == 1, kept
    assert sum(k.endswith("camera-50mp.jpg") for k in kept) == 1, kept  # the full size is kept over its half


@pytest.mark.slow
def test_embed_pack_recaption_take_big_photos(big_photos: dict[str, Path], tiny_clip_spec: str,
                                             tiny_processor_dir: Path, tiny_vlm_dir: Path, tmp_path: Path) -> None:
    from curate.balance.embed import embed
    from curate.recaption.config import RecaptionConfig
    from curate.recaption.stage import recaption
    from packer.pack import pack
    from packer.verify import verify_pack

    names = ["phone-12mp.png", "camera-50mp.jpg"]
    src = _jsonl(big_photos, tmp_path, names)
    stats = embed([src], out=tmp_path / "embed", model=tiny_clip_spec, batch_size=8)
    assert stats["errored"] == {} and stats["records_embedded"] == 2
    stats = pack([src], out=tmp_path / "pack", ctx=4096, processor=str(tiny_processor_dir), verify_sample=1000,
                 plot=False)
    assert stats["records_packed"] == 2, _rejects(tmp_path / "pack")
    report = verify_pack(tmp_path / "pack", sample=8)
    assert report.ok and report.images == 2, report.problems[:3]
    recaption([str(src)], RecaptionConfig(out=tmp_path / "recaption", backend={"model": str(tiny_vlm_dir),
                                                                              "device": "cpu"},
                                          langs="en", temperature=1.0, top_p=1.0, max_new_tokens=4))
    stats = json.loads((tmp_path / "recaption" / "stats.json").read_text())
    assert stats["records_in"] == 2 and stats["errored"] == {}, _rejects(tmp_path / "recaption")
