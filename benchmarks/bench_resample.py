"""Benchmark: ``curate resample`` on 10,000,000 records × K=5 tags: wall and CPU time, peak memory.

Usage:
    python benchmarks/bench_resample.py            # 10M records, K=5, 500,000 concepts (Zipf 1.1)
    python benchmarks/bench_resample.py --quick    # 1M records
    python benchmarks/bench_resample.py --repeat 10 # 10 rounds of the children (default 5), each child's fastest reported

A seeded synthetic ``tags.parquet`` is written first (not timed). Then child
processes run one after the other, each measured for wall time, CPU time
(user + system, all threads and any child process) and peak resident memory:

* baseline ``read_table``: ``pq.read_table`` of the ``id``, ``source`` and ``concepts``
  columns and the flat concept values as numpy, the bare pyarrow read of the
  columns resample needs (the baseline of issue 14);
* baseline ``row groups``: the same columns read the way resample reads them (one
  row group at a time, ``source`` dictionary-encoded), the least any resampler
  must do; a stricter reference, since it is cheaper than ``read_table``;
* ``curate resample --fraction 0.2`` (inverse frequency, mean weighting; the
  selection, stats and rejects written, the plot drawn with Pillow, :mod:`curate.core.chart`);
* the same without the plot (``plot=False``), to show what the plot costs.

The ids are ``r0 … r9999999``, a counter without zero padding, the usual shape of
ids made from row numbers: increasing in (length, bytes) order, which proves them
distinct without a sort (:func:`curate.core.columns.first_occurrences`). With
``--unordered-ids`` (on by default in ``make bench``, ``--no-unordered-ids`` to skip)
a second file has the same ids in a shuffled order, and resample is timed on it too:
repeats are then looked for by hashing every id (and sorting the few that share a hash).

Every child pays the interpreter start and its imports; the baselines' conversions to
numpy import pandas (pyarrow does on its first conversion), resample converts through
the buffers (:mod:`curate.core.columns`) and does not. Prints each, the ratios
resample/baseline (of each child's fastest run, and the median of the ratios within a round: the
machine's speed changes within minutes, so one child's fastest run may come from a faster moment than
another's), and the targets (issue 14: ≤ 1.5× the read, ≤ 1.2 GiB).
"""

from __future__ import annotations

import argparse
import os
import random
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
_ROW_GROUPS = """
import sys, pyarrow.parquet as pq
f = pq.ParquetFile(sys.argv[1], read_dictionary=["source"])
kept = [f.read_row_group(g, columns=["id", "source", "concepts"]) for g in range(f.num_row_groups)]
[c.values.to_numpy() for t in kept for c in t.column("concepts").chunks]
"""
_RESAMPLE = """
import sys
from curate.balance.resample import resample
r = resample(sys.argv[1], out=sys.argv[2], fraction=0.2, seed=0, plot=sys.argv[3] == "plot")
print(r["records_selected"], r["balance"]["head_share_before"], r["balance"]["head_share_after"])
"""


def write_tags(path: Path, n: int, k: int, concepts: int, seed: int = 0, shuffled_ids: bool = False) -> None:
    """Write a synthetic tags file: Zipf(1.1) concept ids, distinct within a record, in row groups; ids
    ``r<row>``, or (``shuffled_ids``) the same ids in a seeded random order."""
    rng = np.random.default_rng(seed)
    numbers = np.random.default_rng(seed + 1).permutation(n) if shuffled_ids else np.arange(n)
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
            ids = pc.binary_join_element_wise("r", pa.array(numbers[lo:lo + m]).cast(pa.string()), "")
            sources = pa.array(np.where(np.arange(lo, lo + m) % 3 == 0, "laion", "coyo"))
            scores = pa.array(np.repeat(np.linspace(0.3, 0.2, k, dtype=np.float32)[None], m, axis=0).ravel())
            writer.write_table(pa.table([ids, sources, pa.ListArray.from_arrays(offsets, pa.array(flat)),
                                         pa.ListArray.from_arrays(offsets, scores)], schema=TAGS_SCHEMA))


_PEAK = """
with open("/proc/self/status") as _status:  # the peak since exec (ru_maxrss would count the parent's pages too)
    print(next(line for line in _status if line.startswith("VmHWM")).split()[1], file=sys.stderr)
"""


def run_child(code: str, *args: str) -> tuple[float, float, float, str]:
    """Run Python code in a child; return (wall seconds, CPU seconds (its own child processes' included),
    peak RSS GiB (its own), stdout)."""
    with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
        t0 = time.perf_counter()
        proc = subprocess.Popen([sys.executable, "-c", code + _PEAK, *args], stdout=out, stderr=err, cwd=ROOT,
                                env={**os.environ, "PYTHONPATH": str(ROOT)})
        _, status, usage = os.wait4(proc.pid, 0)  # this child's CPU time (all its threads, and its children's)
        wall = time.perf_counter() - t0
        proc.returncode = os.waitstatus_to_exitcode(status)
        out.seek(0)
        err.seek(0)
        errors = err.read()
        if proc.returncode:
            raise SystemExit(errors)
        peak_kib = int(errors.strip().splitlines()[-1])
        return wall, usage.ru_utime + usage.ru_stime, peak_kib / 1024 / 1024, out.read().strip()


