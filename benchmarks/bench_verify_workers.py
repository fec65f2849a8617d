"""``curate verify --workers 2`` vs ``--workers 1`` on the same packed folder (records/s and MB/s of tars).

Usage:
    python benchmarks/bench_verify_workers.py            # 36,000 records over the sample images (4.2 GB of tars)
    python benchmarks/bench_verify_workers.py --quick    # 600

Packs N seeded records (each one of the bundled sample images and a caption) into
tars of 8 sequences with the tiny processor, then times ``verify_pack`` with
--workers 1 and 2 in this process after one warm-up run (imports and the processor
load on the driver are the same for both and left out; worker start is included),
in ``--repeat`` rounds, each setting's best reported. Verify reads only member
headers, JSON and image heads and tails, about 0.3 ms of CPU per sequence here; the
default size keeps each timing above a second so that its fixed costs (the pool's
start, the driver's whole-pack checks) do not make the ratio. Target: >= 1.6x.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def main(argv: list[str] | None = None) -> None:
    """Run the benchmark."""
    from curate.fixtures.processor import build_tiny_processor
    from packer.pack import pack

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=36_000)
    ap.add_argument("--repeat", type=int, default=3, help="rounds of the two timings (each one's best is reported)")
    ap.add_argument("--quick", action="store_true")
    args = ap.parse_args(argv)
    n = 600 if args.quick else args.n
    images = sorted((ROOT / "data" / "sample" / "images").glob("*.jpg"))
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        os.environ["CURATE_CACHE"] = str(tmp / "cache")
        data = tmp / "records.jsonl"
        with open(data, "w") as fh:
            for i in range(n):
                fh.write(json.dumps({"id": f"v{i}", "source": "bench", "images": [str(images[i % len(images)])],
                                     "messages": [{"role": "user", "content": "<image>\nDescribe."},
                                                  {"role": "assistant", "content": f"Picture number {i}."}]}) + "\n")
        proc = build_tiny_processor(tmp / "processor")
        t0 = time.perf_counter()
        pack([str(data)], out=tmp / "pack", ctx=4096, processor=str(proc), sequences_per_shard=8, verify_sample=0,
             plot=False, workers=2)
        tars = sorted((tmp / "pack" / "shards").glob("*.tar"))
        size = sum(t.stat().st_size for t in tars) / 1e6
        print(f"verify: {n:,} records in {len(tars)} tars ({size:,.0f} MB, packed in {time.perf_counter() - t0:.0f} s); "
              f"machine: {os.cpu_count()} cores, load average {os.getloadavg()[0]:.1f}")
        rates = {}
        from packer.verify import verify_pack

        verify_pack(tmp / "pack", sample=0)  # warm: imports and the processor load are not what is compared
        best: dict[int, float] = {}
        for _ in range(args.repeat):  # rounds, each timing both, so a change of load hits them alike
            for workers in (1, 2):
                t0 = time.perf_counter()
                report = verify_pack(tmp / "pack", sample=0, workers=workers)
                best[workers] = min(best.get(workers, float("inf")), time.perf_counter() - t0)
                assert report.ok, report.problems[:3]
        for workers, seconds in best.items():
            rates[workers] = n / seconds
            print(f"  --workers {workers}: {seconds:.2f} s (best of {args.repeat}) = {rates[workers]:,.0f} records/s, "
                  f"{size / seconds:,.1f} MB of tars/s")
        print(f"  ratio --workers 2 / 1: {rates[2] / rates[1]:.2f}x  (target >= 1.6x)")


if __name__ == "__main__":
    main()
