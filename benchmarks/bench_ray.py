"""Benchmark of the Ray executor against the local executor on the same work, on this machine.

Usage:
    python benchmarks/bench_ray.py            # pack 3,000 records (12 shards) + a toy task of 48 shards, 2 rounds
    python benchmarks/bench_ray.py --quick    # 600 records (6 shards) + 12 toy shards, 1 round

Two workloads, each run with ``--executor local --workers W`` (process pool, the
baseline) and with ``--executor ray`` on a local Ray cluster with W actors:

* **pack**: ``curate pack`` (token lengths with the tiny offline processor, the
  plan, the shard writer) on the sample data replicated to N records;
* **toy**: a CPU-bound :class:`~curate.core.shards.ShardTask` defined here (a sha256
  chain per record, a fixed amount of work per shard), to show the per-shard cost.

Local and Ray runs alternate (``--rounds``; the best of each is kept, the
machines are shared and noisy). Prints wall times, the overhead ratio (ray /
local), a check that the outputs are byte-identical, and where Ray's time goes: cluster start, actor
start (worker process + Ray Data actor), our set-up in the actor (unpickle the
task, ``task.setup()``), compute, idle time per shard between two shards on an
actor (scheduling), and shard end → result on the driver (gathering).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from curate.executors import get_executor, run_stage
from curate.core.shards import Shard, ShardContext, ShardTask
from curate.core.stats import StageStats

ROOT = Path(__file__).resolve().parent.parent


class ToyTask(ShardTask):
    """A CPU-bound stage: ``rounds`` sha256 rounds per record, one small Parquet file per shard."""

    stage = "toy"

    def __init__(self, rounds: int) -> None:
        self.rounds = rounds

    def settings(self) -> dict[str, Any]:
        return {"rounds": self.rounds}

    def run(self, shard: Shard, work: Path, ctx: ShardContext) -> StageStats:
        from curate.core.io import write_parquet
        import pyarrow as pa

        stats = StageStats()
        first, stop = shard.meta
        digests = []
        for i in range(first, stop):
            h = f"{ctx.seed}:{i}".encode()
            for _ in range(self.rounds):
                h = hashlib.sha256(h).digest()
            digests.append(h.hex())
            stats.seen("toy")
            stats.kept("toy")
        write_parquet(work / "toy" / f"{shard.id}.parquet", pa.table({"digest": digests}))
        return stats


def make_inputs(folder: Path, n: int) -> list[Path]:
    """The sample data's canonical records replicated to ``n`` records with unique ids (absolute image paths)."""
    from curate.core.records import read_records, BadRecord

    sample = ROOT / "data" / "sample"
    base = [r for r in read_records([sample / "records.jsonl", sample / "llava.jsonl"]) if not isinstance(r, BadRecord)]
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "records.jsonl"
    with open(path, "w", encoding="utf-8") as fh:
        for k in range(n):
            rec = base[k % len(base)]
            row = {"id": f"{rec['id']}#{k}", "source": rec["source"], "images": rec["images"],
                   "messages": rec["messages"]}
            fh.write(json.dumps(row, ensure_ascii=False) + "\n")
    return [path]


def run_pack(executor: Any, out: Path, inputs: list[Path], processor: Path, shard_size: int) -> float:
    from packer.pack import pack

    os.environ["CURATE_CACHE"] = str(out.parent / f"cache-{out.name}")
    t0 = time.perf_counter()
    pack(inputs, out=out, ctx=4096, processor=str(processor), seed=0, shard_size=shard_size,
         sequences_per_shard=64, verify_fraction=0.0, executor=executor, plot=False)
    return time.perf_counter() - t0


def run_toy(executor: Any, out: Path, shards: int, per_shard: int, rounds: int) -> float:
    todo = [Shard(k, meta=(k * per_shard, (k + 1) * per_shard), size=per_shard) for k in range(shards)]
    t0 = time.perf_counter()
    run_stage(ToyTask(rounds), todo, out, executor=executor, seed=0, desc="toy")
    return time.perf_counter() - t0


def same_bytes(a: Path, b: Path, patterns: list[str]) -> bool:
    for pattern in patterns:
        names = sorted(p.relative_to(a) for p in a.glob(pattern))
        if names != sorted(p.relative_to(b) for p in b.glob(pattern)) or not names:
            return False
        if any((a / n).read_bytes() != (b / n).read_bytes() for n in names):
            return False
    return True


