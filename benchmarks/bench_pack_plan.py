"""Benchmark of ``curate pack --lengths L --plan-only`` end to end (driver-side plan step).

Usage:
    python benchmarks/bench_pack_plan.py            # 10M and 30M lengths, ctx 8192
    python benchmarks/bench_pack_plan.py --quick    # 1M lengths
    python benchmarks/bench_pack_plan.py --n 10000000
    python benchmarks/bench_pack_plan.py --repeat 3 --data /tmp/lengths   # best of 3, files kept

Writes a seeded ``lengths.parquet`` (ids ``r000000000``..., 8 sources, 0.1% repeated
ids, lengths from ``benchmarks/synthetic.py``), then runs ``python -m curate pack
--lengths ... --plan-only`` in a child process and prints its wall time, its peak
resident memory (the child's ``ru_maxrss``), bins / lower bound, and the time of
a bare pyarrow read of the same columns measured in the same run (the floor).
Targets (issue 14): 10M <= 10 s and <= 1.2 GiB; 30M <= 35 s; bins / lower bound <= 1.0001.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

sys.path.insert(0, str(Path(__file__).resolve().parent))

from synthetic import synthetic_lengths  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent


def make_lengths(path: Path, n: int, seed: int = 0) -> None:
    """A lengths.parquet of ``n`` rows with a few repeated ids, written in row groups."""
    tokens = synthetic_lengths(n, seed)
    rng = np.random.default_rng([seed, 1])
    idx = np.arange(n, dtype=np.int64)
    dup = rng.random(n) < 0.001
    idx[dup] = rng.integers(0, n, int(dup.sum()))
    names = np.array([f"src{k}" for k in range(8)])
    schema = pa.schema([("id", pa.string()), ("source", pa.string()), ("tokens", pa.int32())])
    with pq.ParquetWriter(path, schema) as writer:
        for lo in range(0, n, 1 << 20):
            hi = min(n, lo + (1 << 20))
            ids = pa.array(np.char.add("r", np.char.zfill(idx[lo:hi].astype(str), 9)).tolist(), pa.string())
            src = pa.array(names[rng.integers(0, 8, hi - lo)].tolist(), pa.string())
            writer.write_table(pa.table([ids, src, pa.array(tokens[lo:hi], pa.int32())], schema=schema))


def run_child(cmd: list[str]) -> tuple[float, float, float]:
    """(wall seconds, peak RSS GiB, CPU seconds) of a child process."""
    t0 = time.perf_counter()
    with tempfile.TemporaryFile() as err:
        proc = subprocess.Popen(cmd, cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"},
                                stdout=subprocess.DEVNULL, stderr=err)
        _, status, usage = os.wait4(proc.pid, 0)
        wall = time.perf_counter() - t0
        if os.waitstatus_to_exitcode(status) != 0:
            err.seek(0)
            raise SystemExit(f"failed: {' '.join(cmd)}\n{err.read().decode(errors='replace')[-2000:]}")
    return wall, usage.ru_maxrss / 2**20, usage.ru_utime + usage.ru_stime


def bench(n: int, tmp: Path, workers: int, data: Path, repeat: int) -> None:
    """Print the figures for ``n`` lengths (the best of ``repeat`` runs: the least disturbed by other load)."""
    lengths = data / f"lengths-{n}.parquet"
    t0 = time.perf_counter()
    if not lengths.exists():  # a --data folder keeps the seeded file between runs
        make_lengths(lengths, n)
    gen = time.perf_counter() - t0
    read_cmd = [sys.executable, "-c", f"import pyarrow.parquet as pq; pq.read_table({str(lengths)!r})"]
    read_s, read_gib, read_cpu = run_child(read_cmd)
    runs = []
    for k in range(repeat):
        out = tmp / f"plan-{n}-{k}"
        cmd = [sys.executable, "-m", "curate", "pack", "--lengths", str(lengths), "--plan-only", "--ctx", "8192",
               "--out", str(out), "--workers", str(workers)]
        runs.append(run_child(cmd))
        stats = json.loads((out / "stats.json").read_text())
    wall, peak, cpu = min(r[0] for r in runs), max(r[1] for r in runs), min(r[2] for r in runs)
    print(f"pack --plan-only, {n:,} lengths (made in {gen:.0f} s), workers {workers}, load {os.getloadavg()[0]:.1f}:")
    print(f"  end to end          {wall:.2f} s wall, {cpu:.2f} s CPU   peak RSS {peak:.2f} GiB"
          + (f"  (best of {repeat}; all: {', '.join(f'{w:.1f}/{c:.1f} s' for w, c in ((r[0], r[2]) for r in runs))})"
             if repeat > 1 else ""))
    print(f"  bare pyarrow read   {read_s:.2f} s wall, {read_cpu:.2f} s CPU   peak RSS {read_gib:.2f} GiB"
          "  (same file, same run; python start included)")
    print(f"  plan step           {stats['timings']['plan']:.2f} s (driver)")
    print(f"  bins / lower bound  {stats['bins_over_lower_bound']:.6f}  ({stats['bins']:,} bins)")
    print(f"  records packed      {stats['records_packed']:,}; dropped {stats['dropped']}; errored {stats['errored']}")


def main(argv: list[str] | None = None) -> None:
    """Run the benchmark."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, nargs="*", default=[10_000_000, 30_000_000])
    ap.add_argument("--workers", type=int, default=min(2, os.cpu_count() or 1))
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--repeat", type=int, default=1, help="runs per size; the best wall and CPU are printed")
    ap.add_argument("--data", type=Path, default=None, help="folder keeping the generated lengths files")
    args = ap.parse_args(argv)
    sizes = [1_000_000] if args.quick else args.n
    print(f"machine: {os.cpu_count()} cores, load average {os.getloadavg()[0]:.1f} (wall times inflate with load;"
          " CPU times do less)")
    with tempfile.TemporaryDirectory() as tmp:
        data = args.data or Path(tmp)
        data.mkdir(parents=True, exist_ok=True)
        for n in sizes:
            bench(n, Path(tmp), args.workers, data, max(1, args.repeat))


if __name__ == "__main__":
    main()
