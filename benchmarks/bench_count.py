"""Count step of ``curate pack`` (token lengths + the processor check): fixed sample + thread caps vs the old path.

Usage:
    python benchmarks/bench_count.py            # 100K records, --workers 2, three interleaved rounds (medians)
    python benchmarks/bench_count.py --quick    # 20K records, one round
    python benchmarks/bench_count.py --repeat 1 # one round

Writes N seeded records (1 image each, from a pool of 64 JPEGs of 64 to 1,600 px
per side, captions of varied length) and counts them twice with ``curate pack
--plan-only`` in child processes at the same ``--workers``, the check on both times:

* old: ``--verify-fraction 0.01`` with ``CURATE_WORKER_THREADS=0`` (workers start
  torch/OpenMP threads on every core, as before issue 14);
* new: ``--verify-sample 1000`` with workers capped to 1 thread (the default).

At 100K records both check the same number of records (1% = 1,000), so the ratio
is the thread caps alone; past 100K the old path's check grows with the corpus
and the new one does not.

* before: the code as it was when issue 14 was filed (``--baseline-rev``, default
  the parent of 3ed208c, which brought ``--verify-sample``), unpacked with
  ``git archive`` and run the same way: "today's records/s" of the issue. Skipped
  (with a note) when the repository has no such commit (a shallow clone).

Prints records/s of the count step and the ratios (target >= 2x today's).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
from PIL import Image

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from curate.fixtures.processor import build_tiny_processor  # noqa: E402

WORDS = "a cat dog red blue sofa tree car street sky person holding small large old new wooden table".split()


def make_records(folder: Path, n: int, seed: int = 0) -> Path:
    """``n`` records over 64 seeded JPEGs; returns the JSONL path."""
    rng = np.random.default_rng(seed)
    images = folder / "images"
    images.mkdir(parents=True, exist_ok=True)
    names = []
    for i in range(64):
        w, h = (int(v) for v in rng.integers(64, 1600, 2))
        small = rng.integers(0, 255, (max(2, h // 64), max(2, w // 64), 3), dtype=np.uint8)
        Image.fromarray(small).resize((w, h)).save(images / f"{i}.jpg", quality=85)
        names.append(f"images/{i}.jpg")
    path = folder / "records.jsonl"
    with open(path, "w") as fh:
        for i in range(n):
            caption = " ".join(rng.choice(WORDS, int(rng.integers(5, 60))))
            rec = {"id": f"r{i:08d}", "source": f"s{i % 4}", "images": [names[int(rng.integers(0, 64))]],
                   "messages": [{"role": "user", "content": "<image>\nDescribe the image."},
                                {"role": "assistant", "content": caption}]}
            fh.write(json.dumps(rec) + "\n")
    return path


def count(records: Path, processor: Path, out: Path, workers: int, flags: list[str], env: dict[str, str],
          tree: Path = ROOT) -> dict:
    """Run the count step of the code in ``tree`` in a child process; return its stats.json."""
    cmd = [sys.executable, "-m", "curate", "pack", str(records), "--processor", str(processor), "--plan-only",
           "--out", str(out), "--workers", str(workers), "--shard-size", "5000", *flags]
    full_env = {**os.environ, "PYTHONPATH": str(tree), "CURATE_CACHE": str(out / "cache"), **env}
    for var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
        full_env.pop(var, None)  # as a user's shell would have it
    subprocess.run(cmd, cwd=tree, env=full_env, check=True, stdout=subprocess.DEVNULL)
    return json.loads((out / "stats.json").read_text())


def unpack_rev(rev: str, into: Path) -> Path | None:
    """The files of commit ``rev`` of this repository in ``into`` (``git archive``); None if git cannot give them."""
    into.mkdir(parents=True, exist_ok=True)
    archive = subprocess.run(["git", "-C", str(ROOT), "archive", "--format=tar", rev], capture_output=True)
    if archive.returncode:
        return None
    subprocess.run(["tar", "-x", "-C", str(into)], input=archive.stdout, check=True)
    return into


def main(argv: list[str] | None = None) -> None:
    """Run the benchmark."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=100_000)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--repeat", type=int, default=None,
                    help="rounds of the runs, interleaved (ratios of the medians; each round's ratio printed too): "
                         "on a shared VM one round's ratio moves by a fifth (default 3; 1 with --quick)")
    ap.add_argument("--baseline-rev", default="3ed208c^",
                    help="the code before issue 14 (default: the parent of the commit that brought --verify-sample)")
    args = ap.parse_args(argv)
    n = 20_000 if args.quick else args.n
    args.repeat = args.repeat or (1 if args.quick else 3)
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        records = make_records(tmp / "data", n)
        processor = build_tiny_processor(tmp / "processor")
        print(f"count step: {n:,} records, --workers {args.workers}; machine: {os.cpu_count()} cores, "
              f"load average {os.getloadavg()[0]:.1f}")
        before = unpack_rev(args.baseline_rev, tmp / "before-tree")
        runs = [("old", ["--verify-fraction", "0.01"], {"CURATE_WORKER_THREADS": "0"}, ROOT),
                ("new", ["--verify-sample", "1000"], {}, ROOT)]
        if before is not None:
            runs.insert(0, ("before", ["--verify-fraction", "0.01"], {}, before))
        else:
            print(f"  before: skipped (git archive {args.baseline_rev} failed: a shallow clone?)")
        seconds: dict[str, list[float]] = {name: [] for name, *_ in runs}
        for round_no in range(args.repeat):  # rounds of the runs, so a change of the machine's speed hits them alike
            for name, flags, env, tree in runs:
                t0 = time.perf_counter()
                stats = count(records, processor, tmp / f"{name}-{round_no}", args.workers, flags, env, tree)
                took = stats["timings"]["lengths"]
                seconds[name].append(took)
                where = f" [code of {args.baseline_rev}]" if tree != ROOT else ""
                print(f"  {name}{where}: {' '.join(flags)} {env or ''}: count {took:.1f} s = {n / took:,.0f} "
                      f"records/s, {stats.get('verified_records', 0):,} records checked by the processor "
                      f"(process {time.perf_counter() - t0:.1f} s)")
            if args.repeat > 1 and "before" in seconds:
                print(f"  round {round_no + 1}: new / before {seconds['before'][-1] / seconds['new'][-1]:.2f}x")
        rates = {name: n / statistics.median(took) for name, took in seconds.items()}
        of = " (medians)" if args.repeat > 1 else ""
        print(f"  ratio new / old records/s{of}: {rates['new'] / rates['old']:.2f}x  (the thread caps alone)")
        if "before" in rates:
            print(f"  ratio new / before records/s{of}: {rates['new'] / rates['before']:.2f}x  (target >= 2x today's)")

if __name__ == "__main__":
    main()
