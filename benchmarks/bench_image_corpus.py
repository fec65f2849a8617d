"""Any folder of images through ``pack`` → ``verify`` → the loader, as files, as Parquet bytes and as a tar.

Usage:
    python benchmarks/bench_image_corpus.py [FOLDER]        # default: odd files and photos made here
    python benchmarks/bench_image_corpus.py Tests/images    # e.g. Pillow's test corpus (fetched)
    python benchmarks/bench_image_corpus.py --quick         # the made folder, files form, no embed/recaption

Each image becomes one caption record. For each form, ``curate pack`` runs twice through the real
CLI (the default processor check, and ``--verify-sample 0``), then ``curate verify`` and the loader
(``PackedDataset``, skipping and counting what fails). The truth is the trainer's own loading:
``transformers.image_utils.load_image`` and the image processor. Printed per run: records in, packed,
errored by reason, the exit code and whether a traceback was printed, verify's verdict, loader
failures, packed images whose grid differs from the processor's on ``load_image``, and images the
trainer loads that pack refused. Then ``embed`` (tiny CLIP) and ``recaption`` (tiny VLM) on the files
form: files whose reason differs from pack's. Targets: exit 0, no traceback, verify ✓, 0 loader
failures, 0 grid mismatches, 0 valid images refused, 0 differing reasons.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from curate.core.formats.rows import IMAGE_EXTS  # noqa: E402
from curate.fixtures.odd_images import trainer_view, write_odd_images  # noqa: E402
from curate.fixtures.processor import build_tiny_processor  # noqa: E402

STRUCT = pa.struct([("bytes", pa.binary()), ("path", pa.string())])
CAPTION = "A picture from the corpus."


def made_corpus(folder: Path) -> Path:
    """Odd and broken files, and the shipped photos as JPEG and PNG."""
    from curate.fixtures.sampledata_photos import PHOTOS, load_photos

    write_odd_images(folder)
    photos = load_photos()
    for photo in PHOTOS:
        (folder / f"photo_{photo.key}{Path(photo.file).suffix}").write_bytes(photos[photo.key][0])
    return folder


def forms(images: list[Path], tmp: Path) -> dict[str, Path]:
    """The records of every image: a JSONL of paths, a datasets-style Parquet of bytes, a WebDataset tar."""
    import webdataset as wds

    jsonl = tmp / "corpus.jsonl"
    jsonl.write_text("".join(json.dumps({"id": p.name, "image": str(p), "caption": CAPTION}) + "\n" for p in images))
    parquet = tmp / "corpus.parquet"
    pq.write_table(pa.table({"id": [p.name for p in images], "caption": [CAPTION] * len(images),
                             "image": pa.array([{"bytes": p.read_bytes(), "path": p.name} for p in images], STRUCT)}),
                   parquet, row_group_size=64)
    tar = tmp / "corpus.tar"
    with wds.TarWriter(str(tar)) as sink:
        for i, p in enumerate(images):
            ext = p.suffix.lower().lstrip(".")
            sink.write({"__key__": f"{i:06d}", ext if ext in IMAGE_EXTS else "jpg": p.read_bytes(),
                        "json": json.dumps({"id": p.name, "caption": CAPTION})})
    return {"files": jsonl, "parquet": parquet, "tar": tar}


def curate(*args: str, cwd: Path) -> tuple[int, str]:
    """Run the real CLI; its exit code and stderr."""
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "CURATE_REPORT": "0"}
    done = subprocess.run([sys.executable, "-m", "curate", *args], cwd=cwd, env=env, capture_output=True, text=True)
    return done.returncode, done.stderr


def loader_pass(out: Path, processor: Path) -> tuple[dict[str, list[int]], int, str]:
    """Every packed sample's image grid as the loader builds it, the samples skipped, and any other failure."""
    from packer.loader import PackedDataset

    grids: dict[str, list[int]] = {}
    dataset = PackedDataset(out / "shards", str(processor), on_error="skip")
    try:
        for seq in dataset:
            thw = seq.get("image_grid_thw")
            for k, rid in enumerate(seq["ids"]):
                grids[rid] = thw[k].tolist() if thw is not None else []
    except Exception as exc:  # noqa: BLE001 - what the training loop would die of
        return grids, dataset.skipped, f"{type(exc).__name__}: {exc}"[:200]
    return grids, dataset.skipped, ""


