"""Benchmark of compute-balanced packing against the token-only plan of the same data.

Usage:
    python benchmarks/bench_compute_balance.py            # 1M samples, ctx 8192, dp 8, M = 1 and 4
    python benchmarks/bench_compute_balance.py --quick    # 100k samples
    python benchmarks/bench_compute_balance.py --micro-batches 2 --step-mix 1,2,4
    python benchmarks/bench_compute_balance.py --mixture          # held-out mixture, 100k and 1M, swap pass off/on
    python benchmarks/bench_compute_balance.py --mixture --quick  # 100k only

The data is a seeded synthetic vision-language mixture at native resolution
(image tokens from the Qwen2-VL rule: sides rounded to multiples of 28 within
64 and 4,096 tokens' worth of pixels): camera photos and web images, scanned
document pages, rendered charts, multi-image samples and text-only
conversations, with 0-4 images per sample. Each sample's cost comes from
:mod:`packer.compute_balance` (LLaVA-OneVision-1.5-8B defaults), in its four parts.

Printed for each number of micro-batches M, for the token-only plan (consecutive
bins of the shuffled plan form the steps of ``dp`` ranks), for steps balanced on
the scalar cost alone (the bins of each step matched on one number, as before
parts were balanced) and for ``--balance-compute`` (bins matched part by part):

* p99 step imbalance (max / mean rank cost per step) under the default model and
  under each of the 8 models that scale the LM-attention, ViT and ViT-attention
  weights by x0.5 or x2 (computed here from each bin's component sums), and the
  worst of them;
* the idle fraction of the ranks under the default model, p99 per micro-batch;
* what steps hold: the spread over steps (std, p1-p99) of the image-token share
  and of the mean sample length;
* bins / lower bound; planning wall time and its ratio to the token-only plan
  (both measured in this run; the balanced time includes computing the costs).

With ``--mixture`` it runs on another, held-out mixture (:func:`mixture_samples`: 0-4 images
per sample of up to 110×84 patches, ctx 16384 so that bins are few and the k-d groups
sparse) and prints, for 100k and 1M samples, the p99 under each model without and with
the swap pass (:func:`packer.compute_balance.swap_pass`), side by side, and both planning times.

With ``--step-mix K,...`` it also prints, for each K, the balance and the
composition of steps made of K groups of similar bins.
"""

from __future__ import annotations

import argparse
import itertools
import os
import sys
import time

from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from packer.compute_balance import balance_bins, segment_sums  # noqa: E402
from packer.compute_balance import CostModel, sample_components  # noqa: E402
from packer.plan import plan_bins  # noqa: E402
from packer.compute_balance import StepLayout, rank_loads, step_ratios, token_layout  # noqa: E402

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


