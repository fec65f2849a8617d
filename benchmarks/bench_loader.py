"""The training loader: sequences/s per DataLoader worker, and the time to resume mid-epoch.

(1) Throughput. The demo data replicated --copies times, packed with the tiny processor; one epoch read
through ``torch.utils.data.DataLoader`` with 0, 1 and 2 workers, full tensors built (tokens, positions,
pixels). Prints sequences/s and sequences/s per worker. Baseline in the same run: the raw bytes of
every sequence read (a) by the loader's index (one seek + read per sequence, shuffled) and (b) by
streaming the tars with ``webdataset`` in order; ratio (b)/(a) time.

(2) Resume. A synthetic pack of --sequences (100,000) packed sequences in our layout (a JSON and one
small image member each, 20 tars with their index files). For positions 1 %, 50 % and 99 % of a shuffled
epoch on 8 ranks: the time from a fresh ``PackedDataset`` to its first sequence after
``load_state_dict`` (index read, permutation, one seek). Target < 2 s, independent of the position.
Baseline: the same position reached by skipping sequences (what a loader without state does), and the
index of an older pack (no index files) rebuilt by scanning the tar headers.

    .venv/bin/python benchmarks/bench_loader.py [--copies 8] [--sequences 100000] [--quick]
"""

from __future__ import annotations

import argparse
import io
import json
import os
import sys
import tarfile
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch  # noqa: E402

from benchmarks.bench_writer import replicate  # noqa: E402
from curate.fixtures.processor import build_tiny_processor  # noqa: E402
from curate.fixtures.sampledata import make_sample_data  # noqa: E402
from packer.loader import PackedDataset, worker_init  # noqa: E402
from packer.pack import pack  # noqa: E402
from packer.writer import build_index, index_path  # noqa: E402
from packer.tokens import TokenCounter  # noqa: E402


def throughput(tmp: Path, copies: int) -> None:
    sample = tmp / "sample"
    make_sample_data(sample)
    processor = build_tiny_processor(tmp / "processor")
    out = tmp / "packed"
    pack([replicate(sample, tmp, copies)], out=out, ctx=4096, processor=str(processor), max_pixels=28 * 28 * 64,
         seed=0, sequences_per_shard=16, verify_fraction=0.0, plot=False)
    counter = TokenCounter(processor, max_pixels=28 * 28 * 64)
    n = len(PackedDataset(out / "shards", None))
    print(f"(1) throughput: {n} packed sequences (ctx 4096) of the demo data x{copies}, tiny processor")
    base = None
    next(iter(PackedDataset(out / "shards", counter)))  # warm-up: lazy imports, the image processor's first call
    for workers in (0, 1, 2):
        ds = PackedDataset(out / "shards", counter, shuffle=True, seed=1)
        loader = torch.utils.data.DataLoader(ds, batch_size=None, num_workers=workers,
                                             worker_init_fn=worker_init if workers else None)
        start = time.perf_counter()
        seen = sum(1 for _ in loader)
        rate = seen / (time.perf_counter() - start)
        base = base or rate
        print(f"    workers={workers}: {rate:7.1f} sequences/s, {rate / max(workers, 1):7.1f} per worker "
              f"({rate / base:.2f}x the main process)")
    import webdataset as wds

    tars = sorted(str(p) for p in (out / "shards").glob("*.tar"))
    start = time.perf_counter()
    indexed = sum(1 for _ in PackedDataset(out / "shards", None, shuffle=True, seed=1).raw())
    t_index = time.perf_counter() - start
    start = time.perf_counter()
    streamed = sum(1 for _ in wds.WebDataset(tars, shardshuffle=False, empty_check=False))
    t_stream = time.perf_counter() - start
    assert indexed == streamed == n
    print(f"    raw bytes of every sequence: by index, shuffled {t_index * 1e3:.0f} ms; webdataset stream in order "
          f"{t_stream * 1e3:.0f} ms; ratio stream/index {t_stream / t_index:.2f}")


