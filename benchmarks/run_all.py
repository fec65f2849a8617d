"""Run every benchmark in this folder (``bench_*.py``) one after another and print their reports.

    .venv/bin/python benchmarks/run_all.py [--quick] [--only NAME ...]
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
from pathlib import Path


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="pass --quick to every benchmark")
    ap.add_argument("--only", nargs="*", default=None, help="names such as plan writer lengths")
    args = ap.parse_args()
    here = Path(__file__).resolve().parent
    scripts = sorted(here.glob("bench_*.py"))
    if args.only:
        scripts = [s for s in scripts if s.stem.removeprefix("bench_") in args.only]
    failed = []
    for script in scripts:
        print(f"\n=== {script.stem} ===", flush=True)
        t0 = time.perf_counter()
        cmd = [sys.executable, str(script), *(["--quick"] if args.quick else [])]
        rc = subprocess.call(cmd)
        print(f"--- {script.stem}: exit {rc} in {time.perf_counter() - t0:.0f}s", flush=True)
        if rc:
            failed.append(script.stem)
    if failed:
        print(f"\nfailed: {', '.join(failed)}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
