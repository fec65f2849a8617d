"""What is packed trains: odd images through pack → verify → the loader, as files, Parquet bytes and a tar,
and the same reason for every refused file in pack, embed and recaption."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import webdataset as wds
from transformers import AutoProcessor

from curate.recaption.config import RecaptionConfig
from curate.core.formats.rows import IMAGE_EXTS
from curate.core.images import ImageError, check
from packer.loader import PackedDataset
from packer.pack import pack
from packer.verify import verify_pack
from curate.fixtures.odd_images import trainer_view

STRUCT = pa.struct([("bytes", pa.binary()), ("path", pa.string())])


def _reasons(folder: Path) -> dict[str, str | None]:
    """The gate's answer for every file: None (accepted) or its reason."""
    out: dict[str, str | None] = {}
    for path in sorted(folder.iterdir()):
        try:
            check(path)
            out[path.name] = None
        except ImageError as exc:
            out[path.name] = exc.reason
    return out


def _inputs(folder: Path, tmp: Path) -> dict[str, Path]:
    files = sorted(folder.iterdir())
    caption = "A picture with an odd file behind it."
    jsonl = tmp / "odd.jsonl"
    jsonl.write_text("".join(json.dumps({"id": p.name, "image": str(p), "caption": caption}) + "\n" for p in files))
    parquet = tmp / "odd.parquet"
    pq.write_table(pa.table({"id": [p.name for p in files], "caption": [caption] * len(files),
                             "image": pa.array([{"bytes": p.read_bytes(), "path": p.name} for p in files], STRUCT)}),
                   parquet)
    tar = tmp / "odd.tar"
    with wds.TarWriter(str(tar)) as sink:
        for p in files:
            ext = p.suffix.lstrip(".") if p.suffix.lstrip(".") in IMAGE_EXTS else "jpg"  # a crawl's misnamed files
            sink.write({"__key__": p.name.replace(".", "_"), ext: p.read_bytes(), "json": json.dumps({"id": p.name, "caption": caption})})
    return {"files": jsonl, "parquet": parquet, "tar": tar}


@pytest.mark.slow
def test_what_is_packed_trains(odd_images: Path, tiny_processor_dir: Path, tmp_path: Path) -> None:
    reasons = _reasons(odd_images)
    image_processor = AutoProcessor.from_pretrained(str(tiny_processor_dir)).image_processor
    truth = {p.name: trainer_view(p, image_processor) for p in sorted(odd_images.iterdir())}
    assert {n for n, r in reasons.items() if r is None} == {n for n, t in truth.items() if t[0] == "ok"}
    for form, src in _inputs(odd_images, tmp_path).items():
        for sample in (1000, 0):
            out = tmp_path / f"{form}-{sample}"
            stats = pack([src], out=out, ctx=4096, processor=str(tiny_processor_dir), verify_sample=sample, plot=False)
            rejects = {r["id"]: r["reason"] for r in pq.read_table(out / "rejects.parquet").to_pylist()}
            assert rejects == {n: r for n, r in reasons.items() if r is not None}, form
            assert stats["records_packed"] == sum(r is None for r in reasons.values())
            report = verify_pack(out, sample=8)
            assert report.ok and report.images == stats["records_packed"], report.problems[:3]
            seen = {}
            for seq in PackedDataset(out / "shards", str(tiny_processor_dir)):
                grids = seq.get("image_grid_thw")
                for k, rid in enumerate(seq["ids"]):
                    seen[rid] = grids[k].tolist() if grids is not None else None
            assert seen == {n: truth[n][1][2] for n, r in reasons.items() if r is None}, form


@pytest.mark.slow
def test_every_stage_names_a_file_alike(odd_images: Path, tiny_clip_spec: str, tiny_vlm_dir: Path,
                                       tmp_path: Path) -> None:
    from curate.balance.embed import embed
    from curate.recaption.stage import recaption

    reasons = {n: r for n, r in _reasons(odd_images).items() if r is not None}
    src = _inputs(odd_images, tmp_path)["files"]
    embed([src], out=tmp_path / "embed", model=tiny_clip_spec, batch_size=8)
    recaption([str(src)], RecaptionConfig(out=tmp_path / "recaption",
                                          backend={"model": str(tiny_vlm_dir), "device": "cpu"}, langs="en",
                                          temperature=1.0, top_p=1.0, max_new_tokens=4))
    for stage in ("embed", "recaption"):
        errored = {r["id"]: r["reason"] for r in pq.read_table(tmp_path / stage / "rejects.parquet").to_pylist()
                   if r["kind"] == "errored"}
        assert errored == reasons, stage