def synthetic_pack(folder: Path, sequences: int, tars: int = 20) -> None:
    folder.mkdir(parents=True)
    image = bytes(range(256)) * 2
    per = -(-sequences // tars)
    for t in range(tars):
        path = folder / f"{t:06d}.tar"
        starts, ends, keys = [], [], []
        with open(path, "wb") as fh, tarfile.open(fileobj=fh, mode="w", format=tarfile.USTAR_FORMAT) as tf:
            for i in range(t * per, min(sequences, (t + 1) * per)):
                key = f"{i:010d}"
                meta = json.dumps({"key": key, "ids": [f"r{i}"], "image_members": ["img0.jpg"]}).encode()
                starts.append(tf.offset)
                keys.append(key)
                for name, data in ((f"{key}.json", meta), (f"{key}.img0.jpg", image)):
                    info = tarfile.TarInfo(name)
                    info.size = len(data)
                    tf.addfile(info, io.BytesIO(data))
                ends.append(tf.offset)
        Path(index_path(str(path))).write_text(json.dumps(build_index(starts, ends, None, keys).to_json(
            path.stat().st_size)))


def resume(tmp: Path, sequences: int) -> None:
    folder = tmp / "synthetic" / "shards"
    start = time.perf_counter()
    synthetic_pack(folder, sequences)
    print(f"(2) resume: synthetic pack of {sequences:,} sequences in 20 tars (written in "
          f"{time.perf_counter() - start:.1f} s); shuffled epoch, 8 ranks, rank 3")
    world, rank = 8, 3
    per_rank = -(-sequences // world)
    times = []
    for share in (0.01, 0.5, 0.99):
        done = int(per_rank * share)
        saved = PackedDataset(folder, None, rank=rank, world_size=world, shuffle=True, seed=1)
        saved.set_epoch(2)
        state = saved.state_at(done)
        t0 = time.perf_counter()
        ds = PackedDataset(folder, None, rank=0, world_size=world, shuffle=True, seed=1)
        ds.load_state_dict(state)
        first = next(iter(ds))
        elapsed = time.perf_counter() - t0
        times.append(elapsed)
        assert first["key"] == f"{int(ds._rank_list()[0][0]):010d}"  # rank 0's first sequence after the position
        print(f"    at {share:4.0%} of the epoch ({done * world:,} sequences consumed): first sequence after "
              f"{elapsed * 1e3:6.0f} ms")
    print(f"    slowest/fastest {max(times) / min(times):.2f} (independent of the position); target < 2 s: "
          f"{'met' if max(times) < 2 else 'NOT met'}")
    skip_to = int(per_rank * 0.5)
    t0 = time.perf_counter()
    ds = PackedDataset(folder, None, rank=rank, world_size=world, shuffle=True, seed=1)
    ds.set_epoch(2)
    it = iter(ds)
    for _ in range(skip_to):
        next(it)
    skipping = time.perf_counter() - t0
    print(f"    baseline, skipping to 50 % by reading: {skipping:.2f} s ({skipping / times[1]:.0f}x the resume)")
    for p in folder.glob("*.index.json"):
        os.remove(p)
    t0 = time.perf_counter()
    len(PackedDataset(folder, None, rank=rank, world_size=world))
    print(f"    an older pack without index files: index rebuilt from the tar headers in "
          f"{time.perf_counter() - t0:.2f} s")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--copies", type=int, default=8)
    ap.add_argument("--sequences", type=int, default=100_000)
    ap.add_argument("--quick", action="store_true")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        os.environ["CURATE_CACHE"] = str(Path(tmp) / "cache")
        throughput(Path(tmp), 2 if args.quick else args.copies)
        resume(Path(tmp), args.sequences)  # the 100,000-sequence epoch also in --quick (the target's size)


if __name__ == "__main__":
    main()
