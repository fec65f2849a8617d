"""``curate score`` on distinct math answers: responses/s with --workers 2 vs --workers 1 (isolated math verifiers).

Usage:
    python benchmarks/bench_score_workers.py            # 1,200 responses, every answer distinct
    python benchmarks/bench_score_workers.py --quick    # 300

Every response is a different LaTeX expression, so the result cache never hits
and each one costs a math-verify parse and comparison in the verifier pool. With
--workers N the executor gives each worker process cores // N cores and its
verifier pool that many processes (``CURATE_WORKER_CPUS``); before issue 14 the pool
was capped at 4 per process. Prints responses/s for 1 and 2 workers and the ratio
(target >= 1.6x on a machine with >= 2 idle cores).
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

ROOT = Path(__file__).resolve().parent.parent


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


def main(argv: list[str] | None = None) -> None:
    """Run the benchmark."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=1200)
    ap.add_argument("--quick", action="store_true")
    args = ap.parse_args(argv)
    n = 300 if args.quick else args.n
    print(f"score: {n:,} distinct math responses; machine: {os.cpu_count()} cores, "
          f"load average {os.getloadavg()[0]:.1f}")
    rates = {}
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        records, responses = write_inputs(tmp, n)
        for workers in (1, 2):
            out = tmp / f"out{workers}"
            cmd = [sys.executable, "-m", "curate", "score", "--records", str(records), "--responses", str(responses),
                   "--out", str(out), "--workers", str(workers), "--shard-size", str(max(1, n // 8))]
            env = {**os.environ, "PYTHONPATH": str(ROOT)}
            env.pop("CURATE_REWARD_WORKERS", None)
            t0 = time.perf_counter()
            subprocess.run(cmd, cwd=ROOT, env=env, check=True, stdout=subprocess.DEVNULL)
            seconds = time.perf_counter() - t0
            stats = json.loads((out / "stats.json").read_text())
            rates[workers] = n / seconds
            overall = stats.get("summary", stats).get("overall", {}) if isinstance(stats, dict) else {}
            print(f"  --workers {workers}: {rates[workers]:,.1f} responses/s ({seconds:.1f} s, process start "
                  f"included; mean accuracy {overall.get('mean_accuracy')})")
    print(f"  ratio --workers 2 / 1: {rates[2] / rates[1]:.2f}x  (target >= 1.6x)")


if __name__ == "__main__":
    main()
