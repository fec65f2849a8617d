"""The code sandbox's cost per program, against one plain interpreter per program (the old design's floor).

Usage:
    python benchmarks/bench_sandbox.py            # 200 programs of 4 tests and 60 of 16, 3 rounds (medians)
    python benchmarks/bench_sandbox.py --quick    # 40 and 12, one round

Every program is distinct (no cache hit) and right (``print(int(input()) * 2)``). Measured in one
process, interleaved per round:

* ``base``: one ``python -I -S`` subprocess per program that runs all its tests in-process and
  prints the outputs: what the audit-hook sandbox cost before bubblewrap, less its ``unshare``
  and hook (it measured 139 ms per 4-test program here, one at a time, 70 ms on two threads,
  2026-12-03, on a loaded machine);
* ``bwrap``: the sandbox pool (:mod:`curate.rewards.runtime.sandbox`), one bubblewrap sandbox
  per worker hosting a runner that forks a locked-down child per test; one worker, then one per core;
* ``runner``: the same runner without bubblewrap (``--trust-code`` and no bwrap), to show what the
  namespaces themselves cost once a sandbox is up (nothing per program: they are set up per worker);
* ``start``: seconds from starting a sandbox to its first answer (paid once per worker, and
  again after a timeout kills one).

Prints milliseconds per program and ``base / bwrap`` (how many times faster the sandbox is than a
bare interpreter per program). The machine is shared: read the figures with the load beside them.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from curate.rewards.runtime import bwrap, limits, sandbox  # noqa: E402
from curate.rewards.runtime.limits import Task, WorkerPool  # noqa: E402
from curate.rewards.runtime.sandbox import CodeSandbox  # noqa: E402

PROGRAM = "print(int(input()) * 2)  # {k}"
BASE = ("import sys, io, json\nsrc, inputs = json.loads(sys.stdin.read())\nout = []\n"
        "for text in inputs:\n    sys.stdin, sys.stdout = io.StringIO(text), io.StringIO()\n"
        "    exec(compile(src, '<solution>', 'exec'), {'__name__': '__main__'})\n    out.append(sys.stdout.getvalue())\n"
        "sys.stdout = sys.__stdout__\nprint(json.dumps(out))")


def jobs(n: int, tests: int, offset: int) -> list[Task]:
    inputs = [str(i) for i in range(tests)]
    return [Task("run", sandbox.job_args(PROGRAM.format(k=offset + k), inputs, "stdio", "solution", (5, 10, 512), True),
                 10 + sandbox.GRACE) for k in range(n)]


def run_base(tasks: list[Task]) -> float:
    import json

    t0 = time.perf_counter()
    for task in tasks:
        done = subprocess.run([bwrap.interpreter(), "-I", "-S", "-c", BASE], input=json.dumps([task.args[0], task.args[1]]),
                              capture_output=True, text=True, check=True)
        assert json.loads(done.stdout)[0] == "0\n"
    return (time.perf_counter() - t0) / len(tasks)


def run_pool(pool: WorkerPool, tasks: list[Task]) -> float:
    pool.warm_up(wait=True)
    t0 = time.perf_counter()
    out = pool.run(tasks)
    elapsed = time.perf_counter() - t0
    assert all(o.error is None for o in out), {o.error for o in out}
    return elapsed / len(tasks)


def start_seconds(program: str | None, n: int = 5) -> float:
    times = []
    for _ in range(n):
        t0 = time.perf_counter()
        worker = bwrap.start(program)
        try:
            assert bwrap.start_error(worker, 30) is None
            times.append(time.perf_counter() - t0)
        finally:
            worker.kill()
    return statistics.median(times)


def main(argv: list[str] | None = None) -> None:
    """Run the benchmark."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="40 and 12 programs, one round")
    args = ap.parse_args(argv)
    sizes = {4: 40, 16: 12} if args.quick else {4: 200, 16: 60}
    rounds = 1 if args.quick else 3
    settings = CodeSandbox.from_env()
    kind, why = sandbox.status(settings)
    cores = limits.default_size()
    print(f"sandbox: {kind}{f' ({why})' if why else ''}; {cores} cores; load average {os.getloadavg()[0]:.1f}")
    if kind != "bwrap":
        print("no working bubblewrap: install it (apt-get install bubblewrap) to measure the sandbox; skipped")
        return
    pools = {"bwrap x1": WorkerPool(1, 0, lambda: bwrap.start(settings.bwrap), chunk=1),
             f"bwrap x{cores}": WorkerPool(cores, 0, lambda: bwrap.start(settings.bwrap), chunk=1),
             "runner x1": WorkerPool(1, 0, lambda: bwrap.start(None), chunk=1)}
    got: dict[tuple[int, str], list[float]] = {}
    offset = 0
    try:
        for _ in range(rounds):
            for tests, n in sizes.items():
                offset += n
                got.setdefault((tests, "base x1"), []).append(run_base(jobs(n, tests, offset)))
                for name, pool in pools.items():
                    offset += n
                    got.setdefault((tests, name), []).append(run_pool(pool, jobs(n, tests, offset)))
        start_bwrap, start_runner = start_seconds(settings.bwrap), start_seconds(None)
    finally:
        for pool in pools.values():
            pool.close()
    for tests in sizes:
        ms = {name: statistics.median(v) * 1000 for (t, name), v in got.items() if t == tests}
        line = "  ".join(f"{name} {value:7.1f} ms" for name, value in ms.items())
        print(f"{tests:3d} tests/program: {line}")
        print(f"    base / bwrap x1 = {ms['base x1'] / ms['bwrap x1']:.1f}x, base / bwrap x{cores} = "
              f"{ms['base x1'] / ms[f'bwrap x{cores}']:.1f}x; bwrap x1 / runner x1 = {ms['bwrap x1'] / ms['runner x1']:.2f}")
    print(f"start of one sandbox: {start_bwrap * 1000:.0f} ms with bubblewrap, {start_runner * 1000:.0f} ms without; "
          f"load average {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
