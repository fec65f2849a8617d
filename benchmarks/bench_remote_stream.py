"""How much local disk ``curate pack --out s3://...`` uses, and what streaming to the bucket costs in time.

The same pack of ``--n`` images (640×480, in 4 local tars) runs twice with ``--workers 2``: into a local
folder (the baseline), then into ``s3://bench/out`` on a moto S3 server on 127.0.0.1. During the second
run a thread polls the bytes under ``$CURATE_CACHE/remote`` (every staging folder) every 20 ms. Printed:
the peak local staging bytes against the output's size and against 2 × workers × one shard's output
(the largest tar), the bytes left on local disk after the run, and the wall time of the bucket run over
the local one. Targets (issue 37): peak ≤ 2 × workers × one shard and ≤ 10% of the output; time ≤ 1.3×.

The server shares this machine's cores with the run (a real bucket's server does not), so the CPU seconds of
each side are printed too, and the floor this server sets: the time an upload of the local run's output takes
alone (every file in one ``put`` from this process: the client's work and the server's, nothing else running), added
to the local run's time outside its write step.
A bucket run near that floor overlaps its uploads with its work; what is left above the local time is the
server's. ``MOTO_S3_DEFAULT_KEY_BUFFER_SIZE`` keeps objects of up to 64 MB in the server's memory.

    .venv/bin/python benchmarks/bench_remote_stream.py [--n 2000] [--workers 2] [--quick] [--repeat 3]
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.bench_formats import start_moto, write_layouts  # noqa: E402
from curate.fixtures.processor import build_tiny_processor  # noqa: E402


def folder_bytes(folder: Path) -> int:
    """Bytes of the files under ``folder`` (files vanishing while it is walked count as gone)."""
    total = 0
    for root, _, names in os.walk(folder):
        for name in names:
            try:
                total += os.stat(os.path.join(root, name)).st_size
            except OSError:
                pass
    return total


class Poller:
    """Samples the bytes under a folder every ``every`` seconds in a thread; keeps the peak."""

    def __init__(self, folder: Path, every: float = 0.02) -> None:
        self.folder, self.every, self.peak, self.samples = folder, every, 0, 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            self.peak = max(self.peak, folder_bytes(self.folder))
            self.samples += 1
            self._stop.wait(self.every)

    def __enter__(self) -> Poller:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()


def server_cpu(pid: int) -> float:
    """CPU seconds (user + system) the process ``pid`` has used so far (Linux ``/proc``; 0 elsewhere)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def own_cpu() -> float:
    """CPU seconds of this process and its ended children (the pack workers)."""
    me, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return me.ru_utime + me.ru_stime + kids.ru_utime + kids.ru_stime


