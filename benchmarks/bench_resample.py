"""Benchmark: ``curate resample`` on 10,000,000 records × K=5 tags: wall time and peak memory.

Usage:
    python benchmarks/bench_resample.py            # 10M records, K=5, 500,000 concepts (Zipf 1.1)
    python benchmarks/bench_resample.py --quick    # 1M records

A seeded synthetic ``tags.parquet`` is written first (not timed). Then two
child processes run one after the other, each measured for wall time and peak
resident memory (``ru_maxrss`` of the child):

* baseline: reading the tags' ``id``, ``source`` and ``concepts`` columns with
  pyarrow, the least any resampler must do;
* ``curate resample --fraction 0.2`` (inverse frequency, mean weighting; the
  selection, stats and rejects written, the plot drawn).

Prints both, the ratio resample/baseline, and the targets (issue 14: ≤ 1.5× the read, ≤ 1.2 GiB).
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from curate.balance.tag import TAGS_SCHEMA  # noqa: E402

_BASELINE = """
import sys, pyarrow.parquet as pq
t = pq.read_table(sys.argv[1], columns=["id", "source", "concepts"])
t.column("concepts").combine_chunks().flatten().to_numpy()
"""
_RESAMPLE = """
import sys
from curate.balance.resample import resample
r = resample(sys.argv[1], out=sys.argv[2], fraction=0.2, seed=0)
print(r["records_selected"], r["balance"]["head_share_before"], r["balance"]["head_share_after"])
"""


def write_tags(path: Path, n: int, k: int, concepts: int, seed: int = 0) -> None:
    """Write a synthetic tags file: Zipf(1.1) concept ids, distinct within a record, in row groups."""
    rng = np.random.default_rng(seed)
    cdf = np.cumsum(1.0 / np.arange(1, concepts + 1) ** 1.1)
    cdf /= cdf[-1]
    chunk = 1_000_000
    with pq.ParquetWriter(path, TAGS_SCHEMA.with_metadata({b"concepts_embedded": str(concepts).encode()}),
                          compression="zstd") as writer:
        for lo in range(0, n, chunk):
            m = min(chunk, n - lo)
            first = np.searchsorted(cdf, rng.random(m)).astype(np.int64)
            # K distinct ids per record: the first Zipf draw, then neighbours on a ring of the vocabulary.
            steps = np.sort(rng.choice(np.arange(1, 997), size=(m, k - 1), replace=True), axis=1) if k > 1 else None
            ids_mat = first[:, None] if steps is None else np.concatenate(
                [first[:, None], (first[:, None] + np.cumsum(steps, axis=1)) % concepts], axis=1)
            flat = ids_mat.astype(np.int32).ravel()
            offsets = pa.array(np.arange(0, m * k + 1, k, dtype=np.int32))
            ids = pc.binary_join_element_wise("r", pa.array(np.arange(lo, lo + m)).cast(pa.string()), "")
            sources = pa.array(np.where(np.arange(lo, lo + m) % 3 == 0, "laion", "coyo"))
            scores = pa.array(np.repeat(np.linspace(0.3, 0.2, k, dtype=np.float32)[None], m, axis=0).ravel())
            writer.write_table(pa.table([ids, sources, pa.ListArray.from_arrays(offsets, pa.array(flat)),
                                         pa.ListArray.from_arrays(offsets, scores)], schema=TAGS_SCHEMA))


def run_child(code: str, *args: str) -> tuple[float, float, str]:
    """Run Python code in a child; return (wall seconds, peak RSS GiB, stdout)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    t0 = time.perf_counter()
    proc = subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, cwd=ROOT,
                          env={**os.environ, "PYTHONPATH": str(ROOT)})
    wall = time.perf_counter() - t0
    if proc.returncode:
        raise SystemExit(proc.stderr)
    peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    if peak <= before:
        print("  (note: peak RSS not above an earlier child's; reported value is the earlier maximum)")
    return wall, peak / 1024 / 1024, proc.stdout.strip()


def main(argv: list[str] | None = None) -> None:
    """Run the benchmark and print its figures."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=10_000_000)
    parser.add_argument("--k", type=int, default=5)
    parser.add_argument("--concepts", type=int, default=500_000)
    parser.add_argument("--quick", action="store_true", help="1M records")
    args = parser.parse_args(argv)
    if args.quick:
        args.n = 1_000_000
    tmp = Path(tempfile.mkdtemp(prefix="bench-resample-"))
    try:
        tags = tmp / "tags.parquet"
        t0 = time.perf_counter()
        write_tags(tags, args.n, args.k, args.concepts)
        print(f"{args.n:,} records × K={args.k} over {args.concepts:,} concepts "
              f"({tags.stat().st_size / 1e6:.0f} MB parquet, written in {time.perf_counter() - t0:.1f}s)")
        # The baseline runs first: ru_maxrss of children is a running maximum, so the larger one must come second.
        base_wall, base_mem, _ = run_child(_BASELINE, str(tags))
        wall, mem, out = run_child(_RESAMPLE, str(tags), str(tmp / "out"))
        selected, head_before, head_after = out.split()
        print(f"baseline (read id, source, concepts):  {base_wall:6.1f}s  peak {base_mem:.2f} GiB")
        print(f"curate resample --fraction 0.2:        {wall:6.1f}s  peak {mem:.2f} GiB  "
              f"({int(selected):,} selected; top-1% share {float(head_before):.3f} → {float(head_after):.3f})")
        print(f"ratio resample/baseline: time {wall / base_wall:.2f}×, memory {mem / base_mem:.2f}×  "
              f"(targets for 10M × 5: ≤ 1.5× the bare read, ≤ 1.2 GiB)")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
