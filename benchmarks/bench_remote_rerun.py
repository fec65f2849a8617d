"""What a rerun of a finished ``curate pack`` into a bucket downloads.

A finished pack into ``s3://bench/out`` (on a moto S3 server on 127.0.0.1) is run again, twice: from
another machine (an empty ``CURATE_CACHE``, so an empty local staging mirror) and from the machine
that ran it (its mirror intact). The server's own request recorder counts every request of each
rerun; object GETs are summed by the size of what they returned (the object, or the ``Range`` asked
for) and split by kind: finished shards' data (``shards/*.tar``, the ``_records/`` store), the
lengths parts, small control files (markers, settings) and the rest. A finished rerun should read
markers and the few small files it needs, never shard data.

    .venv/bin/python benchmarks/bench_remote_rerun.py [--n 240] [--quick]

Exits 1 when a rerun fetched any shard data.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from urllib.parse import unquote, urlparse

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.bench_formats import start_moto, write_layouts  # noqa: E402
from curate.fixtures.processor import build_tiny_processor  # noqa: E402


def _call(endpoint: str, what: str) -> bytes:
    with urllib.request.urlopen(f"{endpoint}/moto-api/recorder/{what}") as r:
        return r.read()


def kind(rel: str) -> str:
    """Which kind of object a key under the output prefix is."""
    if rel.startswith(("shards/", "_records/")):
        return "shard data"
    if rel.startswith("lengths/"):
        return "lengths parts"
    if rel.startswith("_shards/") and rel.endswith(".json"):
        return "markers+settings"
    return "other"


def measure(endpoint: str, prefix: str, sizes: dict[str, int], run) -> dict[str, float]:  # noqa: ANN001
    """Run ``run()`` while the server records; count requests and the bytes each object GET returned."""
    _call(endpoint, "reset-recording")
    _call(endpoint, "start-recording")
    t0 = time.perf_counter()
    run()
    seconds = time.perf_counter() - t0
    _call(endpoint, "stop-recording")
    counts: dict[str, float] = {"requests": 0, "GET objects": 0, "GET bytes": 0, "PUT objects": 0,
                                "seconds": seconds}
    for line in _call(endpoint, "download-recording").decode().splitlines():
        entry = json.loads(line)
        counts["requests"] += 1
        url = urlparse(entry["url"])
        key = unquote(url.path).lstrip("/")
        if not key.startswith(prefix + "/"):
            continue
        rel = key[len(prefix) + 1:]
        if entry["method"] == "PUT":
            counts["PUT objects"] += 1
            if os.environ.get("BENCH_KEYS"):
                print(f"  PUT {rel}")
        if entry["method"] != "GET" or "list-type" in url.query:
            continue
        rng = entry["headers"].get("Range") or entry["headers"].get("range")
        if rng:
            lo, _, hi = rng.split("=", 1)[1].partition("-")
            got = min(int(hi), sizes.get(rel, 0) - 1) - int(lo) + 1 if hi else sizes.get(rel, 0) - int(lo)
        else:
            got = sizes.get(rel, 0)
        counts["GET objects"] += 1
        if os.environ.get("BENCH_KEYS"):
            print(f"  GET {rel} {got:,} bytes")
        counts["GET bytes"] += got
        counts[f"GET bytes: {kind(rel)}"] = counts.get(f"GET bytes: {kind(rel)}", 0) + got
    return counts


def main() -> int:
    """Pack into the bucket once, rerun from another machine and from the same one; print what each fetched."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=240, help="records (640×480 images)")
    parser.add_argument("--quick", action="store_true", help="80 records")
    args = parser.parse_args()
    if args.quick:
        args.n = 80
    import s3fs

    from packer.pack import pack

    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        inputs = write_layouts(tmp / "data", args.n)
        processor = str(build_tiny_processor(tmp / "processor"))
        proc, endpoint = start_moto(tmp / "recording.jsonl")
        try:
            fs = s3fs.S3FileSystem(endpoint_url=endpoint)
            fs.mkdir("bench")
            fs.put(str(tmp / "data" / "tars") + "/", "bench/in/", recursive=True)
            kw = dict(processor=processor, ctx=4096, shard_size=40, sequences_per_shard=8, seed=0,
                      verify_fraction=0.0, plot=False)
            src = ["s3://bench/in/{00000..00003}.tar"]
            del inputs

            def run(machine: str) -> None:
                os.environ["CURATE_CACHE"] = str(tmp / machine)
                pack(src, out="s3://bench/out", **kw)

            run("machine-a")
            fs.invalidate_cache()
            sizes = {p[len("bench/out/"):]: int(i["size"]) for p, i in fs.find("bench/out", detail=True).items()}
            total = sum(sizes.values())
            by_kind: dict[str, int] = {}
            for rel, size in sizes.items():
                by_kind[kind(rel)] = by_kind.get(kind(rel), 0) + size
            print(f"output prefix: {len(sizes)} objects, {total:,} bytes "
                  f"({', '.join(f'{k} {v:,}' for k, v in sorted(by_kind.items()))})")
            fetched_data = 0
            for label, machine in (("rerun, another machine", "machine-b"), ("rerun, same machine", "machine-a")):
                counts = measure(endpoint, "bench/out", sizes, lambda m=machine: run(m))
                print(f"{label}: " + ", ".join(f"{k} {int(v):,}" if k != "seconds" else f"{k} {v:.2f}"
                                                for k, v in counts.items()))
                fetched_data += int(counts.get("GET bytes: shard data", 0))
        finally:
            proc.terminate()
            proc.wait(timeout=30)
    return 1 if fetched_data else 0


if __name__ == "__main__":
    sys.exit(main())
