"""``curate score`` on distinct math answers: does scoring scale with the cores it is given?

Usage:
    python benchmarks/bench_score_workers.py              # 20,000 responses, every answer distinct
    python benchmarks/bench_score_workers.py --quick      # 3,000
    python benchmarks/bench_score_workers.py --repeat 1   # A, B, C once each (default: 3 times interleaved, medians; --quick: 1)

Every response is a different LaTeX expression, so no cache ever hits and each one
costs two math-verify parses and a comparison in the verifier pool. A process sizes
its verifier pool from the cores it is given: its CPU affinity
(``os.sched_getaffinity``), or ``CURATE_WORKER_CPUS`` set by the executor (cores ÷
``--workers``, a Ray actor's CPUs). The runs, each a whole ``curate score`` command
pinned with ``os.sched_setaffinity``:

* A: ``--workers 1`` on one core (a pool of 1);
* B: ``--workers 2`` on two cores (two processes, a pool of 1 each);
* C: ``--workers 1`` on two cores (one process, a pool of 2), for contrast.

Prints responses/s end to end (process start, record loading, merge and report
included), the fixed cost of each setting (the same command on 16 responses) and the
rate beyond it, the load average, the cores each run actually got (CPU seconds of the
command and all it started, from ``perf stat`` where it works, over wall seconds), and
B / A (target >= 1.6x), also against the machine's own ceiling: two plain Python loops
pinned one per core against one, measured just before (a VM's two vCPUs may share a
physical core: then no program gets 2x). The fixed cost is larger
with more processes (each imports math-verify and sympy and warms them, about 2 s of
CPU), so ``--n`` must be large enough to amortise it. The machine is shared: read the
ratio with the load beside it. By default A, B and C run three times, interleaved, and the
medians are reported: one run of each gave 1.48× and three gave 1.75× within the hour
(2026-12-02), as the VM's own two-core ceiling moved between 2.21× and 1.76×.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SMALL = 16  # responses of the run that measures the fixed cost of each setting


def write_inputs(folder: Path, n: int) -> tuple[Path, Path]:
    """Math records and one distinct response each (half right, half wrong)."""
    records, responses = folder / "records.jsonl", folder / "responses.jsonl"
    with open(records, "w") as rf, open(responses, "w") as sf:
        for i in range(n):
            a, b = i % 97 + 2, i // 97 + 3
            gold = f"\\frac{{{a}}}{{{b}}} + {i}"
            answer = gold if i % 2 == 0 else f"\\frac{{{a + 1}}}{{{b}}} + {i}"
            rf.write(json.dumps({"id": f"m{i}", "problem": f"Compute {a}/{b} + {i}.", "answer": gold,
                                 "answer_type": "math", "source": "bench"}) + "\n")
            sf.write(json.dumps({"id": f"m{i}", "response": f"The answer is $\\boxed{{{answer}}}$."}) + "\n")
    return records, responses


def pool_size(cores: set[int], workers: int, env: dict[str, str]) -> int:
    """The verifier pool one score process gets: asked of a process pinned like the run (÷ workers, as the executor)."""
    code = "from curate.rewards.runtime.limits import default_size; print(default_size())"
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True,
                         preexec_fn=lambda: os.sched_setaffinity(0, cores))
    return max(1, int(out.stdout.strip()) // workers)


_SPIN = "x = 0\nfor i in range(12_000_000):\n    x += i * i % 7\n"


def machine_ceiling(one: set[int], two: set[int]) -> float:
    """What two of these cores give over one for plain CPU-bound Python, measured now: 2 × (time of one
    loop alone on one core) / (time of two loops at once, one per core). 2.0 on two free, independent cores;
    less when the cores share a physical core (SMT, a VM's vCPUs) or others' work takes them."""
    def spin(cores: set[int]) -> subprocess.Popen:
        return subprocess.Popen([sys.executable, "-c", _SPIN], preexec_fn=lambda: os.sched_setaffinity(0, cores))

    t0 = time.perf_counter()
    spin(one).wait()
    alone = time.perf_counter() - t0
    t0 = time.perf_counter()
    procs = [spin({c}) for c in sorted(two)]
    for p in procs:
        p.wait()
    return 2 * alone / (time.perf_counter() - t0)


def perf_works() -> bool:
    """Whether ``perf stat`` can count the CPU time of a command and its descendants here."""
    if shutil.which("perf") is None:
        return False
    probe = subprocess.run(["perf", "stat", "-x,", "-e", "task-clock", "--", sys.executable, "-c", "pass"],
                           capture_output=True, text=True)
    return probe.returncode == 0 and "task-clock" in probe.stderr


def run_once(records: Path, responses: Path, out: Path, n: int, workers: int, cores: set[int],
             env: dict[str, str], perf: bool) -> dict[str, float]:
    """One ``curate score`` command pinned to ``cores``: wall seconds, the load average before it and,
    with ``perf``, the CPU seconds the command and every process it started got (``perf stat`` task-clock)."""
    cmd = [sys.executable, "-m", "curate", "score", "--records", str(records), "--responses", str(responses),
           "--out", str(out), "--workers", str(workers), "--shard-size", str(max(1, n // 8))]
    counted = out.with_name(out.name + ".perf")
    if perf:
        cmd = ["perf", "stat", "-x,", "-e", "task-clock", "-o", str(counted), "--", *cmd]
    load = os.getloadavg()[0]
    t0 = time.perf_counter()
    subprocess.run(cmd, cwd=ROOT, env=env, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                   preexec_fn=lambda: os.sched_setaffinity(0, cores))
    wall = time.perf_counter() - t0
    stats = json.loads((out / "stats.json").read_text())
    if stats.get("scored") != n:
        raise SystemExit(f"scored {stats.get('scored')} of {n}: {stats.get('errored')}")
    cpu = float("nan")
    if perf:
        for line in counted.read_text().splitlines():
            fields = line.split(",")
            if len(fields) > 2 and fields[2] == "task-clock":
                cpu = float(fields[0]) / 1000.0
    return {"wall": wall, "load": load, "cpu": cpu}


def main(argv: list[str] | None = None) -> None:
    """Run the benchmark."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=20000, help="distinct responses (default 20,000)")
    ap.add_argument("--quick", action="store_true", help="3,000 responses")
    ap.add_argument("--repeat", type=int, default=None,
                    help="run A, B, C this many times, interleaved (medians; default 3, 1 with --quick)")
    args = ap.parse_args(argv)
    n = 3000 if args.quick else args.n
    if args.repeat is None:
        args.repeat = 1 if args.quick else 3
    mine = sorted(os.sched_getaffinity(0))
    if len(mine) < 2:
        print(f"score workers: needs 2 cores, this process may use {len(mine)}; skipped")
        return
    one, two = {mine[0]}, set(mine[:2])
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    for var in ("CURATE_REWARD_WORKERS", "CURATE_WORKER_CPUS"):
        env.pop(var, None)
    runs = {"A": (1, one, "--workers 1 on 1 core "), "B": (2, two, "--workers 2 on 2 cores"),
            "C": (1, two, "--workers 1 on 2 cores")}
    print(f"score: {n:,} distinct math responses; machine: {os.cpu_count()} cores, cores used {mine[:2]}, "
          f"load average {os.getloadavg()[0]:.1f}")
    got: dict[str, list[dict[str, float]]] = {k: [] for k in runs}
    fixed: dict[str, float] = {}
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        records, responses = write_inputs(tmp, n)
        small = tmp / "small"
        small.mkdir()
        small_records, small_responses = write_inputs(small, SMALL)
        sizes = {k: pool_size(cores, workers, env) for k, (workers, cores, _) in runs.items()}
        perf = perf_works()
        ceiling = machine_ceiling(one, two)
        print(f"  machine ceiling now: two of these cores run plain Python {ceiling:.2f}x one "
              "(2.00 on free, independent cores)", flush=True)
        for key, (workers, cores, _) in runs.items():  # start-up, records, merge, report: the cost n does not change
            fixed[key] = run_once(small_records, small_responses, small / f"out{key}", SMALL, workers, cores, env,
                                  perf)["wall"]
        for r in range(args.repeat):
            for key, (workers, cores, label) in runs.items():
                m = run_once(records, responses, tmp / f"out{key}{r}", n, workers, cores, env, perf)
                got[key].append(m)
                print(f"  {key} {label} (pool {sizes[key]} per process): {n / m['wall']:7,.1f} responses/s end to end "
                      f"({m['wall']:.1f} s, of which ~{fixed[key]:.1f} s fixed: "
                      f"{(n - SMALL) / max(m['wall'] - fixed[key], 1e-9):,.1f}/s beyond it); "
                      f"load {m['load']:.1f}; CPU it got {m['cpu']:.1f} s = {m['cpu'] / m['wall']:.2f} cores busy",
                      flush=True)
    rate = {k: statistics.median(n / m["wall"] for m in v) for k, v in got.items()}
    beyond = {k: statistics.median((n - SMALL) / max(m["wall"] - fixed[k], 1e-9) for m in v) for k, v in got.items()}
    print(f"  ratio B / A (--workers 2 on 2 cores vs --workers 1 on 1 core): {rate['B'] / rate['A']:.2f}x end to end, "
          f"{beyond['B'] / beyond['A']:.2f}x beyond the fixed cost  (target >= 1.6x)")
    busy = {k: statistics.median(m["cpu"] / m["wall"] for m in v) for k, v in got.items()}
    print(f"  cores the runs got (CPU s / wall s; other users' work takes the rest): A {busy['A']:.2f}, "
          f"B {busy['B']:.2f}, C {busy['C']:.2f}; per CPU second: A {n / statistics.median(m['cpu'] for m in got['A']):,.0f}, "
          f"B {n / statistics.median(m['cpu'] for m in got['B']):,.0f} responses")
    after = machine_ceiling(one, two)
    ceiling = (ceiling + after) / 2
    print(f"  B / A against the machine's own two-core ceiling (mean of before and after the runs, "
          f"after: {after:.2f}x): {rate['B'] / rate['A'] / ceiling:.0%} of {ceiling:.2f}x")
    print(f"  ratio C / A (--workers 1 on 2 cores vs 1 core): {rate['C'] / rate['A']:.2f}x end to end, "
          f"{beyond['C'] / beyond['A']:.2f}x beyond the fixed cost; load average now {os.getloadavg()[0]:.1f}")

if __name__ == "__main__":
    main()
