"""Images as bytes vs images as files: pack's length step and embed's image decoding.

The same N images (JPEG and PNG, 640×480) are written three ways: files on disk with a JSONL of
paths (the baseline), one Parquet file with the ``datasets`` image struct ``{bytes, path}``, and
WebDataset tars. For each layout the benchmark times, in this process:

* **lengths**: pack's length step (:class:`packer.lengths.LengthsTask` over every shard: read
  the records, probe image headers, render and tokenize the text), records/s;
* **decode**: embed's image decoding (read the records, :func:`curate.core.images.decode` every
  image to RGB, as ``curate embed``'s decoder threads do), records/s.

It prints records/s and the ratio of each bytes layout to the files baseline (target ≥ 1.0:
reading one big file should not be slower than many small ones). Best of ``--repeats``.

Two places: the local disk (files in the page cache: the files baseline reads only each image's
header for the length step), and, when ``moto`` and ``s3fs`` are installed (``requirements-dev.txt``),
an S3-compatible server on 127.0.0.1 holding the same three layouts (one GET per image file against a
few ranged reads of one big object), which is where data at scale lives.

    .venv/bin/python benchmarks/bench_formats.py [--n 600] [--quick]
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from curate.core.images import decode  # noqa: E402
from curate.core.shards import ShardContext, plan_shards  # noqa: E402
from curate.fixtures.processor import build_tiny_processor  # noqa: E402
from packer.lengths import LengthsTask  # noqa: E402


def write_layouts(folder: Path, n: int, seed: int = 0) -> dict[str, list[str]]:
    """Write ``n`` images as files + JSONL, as a datasets-layout Parquet and as 4 tars; return the inputs."""
    import pyarrow as pa
    import pyarrow.parquet as pq
    import webdataset as wds
    from PIL import Image

    rng = np.random.default_rng(seed)
    (folder / "files" / "images").mkdir(parents=True)
    (folder / "tars").mkdir()
    yy, xx = np.mgrid[0:480, 0:640].astype(np.float32)
    rows = []
    for i in range(n):
        a, b, c = rng.uniform(0.005, 0.05, 3)
        base = np.stack([np.sin(a * xx + i), np.cos(b * yy), np.sin(c * (xx + yy))], axis=-1)
        pixels = ((base + 1) * 110 + rng.normal(0, 12, base.shape)).clip(0, 255).astype(np.uint8)
        ext = "png" if i % 5 == 0 else "jpg"
        path = folder / "files" / "images" / f"img{i:05d}.{ext}"
        Image.fromarray(pixels).save(path, **({"quality": 90} if ext == "jpg" else {}))
        rows.append({"id": f"b{i:05d}", "ext": ext, "name": path.name, "bytes": path.read_bytes(),
                     "caption": f"A smooth pattern, number {i}, in soft colours."})
    with open(folder / "files" / "records.jsonl", "w", encoding="utf-8") as fh:
        for r in rows:
            fh.write(json.dumps({"id": r["id"], "images": [f"images/{r['name']}"], "caption": r["caption"]}) + "\n")
    struct = pa.struct([("bytes", pa.binary()), ("path", pa.string())])
    pq.write_table(pa.table({"id": [r["id"] for r in rows], "caption": [r["caption"] for r in rows],
                             "image": pa.array([{"bytes": r["bytes"], "path": r["name"]} for r in rows], type=struct)}),
                   folder / "data.parquet", row_group_size=256)
    per = (n + 3) // 4
    for t in range(4):
        with wds.TarWriter(str(folder / "tars" / f"{t:05d}.tar")) as sink:
            for r in rows[t * per:(t + 1) * per]:
                sink.write({"__key__": r["id"], r["ext"]: r["bytes"], "txt": r["caption"]})
    return {"files": [str(folder / "files" / "records.jsonl")], "parquet": [str(folder / "data.parquet")],
            "tar": [str(folder / "tars" / "{00000..00003}.tar")]}


def time_lengths(task: LengthsTask, inputs: list[str], work: Path) -> tuple[float, int]:
    """Seconds for the length step over every shard of ``inputs``, and the records counted."""
    t0 = time.perf_counter()
    shards = plan_shards(inputs, 256)
    kept = 0
    for shard in shards:
        out = work / f"w{shard.index}"
        out.mkdir(parents=True)
        stats = task.run(shard, out, ShardContext(seed=0))
        kept += sum(stats.to_dict()["per_source"][s]["records_out"] for s in stats.to_dict()["per_source"])
    elapsed = time.perf_counter() - t0
    shutil.rmtree(work, ignore_errors=True)
    return elapsed, kept


def time_decode(inputs: list[str]) -> tuple[float, int]:
    """Seconds to read every record and decode its images to RGB, and the records decoded."""
    t0 = time.perf_counter()
    n = 0
    for shard in plan_shards(inputs, 256):
        for rec in shard.read():
            for image in rec["images"]:
                decode(image)
            n += 1
    return time.perf_counter() - t0, n


def start_s3(folder: Path, inputs: dict[str, list[str]]) -> tuple[object, dict[str, list[str]]] | None:
    """Start a moto S3 server on loopback, upload the layouts; None when moto or s3fs is missing."""
    import os
    import socket
    import subprocess

    try:
        import moto.server  # noqa: F401
        import s3fs
    except ImportError:
        return None
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    proc = subprocess.Popen([sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    for _ in range(300):
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            break
        except OSError:
            time.sleep(0.1)
    url = f"http://127.0.0.1:{port}"
    os.environ.update(AWS_ACCESS_KEY_ID="bench", AWS_SECRET_ACCESS_KEY="bench", AWS_DEFAULT_REGION="us-east-1",
                      AWS_ENDPOINT_URL=url, FSSPEC_S3_ENDPOINT_URL=url)
    fs = s3fs.S3FileSystem(endpoint_url=url)
    fs.mkdir("bench")
    fs.put(str(folder) + "/", "bench/data/", recursive=True)
    remote = {name: [p.replace(str(folder), "s3://bench/data") for p in paths] for name, paths in inputs.items()}
    return proc, remote


def report(where: str, results: dict[str, dict[str, float]]) -> bool:
    """Print one line per step; whether every ratio reached 1.0."""
    for step, rates in results.items():
        base = rates["files"]
        print(f"{where:5s} {step:8s} files {base:8.0f} rec/s | parquet {rates['parquet']:8.0f} rec/s "
              f"(ratio {rates['parquet'] / base:.2f}) | tar {rates['tar']:8.0f} rec/s (ratio {rates['tar'] / base:.2f})")
    return all(rates[k] / rates["files"] >= 1.0 for rates in results.values() for k in ("parquet", "tar"))


def measure(task: LengthsTask, inputs: dict[str, list[str]], n: int, repeats: int,
            work: Path) -> dict[str, dict[str, float]]:
    """Best-of-``repeats`` records/s of each step for each layout (layouts alternate within a repeat)."""
    results: dict[str, dict[str, float]] = {}
    for step in ("lengths", "decode"):
        best = {name: float("inf") for name in inputs}
        for _ in range(repeats):  # alternate the layouts: the machine is shared and noisy
            for name, paths in inputs.items():
                secs, count = time_lengths(task, paths, work) if step == "lengths" else time_decode(paths)
                assert count == n, (step, name, count)
                best[name] = min(best[name], secs)
        results[step] = {name: n / secs for name, secs in best.items()}
    return results


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=600)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--quick", action="store_true", help="200 images, 2 repeats")
    args = ap.parse_args()
    n, repeats = (200, 2) if args.quick else (args.n, args.repeats)
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        t0 = time.perf_counter()
        inputs = write_layouts(tmp / "data", n)
        print(f"wrote {n} images (640×480, 1 in 5 PNG) as files, Parquet and 4 tars in {time.perf_counter() - t0:.1f}s")
        task = LengthsTask(str(build_tiny_processor(tmp / "proc")), verify_fraction=0.0)
        task.setup()
        ok = report("local", measure(task, inputs, n, repeats, tmp / "work"))
        started = start_s3(tmp / "data", inputs)
        if started is None:
            print("s3    skipped (pip install moto[server] s3fs)")
        else:
            proc, remote = started
            try:
                ok = report("s3", measure(task, remote, n, repeats, tmp / "work")) and ok
            finally:
                proc.terminate()
        print(f"target: every ratio >= 1.0 -> {'met' if ok else 'NOT met'}")

if __name__ == "__main__":
    main()
