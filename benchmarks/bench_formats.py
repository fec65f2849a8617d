"""Images as bytes vs images as files: pack's length step and embed's image decoding.

The same N images (JPEG and PNG, 640×480) are written three ways: files on disk with a JSONL of
paths (the baseline), one Parquet file with the ``datasets`` image struct ``{bytes, path}`` (written
by pyarrow with its defaults, as ``datasets`` does), and 4 WebDataset tars (``webdataset.TarWriter``).
For each layout the benchmark times, in this process:

* **lengths**: pack's length step (:class:`packer.count.LengthsTask` over every shard: read
  the records, probe image headers, render and tokenize the text), records/s;
* **decode**: embed's image decoding (read the records, :func:`curate.core.images.decode` every
  image to RGB, as ``curate embed``'s decoder threads do), records/s;
* **pack** (context, not a target): the whole ``pack`` (lengths, plan, shard writing) with one
  local worker. Tar members are kept as references by the length step and read again by the shard
  writer (this row shows the cost moved there); Parquet cells are copied into pack's record store.

Each layout runs once untimed first (page cache warm for all three), then the layouts run back to
back in each of ``--repeats`` rounds. It prints the best records/s by wall clock and per CPU second
of this process (the machine is shared: CPU time is the steadier figure) and the ratio of each
bytes layout to the files baseline: the median over the rounds of the CPU-time ratio within a
round. Target: every lengths/decode ratio >= 1.0 (reading one big file should not be slower than
many small ones).

Two places: the local disk (the files baseline reads only each image's header for the length
step), and, when ``moto`` and ``s3fs`` are installed (``requirements-dev.txt``), an S3-compatible
server on 127.0.0.1 holding the same three layouts (one GET per image file against a few ranged
reads of one big object; the server's own CPU is not counted), which is where data at scale lives.

    .venv/bin/python benchmarks/bench_formats.py [--n 600] [--quick] [--steps lengths,decode,pack]
        [--no-s3] [--data DIR (write the layouts there once, reuse them on later runs)]
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from curate.core.images import decode  # noqa: E402
from curate.core.shards import ShardContext, plan_shards  # noqa: E402
from curate.fixtures.processor import build_tiny_processor  # noqa: E402
from packer.config import PackConfig  # noqa: E402
from packer.count import LengthsTask  # noqa: E402


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


def _timed(fn: Any) -> tuple[float, float, int]:
    """``(wall seconds, CPU seconds of this process, result of fn)``."""
    w0, c0 = time.perf_counter(), time.process_time()
    n = fn()
    return time.perf_counter() - w0, time.process_time() - c0, n


def time_lengths(task: LengthsTask, inputs: list[str], work: Path) -> tuple[float, float, int]:
    """Wall and CPU seconds for the length step over every shard of ``inputs``, and the records counted."""
    def run() -> int:
        kept = 0
        for shard in plan_shards(inputs, 256):
            out = work / f"w{shard.index}"
            out.mkdir(parents=True)
            stats = task.run(shard, out, ShardContext(seed=0)).to_dict()["per_source"]
            kept += sum(stats[s]["records_out"] for s in stats)
        return kept

    try:
        return _timed(run)
    finally:
        shutil.rmtree(work, ignore_errors=True)


def time_decode(inputs: list[str]) -> tuple[float, float, int]:
    """Wall and CPU seconds to read every record and decode its images to RGB, and the records decoded."""
    def run() -> int:
        n = 0
        for shard in plan_shards(inputs, 256):
            for rec in shard.read(views=True):  # as embed reads: Parquet cells decode in place
                for image in rec["images"]:
                    decode(image)
                n += 1
        return n

    return _timed(run)


def time_pack(processor: str, inputs: list[str], work: Path) -> tuple[float, float, int]:
    """Wall and CPU seconds of a whole ``pack`` (lengths, plan, shard writing) in this process."""
    from curate.executors import get_executor
    from packer.pack import pack

    def run() -> int:
        stats = pack(inputs, out=work, ctx=8192, processor=processor, seed=0, shard_size=256, verify_sample=0,
                     plot=False, executor=get_executor("local", workers=1))
        return int(stats["records_packed"])

    try:
        return _timed(run)
    finally:
        shutil.rmtree(work, ignore_errors=True)


def start_moto(recording: Path | None = None) -> tuple[Any, str]:
    """A moto S3 server on a free loopback port (recording requests into ``recording`` when asked), with the
    environment pointed at it; returns the process and the endpoint URL."""
    import os
    import socket
    import subprocess

    from curate.fixtures.tiny_vlm import free_port

    port = free_port()
    env = {**os.environ, **({"MOTO_RECORDER_FILEPATH": str(recording)} if recording else {})}
    proc = subprocess.Popen([sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)
    for _ in range(600):
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            break
        except OSError:
            time.sleep(0.1)
    url = f"http://127.0.0.1:{port}"
    os.environ.update(AWS_ACCESS_KEY_ID="bench", AWS_SECRET_ACCESS_KEY="bench", AWS_DEFAULT_REGION="us-east-1",
                      AWS_ENDPOINT_URL=url, FSSPEC_S3_ENDPOINT_URL=url)
    return proc, url


def start_s3(folder: Path, inputs: dict[str, list[str]]) -> tuple[object, dict[str, list[str]]] | None:
    """Start a moto S3 server on loopback, upload the layouts; None when moto or s3fs is missing."""
    try:
        import moto.server  # noqa: F401
        import s3fs
    except ImportError:
        return None
    proc, url = start_moto()
    fs = s3fs.S3FileSystem(endpoint_url=url)
    fs.mkdir("bench")
    fs.put(str(folder) + "/", "bench/data/", recursive=True)
    remote = {name: [p.replace(str(folder), "s3://bench/data") for p in paths] for name, paths in inputs.items()}
    return proc, remote


def report(where: str, results: dict[str, dict[str, tuple[float, float, float]]]) -> bool:
    """Print one line per step; whether every target ratio >= 1.0.

    Per layout: best records/s by wall clock and per CPU second, and the ratio to the files
    baseline by CPU: the median over the rounds of ``files CPU / layout CPU`` within the same round
    (the layouts run back to back, so a change of load between rounds cancels out). The target is
    on the ``lengths`` and ``decode`` steps; ``pack`` (the whole command, shard writing included)
    is shown for context.
    """
    ok = True
    for step, rates in results.items():
        base_wall, base_cpu, _ = rates["files"]
        cells = []
        for name in ("parquet", "tar"):
            wall, cpu, ratio = rates[name]
            cells.append(f"{name} {wall:6.0f} rec/s {cpu:6.0f} rec/cpu-s (ratio {ratio:.2f} cpu, {wall / base_wall:.2f} wall)")
            if step != "pack":
                ok = ok and ratio >= 1.0
        print(f"{where:5s} {step:7s} files {base_wall:6.0f} rec/s {base_cpu:6.0f} rec/cpu-s | " + " | ".join(cells))
    return ok


def measure(task: LengthsTask, processor: str, inputs: dict[str, list[str]], n: int, repeats: int,
            work: Path, steps: Sequence[str]) -> dict[str, dict[str, tuple[float, float, float]]]:
    """Per step and layout: best records/s (wall, per CPU second) and the median paired CPU ratio to files.

    Every layout is run once untimed first (imports, page cache warm for all of them), then each
    of ``repeats`` rounds runs the layouts back to back (the machine is shared and noisy).
    """
    def one(step: str, paths: list[str]) -> tuple[float, float, int]:
        if step == "lengths":
            return time_lengths(task, paths, work)
        if step == "decode":
            return time_decode(paths)
        return time_pack(processor, paths, work)

    results: dict[str, dict[str, tuple[float, float, float]]] = {}
    for step in steps:
        walls: dict[str, list[float]] = {name: [] for name in inputs}
        cpus: dict[str, list[float]] = {name: [] for name in inputs}
        for name, paths in inputs.items():
            one(step, paths)
        for _ in range(repeats):
            for name, paths in inputs.items():
                wall, cpu, count = one(step, paths)
                assert count == n, (step, name, count)
                walls[name].append(wall)
                cpus[name].append(cpu)
        results[step] = {name: (n / min(walls[name]), n / min(cpus[name]),
                                float(np.median(np.array(cpus["files"]) / np.array(cpus[name]))))
                         for name in inputs}
    return results


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=600)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--quick", action="store_true", help="200 images, 2 repeats")
    ap.add_argument("--steps", default="lengths,decode,pack", help="comma-separated: lengths, decode, pack")
    ap.add_argument("--no-s3", action="store_true", help="skip the S3 run even when moto and s3fs are installed")
    ap.add_argument("--data", type=Path, help="keep the written layouts in this folder and reuse them next time")
    args = ap.parse_args()
    n, repeats = (200, 2) if args.quick else (args.n, args.repeats)
    steps = [s for s in args.steps.split(",") if s]
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        data = args.data / f"n{n}" if args.data else tmp / "data"
        t0 = time.perf_counter()
        if (data / "done").exists():
            inputs = json.loads((data / "done").read_text())
            print(f"reusing {n} images in {data}")
        else:
            shutil.rmtree(data, ignore_errors=True)
            inputs = write_layouts(data, n)
            (data / "done").write_text(json.dumps(inputs))
            print(f"wrote {n} images (640×480, 1 in 5 PNG) as files, Parquet and 4 tars in {time.perf_counter() - t0:.1f}s")
        processor = str(build_tiny_processor(tmp / "proc"))
        task = LengthsTask(PackConfig(out=tmp / "packed", verify_fraction=0.0), processor)
        task.setup()
        ok = report("local", measure(task, processor, inputs, n, repeats, tmp / "work", steps))
        started = None if args.no_s3 else start_s3(data, inputs)
        if started is None:
            print("s3    skipped (--no-s3, or pip install moto[server] s3fs)")
        else:
            proc, remote = started
            try:
                ok = report("s3", measure(task, processor, remote, n, repeats, tmp / "work", steps)) and ok
            finally:
                proc.terminate()
        print(f"target: every lengths/decode ratio (CPU) >= 1.0 -> {'met' if ok else 'NOT met'}")


if __name__ == "__main__":
    main()
