"""Run ``make demo`` at two git revisions and compare every output byte for byte.

Usage::

    python scripts/demo_identity.py REV_A REV_B [--work DIR] [--keep]

Each revision is checked out, one after the other, into the same temporary git
worktree (``WORK/tree``, ``git worktree add --detach``), so that absolute paths
(and hashes of them) agree; its own Makefile's ``demo`` target runs there with
the shared virtualenv (``VENV``, default ``/work/main/.venv``; override with
``--venv``) and with that worktree first on ``PYTHONPATH``, so the code under
test is the revision's, not the installed one. The outputs (``demo-out/``) are
moved to ``WORK/out-<commit>`` and compared file by file:

* every file must exist on both sides;
* ``*.json`` files are compared after dropping the keys that describe the run
  rather than its result: ``timings``, ``versions``, ``command``, ``finished``
  (a timestamp in ``history.json``) and any key ending in ``seconds`` (at any depth);
  a recipe step's input stamps (``inputs`` in ``OUT/_run/*.json``) by size, not modification time
  (each revision's checkout writes its files anew);
* ``*.html`` report pages are compared with durations (``12.3s``) masked;
* every other file (tar shards, Parquet, ``.npy``, PNG plots, JSONL) must be the
  same bytes.

Prints one line per differing file and a summary; exits 1 when anything differs.
The outputs are kept in ``--work`` (default: a temporary folder) with ``--keep``,
and a revision already run there (same commit id) is not run again. Takes about
4 minutes per revision on 2 cores.
"""

from __future__ import annotations

import argparse
import filecmp
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

RUN_KEYS = {"timings", "versions", "command", "finished"}
DURATION = re.compile(rb"\b\d+(?:\.\d+)?s\b")
DEMO = "demo-out"


def _git(*args: str, cwd: Path) -> str:
    return subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True, text=True).stdout.strip()


def run_demo(repo: Path, rev: str, work: Path, venv: Path) -> Path:
    """Run ``make demo`` of ``rev`` in ``WORK/tree``; return the folder its outputs were moved to."""
    sha = _git("rev-parse", rev, cwd=repo)
    result = work / f"out-{sha[:12]}"
    if (result / ".demo_identity_done").exists():
        print(f"{rev} ({sha[:12]}): outputs already in {result}", flush=True)
        return result
    tree = work / "tree"
    if tree.exists():
        _git("worktree", "remove", "--force", str(tree), cwd=repo)
    _git("worktree", "add", "--detach", str(tree), sha, cwd=repo)
    env = {**os.environ, "PYTHONPATH": str(tree), "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "1")}
    python = venv / "bin" / "python"
    cmd = ["make", "--no-print-directory", "-C", str(tree), "demo", f"VENV={venv}",
           f"PY={python}", f"CURATE={python} -m curate", f"DEMO={DEMO}", "-o", str(venv / ".installed"),
           "-o", str(venv / ".runtime"), "-o", "setup", "-o", "setup-run"]  # the venv is given: install nothing
    print(f"{rev} ({sha[:12]}): {' '.join(cmd)}", flush=True)
    log = work / f"{sha[:12]}.log"
    try:
        with open(log, "w") as fh:
            proc = subprocess.run(cmd, env=env, stdout=fh, stderr=subprocess.STDOUT)
        if proc.returncode != 0:
            sys.exit(f"make demo failed at {rev}; see {log}")
        shutil.rmtree(result, ignore_errors=True)
        shutil.move(str(tree / DEMO), str(result))
        (result / ".demo_identity_done").touch()
    finally:
        _git("worktree", "remove", "--force", str(tree), cwd=repo)
    return result


def _strip(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _strip(v) if k != "inputs" else _sizes(v) for k, v in value.items()
                if k not in RUN_KEYS and not k.endswith("seconds")}
    if isinstance(value, list):
        return [_strip(v) for v in value]
    return value


def _sizes(stamps: Any) -> Any:
    """A recipe step's input stamps (``OUT/_run/*.json``: path -> ``size|mtime_ns``) without their modification times,
    which a fresh checkout of each revision sets anew; the sizes still compare."""
    if isinstance(stamps, dict):
        return {k: v.split("|")[0] if isinstance(v, str) else v for k, v in stamps.items()}
    return _strip(stamps)


def same_file(a: Path, b: Path) -> bool:
    """Whether two output files agree (JSON without run details, HTML without durations, the rest byte for byte)."""
    if a.suffix == ".html":
        return DURATION.sub(b"<t>", a.read_bytes()) == DURATION.sub(b"<t>", b.read_bytes())
    if a.suffix == ".json":
        try:
            ja, jb = json.loads(a.read_text()), json.loads(b.read_text())
        except (UnicodeDecodeError, json.JSONDecodeError):
            return filecmp.cmp(a, b, shallow=False)
        return _strip(ja) == _strip(jb)
    return filecmp.cmp(a, b, shallow=False)


def compare(out_a: Path, out_b: Path) -> tuple[list[str], int]:
    """Differences between two demo output folders (one line each), and how many files both have."""
    files_a = {p.relative_to(out_a) for p in out_a.rglob("*") if p.is_file()}
    files_b = {p.relative_to(out_b) for p in out_b.rglob("*") if p.is_file()}
    problems = [f"only in A: {p}" for p in sorted(files_a - files_b)]
    problems += [f"only in B: {p}" for p in sorted(files_b - files_a)]
    for rel in sorted(files_a & files_b):
        if not same_file(out_a / rel, out_b / rel):
            problems.append(f"differs: {rel}")
    return problems, len(files_a & files_b)


def main() -> int:
    """Parse the arguments, run both demos, print the comparison."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("rev_a")
    parser.add_argument("rev_b")
    parser.add_argument("--work", type=Path, default=None, help="where the worktrees and outputs go")
    parser.add_argument("--keep", action="store_true", help="keep the worktrees and outputs")
    parser.add_argument("--venv", type=Path, default=Path(os.environ.get("CURATE_VENV", "/work/main/.venv")))
    args = parser.parse_args()
    repo = Path(_git("rev-parse", "--show-toplevel", cwd=Path.cwd()))
    work = (args.work or Path(tempfile.mkdtemp(prefix="demo_identity_"))).resolve()
    work.mkdir(parents=True, exist_ok=True)
    try:
        outs = [run_demo(repo, rev, work, args.venv) for rev in (args.rev_a, args.rev_b)]
        problems, n_same = compare(*outs)
    finally:
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)
    for line in problems:
        print(line)
    print(f"{args.rev_a} vs {args.rev_b}: {n_same} files compared, {len(problems)} differences"
          + ("" if problems else " (byte-identical outputs)"))
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