def best_of(runs: list[tuple[float, float, float, str]]) -> tuple[float, float, float, str]:
    """The smallest wall, CPU and peak of several runs of one child (and the last one's output)."""
    return min(r[0] for r in runs), min(r[1] for r in runs), min(r[2] for r in runs), runs[-1][3]


def main(argv: list[str] | None = None) -> None:
    """Run the benchmark and print its figures."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=10_000_000)
    parser.add_argument("--k", type=int, default=5)
    parser.add_argument("--concepts", type=int, default=500_000)
    parser.add_argument("--quick", action="store_true", help="1M records")
    parser.add_argument("--repeat", type=int, default=5,
                        help="rounds of the children, each round in a shuffled order (each child's fastest run is "
                             "reported)")
    parser.add_argument("--unordered-ids", action=argparse.BooleanOptionalAction, default=True,
                        help="also time resample on the same ids in a shuffled order (the sort path)")
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
        shuffled = tmp / "tags-unordered-ids.parquet"
        if args.unordered_ids:
            write_tags(shuffled, args.n, args.k, args.concepts, shuffled_ids=True)
        runs: dict[str, list[tuple[float, float, float, str]]] = {"base": [], "groups": [], "res": [], "bare": [],
                                                                   "sort": []}
        children = [("base", (_BASELINE, str(tags))), ("groups", (_ROW_GROUPS, str(tags))),
                    ("res", (_RESAMPLE, str(tags), str(tmp / "out"), "plot")),
                    ("bare", (_RESAMPLE, str(tags), str(tmp / "out-no-plot"), "no-plot"))]
        if args.unordered_ids:
            children.append(("sort", (_RESAMPLE, str(shuffled), str(tmp / "out-unordered"), "plot")))
        shuffle = random.Random(0)
        for _ in range(args.repeat):
            # Rounds of the children, so a change of load hits them alike, each round in a shuffled order: on a
            # VM that hands freed memory back to its host, a child started as the previous one exits pays for
            # that memory again, more after some children than others (the same child took 3.1 s after the
            # row-group baseline, 2.6 s after the others). A rotation would keep each child's predecessor.
            for name, call in shuffle.sample(children, len(children)):
                runs[name].append(run_child(*call))
        base, groups, res, bare = (best_of(runs[k]) for k in ("base", "groups", "res", "bare"))
        selected, head_before, head_after = res[3].split()
        for label, (wall, cpu, mem, _) in (("baseline read_table (id, source, concepts)", base),
                                           ("baseline row groups (same columns)", groups),
                                           ("curate resample --fraction 0.2", res)):
            print(f"{label:44s} {wall:6.2f}s wall {cpu:6.2f}s CPU  peak {mem:.2f} GiB")
        print(f"  ({int(selected):,} selected; top-1% share {float(head_before):.3f} → {float(head_after):.3f}; "
              f"load average {os.getloadavg()[0]:.1f})")
        for label, ref in (("read_table", base), ("row groups", groups)):
            print(f"ratio resample/{label}: wall {res[0] / ref[0]:.2f}×, CPU {res[1] / ref[1]:.2f}×, "
                  f"memory {res[2] / ref[2]:.2f}×")
        paired = sorted(r[0] / b[0] for r, b in zip(runs["res"], runs["base"]))
        print(f"ratio resample/read_table within each round (wall): median {paired[len(paired) // 2]:.2f}×, "
              f"rounds {', '.join(f'{x:.2f}×' for x in paired)}  (a round's two runs share the machine's moment)")
        wall, cpu, mem, _ = bare
        print(f"{'curate resample without the plot (plot=False)':44s} {wall:6.2f}s wall {cpu:6.2f}s CPU  "
              f"peak {mem:.2f} GiB  (ratio to read_table: wall {wall / base[0]:.2f}×, CPU {cpu / base[1]:.2f}×; "
              f"the plot: {res[1] - cpu:+.2f}s CPU)")
        if runs["sort"]:
            wall, cpu, mem, _ = best_of(runs["sort"])
            print(f"{'curate resample, ids in shuffled order':44s} {wall:6.2f}s wall {cpu:6.2f}s CPU  "
                  f"peak {mem:.2f} GiB  (ids hashed for repeats; ratio to read_table: wall {wall / base[0]:.2f}×, "
                  f"CPU {cpu / base[1]:.2f}×)")
        print("targets for 10M × 5: ≤ 1.5× the bare read, ≤ 1.2 GiB")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
