"""Benchmark: ``curate embed`` throughput against a bare open_clip forward loop.

Usage:
    python benchmarks/bench_embed.py                 # 192 images, random ViT-B-32 (realistic compute)
    python benchmarks/bench_embed.py --quick         # 48 images
    python benchmarks/bench_embed.py --model local-dir:/path/tiny   # any model spec

The baseline is open_clip's ``encode_image`` over already decoded and
preprocessed tensors, in batches of the same size, in this process, with the
same model object. ``curate embed`` runs on JPEG files (640×480, decoded by its
thread pool while the model runs) and writes its outputs. Each side is timed
``--repeats`` times alternately and the best time is kept. Target: ratio ≥ 0.9.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from curate.balance.embed import embed  # noqa: E402
from curate.models.encoders import load_encoder  # noqa: E402
from curate.core.images import decode  # noqa: E402


def make_images(folder: Path, n: int, seed: int = 0) -> Path:
    """Write ``n`` smooth random 640×480 JPEGs and a records file pointing at them."""
    from PIL import Image

    rng = np.random.default_rng(seed)
    folder.mkdir(parents=True, exist_ok=True)
    yy, xx = np.mgrid[0:480, 0:640].astype(np.float32)
    with open(folder / "records.jsonl", "w", encoding="utf-8") as fh:
        for i in range(n):
            a, b, c = rng.uniform(0.005, 0.05, 3)
            base = np.stack([np.sin(a * xx + i), np.cos(b * yy), np.sin(c * (xx + yy))], axis=-1)
            pixels = ((base + 1) * 110 + rng.normal(0, 12, base.shape)).clip(0, 255).astype(np.uint8)
            name = f"img{i:05d}.jpg"
            Image.fromarray(pixels).save(folder / name, quality=90)
            fh.write(json.dumps({"id": f"b{i:05d}", "images": [name], "caption": "x"}) + "\n")
    return folder / "records.jsonl"


def bare_loop(encoder, tensors, batch_size: int) -> float:  # noqa: ANN001
    """Seconds for the bare forward loop over preprocessed tensors."""
    import torch

    t0 = time.perf_counter()
    with torch.inference_mode():
        for lo in range(0, len(tensors), batch_size):
            batch = torch.stack(tensors[lo:lo + batch_size]).to(encoder.device, dtype=encoder.input_dtype)
            feats = encoder.model.encode_image(batch)
            torch.nn.functional.normalize(feats.float(), dim=-1).cpu().numpy()
    return time.perf_counter() - t0


def main(argv: list[str] | None = None) -> None:
    """Run the benchmark and print its figures."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="ViT-B-32-quickgelu:random")
    parser.add_argument("--n", type=int, default=192, help="images")
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--precision", default="fp32")
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--quick", action="store_true", help="48 images, one repeat")
    args = parser.parse_args(argv)
    if args.quick:
        args.n, args.repeats = 48, 1

    tmp = Path(tempfile.mkdtemp(prefix="bench-embed-"))
    try:
        records = make_images(tmp / "data", args.n)
        encoder = load_encoder(args.model, precision=args.precision)
        tensors = [encoder.preprocess(decode(p)) for p in sorted((tmp / "data").glob("*.jpg"))]
        bare_loop(encoder, tensors[: args.batch_size], args.batch_size)  # warm-up
        bare, ours = [], []
        for r in range(args.repeats):
            bare.append(bare_loop(encoder, tensors, args.batch_size))
            out = tmp / f"out{r}"
            t0 = time.perf_counter()
            result = embed([records], out=out, model=args.model, precision=args.precision,
                           batch_size=args.batch_size, shard_size=max(args.n, 1))
            ours.append(time.perf_counter() - t0)
            assert result["records_embedded"] == args.n
            shutil.rmtree(out)
        tb, to = min(bare), min(ours)
        print(f"model {args.model} ({args.precision}), {args.n} images 640x480 JPEG, batch {args.batch_size}, "
              f"{encoder.device}")
        print(f"bare open_clip forward on decoded tensors: {tb:.2f}s  ({args.n / tb:.1f} images/s)")
        print(f"curate embed (decode + model + write):     {to:.2f}s  ({args.n / to:.1f} images/s)")
        print(f"throughput ratio curate/bare: {tb / to:.3f}  (target >= 0.9)")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
