"""Benchmark: process tuning (GC, allocator, import avoidance), each trick on against off, at scale (issue 38).

Usage:
    python benchmarks/bench_process_tuning.py             # resample 10M records × K=5, 3 rounds
    python benchmarks/bench_process_tuning.py --n 0 --pack-n 20000  # pack's count step only (≈3 min a run here)
    python benchmarks/bench_process_tuning.py --quick     # resample 1M records, 2 rounds, no pack
    python benchmarks/bench_process_tuning.py --before REV --only gc  # also the code of a git revision as it is

Each child process runs a whole command (interpreter start, imports, the run, the exit) in one
variant, on the same seeded inputs (written first, not timed):

* ``resample``: ``python -m curate resample --tags T --fraction 0.2`` on a tags file of
  :func:`bench_resample.write_tags` (10M records × 5 Zipf tags);
* ``pack``: ``python -m curate pack R --processor P --plan-only --workers 2`` (the count step) on
  :func:`bench_count.make_records` records with the tiny test processor. Its cost grows linearly
  with the records (≈0.2 ms of CPU each, the processor check fixed at 1,000), so a ratio at 20K
  overstates a fixed cost (process start, processor load, exit), which weighs far less at 10M.
  Off by default (``--pack-n``): a run takes minutes, 10M ≈40 min.

The variants, one per trick, are applied from here (the prelude below) to the code path the
trick served, or, for a trick the code has, taken away from here:

* ``plain``: the code as it is;
* ``gc``: automatic garbage collection off during the run (resample) or each counting shard (pack);
* ``exit``: ``gc.collect(); gc.freeze()`` before the interpreter's shutdown;
* ``malloc``: glibc's mmap and trim thresholds raised (``mallopt``: 64 MiB, 256 MiB);
* ``hugepage`` (the code has the trick): NumPy's transparent-huge-page advice left on (without
  :func:`curate.core.malloc.small_numpy_pages`);
* ``pooled``: the large temporaries allocated from Arrow's pool instead of ``np.empty``;
* ``nopandas`` (the code has the trick): pandas imported, as pyarrow's own conversions would (they
  import it to ask whether a value is a pandas one; :mod:`curate.core.columns` converts through the
  buffers instead). Until fb8be9d the variant was the reverse (pandas blocked, on plain conversions);
* ``matplotlib`` (the code has the trick): the plot drawn with matplotlib, as before
  :mod:`curate.core.chart`, instead of Pillow;
* ``nofreeze`` (the code has the trick): no ``gc.freeze()`` of the driver's objects before the local
  executor forks its workers (:mod:`curate.executors.local`);
* ``before`` (``--before REV``): the code of a git revision, as it is.

After one untimed warm-up run, rounds run the variants in rotated order (the machine is shared:
A/B/A/B, not AAA/BBB). Reported per variant: median wall seconds, CPU seconds (user + system,
workers included), peak RSS (the largest process); then each trick's ratios without / with it
(median of the per-round ratios: > 1 means the trick helps) and whether both wall and CPU clear
10%. The outputs (the selection and rejects; pack's plan) of every variant are checked to be the
same bytes. ``--quick`` (1M records, 2 rounds) only shows that it runs: at 1M the fixed costs
weigh ten times more, and two rounds on a shared machine are noise.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pyarrow.parquet as pq

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_resample import write_tags  # noqa: E402

# argv[1] names the variant, the rest is the curate command. Nothing here changes what is computed.
_PRELUDE = r"""
import atexit, gc, sys
variant, sys.argv = sys.argv[1], ["curate", *sys.argv[2:]]
import curate.cli


def wrapped(owner, name, before, after):
    run = getattr(owner, name)
    def call(*args, **kwargs):
        before()
        try:
            return run(*args, **kwargs)
        finally:
            after()
    setattr(owner, name, call)


if variant == "exit":  # registered first, so it runs last (after the peak is printed)
    atexit.register(lambda: (gc.collect(), gc.freeze()))