def mixture_samples(n: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(tokens, patches, owner)`` of the held-out mixture: 0-4 images per sample (15/40/20/15/10%), each a grid
    of 4-110 × 4-84 patches (even sides, uniform), text of median 150 tokens (log-normal, sigma 1) + 20."""
    rng = np.random.default_rng([seed, 46])
    n_img = rng.choice(5, n, p=[.15, .40, .2, .15, .1])
    owner = np.repeat(np.arange(n, dtype=np.int64), n_img)
    patches = (2 * rng.integers(2, 56, owner.size)) * (2 * rng.integers(2, 43, owner.size))
    text = np.maximum(8, rng.lognormal(np.log(150), 1.0, n)).astype(np.int64) + 20
    return text + np.bincount(owner, weights=patches // 4, minlength=n).astype(np.int64), patches, owner


def model_weights() -> list[tuple[str, np.ndarray]]:
    """The default model's ``(a, b, c, e)`` and the 8 models scaling ``b``, ``c``, ``e`` by x0.5 or x2."""
    base = np.array(CostModel().coefficients())
    out = [("default", base)]
    for f in itertools.product((0.5, 2.0), repeat=3):
        out.append((f"attn x{f[0]:g} vit x{f[1]:g} vit-attn x{f[2]:g}", base * np.array([1.0, *f])))
    return out


def judged(bin_parts: np.ndarray, layout: object) -> list[float]:
    """p99 step imbalance of a layout under each of :func:`model_weights` (``bin_parts`` in component units)."""
    loads = rank_loads(bin_parts, layout)  # (parts, steps, dp)
    return [float(np.percentile(step_ratios(np.tensordot(w, loads, 1)), 99)) for _, w in model_weights()]


def composition_line(stats: dict) -> str:
    """The spread over steps of the image-token share and the mean sample length."""
    s, m = stats["image_share"], stats["mean_length"]
    return (f"image share std {s['std']:.3f} (p1-p99 {s['p1']:.2f}-{s['p99']:.2f}), mean length std "
            f"{m['std']:,.0f} (p1-p99 {m['p1']:,.0f}-{m['p99']:,.0f})")


def main(argv: list[str] | None = None) -> None:
    """Run the benchmark and print its figures."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=1_000_000)
    parser.add_argument("--ctx", type=int, default=8192)
    parser.add_argument("--dp", type=int, default=8)
    parser.add_argument("--micro-batches", default="1,4", help="comma-separated values of M")
    parser.add_argument("--step-mix", default="", help="comma-separated K values to compare (default: none)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--repeat", type=int, default=5, help="timing runs of each plan (best is kept)")
    parser.add_argument("--quick", action="store_true", help="100k samples, 2 timing runs")
    parser.add_argument("--mixture", action="store_true", help="the held-out mixture, swap pass off and on")
    parser.add_argument("--mixture-ctx", type=int, default=16384)
    args = parser.parse_args(argv)
    if args.mixture:
        for n in ((100_000,) if args.quick else (100_000, 1_000_000)):
            for m in (int(x) for x in args.micro_batches.split(",")):
                run_mixture(args, n, m)
        return
    if args.quick:
        args.n, args.repeat = 100_000, 2
    tokens, patches, owner = synthetic_samples(args.n, args.seed)
    img_tok = patches // 4
    image_tokens = np.bincount(owner, weights=img_tok, minlength=args.n)
    print(f"compute balance: {args.n:,} synthetic samples (seed {args.seed}), ctx {args.ctx}, dp {args.dp}; "
          f"machine: {os.cpu_count()} cores, load {os.getloadavg()[0]:.1f}")
    print(f"  images {owner.size:,} ({np.bincount(np.bincount(owner, minlength=args.n), minlength=5).tolist()} "
          f"samples with 0..4 images); image tokens min {img_tok.min()} median {int(np.median(img_tok))} "
          f"p99 {int(np.percentile(img_tok, 99))} max {img_tok.max()}; samples > ctx {(tokens > args.ctx).sum():,}")
    model = CostModel()
    coef = np.array(model.coefficients())
    components = sample_components(tokens, patches, owner)
    for m in (int(x) for x in args.micro_batches.split(",")):
        run(args, m, tokens, image_tokens, patches, owner, components, coef)


def run(args: argparse.Namespace, m: int, tokens: np.ndarray, image_tokens: np.ndarray, patches: np.ndarray,
        owner: np.ndarray, components: np.ndarray, coef: np.ndarray) -> None:
    """The figures for one number of micro-batches."""
    dp = args.dp

    def token_only() -> object:
        return plan_bins(tokens, args.ctx, seed=args.seed)

    def compute_balanced() -> object:
        parts = sample_components(tokens, patches, owner) * coef
        token_plan = plan_bins(tokens, args.ctx, seed=args.seed)
        return balance_bins(token_plan.bin_offsets, token_plan.members, tokens, parts, dp=dp, micro_batches=m,
                            seed=args.seed, image_tokens=image_tokens)

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
    scalar = balance_bins(plan.bin_offsets, plan.members, tokens, components @ coef, dp=dp, micro_batches=m,
                          seed=args.seed, image_tokens=image_tokens)
    names = [n for n, _ in model_weights()]
    token_lay = token_layout(plan.bins, dp, m)
    rows = {"token-only": judged(segment_sums(components[plan.members], plan.bin_offsets), token_lay),
            "scalar cost": judged(segment_sums(components[scalar.members], scalar.bin_offsets), _in_order(scalar)),
            "balanced": judged(segment_sums(components[bal.members], bal.bin_offsets), _in_order(bal))}
    print(f"\n  M = {m} ({bal.layout.steps:,} steps of {dp} ranks x {m})")
    print(f"  {'p99 step max/mean under':44s} {'token-only':>11s} {'scalar cost':>12s} {'balanced':>11s}")
    for i, name in enumerate(names):
        print(f"  {name:44s} " + " ".join(f"{rows[k][i]:11.4f}" for k in rows))
    print(f"  {'worst of the 8 other models':44s} " + " ".join(f"{max(rows[k][1:]):11.4f}" for k in rows))
    stats = {"token-only": bal.stats["imbalance"]["token_only"], "scalar cost": scalar.stats["imbalance"]["balanced"],
             "balanced": bal.stats["imbalance"]["balanced"]}
    print(f"  {'idle fraction (default model)':44s} " + " ".join(f"{stats[k]['idle_fraction']:11.3%}" for k in stats))
    if m > 1:
        print(f"  {'p99 per micro-batch (FSDP / ZeRO-3)':44s} " + " ".join(f"{stats[k]['micro_p99']:11.4f}"
                                                                        for k in stats))
    comp = {"token-only": bal.stats["composition"]["token_only"], "scalar cost": scalar.stats["composition"]["balanced"],
            "balanced": bal.stats["composition"]["balanced"]}
    for k, v in comp.items():
        print(f"  steps hold, {k:12s} {composition_line(v)}")
    print(f"  bins {plan.bins:,} token-only, {bal.bins:,} balanced ({bal.split} split); lower bound "
          f"{plan.lower_bound_bins:,}; bins / lower bound {plan.bins / plan.lower_bound_bins:.6f} token-only, "
          f"{bal.bins / plan.lower_bound_bins:.6f} balanced")
    print(f"  planning time: token-only {token_s:.2f} s, balanced {balanced_s:.2f} s "
          f"(costs + plan + steps) -> ratio {balanced_s / token_s:.2f}x (best of {args.repeat})")
    for k in (int(x) for x in args.step_mix.split(",") if x):
        if (dp * m) % k:
            print(f"  --step-mix {k}: does not divide dp x M = {dp * m}")
            continue
        mixed = balance_bins(plan.bin_offsets, plan.members, tokens, components * coef, dp=dp, micro_batches=m,
                             seed=args.seed, mix=k, image_tokens=image_tokens)
        p99 = judged(segment_sums(components[mixed.members], mixed.bin_offsets), _in_order(mixed))
        print(f"  --step-mix {k:<3d} p99 {p99[0]:.4f}, worst other {max(p99[1:]):.4f}; "
              f"{composition_line(mixed.stats['composition']['balanced'])}")


def run_mixture(args: argparse.Namespace, n: int, m: int) -> None:
    """p99 under every model on the held-out mixture, without and with the swap pass; planning times."""
    tokens, patches, owner = mixture_samples(n, args.seed)
    components = sample_components(tokens, patches, owner)
    coef = np.array(CostModel().coefficients())
    parts = components * coef
    plan = plan_bins(tokens, args.mixture_ctx, seed=args.seed)

    def layout(swap: bool) -> object:
        plan = plan_bins(tokens, args.mixture_ctx, seed=args.seed)
        return balance_bins(plan.bin_offsets, plan.members, tokens, parts, dp=args.dp, micro_batches=m,
                            seed=args.seed, swap=swap)

    times: dict[bool, list[float]] = {False: [], True: []}
    out: dict[bool, object] = {}
    for _ in range(max(1, args.repeat)):  # alternate, so that load on the machine hits both alike
        for swap in (False, True):
            t0 = time.perf_counter()
            out[swap] = layout(swap)
            times[swap].append(time.perf_counter() - t0)
    rows = {swap: judged(segment_sums(components[bb.members], bb.bin_offsets), _in_order(bb))
            for swap, bb in out.items()}
    print(f"\nheld-out mixture: {n:,} samples (0-4 images of up to 110x84 patches), ctx {args.mixture_ctx}, "
          f"dp {args.dp}, M = {m}: {plan.bins:,} bins, {out[True].layout.steps:,} steps; "
          f"load {os.getloadavg()[0]:.1f}")
    print(f"  {'p99 step max/mean under':44s} {'k-d groups':>11s} {'+ swap pass':>12s}")
    for i, (name, _) in enumerate(model_weights()):
        print(f"  {name:44s} {rows[False][i]:11.4f} {rows[True][i]:12.4f}")
    print(f"  {'worst of the 8 other models':44s} {max(rows[False][1:]):11.4f} {max(rows[True][1:]):12.4f}")
    print(f"  {'p99 per micro-batch (default model)':44s} "
          f"{out[False].stats['imbalance']['balanced']['micro_p99']:11.4f} "
          f"{out[True].stats['imbalance']['balanced']['micro_p99']:12.4f}")
    before, after = min(times[False]), min(times[True])
    print(f"  exchanges {out[True].stats['swaps']:,}; planning time (token plan + split + k-d groups [+ swaps], "
          f"best of {max(1, args.repeat)}): {before:.2f} s -> {after:.2f} s, ratio {after / before:.2f}x")


def _in_order(bb: object) -> object:
    """The layout of balanced bins with ``order`` referring to their output positions."""
    lay = bb.layout
    return StepLayout(lay.dp, lay.micro_batches, lay.steps, np.arange(lay.order.shape[0]), lay.step, lay.rank,
                      lay.micro)


if __name__ == "__main__":
    main()
