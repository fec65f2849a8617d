"""Measured step times: token-only, FLOPs-model and calibrated compute-balanced plans on a real Qwen2-VL.

Usage:
    python benchmarks/bench_calibration.py            # 15-30 minutes on 2 shared cores (26 at load 9)
    python benchmarks/bench_calibration.py --quick    # 1-2 minutes (it runs; its figures are noise)
    python benchmarks/bench_calibration.py --out DIR  # keep the timing logs (DIR/calibration.csv, DIR/evaluation.csv)

The model is the tiny Qwen2-VL of :mod:`curate.fixtures.tiny_vlm` (its tokenizer and config,
built offline), enlarged through its config (text hidden 64 → ``--hidden``, vision encoder
width 32 → ``--vit-hidden``) so that one packed sequence of ``--ctx`` tokens takes tens to
hundreds of milliseconds for forward + backward on one CPU thread. Attention runs per sample
in the language model (causal SDPA over each sample's span of the packed sequence, what a
varlen kernel does) and per image in the vision encoder (the model's own non-flash path).

1. **Calibration.** Samples of a seeded vision-language mixture (text-only chats, photos,
   document pages, charts, multi-image samples) are packed into bins of ``--ctx`` tokens; half of
   ``--calibrate`` sequences keep only a random share of their samples, so that lengths vary. Every
   sequence is run (forward + backward) once per round for ``--rounds`` rounds, each round in its own
   random order, in CPU time (other work on the shared machine does not count, though it still slows
   ours for seconds at a time: hence rounds rather than runs back to back); its median time is written
   with :class:`packer.compute_balance.TimingLog`, as a training loop would, and :func:`packer.compute_balance.load_model`
   fits the coefficients.
2. **Evaluation.** Another draw of the mixture is packed; the token-only plan, the plans balanced
   with the FLOPs model of this architecture (:class:`packer.compute_balance.CostModel`) and with the fitted
   model (each part by part, and on one scalar cost: "1 cost", the layout before the parts were
   matched) are laid out for ``--dp`` ranks with 1 and ``--micro-batches`` micro-batches. Every
   distinct sequence of these plans is run in ``--rounds`` rounds the same way; its time is the
   median of its runs. A step's rank time is the sum of its measured sequence times (dp ranks
   simulated on one CPU). Printed: mean and p99 over steps of the step's max/mean rank time, the idle
   rank time, and the mean judged on the medians of the even rounds (A) and of the odd ones (B) alone;
   "oracle" lays the calibrated plan's bins out on A's times and is judged on B's: what measurement
   noise alone leaves.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

from packer.compute_balance import balance_bins  # noqa: E402
from packer.compute_balance import CostModel, sample_components  # noqa: E402
from packer.plan import plan_bins  # noqa: E402
from packer.compute_balance import StepLayout, balanced_layout, imbalance_stats, rank_loads, token_layout  # noqa: E402
from packer.compute_balance import TimingLog, describe_fit, load_model  # noqa: E402

PATCH_DIM = 3 * 2 * 14 * 14  # channels x temporal patch x patch x patch


def mixture(n: int, ctx: int, seed: int) -> tuple[np.ndarray, list[list[tuple[int, int]]]]:
    """Text tokens per sample and the (height, width) patch grids of its images (even sides: 2x2 merge).

    Kinds: text-only chat (20%), photo caption (40%, 1 image of 4-12 patches a side),
    document page (15%, 1 image of 16-26 patches a side), chart (10%, 1 image of 8-16), 2-4 small
    images (15%, 4-8 a side). Sizes suit ``--ctx`` 256 (a page is up to 169 tokens).
    """
    rng = np.random.default_rng([seed, 39])
    kind = rng.choice(5, n, p=[.2, .4, .15, .1, .15])
    median = np.array([50.0, 12.0, 20.0, 16.0, 16.0])[kind]
    text = np.maximum(4, rng.lognormal(np.log(median), 0.8)).astype(np.int64)
    sides = {1: (2, 7), 2: (8, 14), 3: (4, 9)}
    grids: list[list[tuple[int, int]]] = []
    for k in kind.tolist():
        if k == 0:
            grids.append([])
        elif k < 4:
            grids.append([tuple(2 * rng.integers(*sides[k], 2))])
        else:
            grids.append([tuple(2 * rng.integers(2, 5, 2)) for _ in range(int(rng.integers(2, 5)))])
    tokens = text + np.array([sum(h * w // 4 for h, w in g) for g in grids], dtype=np.int64)
    keep = tokens <= ctx
    return text[keep], [g for g, k in zip(grids, keep.tolist()) if k]


def build_model(hidden: int, layers: int, vit_hidden: int, vit_layers: int, seed: int) -> tuple[Any, CostModel]:
    """The enlarged tiny Qwen2-VL (random weights, training mode) and its FLOPs :class:`CostModel`."""
    import torch
    import torch.nn.functional as F
    from transformers import AttentionInterface, AutoTokenizer, Qwen2VLForConditionalGeneration

    from curate.fixtures.processor import build_tiny_processor
    from curate.fixtures.tiny_vlm import tiny_vlm_config

    def varlen_attention(module: Any, query: Any, key: Any, value: Any, attention_mask: Any, scaling: float | None = None,
                         dropout: float = 0.0, sample_bounds: list[int] | None = None, **kwargs: Any) -> tuple[Any, None]:
        spans = zip(sample_bounds[:-1], sample_bounds[1:])
        out = [F.scaled_dot_product_attention(query[:, :, s:e], key[:, :, s:e], value[:, :, s:e], is_causal=True,
                                              scale=scaling, enable_gqa=True) for s, e in spans]
        return torch.cat(out, dim=2).transpose(1, 2).contiguous(), None

    AttentionInterface.register("per_sample_sdpa", varlen_attention)
    folder = Path(tempfile.mkdtemp(prefix="bench-calibration-"))
    build_tiny_processor(folder)
    config = tiny_vlm_config(AutoTokenizer.from_pretrained(str(folder)), hidden_size=hidden, layers=layers)
    vision = config.vision_config
    vision.embed_dim, vision.depth, vision.num_heads = vit_hidden, vit_layers, max(1, vit_hidden // 32)
    config.text_config._attn_implementation = "per_sample_sdpa"
    vision._attn_implementation = "sdpa"
    torch.manual_seed(seed)
    model = Qwen2VLForConditionalGeneration(config).train()
    text = config.text_config
    flops = CostModel(lm_hidden=text.hidden_size, lm_layers=text.num_hidden_layers, lm_heads=text.num_attention_heads,
                      lm_kv_heads=text.num_key_value_heads, lm_head_dim=text.hidden_size // text.num_attention_heads,
                      lm_intermediate=text.intermediate_size, lm_vocab=text.vocab_size, lm_gated_mlp=True,
                      vit_hidden=vit_hidden, vit_layers=vit_layers, vit_intermediate=vit_hidden * vision.mlp_ratio,
                      vit_gated_mlp=False, patch_size=vision.patch_size, temporal_patch_size=vision.temporal_patch_size,
                      in_channels=vision.in_channels, merge_size=vision.spatial_merge_size)
    return model, flops


def sequence_inputs(model: Any, text: np.ndarray, grids: list[list[tuple[int, int]]], members: np.ndarray,
                    seed: int) -> dict[str, Any]:
    """One packed sequence of the samples ``members``: ids, image placeholders, random pixels, positions."""
    import torch

    rng = np.random.default_rng([seed, int(members[0])])
    pad = model.config.image_token_id
    ids: list[int] = []
    bounds, positions, thw = [0], [], []
    for r in members.tolist():
        n_img = sum(h * w // 4 for h, w in grids[r])
        sample = rng.integers(0, 3000, int(text[r])).tolist() + [pad] * n_img
        ids += sample
        positions += range(len(sample))
        bounds.append(bounds[-1] + len(sample))
        thw += [(1, h, w) for h, w in grids[r]]
    input_ids = torch.tensor(ids)[None]
    patches = sum(h * w for _, h, w in thw)
    return {"input_ids": input_ids, "labels": input_ids, "attention_mask": {"full_attention": None},
            "position_ids": torch.tensor(positions)[None, None].expand(3, 1, -1), "sample_bounds": bounds,
            "pixel_values": torch.randn(patches, PATCH_DIM, generator=torch.Generator().manual_seed(seed))
            if patches else None,
            "image_grid_thw": torch.tensor(thw) if thw else None}


def train_step(model: Any, inputs: dict[str, Any]) -> None:
    """Forward + backward of one packed sequence (gradients dropped afterwards)."""
    model(**inputs).loss.backward()
    model.zero_grad(set_to_none=True)


def time_bins(model: Any, text: np.ndarray, grids: list, bins: list[np.ndarray], rounds: int, seed: int,
              log: TimingLog | None = None) -> np.ndarray:
    """CPU times of forward + backward of each bin, ``(bins, rounds)``: every round runs every bin once.

    CPU time, not wall time: other work on the shared machine does not count, though it still
    slows ours (caches, the hypervisor) by up to a third for seconds at a time, so the runs of one
    sequence are spread over rounds (each in its own seeded random order) rather than made back to
    back. The log gets each bin's median over the rounds.
    """
    inputs = [sequence_inputs(model, text, grids, b, seed) for b in bins]
    times = np.zeros((len(bins), rounds))
    for j in range(rounds):
        for i in np.random.default_rng([seed, 7, j]).permutation(len(bins)).tolist():
            start = time.process_time()
            train_step(model, inputs[i])
            times[i, j] = time.process_time() - start
    if log is not None:
        for i, x in enumerate(inputs):
            batch = {"cu_seqlens": np.array(x["sample_bounds"]), "image_grid_thw": x["image_grid_thw"]}
            log.add(batch, float(np.median(times[i])), bin=float(i))
    return times


def components(text: np.ndarray, grids: list) -> tuple[np.ndarray, np.ndarray]:
    """Tokens and the (records, 4) cost components of every sample."""
    owner = np.array([r for r, g in enumerate(grids) for _ in g], dtype=np.int64)
    patches = np.array([h * w for g in grids for h, w in g], dtype=np.int64)
    tokens = text + np.bincount(owner, weights=patches // 4, minlength=text.shape[0]).astype(np.int64)
    return tokens, sample_components(tokens, patches, owner)


def judge(layout: StepLayout, bin_times: np.ndarray) -> dict[str, float]:
    """Step imbalance of a layout's complete steps when each bin takes its measured time.

    (The token-only plan's last step is short: one sequence on one rank would count as 8x.)
    """
    complete = np.bincount(layout.step, minlength=layout.steps) == layout.dp * layout.micro_batches
    return imbalance_stats(rank_loads(bin_times, layout)[complete])


def main(argv: list[str] | None = None) -> None:
    """Run the experiment and print its tables."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ctx", type=int, default=256)
    ap.add_argument("--dp", type=int, default=8)
    ap.add_argument("--micro-batches", type=int, default=4, help="also judged with this many (and with 1)")
    ap.add_argument("--samples", type=int, default=4000, help="samples of the evaluation mixture")
    ap.add_argument("--calibrate", type=int, default=240, help="sequences timed for the fit")
    ap.add_argument("--rounds", type=int, default=8, help="runs of every sequence, one per round")
    ap.add_argument("--hidden", type=int, default=64)
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--vit-hidden", type=int, default=64)
    ap.add_argument("--vit-layers", type=int, default=2)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", type=Path, default=None, help="folder for the timing logs (default: a temporary one)")
    ap.add_argument("--quick", action="store_true", help="500 samples, 40 calibration sequences, 3 rounds")
    args = ap.parse_args(argv)
    if args.quick:
        args.samples, args.calibrate, args.rounds = 500, 40, 3
    import torch

    torch.set_num_threads(args.threads)
    out = args.out or Path(tempfile.mkdtemp(prefix="bench-calibration-logs-"))
    out.mkdir(parents=True, exist_ok=True)
    model, flops = build_model(args.hidden, args.layers, args.vit_hidden, args.vit_layers, args.seed)
    print(f"bench_calibration: Qwen2-VL with text hidden {args.hidden} x {args.layers} layers, vision width "
          f"{args.vit_hidden} x {args.vit_layers} layers ({sum(p.numel() for p in model.parameters()):,} parameters), "
          f"ctx {args.ctx}, dp {args.dp}, {args.threads} thread(s); machine: {os.cpu_count()} "
          f"cores, load {os.getloadavg()[0]:.1f}")

    # 1. calibration: time packed sequences of another draw of the mixture, fit
    text, grids = mixture(max(4 * args.calibrate, 400), args.ctx, args.seed + 1)
    tokens, _ = components(text, grids)
    plan = plan_bins(tokens, args.ctx, seed=args.seed)
    rng = np.random.default_rng([args.seed, 5])  # half of them cut to a random share of their samples: varied lengths
    bins = [plan.bin_members(b) for b in range(min(args.calibrate, plan.bins))]
    bins = [s[:max(1, int(rng.integers(1, s.shape[0] + 1)))] if rng.random() < 0.5 else s for s in bins]
    time_bins(model, text, grids, bins[:4], 2, args.seed)  # warm-up
    t0 = time.perf_counter()
    with TimingLog(out / "calibration.csv") as log:
        time_bins(model, text, grids, bins, args.rounds, args.seed, log)
    fitted, fit = load_model(out / "calibration.csv")
    print(f"1. calibration: {len(bins)} sequences, {args.rounds} rounds, in {time.perf_counter() - t0:.0f} s -> "
          f"{out / 'calibration.csv'}")
    print(f"   {describe_fit(fit)}")
    a, b, c, e = flops.coefficients()
    per_token = fit["coefficients"]["per_token"] or float("nan")
    print(f"   FLOPs model of this architecture: per_token {a:.3g}, per_token_sq {b:.3g}, per_patch {c:.3g}, "
          f"per_patch_sq {e:.3g} FLOPs (ratios to per_token: {b / a:.3g}, {c / a:.3g}, {e / a:.3g}; fitted: "
          + ", ".join(f"{fit['coefficients'][k] / per_token:.3g}" for k in ("per_token_sq", "per_patch", "per_patch_sq"))
          + ")")

    # 2. evaluation: the plans of one draw, for 1 and M micro-batches, every sequence timed in two passes
    text, grids = mixture(args.samples, args.ctx, args.seed + 2)
    tokens, comps = components(text, grids)
    plan = plan_bins(tokens, args.ctx, seed=args.seed)
    dp = args.dp
    plans: dict[tuple[int, str], tuple[list[np.ndarray], StepLayout]] = {}
    for m in sorted({1, args.micro_batches}):
        plans[m, "token-only"] = ([plan.bin_members(b) for b in range(plan.bins)], token_layout(plan.bins, dp, m))
        for name, model_of, scalar in (("FLOPs, 1 cost", flops, True), ("FLOPs model", flops, False),
                                       ("fitted, 1 cost", fitted, True), ("calibrated", fitted, False)):
            parts = comps * np.array(model_of.coefficients())
            bb = balance_bins(plan.bin_offsets, plan.members, tokens, parts.sum(axis=1) if scalar else parts, dp=dp,
                              micro_batches=m, seed=args.seed)
            lay = bb.layout
            plans[m, name] = ([bb.members[bb.bin_offsets[p]:bb.bin_offsets[p + 1]] for p in range(bb.bins)],
                              StepLayout(dp, m, lay.steps, np.arange(bb.bins), lay.step, lay.rank, lay.micro))
    distinct: dict[tuple[int, ...], int] = {}
    for seqs, _ in plans.values():
        for s in seqs:
            distinct.setdefault(tuple(sorted(s.tolist())), len(distinct))
    every = [np.array(k) for k in distinct]
    t0 = time.perf_counter()
    with TimingLog(out / "evaluation.csv") as log:
        runs = time_bins(model, text, grids, every, args.rounds, args.seed + 10, log)
    pass_a, pass_b = np.median(runs[:, 0::2], axis=1), np.median(runs[:, 1::2], axis=1)  # two halves of the rounds
    measured = np.median(runs, axis=1)
    noise = np.abs(pass_a - pass_b) / ((pass_a + pass_b) / 2)
    print(f"2. evaluation: {args.samples:,} samples -> {plan.bins} bins ({len(every)} distinct sequences over the "
          f"plans), run in {args.rounds} rounds ({time.perf_counter() - t0:.0f} s); a sequence's time is the median "
          f"of its runs; the medians of the even and the odd rounds (A, B) are {np.median(noise):.1%} apart "
          f"(median; p90 {np.percentile(noise, 90):.1%})")
    for m in sorted({1, args.micro_batches}):
        print(f"   dp {dp} x {m} micro-batch{'es' if m > 1 else ''}: step max/mean rank time (measured)")
        print(f"   {'plan':16s} {'mean':>7s} {'p99':>7s} {'idle':>7s} {'mean A':>7s} {'mean B':>7s}")
        for (mm, name), (seqs, lay) in plans.items():
            if mm != m:
                continue
            idx = np.array([distinct[tuple(sorted(s.tolist()))] for s in seqs])
            jm, ja, jb = (judge(lay, t[idx]) for t in (measured, pass_a, pass_b))
            print(f"   {name:16s} {jm['mean']:7.4f} {jm['p99']:7.4f} {jm['idle_fraction']:7.2%} {ja['mean']:7.4f} "
                  f"{jb['mean']:7.4f}")
        seqs, _ = plans[m, "calibrated"]
        idx = np.array([distinct[tuple(sorted(s.tolist()))] for s in seqs])
        oracle = balanced_layout(pass_a[idx], dp, m, seed=args.seed)
        jb = judge(oracle, pass_b[idx])
        print(f"   {'oracle':16s} {'':7s} {'':7s} {jb['idle_fraction']:7.2%} {'':7s} {jb['mean']:7.4f}   (laid out on "
              f"pass A's times, judged on pass B's)")

if __name__ == "__main__":
    main()