def rejects(out: Path) -> dict[str, str]:
    """``id -> reason`` of a stage's errored records."""
    path = out / "rejects.parquet"
    if not path.exists():
        return {}
    return {r["id"]: r["reason"] for r in pq.read_table(path).to_pylist() if r["kind"] == "errored"}


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark; exit 1 when a target is missed."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("folder", nargs="?", default=None, help="a folder of images (default: made here)")
    ap.add_argument("--quick", action="store_true", help="the files form only, without embed and recaption")
    ap.add_argument("--no-stages", action="store_true", help="skip embed and recaption")
    args = ap.parse_args(argv)
    missed = 0
    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        folder = Path(args.folder).resolve() if args.folder else made_corpus(tmp / "corpus")
        images = sorted(p for p in folder.iterdir() if p.is_file())
        from curate.fixtures.tiny_clip import build_tiny_clip
        from curate.fixtures.tiny_vlm import build_tiny_vlm
        from transformers import AutoProcessor

        processor = build_tiny_processor(tmp / "processor")
        image_processor = AutoProcessor.from_pretrained(str(processor)).image_processor
        truth = {p.name: trainer_view(p, image_processor) for p in images}
        loads = {n for n, t in truth.items() if t[0] == "ok"}
        print(f"{len(images):,} files in {folder}; the trainer's load_image + processor accepts {len(loads):,}")
        all_forms = forms(images, tmp)
        pack_reasons: dict[str, str] = {}
        for form, src in all_forms.items():
            if args.quick and form != "files":
                continue
            for sample in ("1000", "0"):
                out = tmp / f"{form}-{sample}"
                code, err = curate("pack", str(src), "--processor", str(processor), "--ctx", "8192", "--out",
                                   str(out), "--verify-sample", sample, cwd=tmp)
                traceback = "Traceback" in err
                if code:
                    print(f"  {form:7s} --verify-sample {sample:4s}: exit {code}, traceback {traceback}: "
                          f"{err.strip().splitlines()[-1][:200] if err.strip() else ''}")
                    missed += 1
                    continue
                stats = json.loads((out / "stats.json").read_text())
                errored = rejects(out)
                pack_reasons = pack_reasons or errored
                vcode, verr = curate("verify", str(out), "--sample", "16", cwd=tmp)
                grids, skipped, failure = loader_pass(out, processor)
                mismatch = [n for n, g in grids.items() if n in loads and [g] != [truth[n][1][2]]]
                refused = sorted(loads & set(errored))
                print(f"  {form:7s} --verify-sample {sample:4s}: exit {code}, traceback {traceback}; in "
                      f"{stats['records_in']:,}, packed {stats['records_packed']:,}, errored "
                      f"{dict(sorted(collections.Counter(errored.values()).items()))}; verify "
                      f"{'✓' if vcode == 0 else 'FAILED'}; loader: {len(grids):,} read, {skipped} skipped"
                      f"{', ' + failure if failure else ''}; grid mismatches {len(mismatch)}; valid refused "
                      f"{len(refused)}{' ' + str(refused[:5]) if refused else ''}")
                missed += int(traceback or vcode != 0 or bool(skipped) or bool(failure) or bool(mismatch)
                              or bool(refused))
        if not (args.quick or args.no_stages):
            clip = build_tiny_clip(tmp / "clip", seed=0)
            vlm = build_tiny_vlm(tmp / "vlm", seed=0)
            src = all_forms["files"]
            curate("embed", str(src), "--model", clip, "--out", str(tmp / "embed"), cwd=tmp)
            curate("recaption", str(src), "--model", str(vlm), "--device", "cpu", "--langs", "en",
                   "--max-new-tokens", "4", "--out", str(tmp / "recaption"), cwd=tmp)
            for stage in ("embed", "recaption"):
                theirs = rejects(tmp / stage)
                differ = {n: (pack_reasons.get(n), theirs.get(n)) for n in set(pack_reasons) | set(theirs)
                          if pack_reasons.get(n) != theirs.get(n)}
                print(f"  {stage}: {len(theirs):,} errored; files whose reason differs from pack's: {len(differ)}"
                      f"{' ' + str(sorted(differ.items())[:5]) if differ else ''}")
                missed += int(bool(differ))
    print(f"targets missed: {missed}")
    return 1 if missed else 0


if __name__ == "__main__":
    sys.exit(main())
