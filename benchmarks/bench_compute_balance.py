"""Benchmark of compute-balanced packing against the token-only plan of the same data.

Usage:
    python benchmarks/bench_compute_balance.py            # 1M samples, ctx 8192, dp 8
    python benchmarks/bench_compute_balance.py --quick    # 100k samples
    python benchmarks/bench_compute_balance.py --micro-batches 4

The data is a seeded synthetic vision-language mixture at native resolution
(image tokens from the Qwen2-VL rule: sides rounded to multiples of 28 within
64 and 4,096 tokens' worth of pixels): camera photos and web images, scanned
document pages, rendered charts, multi-image samples and text-only
conversations, with 0-4 images per sample. Each sample's cost comes from
:mod:`packer.cost` (LLaVA-OneVision-1.5-8B defaults).

Printed, for the token-only plan (consecutive bins of the shuffled plan form
the steps of ``dp`` ranks) and for ``--balance-compute``:

* step imbalance (max / mean rank cost per step): mean, p99, max;
* expected idle fraction of the ranks (rank-time spent waiting for the slowest
  rank: ``1 − Σ mean / Σ max`` over steps, from the cost model; no GPU needed),
  and the step time it implies relative to perfect balance;
* bins / lower bound; planning wall time and its ratio to the token-only plan
  (both measured in this run; the balanced time includes the costs).
"""

from __future__ import annotations

import argparse
import os
import sys
import time

from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from packer.balance import balance_bins  # noqa: E402
from packer.cost import CostModel  # noqa: E402
from packer.plan import plan_bins  # noqa: E402

FACTOR = 28
MIN_PIXELS = 64 * FACTOR * FACTOR
MAX_PIXELS = 4096 * FACTOR * FACTOR


