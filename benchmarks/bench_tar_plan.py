"""Benchmark: the shard plan over a folder of img2dataset-shaped tars, walked in one process, in worker
processes, and from the cache.

Usage:
    python benchmarks/bench_tar_plan.py            # 16 tars × 10,000 samples (jpg + txt + json each)
    python benchmarks/bench_tar_plan.py --quick    # 8 tars × 2,000 samples

Splitting a tar walks every member header. The seed's scale is 85M samples, about 8,500 such
tars: this measures seconds per tar and projects the plan's wall time on one 64-core node.
Three plans of the same folder (``plan_shards``, ``--shard-size 5000``), each timed wall and CPU:

* one process, no cache: the code before :mod:`curate.core.shards` (``PARALLEL_FROM`` set past the
  number of tars, an empty cache folder);
* worker processes (one per core), an empty cache folder: a first plan;
* the same again: the plan of a rerun, of the next stage or of the next step of a recipe (from
  the cache).

The three plans must be equal. The tars are written first (not timed), their modification
time set an hour back (a tar modified in the last seconds is not kept).
"""

from __future__ import annotations

import argparse
import io
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import webdataset as wds  # noqa: E402
from PIL import Image  # noqa: E402

import curate.core.shards as splits  # noqa: E402
from curate.core.shards import plan_shards  # noqa: E402
from curate.core.threads import available_cpus  # noqa: E402

SEED_TARS = 8_500  # 85M samples in img2dataset tars of 10,000
NODE_CORES = 64


def write_tars(folder: Path, tars: int, samples: int) -> int:
    """img2dataset-shaped tars (a small JPEG, a caption, a JSON per sample); returns their bytes."""
    folder.mkdir(parents=True)
    out = io.BytesIO()
    Image.new("RGB", (16, 16), "green").save(out, "JPEG")
    jpg, past = out.getvalue(), time.time() - 3600
    for t in range(tars):
        path = folder / f"{t:05d}.tar"
        with wds.TarWriter(str(path)) as sink:
            for i in range(samples):
                key = f"{t:05d}{i:04d}"
                sink.write({"__key__": key, "jpg": jpg, "txt": f"a photo number {i}",
                            "json": json.dumps({"key": key, "url": f"https://example.com/{key}.jpg",
                                                "status": "success", "width": 16, "height": 16})})
        os.utime(path, (past, past))
    return sum(p.stat().st_size for p in folder.iterdir())


def timed_plan(folder: Path, cache: Path) -> tuple[float, float, list]:
    """(wall, CPU of this process and its finished children, the plan as tuples) of one ``plan_shards``."""
    os.environ["CURATE_CACHE"] = str(cache)
    t0, c0 = time.perf_counter(), _cpu()
    shards = plan_shards([folder], shard_size=5000)
    wall, cpu = time.perf_counter() - t0, _cpu() - c0
    return wall, cpu, [[(p.path, p.start, p.stop, p.offset) for p in s.parts] for s in shards]


def _cpu() -> float:
    t = os.times()
    return t.user + t.system + t.children_user + t.children_system


def main(argv: list[str] | None = None) -> None:
    """Run the benchmark and print its figures."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tars", type=int, default=16)
    parser.add_argument("--samples", type=int, default=10_000)
    parser.add_argument("--quick", action="store_true", help="8 tars × 2,000 samples")
    args = parser.parse_args(argv)
    if args.quick:
        args.tars, args.samples = 8, 2_000
    tmp = Path(tempfile.mkdtemp(prefix="bench-tar-plan-"))
    try:
        t0 = time.perf_counter()
        size = write_tars(tmp / "laion", args.tars, args.samples)
        print(f"{args.tars} tars × {args.samples:,} samples ({size / 1e6:.0f} MB, written in "
              f"{time.perf_counter() - t0:.0f}s); {available_cpus()} cores")
        default = splits.PARALLEL_FROM
        splits.PARALLEL_FROM = args.tars + 1
        one = timed_plan(tmp / "laion", tmp / "cache-one")
        splits.PARALLEL_FROM = default
        workers = timed_plan(tmp / "laion", tmp / "cache")
        cached = timed_plan(tmp / "laion", tmp / "cache")
        if not one[2] == workers[2] == cached[2]:
            raise SystemExit("the three plans differ")
        per_tar = one[0] / args.tars * (10_000 / args.samples)
        for name, (wall, cpu, _) in (("one process, no cache", one), ("worker processes, no cache", workers),
                                     ("from the cache", cached)):
            print(f"{name:28s} {wall:7.2f}s wall {cpu:7.2f}s CPU  {wall / args.tars * 1000:7.1f} ms per tar "
                  f"{one[0] / wall:6.1f}× one process")
        print(f"one 10,000-sample tar walked in {per_tar:.3f}s: {SEED_TARS:,} tars (85M samples) = "
              f"{per_tar * SEED_TARS / 60:.0f} min in one process, ≈{per_tar * SEED_TARS / NODE_CORES:.0f}s over "
              f"{NODE_CORES} cores, ≈{cached[0] / args.tars * SEED_TARS:.0f}s from the cache (the rate measured here)")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