def describe(runs: list[dict[str, Any]]) -> None:
    keys = ["wall", "actor_start", "setup", "compute", "gap_per_shard", "gather_per_shard", "shards", "actors_used"]
    print(f"    {'step':<14}" + "".join(f"{k:>17}" for k in keys))
    for r in runs:
        print(f"    {r['desc']:<14}" + "".join(f"{r.get(k, 0.0):>17.3f}" for k in keys))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small sizes, one round (a couple of minutes)")
    parser.add_argument("--workers", type=int, default=2, help="local worker processes = Ray actors")
    parser.add_argument("--records", type=int, default=None, help="records to pack (default 3000, quick 600)")
    parser.add_argument("--rounds", type=int, default=None,
                        help="alternating local/ray rounds; the best of each is reported (default 2, quick 1)")
    args = parser.parse_args(argv)
    records = args.records or (600 if args.quick else 3000)
    rounds = args.rounds or (1 if args.quick else 2)
    shard_size = 100 if args.quick else 250
    toy_shards, toy_per_shard, toy_rounds = (12, 200, 500) if args.quick else (48, 200, 500)

    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    import ray

    tmp = Path(tempfile.mkdtemp(prefix="bench-ray-"))
    try:
        from curate.fixtures.processor import build_tiny_processor

        processor = build_tiny_processor(tmp / "processor")
        inputs = make_inputs(tmp / "data", records)
        print(f"machine: {os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f}; "
              f"workers/actors: {args.workers}; ray {ray.__version__}; best of {rounds} round(s)")

        local = get_executor("local", workers=args.workers)
        rayx = get_executor("ray", concurrency=args.workers)
        t0 = time.perf_counter()
        rayx.connect()
        t_cluster = time.perf_counter() - t0

        results: dict[str, list[tuple[float, list[dict[str, Any]]]]] = {
            k: [] for k in ("pack-local", "pack-ray", "toy-local", "toy-ray")}
        ok = True
        for r in range(rounds):
            for kind, runner in (("pack", lambda ex, out: run_pack(ex, out, inputs, processor, shard_size)),
                                 ("toy", lambda ex, out: run_toy(ex, out, toy_shards, toy_per_shard, toy_rounds))):
                for name, ex in (("local", local), ("ray", rayx)):
                    before = len(rayx.runs)
                    wall = runner(ex, tmp / f"{kind}-{name}-{r}")
                    results[f"{kind}-{name}"].append((wall, rayx.runs[before:] if name == "ray" else []))
                patterns = (["shards/*.tar", "lengths.parquet", "plan.parquet", "_records/*.arrow"] if kind == "pack"
                            else ["toy/*.parquet"])
                ok &= same_bytes(tmp / f"{kind}-local-{r}", tmp / f"{kind}-ray-{r}", patterns)
                for name in ("local", "ray"):
                    shutil.rmtree(tmp / f"{kind}-{name}-{r}", ignore_errors=True)
        rayx.close()

        print(f"\nRay local cluster start: {t_cluster:.2f} s (once per process); outputs identical: {ok}")
        for kind, what in (("pack", f"pack {records:,} records ({-(-records // shard_size)} lengths shards)"),
                           ("toy", f"toy {toy_shards} shards × {toy_per_shard} records × "
                                   f"{toy_rounds} sha256 rounds")):
            t_local = min(w for w, _ in results[f"{kind}-local"])
            t_ray, runs = min(results[f"{kind}-ray"], key=lambda x: x[0])
            print(f"\n{what}")
            print(f"  local ({args.workers} processes): {t_local:7.2f} s   (rounds: "
                  + ", ".join(f"{w:.1f}" for w, _ in results[f"{kind}-local"]) + ")")
            print(f"  ray   ({args.workers} actors):    {t_ray:7.2f} s   (rounds: "
                  + ", ".join(f"{w:.1f}" for w, _ in results[f"{kind}-ray"]) + ")")
            print(f"  overhead ratio ray/local: {t_ray / t_local:.2f}×   "
                  f"(with the cluster start: {(t_ray + t_cluster) / t_local:.2f}×)")
            print("  where Ray's time went (best round):")
            describe(runs)
        print("\n(seconds; actor_start = step start → actor constructor (worker process, Ray Data actor), setup = "
              "unpickle the task + task.setup(), both means over actors; compute = shard work per actor; "
              "gap = an actor's idle time between two shards; gather = shard end → result on the driver)")
        return 0 if ok else 1
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