def smart_resize(h: np.ndarray, w: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Vectorised Qwen2-VL resize rule: sides multiples of 28, pixels within [MIN_PIXELS, MAX_PIXELS]."""
    h, w = h.astype(np.float64), w.astype(np.float64)
    hb = np.maximum(FACTOR, np.round(h / FACTOR) * FACTOR)
    wb = np.maximum(FACTOR, np.round(w / FACTOR) * FACTOR)
    big = hb * wb > MAX_PIXELS
    beta = np.sqrt(h * w / MAX_PIXELS)
    hb = np.where(big, np.maximum(FACTOR, np.floor(h / beta / FACTOR) * FACTOR), hb)
    wb = np.where(big, np.maximum(FACTOR, np.floor(w / beta / FACTOR) * FACTOR), wb)
    small = hb * wb < MIN_PIXELS
    beta = np.sqrt(MIN_PIXELS / (h * w))
    hb = np.where(small, np.ceil(h * beta / FACTOR) * FACTOR, hb)
    wb = np.where(small, np.ceil(w * beta / FACTOR) * FACTOR, wb)
    return hb.astype(np.int64), wb.astype(np.int64)


def _sizes(rng: np.random.Generator, kind: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Native (height, width) of images of kind 0 photo, 1 document page, 2 chart."""
    n = kind.shape[0]
    long_side = np.empty(n)
    aspect = np.empty(n)  # height / width
    photo, doc, chart = kind == 0, kind == 1, kind == 2
    # Photos: web thumbnails to camera originals; landscape, portrait and square.
    long_side[photo] = np.exp(rng.normal(np.log(900), 0.6, photo.sum())).clip(120, 4032)
    aspect[photo] = rng.choice([0.75, 0.667, 0.5625, 1.0, 1.333, 1.5], photo.sum(), p=[.3, .2, .2, .1, .1, .1])
    # Document pages scanned at 100-300 dpi (A4 / letter portrait).
    dpi = rng.choice([100, 150, 200, 300], doc.sum(), p=[.2, .4, .25, .15])
    long_side[doc] = 11.2 * dpi
    aspect[doc] = rng.choice([1.414, 1.294], doc.sum())
    # Charts rendered for the web or papers.
    long_side[chart] = rng.uniform(480, 2000, chart.sum())
    aspect[chart] = rng.choice([0.75, 0.5625, 0.667, 1.0], chart.sum())
    width = np.where(aspect <= 1, long_side, long_side / aspect)
    height = width * aspect
    return np.maximum(16, height).astype(np.int64), np.maximum(16, width).astype(np.int64)


def synthetic_samples(n: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(tokens, patches, owner)``: tokens per sample and patches (before the 2x2 merge) per image.

    Sample kinds: text-only conversation (15%), photo caption or QA (45%),
    document QA with 1 page, or 2 for 30% of them (12%), chart QA (13%), 2-4 mixed, smaller
    images (15%).
    """
    rng = np.random.default_rng([seed, 16])
    kind = rng.choice(5, n, p=[.15, .45, .12, .13, .15])
    n_img = np.select([kind == 0, kind == 1, kind == 2, kind == 3],
                      [0, 1, 1 + (rng.random(n) < 0.3), 1], rng.choice([2, 3, 4], n, p=[.6, .3, .1]))
    text_median = np.select([kind == 0, kind == 1, kind == 2, kind == 3], [450.0, 90.0, 220.0, 120.0], 160.0)
    text = np.maximum(8, rng.lognormal(np.log(text_median), 0.9)).astype(np.int64) + 20
    owner = np.repeat(np.arange(n, dtype=np.int64), n_img)
    multi = kind[owner] == 4
    img_kind = np.select([kind[owner] == 1, kind[owner] == 2, kind[owner] == 3], [0, 1, 2],
                         rng.choice(3, owner.shape[0], p=[.7, .15, .15]))
    h, w = _sizes(rng, img_kind)
    shrink = np.where(multi, 0.6, 1.0)  # images of multi-image samples are usually smaller
    h, w = smart_resize((h * shrink).astype(np.int64), (w * shrink).astype(np.int64))
    patches = (h // 14) * (w // 14)
    image_tokens = np.bincount(owner, weights=patches // 4, minlength=n).astype(np.int64)
    return text + image_tokens, patches, owner


def main(argv: list[str] | None = None) -> None:
    """Run the benchmark and print its figures."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=1_000_000)
    parser.add_argument("--ctx", type=int, default=8192)
    parser.add_argument("--dp", type=int, default=8)
    parser.add_argument("--micro-batches", type=int, default=1)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--repeat", type=int, default=5, help="timing runs of each plan (best is kept)")
    parser.add_argument("--quick", action="store_true", help="100k samples")
    args = parser.parse_args(argv)
    if args.quick:
        args.n = 100_000
    tokens, patches, owner = synthetic_samples(args.n, args.seed)
    img_tok = patches // 4
    print(f"compute balance: {args.n:,} synthetic samples (seed {args.seed}), ctx {args.ctx}, dp {args.dp}, "
          f"micro-batches {args.micro_batches}; machine: {os.cpu_count()} cores, load {os.getloadavg()[0]:.1f}")
    print(f"  images {owner.size:,} ({np.bincount(np.bincount(owner, minlength=args.n), minlength=5).tolist()} "
          f"samples with 0..4 images); image tokens min {img_tok.min()} median {int(np.median(img_tok))} "
          f"p99 {int(np.percentile(img_tok, 99))} max {img_tok.max()}; samples > ctx {(tokens > args.ctx).sum():,}")
    model = CostModel()

    def token_only() -> object:
        return plan_bins(tokens, args.ctx, seed=args.seed)

    def compute_balanced() -> object:
        cost = model.sample_costs(tokens, patches, owner)
        token_plan = plan_bins(tokens, args.ctx, seed=args.seed)
        return balance_bins(token_plan.bin_offsets, token_plan.members, tokens, cost, dp=args.dp,
                            micro_batches=args.micro_batches, seed=args.seed)

    times: dict[str, list[float]] = {"token": [], "balanced": []}
    for _ in range(args.repeat):  # alternate the two so that load on the machine hits both alike
        for name, fn in (("token", token_only), ("balanced", compute_balanced)):
            t0 = time.perf_counter()
            result = fn()
            times[name].append(time.perf_counter() - t0)
            if name == "token":
                plan = result
            else:
                bal = result
    token_s, balanced_s = min(times["token"]), min(times["balanced"])

    before, after = bal.stats["imbalance"]["token_only"], bal.stats["imbalance"]["balanced"]
    print(f"  {'':22s} {'token-only':>12s} {'balanced':>12s}")
    for key in ("mean", "p99", "max"):
        print(f"  imbalance {key:12s} {before[key]:12.5f} {after[key]:12.5f}")
    if args.micro_batches > 1:
        print(f"  {'per micro-batch p99':22s} {before['micro_p99']:12.5f} {after['micro_p99']:12.5f}   "
              f"(across ranks, for FSDP / ZeRO-3)")
    print(f"  {'idle fraction':22s} {before['idle_fraction']:12.3%} {after['idle_fraction']:12.3%}   "
          f"(rank-time waiting for the slowest rank)")
    print(f"  {'mean step idle':22s} {before['mean_step_idle']:12.3%} {after['mean_step_idle']:12.3%}")
    slow_b, slow_a = 1 / (1 - before["idle_fraction"]), 1 / (1 - after["idle_fraction"])
    print(f"  {'step time / ideal':22s} {slow_b:12.5f} {slow_a:12.5f}   -> {slow_b / slow_a:.3f}x faster epochs")
    print(f"  p99 distance to 1: token-only {before['p99'] - 1:.5f}, balanced {after['p99'] - 1:.5f} "
          f"({(before['p99'] - 1) / max(after['p99'] - 1, 1e-12):.1f}x closer)")
    print(f"  bins {plan.bins:,} token-only, {bal.bins:,} balanced ({bal.split} split); lower bound "
          f"{plan.lower_bound_bins:,}; bins / lower bound {plan.bins / plan.lower_bound_bins:.6f} token-only, "
          f"{bal.bins / plan.lower_bound_bins:.6f} balanced")
    lay = bal.layout
    loads = np.bincount(lay.step * lay.dp + lay.rank, weights=bal.bin_cost).reshape(-1, lay.dp)
    worst = int(np.argmax(loads.max(axis=1) / loads.mean(axis=1)))
    print(f"  bin cost CV {bal.stats['bin_cost_cv']:.4f}; steps {lay.steps:,}; the most unbalanced step costs "
          f"{loads[worst].mean() / loads.mean():.2f}x the mean step (its bins hold "
          f"{sorted(bal.bin_tokens[lay.step == worst].tolist())[:lay.dp]}... tokens: the plan's last, "
          f"underfilled bins)")
    print(f"  planning time: token-only {token_s:.2f} s, balanced {balanced_s:.2f} s "
          f"(costs + plan + steps) -> ratio {balanced_s / token_s:.2f}x (best of {args.repeat})")


if __name__ == "__main__":
    main()
