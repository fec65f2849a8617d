"""Shard writing: curate's shard writer vs a plain tarfile loop writing the same members.

Packs the bundled sample data replicated --copies times (token counting once),
then times (a) the pack shard-writing step (ShardWriteTask over every output
shard, in this process) and (b) a plain ``tarfile`` loop that reads the same
image files and writes the same member names and bytes. Ratio = (b) / (a);
target >= 0.7. Also prints the padding reduction of the demo data.

    .venv/bin/python benchmarks/bench_writer.py [--copies 30] [--quick]
"""

from __future__ import annotations

import argparse
import io
import json
import os
import shutil
import sys
import tarfile
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import webdataset as wds  # noqa: E402

from curate.executors import run_stage  # noqa: E402
from curate.fixtures.processor import build_tiny_processor  # noqa: E402
from curate.fixtures.sampledata import make_sample_data  # noqa: E402
from curate.core.shards import Shard  # noqa: E402
from packer.config import PackConfig  # noqa: E402
from packer.pack import pack  # noqa: E402
from packer.writer import BinRange, ShardWriteTask  # noqa: E402


def replicate(sample: Path, out: Path, copies: int) -> Path:
    """records.jsonl repeated with unique ids and absolute image paths."""
    lines = (sample / "records.jsonl").read_text(encoding="utf-8").splitlines()
    path = out / "big.jsonl"
    with open(path, "w", encoding="utf-8") as fh:
        for c in range(copies):
            for line in lines:
                rec = json.loads(line)
                rec["id"] = f"{rec['id']}#{c}"
                rec["images"] = [str((sample / p).resolve()) for p in rec.get("images", [])]
                fh.write(json.dumps(rec, ensure_ascii=False) + "\n")
    return path


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--copies", type=int, default=30)
    ap.add_argument("--quick", action="store_true")
    args = ap.parse_args()
    copies = 5 if args.quick else args.copies
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        os.environ["CURATE_CACHE"] = str(tmp / "cache")
        sample = tmp / "sample"
        make_sample_data(sample)
        proc = build_tiny_processor(tmp / "proc")
        demo = pack([sample / "records.jsonl", sample / "llava.jsonl", sample / "captions.jsonl"], out=tmp / "demo",
                    ctx=8192, processor=str(proc), verify_fraction=0.0)
        src = replicate(sample, tmp, copies)
        out = tmp / "out"
        stats = pack([src], out=out, ctx=8192, processor=str(proc), verify_fraction=0.0, sequences_per_shard=64)
        shards = sorted((out / "shards").glob("*.tar"))
        total_bytes = sum(p.stat().st_size for p in shards)
        # (a) the writer again, into a fresh folder (same plan and record store)
        fresh = tmp / "again"
        (fresh / "_plan").mkdir(parents=True)
        shutil.copy(out / "_plan" / "plan.npz", fresh / "_plan" / "plan.npz")
        bins = stats["bins"]
        work = [Shard(k, meta=BinRange(lo, min(lo + 64, bins)), size=min(lo + 64, bins) - lo)
                for k, lo in enumerate(range(0, bins, 64))]
        task = ShardWriteTask(PackConfig(out=fresh, ctx=8192), stats["settings"]["processor"], store_dir=str(out),
                              out=str(fresh))
        task.setup()
        t0 = time.perf_counter()
        run_stage(task, work, fresh, seed=0)
        ours = time.perf_counter() - t0
        # (b) the same members with a plain tarfile loop (JSON payloads prepared, image files read from disk)
        members = []
        for shard in shards:
            group = []
            for sample_ in wds.WebDataset(str(shard), shardshuffle=False, empty_check=False):
                meta = json.loads(sample_["json"])
                group.append((sample_["__key__"], sample_["json"], meta))
            members.append(group)
        store = {rec_id: paths for rec_id, paths in _paths(out)}
        t0 = time.perf_counter()
        for k, group in enumerate(members):
            with tarfile.open(tmp / f"plain{k}.tar", "w") as tar:
                for key, payload, meta in group:
                    info = tarfile.TarInfo(f"{key}.json")
                    info.size = len(payload)
                    tar.addfile(info, io.BytesIO(payload))
                    names = iter(meta["image_members"])
                    for rid in meta["ids"]:
                        for p in store[rid]:
                            data = Path(p).read_bytes()
                            info = tarfile.TarInfo(f"{key}.{next(names)}")
                            info.size = len(data)
                            tar.addfile(info, io.BytesIO(data))
        plain = time.perf_counter() - t0
        same = all((fresh / "shards" / p.name).read_bytes() == p.read_bytes() for p in shards)
        print(f"shards: {len(shards)} tars, {bins:,} sequences, {stats['records_packed']:,} records, "
              f"{total_bytes / 1e6:.1f} MB; rewrite byte-identical: {same}")
        print(f"curate shard writer: {ours:.2f}s ({total_bytes / 1e6 / ours:.0f} MB/s)")
        print(f"plain tarfile loop:  {plain:.2f}s ({total_bytes / 1e6 / plain:.0f} MB/s)")
        print(f"throughput ratio (ours / plain): {plain / ours:.2f}   [target >= 0.7]")
        pr = demo["padding_reduction"]
        print(f"padding reduction on the demo data (ctx 8192): {'inf' if pr is None else f'{pr:.1f}x'} "
              f"({demo['records_packed']} records, {demo['bins']} bins, fill {demo['fill_ratio']:.3f})")


def _paths(out: Path):  # noqa: ANN202
    import pyarrow as pa
    for p in sorted((out / "_records").glob("*.arrow")):
        table = pa.ipc.open_file(pa.memory_map(str(p))).read_all()
        yield from zip(table.column("id").to_pylist(), table.column("images").to_pylist())


if __name__ == "__main__":
    main()