if variant == "gc" and sys.argv[1] == "resample":
    import curate.balance.resample as resample_module
    wrapped(resample_module, "resample", gc.disable, gc.enable)
elif variant == "gc" and sys.argv[1] == "pack":  # during each counting shard, in the (forked) workers
    import packer.count
    wrapped(packer.count.LengthsTask, "run", gc.disable, gc.enable)
elif variant == "nofreeze":
    import contextlib, curate.executors.local as local
    local._frozen_heap = lambda ctx: contextlib.nullcontext()
elif variant == "malloc":  # before any worker is forked: they inherit it
    import ctypes
    mallopt = ctypes.CDLL(None).mallopt
    mallopt.argtypes, mallopt.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
    assert mallopt(-3, 64 << 20) == 1 and mallopt(-1, 256 << 20) == 1  # M_MMAP_THRESHOLD, M_TRIM_THRESHOLD
elif variant == "hugepage":  # NumPy's huge-page advice left on (curate.core.malloc.small_numpy_pages not used)
    import contextlib, curate.balance.resample as resample_module
    resample_module.small_numpy_pages = contextlib.nullcontext
elif variant == "pooled":
    import types, numpy, pyarrow as pa
    class PooledNumpy(types.ModuleType):  # numpy, but a 1-D np.empty comes from Arrow's pool (its freed pages)
        def __getattr__(self, name):
            return getattr(numpy, name)
        @staticmethod
        def empty(shape, dtype=float, **kwargs):
            if kwargs or not isinstance(shape, int):
                return numpy.empty(shape, dtype, **kwargs)
            dtype = numpy.dtype(dtype)
            return numpy.frombuffer(pa.allocate_buffer(max(shape * dtype.itemsize, 1)), dtype, count=shape)
    import curate.balance.resample, curate.balance.tags_file, curate.balance.weights, curate.core.columns
    for module in (curate.balance.resample, curate.balance.tags_file, curate.balance.weights, curate.core.columns):
        module.np = PooledNumpy("numpy")
elif variant == "nopandas":  # taken away: pandas imported, as pyarrow's own conversions would
    import pandas
elif variant == "matplotlib":
    import curate.balance.resample as resample_module
    from pathlib import Path
    import numpy as np
    def plot_balance(path, before, after, *, title="", stats=None):  # the plot as drawn before curate.core.chart
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.figure import Figure
        from matplotlib.ticker import FuncFormatter, NullLocator
        label_of = lambda v, _p=None: f"{v:,.0f}" if 1 <= v < 1e5 else f"{v:.0e}"
        fig = Figure(figsize=(7, 4.5), dpi=110)
        FigureCanvasAgg(fig)
        fig.subplots_adjust(left=0.12, right=0.97, bottom=0.12, top=0.9)
        ax = fig.add_subplot()
        for counts, label, color in ((before, "before", "#c0392b"), (after, "after", "#2471a3")):
            ranked = np.sort(np.asarray(counts)[np.asarray(counts) > 0])[::-1]
            if ranked.size:
                ranks = np.unique(np.geomspace(1, ranked.size, num=min(ranked.size, 2000)).round().astype(np.int64))
                ax.loglog(ranks, ranked[ranks - 1], label=label, color=color, lw=1.6)
        for axis in (ax.xaxis, ax.yaxis):
            axis.set_major_formatter(FuncFormatter(label_of))
            axis.set_minor_locator(NullLocator())
        ax.set_title(title or "Concept frequency before and after balancing", fontsize=10)
        ax.legend(loc="upper right", fontsize=8)
        fig.savefig(path, format="png", metadata={"Software": None})
        return Path(path)
    resample_module.plot_balance = plot_balance


def _peak():
    with open("/proc/self/status") as status:  # this process's peak since exec
        print(next(line for line in status if line.startswith("VmHWM")).split()[1], file=sys.stderr, flush=True)


