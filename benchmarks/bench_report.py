"""Benchmark of ``curate report`` on a large pack: report size and time against reading the plan.

Usage:
    python benchmarks/bench_report.py            # 300,000 records
    python benchmarks/bench_report.py --quick    # 30,000 records
    python benchmarks/bench_report.py --n 3000000

Writes a seeded ``lengths.parquet`` (as ``bench_pack_plan.py``), packs it with ``curate pack
--lengths L --plan-only --ctx 8192`` (a child process), then times ``curate report OUT`` in a
child process and ``write_report`` in this one, and prints the report's size and file count.
The baseline measured in the same run is a bare pyarrow read of ``plan.parquet`` plus the
rejects (what any report must at least read); the report time is printed as a ratio of it.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

import pyarrow.parquet as pq

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench_pack_plan import make_lengths, run_child  # noqa: E402


def _size(folder: Path) -> tuple[int, int]:
    files = [p for p in folder.rglob("*") if p.is_file()]
    return sum(p.stat().st_size for p in files), len(files)


def bench(n: int, tmp: Path, samples: int) -> None:
    """Print the figures for ``n`` records."""
    lengths = tmp / "lengths.parquet"
    make_lengths(lengths, n)
    out = tmp / "pack"
    run_child([sys.executable, "-m", "curate", "pack", "--lengths", str(lengths), "--plan-only", "--ctx", "8192",
               "--out", str(out)])
    t0 = time.perf_counter()
    pq.read_table(out / "plan.parquet")
    pq.read_table(out / "rejects.parquet")
    base = time.perf_counter() - t0

    from curate.report import write_report

    t0 = time.perf_counter()
    write_report(out, samples=samples)
    inproc = time.perf_counter() - t0
    child, peak, cpu = run_child([sys.executable, "-m", "curate", "report", str(out), "--samples", str(samples)])
    size, files = _size(out / "report")
    bins = pq.ParquetFile(out / "plan.parquet").metadata.num_rows
    print(f"curate report on a {n:,}-record pack ({bins:,} plan rows), --samples {samples}:")
    print(f"  report size         {size / 1024:.0f} KiB in {files} files")
    print(f"  write_report        {inproc:.2f} s in process  ({inproc / base:.1f}x the baseline)")
    print(f"  curate report       {child:.2f} s wall end to end, {cpu:.2f} s CPU, peak RSS {peak:.2f} GiB "
          "(python start and imports included)")
    print(f"  baseline            {base:.3f} s: pyarrow read of plan.parquet + rejects.parquet, same run")


def main(argv: list[str] | None = None) -> None:
    """Run the benchmark."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=300_000)
    ap.add_argument("--samples", type=int, default=48)
    ap.add_argument("--quick", action="store_true")
    args = ap.parse_args(argv)
    print(f"machine: {os.cpu_count()} cores, load average {os.getloadavg()[0]:.1f}")
    with tempfile.TemporaryDirectory() as tmp:
        bench(30_000 if args.quick else args.n, Path(tmp), args.samples)


if __name__ == "__main__":
    main()
