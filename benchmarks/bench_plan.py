"""Benchmark of the hash-bucket planner against plain first-fit decreasing.

Usage:
    python benchmarks/bench_plan.py             # 10M synthetic lengths, ctx 8192
    python benchmarks/bench_plan.py --quick     # 200k lengths, seconds
    python benchmarks/bench_plan.py --ffd-n 0   # FFD on all lengths too (about a minute per 10M)

Prints bins, lower bound, their ratio, fill ratio, wall time, peak memory and
padding reduction of ``packer.plan.plan_bins`` on the synthetic mixture of
``benchmarks/synthetic.py``, then the wall-time and bin-count ratios against
``packer.plan.first_fit_decreasing`` measured in the same process. FFD works
record by record in Python, so by default both run on the same first 1M lengths
for the ratio (the synthetic generator's first m values do not depend on n).
"""

from __future__ import annotations

import argparse
import os
import resource
import sys
import time
import tracemalloc
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from synthetic import synthetic_lengths  # noqa: E402

from packer.plan import first_fit_decreasing, padding_reduction, plan_bins  # noqa: E402


def _maxrss_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


_CPU: dict[int, float] = {}


def _timed(fn, *args, **kwargs):  # type: ignore[no-untyped-def]
    """(result, wall seconds); the call's process CPU seconds go to ``_CPU[id(result)]``."""
    cpu = time.process_time()
    start = time.perf_counter()
    out = fn(*args, **kwargs)
    wall = time.perf_counter() - start
    _CPU[id(out)] = time.process_time() - cpu
    return out, wall


def main(argv: list[str] | None = None) -> None:
    """Run the benchmark and print its figures."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=10_000_000, help="synthetic lengths")
    parser.add_argument("--ctx", type=int, default=8192)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--workers", type=int, default=min(2, os.cpu_count() or 1))
    parser.add_argument(
        "--ffd-n", type=int, default=1_000_000, help="lengths for the FFD comparison (0: all)"
    )
    parser.add_argument("--quick", action="store_true", help="200k lengths, FFD on 100k")
    args = parser.parse_args(argv)
    if args.quick:
        args.n, args.ffd_n = 200_000, 100_000
    ffd_n = args.n if args.ffd_n <= 0 else min(args.ffd_n, args.n)

    lengths, gen_s = _timed(synthetic_lengths, args.n, args.seed)
    print(
        f"plan: {args.n:,} synthetic lengths (seed {args.seed}, generated in {gen_s:.1f} s), "
        f"ctx {args.ctx}, workers {args.workers}; machine: {os.cpu_count()} cores, "
        f"load average {os.getloadavg()[0]:.1f} at start"
    )
    rss_before = _maxrss_mib()
    plan, plan_s = _timed(plan_bins, lengths, args.ctx, seed=args.seed, workers=args.workers)
    rss_delta = _maxrss_mib() - rss_before
    _, serial_s = _timed(plan_bins, lengths, args.ctx, seed=args.seed, workers=1)

    tracemalloc.start()
    again = plan_bins(lengths, args.ctx, seed=args.seed, workers=1)
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    same = all(
        np.array_equal(getattr(plan, k), getattr(again, k))
        for k in ("bin_of", "bin_offsets", "members", "bin_tokens")
    )
    del again
    reduction, pad_s = _timed(padding_reduction, lengths, plan, batch_size=8, seed=args.seed)

    print(f"  records packed      {plan.records_packed:,}  (too long {plan.too_long.size:,}, "
          f"empty {plan.empty.size:,})")
    print(f"  bins                {plan.bins:,}")
    print(f"  lower bound bins    {plan.lower_bound_bins:,}")
    print(f"  bins / lower bound  {plan.bins / max(1, plan.lower_bound_bins):.6f}")
    print(f"  fill ratio          {plan.fill_ratio:.6f}")
    print(f"  wall time           {plan_s:.2f} s with workers={args.workers} "
          f"({serial_s:.2f} s with workers=1); CPU time {_CPU[id(plan)]:.2f} s")
    print(f"  peak memory         {peak / 2**20:,.0f} MiB traced (tracemalloc, rerun with "
          f"workers=1); maxrss grew {rss_delta:,.0f} MiB; input {lengths.nbytes / 2**20:,.0f} MiB")
    print(f"  same plan on rerun with workers=1: {'yes' if same else 'NO'}")
    print(f"  padding reduction   {reduction:,.1f}x  (random batches of 8 padded to their "
          f"longest: {plan.padding_tokens:,} padding tokens in bins; {pad_s:.1f} s)")

    sub = lengths[:ffd_n]
    if ffd_n == args.n:
        sub_plan, sub_plan_s = plan, plan_s
        where = f"the same {ffd_n:,} lengths"
    else:
        sub_plan, sub_plan_s = _timed(plan_bins, sub, args.ctx, seed=args.seed,
                                      workers=args.workers)
        where = (f"the same first {ffd_n:,} lengths for both (FFD goes record by record "
                 f"in Python; --ffd-n 0 runs it on all {args.n:,})")
    ffd, ffd_s = _timed(first_fit_decreasing, sub, args.ctx)
    print(f"baseline: plain first-fit decreasing (max segment tree) on {where}")
    ffd_cpu, plan_cpu = _CPU[id(ffd)], _CPU[id(sub_plan)]
    print(f"  FFD   bins {ffd.bins:,}  lower bound {sub_plan.lower_bound_bins:,}  "
          f"wall {ffd_s:.2f} s  CPU {ffd_cpu:.2f} s")
    print(f"  plan  bins {sub_plan.bins:,}  lower bound {sub_plan.lower_bound_bins:,}  "
          f"wall {sub_plan_s:.2f} s  CPU {plan_cpu:.2f} s")
    print(f"  wall time FFD / plan   {ffd_s / sub_plan_s:.1f}x  (CPU time {ffd_cpu / plan_cpu:.1f}x)")
    print(f"  bins plan / FFD        {sub_plan.bins / max(1, ffd.bins):.6f}")


if __name__ == "__main__":
    main()