atexit.register(_peak)
getattr(curate.cli, "entry", curate.cli.main)()  # the console script's function (older trees: entry)
"""

TRICKS = {  # variant: (what it does, the command it serves, whether the code as it is has it)
    "gc": ("gc.disable() during the run / each shard", ("resample", "pack"), False),
    "exit": ("gc.collect(); gc.freeze() before shutdown", ("resample", "pack"), False),
    "malloc": ("mallopt: mmap 64 MiB, trim 256 MiB", ("resample", "pack"), False),
    "hugepage": ("NumPy's huge-page advice off (kept)", ("resample",), True),
    "pooled": ("large temporaries from Arrow's pool", ("resample",), False),
    "nopandas": ("pandas never imported (curate.core.columns)", ("resample",), True),
    "matplotlib": ("the plot drawn with Pillow, not matplotlib", ("resample",), True),
    "nofreeze": ("gc.freeze() before forking the workers", ("pack",), True),
}


def run_child(variant: str, command: list[str], out: Path, tree: Path = ROOT) -> tuple[float, float, float]:
    """One curate command of the code in ``tree`` in a fresh interpreter: (wall seconds, CPU seconds of it and
    its workers, peak RSS GiB of the largest process)."""
    shutil.rmtree(out, ignore_errors=True)
    env = {**os.environ, "PYTHONPATH": str(tree), "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1",
           "TOKENIZERS_PARALLELISM": "false", "CURATE_CACHE": str(out.parent / "cache")}
    with tempfile.TemporaryFile("w+") as err:
        t0 = time.perf_counter()
        proc = subprocess.Popen([sys.executable, "-c", _PRELUDE, "plain" if variant == "before" else variant,
                                 *command, "--out", str(out)], cwd=tree, env=env, stdout=subprocess.DEVNULL,
                                stderr=err)
        _, status, usage = os.wait4(proc.pid, 0)
        wall = time.perf_counter() - t0
        err.seek(0)
        text = err.read()
        if os.waitstatus_to_exitcode(status):
            raise SystemExit(f"{variant}: {text}")
        peak_kib = max(int(text.strip().splitlines()[-1]), usage.ru_maxrss)  # the driver's, its largest worker's
    return wall, usage.ru_utime + usage.ru_stime, peak_kib / 2**20


def digest(out: Path) -> str:
    """The bytes of what the command decides (resample: selection and rejects; pack: the plan), hashed."""
    h = hashlib.sha256()
    for name in ("selection.parquet", "rejects.parquet", "_plan/plan.npz"):
        if (out / name).exists():
            h.update((out / name).read_bytes())
    return h.hexdigest()[:16]


def measure(name: str, command: list[str], variants: list[str], trees: dict[str, Path], rounds: int,
            tmp: Path) -> None:
    """Run ``command`` in every variant, rounds in rotated order; print the runs, the medians and the ratios."""
    runs: dict[str, list[tuple[float, float, float]]] = {v: [] for v in variants}
    digests: dict[str, str] = {}
    run_child("plain", command, tmp / "out")  # a warm-up, not counted: the inputs into the page cache
    for r in range(rounds):
        order = variants[r % len(variants):] + variants[:r % len(variants)]
        for v in order:
            runs[v].append(run_child(v, command, tmp / "out", trees.get(v, ROOT)))
            digests[v] = digest(tmp / "out")
            print(f"  round {r + 1} {v:<11} {runs[v][-1][0]:6.2f} s wall {runs[v][-1][1]:6.2f} s CPU "
                  f"{runs[v][-1][2]:5.2f} GiB  (load {os.getloadavg()[0]:.1f})", flush=True)
    print(f"\n{name}: {'variant':<11} {'wall s median':>13} {'CPU s median':>12} {'peak GiB':>8}   walls")
    for v in variants:
        print(f"{'':<{len(name) + 2}}{v:<11} {statistics.median(w for w, _, _ in runs[v]):13.2f} "
              f"{statistics.median(c for _, c, _ in runs[v]):12.2f} {statistics.median(p for *_, p in runs[v]):8.2f}"
              f"   {', '.join(f'{w:.2f}' for w, _, _ in runs[v])}")
    print(f"\n{name}: without / with each trick (median of the rounds' ratios; > 1: the trick helps)")
    print(f"  {'trick':<11} {'what':<44} {'wall':>6} {'CPU':>6} {'peak':>6}  ≥ 10%?")
    for t in variants[1:]:
        what, _, present = TRICKS[t]
        with_, without = (runs["plain"], runs[t]) if present else (runs[t], runs["plain"])
        wall, cpu, peak = (statistics.median(b[i] / a[i] for a, b in zip(with_, without)) for i in range(3))
        print(f"  {t:<11} {what:<44} {wall:6.3f} {cpu:6.3f} {peak:6.3f}  {'yes' if min(wall, cpu) >= 1.10 else 'no'}")
    same = len(set(digests.values())) == 1
    print(f"{name}: outputs {'the same bytes in every variant' if same else f'DIFFER: {digests}'}", flush=True)
    if not same:
        raise SystemExit(1)


def main(argv: list[str] | None = None) -> None:
    """Run the benchmark and print its figures."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=10_000_000, help="records of the tags file (0: skip resample)")
    parser.add_argument("--k", type=int, default=5)
    parser.add_argument("--concepts", type=int, default=500_000)
    parser.add_argument("--pack-n", type=int, default=0,
                        help="records counted by pack --plan-only (default 0: no pack; 10M would take ≈40 min here)")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--quick", action="store_true", help="1M records, 2 rounds, no pack")
    parser.add_argument("--only", nargs="*", default=None, help="tricks to time (default: all)")
    parser.add_argument("--before", default=None, metavar="REV",
                        help="also time the code of this git revision as it is (e.g. one that still had the tricks)")
    parser.add_argument("--tags", type=Path, default=None,
                        help="an existing tags file (bench_resample.write_tags) instead of writing one")
    args = parser.parse_args(argv)
    if args.quick:
        args.n, args.rounds, args.pack_n = 1_000_000, 2, 0
    tmp = Path(tempfile.mkdtemp(prefix="bench-tuning-"))
    trees: dict[str, Path] = {}
    try:
        if args.before:
            archive = subprocess.run(["git", "-C", str(ROOT), "archive", "--format=tar", args.before],
                                     capture_output=True, check=True).stdout
            (tmp / "before").mkdir()
            subprocess.run(["tar", "-x", "-C", str(tmp / "before")], input=archive, check=True)
            trees["before"] = tmp / "before"
            TRICKS["before"] = (f"the code of {args.before}", ("resample", "pack"), False)

        def variants(command: str) -> list[str]:
            return ["plain", *(t for t, (_, serves, _) in TRICKS.items()
                               if command in serves and (args.only is None or t in args.only or t == "before"))]

        tags, t0 = args.tags or tmp / "tags.parquet", time.perf_counter()
        if args.tags is None and args.n:
            write_tags(tags, args.n, args.k, args.concepts)
        if args.n or args.tags:
            rows = pq.ParquetFile(tags).metadata.num_rows
            print(f"resample: {rows:,} records ({tags.stat().st_size / 2**20:,.0f} MiB, made in "
                  f"{time.perf_counter() - t0:.0f}s): python -m curate resample --tags T --fraction 0.2 --seed 0 "
                  f"--out O; {os.cpu_count()} cores, load average {os.getloadavg()[0]:.1f}", flush=True)
            measure("resample", ["resample", "--tags", str(tags), "--fraction", "0.2", "--seed", "0"],
                    variants("resample"), trees, args.rounds, tmp)
        if args.pack_n:
            from bench_count import make_records

            from curate.fixtures.processor import build_tiny_processor

            records = make_records(tmp / "data", args.pack_n)
            processor = build_tiny_processor(tmp / "processor")
            print(f"\npack: {args.pack_n:,} records: python -m curate pack R --processor P --plan-only --workers 2 "
                  f"--shard-size 5000 --out O", flush=True)
            measure("pack", ["pack", str(records), "--processor", str(processor), "--plan-only", "--workers", "2",
                             "--shard-size", "5000"], variants("pack"), trees, args.rounds, tmp)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