def main() -> int:
    """Pack locally, then into the bucket while polling the staging folder; print the figures."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=2000, help="images (640×480)")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--quick", action="store_true", help="240 images")
    parser.add_argument("--repeat", type=int, default=1,
                        help="run both packs this many times, alternating, and compare the best of each (a busy "
                             "machine's noise out of the ratio)")
    args = parser.parse_args()
    if args.quick:
        args.n = 240
    import s3fs

    from packer.pack import pack

    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        t0 = time.perf_counter()
        write_layouts(tmp / "data", args.n)
        processor = str(build_tiny_processor(tmp / "processor"))
        print(f"{args.n} images written in {time.perf_counter() - t0:.1f}s")
        os.environ.setdefault("MOTO_S3_DEFAULT_KEY_BUFFER_SIZE", str(64 << 20))
        proc, endpoint = start_moto()
        try:
            fs = s3fs.S3FileSystem(endpoint_url=endpoint)
            fs.mkdir("bench")
            src = [str(tmp / "data" / "tars" / "{00000..00003}.tar")]
            kw = dict(processor=processor, ctx=4096, shard_size=100, sequences_per_shard=max(1, args.n // 500),
                      seed=0, verify_sample=0, plot=False, workers=args.workers)
            local_s = bucket_s = float("inf")
            peak = samples = 0
            cpu = {"local": [], "bucket": [], "server": []}
            for round_ in range(max(1, args.repeat)):  # fresh caches and outputs each round: no counts reused
                os.environ["CURATE_CACHE"] = str(tmp / f"cache-{round_}")
                shutil.rmtree(tmp / "local", ignore_errors=True)
                c0, t0 = own_cpu(), time.perf_counter()
                steps = pack(src, out=tmp / "local", **kw)["timings"]
                cpu["local"].append(own_cpu() - c0)
                if time.perf_counter() - t0 < local_s:
                    local_s, local_steps = time.perf_counter() - t0, steps
                os.environ["CURATE_CACHE"] = str(tmp / f"cache-bucket-{round_}")
                fs.invalidate_cache()
                if fs.exists("bench/out"):
                    fs.rm("bench/out", recursive=True)
                with Poller(tmp / f"cache-bucket-{round_}" / "remote") as poll:
                    c0, s0, t0 = own_cpu(), server_cpu(proc.pid), time.perf_counter()
                    steps = pack(src, out="s3://bench/out", **kw)["timings"]
                    cpu["bucket"].append(own_cpu() - c0)
                    cpu["server"].append(server_cpu(proc.pid) - s0)
                    if time.perf_counter() - t0 < bucket_s:
                        bucket_s, bucket_steps = time.perf_counter() - t0, steps
                peak, samples = max(peak, poll.peak), samples + poll.samples
                print(f"round {round_ + 1}: local {local_s:.1f}s, bucket {bucket_s:.1f}s (best so far)")
            files = sorted(p for p in (tmp / "local").rglob("*") if p.is_file())
            t0 = time.perf_counter()
            fs.put([str(p) for p in files], [f"bench/ingest/{p.relative_to(tmp / 'local').as_posix()}" for p in files])
            ingest_s = time.perf_counter() - t0
            fs.rm("bench/ingest", recursive=True)
            left = folder_bytes(tmp / f"cache-bucket-{round_}" / "remote")
            fs.invalidate_cache()
            objects = {p: int(i["size"]) for p, i in fs.find("bench/out", detail=True).items()}
            output = sum(objects.values())
            tars = [size for p, size in objects.items() if p.endswith(".tar")]
            shard = max(tars)
            bound = 2 * args.workers * shard
            print(f"output in the bucket: {output:,} bytes in {len(objects)} objects ({len(tars)} tars, the largest "
                  f"{shard:,} bytes); local run {folder_bytes(tmp / 'local'):,} bytes")
            print(f"peak local staging bytes: {peak:,} ({samples} samples) = {peak / output:.1%} of "
                  f"the output, {peak / bound:.2f} × (2 × {args.workers} workers × one shard = {bound:,}); "
                  f"left after the run: {left:,} bytes")
            print(f"wall time: local {local_s:.1f}s, bucket {bucket_s:.1f}s, ratio {bucket_s / local_s:.2f}× "
                  "(target ≤ 1.3×)")
            floor = local_s - local_steps.get("write", 0) + max(local_steps.get("write", 0), ingest_s)
            mid = {k: statistics.median(v) for k, v in cpu.items()}
            print(f"CPU seconds (median of rounds): local run {mid['local']:.1f}, bucket run {mid['bucket']:.1f} + the "
                  f"server {mid['server']:.1f}, on {os.cpu_count()} cores")
            print(f"uploading the output alone takes {ingest_s:.1f}s: floor for the bucket run {floor:.1f}s "
                  f"({floor / local_s:.2f}× local); the bucket run is {bucket_s / floor:.2f}× that floor")
            steps = ("lengths", "plan", "write")  # the driver's steps; the rest of the bucket run is the final upload
            print("driver steps (s), local / bucket: " + ", ".join(
                f"{k} {local_steps.get(k, 0):.1f} / {bucket_steps.get(k, 0):.1f}" for k in steps)
                + f"; outside them {local_s - sum(local_steps.get(k, 0) for k in steps):.1f} / "
                f"{bucket_s - sum(bucket_steps.get(k, 0) for k in steps):.1f}")
            ok = peak <= bound and peak <= 0.10 * output
            print(f"local disk bound: {'met' if ok else 'NOT met'} "
                  "(≤ 2 × workers × one shard and ≤ 10% of the output)")
        finally:
            proc.terminate()
            proc.wait(timeout=30)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
