"""Benchmark: ``resample``'s ``records/`` (the selected records written back) from img2dataset-shaped tars,
in one process and in worker processes.

Usage:
    python benchmarks/bench_selected_records.py            # 8 tars × 10,000 samples, 20% selected
    python benchmarks/bench_selected_records.py --quick    # 4 tars × 2,000 samples

Every input record is read again to find the selected ones (``balance`` does this by default), so
at the seed's scale (85M records) this step reads the whole corpus. Times
:func:`curate.core.filters.write_kept` (per input file) with ``workers=1`` and with one worker per core
(alternating, best of ``--repeat``), checks the files are the same bytes, and prints records/s,
the ratio and the projection for 85M records on one 64-core node.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

import pyarrow as pa  # noqa: E402

from bench_tar_plan import write_tars  # noqa: E402
from curate.core.filters import write_kept  # noqa: E402
from curate.core.threads import available_cpus  # noqa: E402

SEED_RECORDS = 85_000_000
NODE_CORES = 64


def main(argv: list[str] | None = None) -> None:
    """Run the benchmark and print its figures."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tars", type=int, default=8)
    parser.add_argument("--samples", type=int, default=10_000)
    parser.add_argument("--repeat", type=int, default=2)
    parser.add_argument("--quick", action="store_true", help="4 tars × 2,000 samples")
    args = parser.parse_args(argv)
    if args.quick:
        args.tars, args.samples, args.repeat = 4, 2_000, 1
    tmp = Path(tempfile.mkdtemp(prefix="bench-selected-"))
    try:
        size = write_tars(tmp / "laion", args.tars, args.samples)
        n = args.tars * args.samples
        chosen = [f"{t:05d}{i:04d}" for t in range(args.tars) for i in range(0, args.samples, 5)]
        selection = pa.table({"id": chosen, "copies": pa.array([1] * len(chosen), pa.int32())})
        cores = available_cpus()
        print(f"{args.tars} tars × {args.samples:,} samples ({size / 1e6:.0f} MB), {len(chosen):,} selected; "
              f"{cores} cores")
        best: dict[int, float] = {}
        for r in range(args.repeat):
            for workers in (1, cores):
                out = tmp / f"out-{workers}"
                shutil.rmtree(out, ignore_errors=True)
                t0 = time.perf_counter()
                result = write_kept(out, inputs=[tmp / "laion"], selection=selection, workers=workers)
                best[workers] = min(best.get(workers, float("inf")), time.perf_counter() - t0)
                if result["records"] != len(chosen):
                    raise SystemExit(f"wrote {result['records']} records, expected {len(chosen)}")
        for name in result["files"]:  # laion/00000.parquet …: under the dataset's folder
            if (tmp / "out-1" / name).read_bytes() != (tmp / f"out-{cores}" / name).read_bytes():
                raise SystemExit(f"{name} differs between 1 and {cores} workers")
        for workers, wall in best.items():
            print(f"workers={workers:<3d} {wall:7.2f}s  {n / wall:9,.0f} records/s read  {best[1] / wall:5.2f}×")
        per_core = n / best[1]
        print(f"85M records: {SEED_RECORDS / per_core / 3600:.1f} h in one process (before), "
              f"≈{SEED_RECORDS / per_core / NODE_CORES / 60:.0f} min over {NODE_CORES} cores "
              "(the rate of one process here)")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
