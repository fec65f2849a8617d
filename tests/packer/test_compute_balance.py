"""Compute balance: training-step layouts, the cost model, timing logs and the swap pass (lowers the worst steps, never raises p99 or max, keeps the bins)."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.csv as pacsv
import pyarrow.parquet as pq
import pytest

from curate.core.errors import UserError
from packer.compute_balance import (
    balance_bins, judge_weights, step_worst, swap_pass, CostModel, sample_components, balanced_layout,
    balance_options, segment_sums, imbalance_stats, micro_batch_imbalance, other_models, rank_loads, similar_groups,
    step_composition, token_layout, image_patches, load_cost_model, table_components, table_costs,
    COEFFICIENT_FIELDS, COMPONENTS, TimingLog, describe_fit, fit_coefficients, is_timing_log, load_model,
    read_timing_log, sequence_components,
)
from packer.plan import plan_bins


def sparse_mixture(n: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """``(tokens, cost parts)`` of ``n`` samples with 0-4 images of up to 110x84 patches."""
    rng = np.random.default_rng(seed)
    owner = np.repeat(np.arange(n), rng.choice(5, n, p=[.15, .4, .2, .15, .1]))
    patches = (2 * rng.integers(2, 56, owner.size)) * (2 * rng.integers(2, 43, owner.size))
    tokens = (rng.lognormal(np.log(150), 1.0, n).astype(np.int64) + 28
              + np.bincount(owner, weights=patches // 4, minlength=n).astype(np.int64))
    return tokens, sample_components(tokens, patches, owner) * np.array(CostModel().coefficients())


@pytest.fixture(scope="module")
def planned() -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """A plan whose k-d groups are sparse (about 1,300 bins of ctx 16384)."""
    tokens, parts = sparse_mixture(16_000, 7)
    plan = plan_bins(tokens, 16384, seed=0)
    return tokens, parts, plan.bin_offsets, plan.members


def bin_parts(parts: np.ndarray, offsets: np.ndarray, members: np.ndarray) -> np.ndarray:
    """Per-bin sums of the per-record parts."""
    bin_of = np.repeat(np.arange(offsets.shape[0] - 1), np.diff(offsets))
    return np.stack([np.bincount(bin_of, weights=parts[members, k], minlength=offsets.shape[0] - 1)
                     for k in range(parts.shape[1])], axis=1)


@pytest.mark.parametrize("dp,m", [(8, 1), (4, 2), (2, 1)])
def test_swap_pass_never_raises_the_worst_steps(planned: tuple, dp: int, m: int) -> None:
    tokens, parts, offsets, members = planned
    bp = bin_parts(parts, offsets, members)
    bp = bp[: bp.shape[0] - 5]  # leaves a short last step for every (dp, m) here
    layout = balanced_layout(bp, dp, m, seed=1)
    swapped, swaps = swap_pass(bp, layout)
    assert swaps > 0
    before, after = step_worst(bp, layout), step_worst(bp, swapped)
    full = np.bincount(layout.step, minlength=layout.steps) == dp * m
    assert not full.all()
    # Every level at or above the 90th percentile of the steps before: no more steps above it after.
    for level in np.sort(before[full])[int(0.9 * full.sum()):]:
        assert (after[full] > level).sum() <= (before[full] > level).sum()
    assert np.percentile(after[full], 99) <= np.percentile(before[full], 99)
    assert after[full].max() <= before[full].max()
    assert after[full].max() < before[full].max() or np.percentile(after[full], 99) < np.percentile(before[full], 99)
    # Same bins, same slots: only which bin sits in which slot of a complete step changes.
    assert np.array_equal(np.sort(swapped.order), np.arange(bp.shape[0]))
    for name in ("step", "rank", "micro"):
        assert np.array_equal(getattr(swapped, name), getattr(layout, name))
    short = ~full[layout.step]
    assert np.array_equal(swapped.order[short], layout.order[short])
    again, _ = swap_pass(bp, layout)
    assert np.array_equal(again.order, swapped.order)


def test_swap_pass_on_random_parts_never_raises_p99_or_max() -> None:
    for seed in range(4):
        rng = np.random.default_rng(seed)
        bp = rng.lognormal(0.0, 1.0, (480, 4)) * np.array([1.0, 0.3, 0.5, 0.2])
        layout = balanced_layout(bp, 8, 1, seed=seed)
        swapped, _ = swap_pass(bp, layout, share=0.2)
        before, after = step_worst(bp, layout), step_worst(bp, swapped)
        assert np.percentile(after, 99) <= np.percentile(before, 99) + 1e-12
        assert after.max() <= before.max() + 1e-12


def test_balance_bins_keeps_every_bin_and_each_ranks_steps_in_order(planned: tuple) -> None:
    tokens, parts, offsets, members = planned
    on = balance_bins(offsets, members, tokens, parts, dp=8, micro_batches=2, seed=3)
    off = balance_bins(offsets, members, tokens, parts, dp=8, micro_batches=2, seed=3, swap=False)
    assert on.stats["swaps"] > 0 and off.stats["swaps"] == 0

    def bins(bb: object) -> set[tuple[int, ...]]:
        return {tuple(sorted(bb.members[a:b].tolist())) for a, b in zip(bb.bin_offsets[:-1], bb.bin_offsets[1:])}

    assert bins(on) == bins(off)
    assert sorted(on.members.tolist()) == sorted(members.tolist())
    lay = on.layout
    for r in range(8):
        at = lay.rank == r
        assert np.all(np.diff(lay.step[at] * 2 + lay.micro[at]) == 1)  # rank-major, step by step
    worst_on = on.stats["imbalance"]["balanced"]["other_models"]["p99_worst"]
    worst_off = off.stats["imbalance"]["balanced"]["other_models"]["p99_worst"]
    assert worst_on < worst_off
    again = balance_bins(offsets, members, tokens, parts, dp=8, micro_batches=2, seed=3)
    assert np.array_equal(again.members, on.members) and np.array_equal(again.bin_offsets, on.bin_offsets)


def test_judge_weights_are_the_plan_and_the_8_other_models() -> None:
    w = judge_weights(4)
    assert w.shape == (9, 4) and np.all(w[0] == 1) and np.all(w[:, 0] == 1)
    assert {tuple(row) for row in w[1:, 1:]} == {(a, b, c) for a in (.5, 2.) for b in (.5, 2.) for c in (.5, 2.)}
    assert judge_weights(1).shape == (1, 1)


def test_swap_pass_leaves_free_bins_and_one_rank_alone() -> None:
    bp = np.zeros((64, 4))
    bp[:8] = 1.0  # one step of equal bins, the others free
    layout = balanced_layout(bp, 8, 1, seed=0)
    assert swap_pass(bp, layout) == (layout, 0)
    one = balanced_layout(np.arange(12.0), 1, 2, seed=0)
    assert swap_pass(np.arange(12.0), one) == (one, 0)


# Compute-balanced steps: layouts, rank loads, imbalance, and balancing a token plan.
def vlm_mixture(n: int, seed: int, parts: bool = False) -> tuple[np.ndarray, np.ndarray]:
    """Tokens and cost per sample: text-only, photo and document samples with 0-3 images of 64-2000 tokens.

    With ``parts``, the cost split in its four parts ``(n, 4)`` (and image tokens per sample as a third value).
    """
    rng = np.random.default_rng(seed)
    n_img = rng.choice(4, n, p=[.2, .5, .2, .1])
    owner = np.repeat(np.arange(n), n_img)
    image_tokens = np.where(rng.random(owner.size) < 0.2, rng.integers(1000, 2000, owner.size),
                            rng.integers(64, 600, owner.size))
    text = rng.lognormal(np.log(150), 1.0, n).astype(np.int64) + 10
    per_sample = np.bincount(owner, weights=image_tokens, minlength=n).astype(np.int64)
    tokens = text + per_sample
    if parts:
        return tokens, sample_components(tokens, image_tokens * 4, owner) * np.array(CostModel().coefficients()), \
            per_sample
    return tokens, CostModel().sample_costs(tokens, image_tokens * 4, owner)


def check_layout(layout, bins: int, rank_major: bool = True) -> None:
    dp, m = layout.dp, layout.micro_batches
    assert sorted(layout.order.tolist()) == list(range(bins))  # every bin exactly once
    slots = (layout.step * dp + layout.rank) * m + layout.micro
    assert np.unique(slots).size == bins
    assert layout.steps == -(-bins // (dp * m))
    key = (layout.rank * layout.steps + layout.step) * m + layout.micro
    if rank_major:
        assert (np.diff(key) > 0).all()  # rank-major output order
    per_step = np.bincount(layout.step, minlength=layout.steps)
    assert (per_step[:-1] == dp * m).all() and 1 <= per_step[-1] <= dp * m  # only the last step may be short


@pytest.mark.parametrize("bins,dp,m", [(64, 8, 1), (61, 4, 3), (5, 8, 1), (1, 1, 1), (40, 2, 4)])
def test_balanced_layout_uses_every_bin_once(bins: int, dp: int, m: int) -> None:
    cost = np.random.default_rng(bins).lognormal(0, 0.5, bins)
    layout = balanced_layout(cost, dp, m, seed=1)
    check_layout(layout, bins)
    again = balanced_layout(cost, dp, m, seed=1)
    assert np.array_equal(layout.order, again.order) and np.array_equal(layout.rank, again.rank)
    if bins >= 40:
        assert not np.array_equal(layout.order, balanced_layout(cost, dp, m, seed=2).order)
    check_layout(token_layout(bins, dp, m), bins, rank_major=False)  # the token plan's order is step-major


def test_rank_loads_and_imbalance_by_hand() -> None:
    cost = np.array([4.0, 1.0, 2.0, 2.0, 3.0, 1.0])
    layout = token_layout(6, 2, 1)  # steps: (4, 1), (2, 2), (3, 1)
    loads = rank_loads(cost, layout)
    assert loads.tolist() == [[4.0, 1.0], [2.0, 2.0], [3.0, 1.0]]
    stats = imbalance_stats(loads)
    ratios = [4 / 2.5, 1.0, 3 / 2]
    assert stats["mean"] == pytest.approx(np.mean(ratios)) and stats["max"] == pytest.approx(1.6)
    assert stats["idle_fraction"] == pytest.approx(1 - (2.5 + 2 + 2) / (4 + 2 + 3))
    assert stats["mean_step_idle"] == pytest.approx(np.mean([1 - 2.5 / 4, 0.0, 1 - 2 / 3]))
    two = token_layout(6, 1, 2)  # one rank, two micro-batches per step: loads are sums
    assert rank_loads(cost, two)[:, 0].tolist() == [5.0, 4.0, 4.0]
    # 2 ranks x 2 micro-batches: step 0 is micro-batch (4, 1) then (2, 2); step 1 is (3, 1)
    micro = micro_batch_imbalance(cost, token_layout(6, 2, 2))
    assert micro["micro_mean"] == pytest.approx(np.mean([4 / 2.5, 1.0, 3 / 2]))


def test_micro_batches_pair_the_costliest_bin_with_the_least_loaded_rank() -> None:
    # 50 steps of 2 ranks x 2 micro-batches; strata 101..200 and 1..100 in groups of neighbours such as
    # {200, 199} and {k, k - 1}: only 200 + (k - 1) and 199 + k balance a step
    cost = np.arange(1.0, 201.0)
    layout = balanced_layout(cost, 2, 2, seed=4)
    check_layout(layout, cost.size)
    loads = rank_loads(cost, layout)
    assert (loads[:, 0] == loads[:, 1]).all()
    assert len({tuple(sorted(cost[layout.order][layout.step == s].tolist())) for s in range(50)}) == 50


@pytest.mark.parametrize("dp,m", [(8, 1), (4, 4)])
def test_balancing_a_token_plan(dp: int, m: int) -> None:
    tokens, cost = vlm_mixture(40_000, seed=dp)
    ctx = 4096
    plan = plan_bins(tokens, ctx, seed=0)
    bal = balance_bins(plan.bin_offsets, plan.members, tokens, cost, dp=dp, micro_batches=m, seed=0)
    # the same records, each once, in bins of at most ctx tokens
    assert sorted(bal.members.tolist()) == sorted(plan.members.tolist())
    assert np.array_equal(bal.bin_tokens, segment_sums(tokens[bal.members].astype(float), bal.bin_offsets))
    assert bal.bin_tokens.max() <= ctx
    np.testing.assert_allclose(bal.bin_cost, segment_sums(cost[bal.members], bal.bin_offsets))
    assert bal.bins % (dp * m) == 0 and plan.bins <= bal.bins < plan.bins + dp * m
    check_layout(bal.layout, bal.bins)
    before, after = bal.stats["imbalance"]["token_only"], bal.stats["imbalance"]["balanced"]
    assert before["p99"] > 1.05  # the mixture is unbalanced by tokens alone
    assert after["p99"] <= 1.05 and (after["p99"] - 1) * 3 <= before["p99"] - 1
    assert after["idle_fraction"] < before["idle_fraction"] / 3
    # every micro-batch is balanced across ranks too (ranks meet at each one under FSDP / ZeRO-3)
    assert after["micro_p99"] <= 1.05 and (after["micro_p99"] - 1) * 3 <= before["micro_p99"] - 1
    # the per-step ratios behind the plot agree with the stats
    assert bal.step_ratio["balanced"].mean() == pytest.approx(after["mean"])
    loads = np.bincount(bal.layout.step * dp + bal.layout.rank, weights=bal.bin_cost).reshape(-1, dp)
    assert imbalance_stats(loads)["p99"] == pytest.approx(after["p99"])


def test_unsplittable_bins_leave_a_short_last_step() -> None:
    tokens = np.array([100, 100, 100])  # each fills its bin: nothing to split
    plan = plan_bins(tokens, 100, seed=0)
    bal = balance_bins(plan.bin_offsets, plan.members, tokens, tokens * 1.0, dp=2, seed=0)
    assert bal.bins == 3 and bal.split == 0 and bal.layout.steps == 2
    assert bal.layout.rank.tolist() == [0, 0, 1]  # the short step fills rank 0 first
    assert bal.layout.step.tolist()[:2] == [0, 1] and bal.layout.step[2] == 0


def test_balance_options() -> None:
    assert balance_options(False, None, None, None) is None
    opts = balance_options(True, 8, None, None)
    assert (opts.dp, opts.micro_batches, opts.cost_model) == (8, 1, CostModel())
    with pytest.raises(UserError, match="needs dp"):
        balance_options(True, None, 2, None)
    with pytest.raises(UserError, match="only applies with balance_compute"):
        balance_options(False, 8, None, None)
    with pytest.raises(UserError, match="micro_batches must be >= 1"):
        balance_options(True, 8, 0, None)


def test_similar_groups_find_planted_groups() -> None:
    """Groups of 8 rows around 96 centres (distinct in every coordinate), shuffled: each run of 8 is one centre's."""
    rng = np.random.default_rng(0)
    centres = np.stack([rng.permutation(96) / 96.0 for _ in range(3)], axis=1)
    centres[:, 2] *= 0.3  # one coordinate narrower than the others
    label = np.repeat(np.arange(96), 8)
    points = centres[label] + rng.normal(0, 1e-4, (label.size, 3))
    shuffle = rng.permutation(label.size)
    order = similar_groups(points[shuffle], 8)
    assert sorted(order.tolist()) == list(range(label.size))
    runs = label[shuffle][order].reshape(-1, 8)
    assert (runs == runs[:, :1]).all() and np.unique(runs[:, 0]).size == 96
    assert np.array_equal(order, similar_groups(points[shuffle], 8))  # deterministic
    # a coordinate that hardly varies is left out with min_spread: the groups then ignore it
    flat = np.column_stack([points[shuffle], rng.normal(5, 1e-6, label.size)])
    assert np.array_equal(similar_groups(flat, 8, min_spread=1e-3), order)
    with pytest.raises(ValueError, match="groups of 8"):
        similar_groups(points[:12], 8)


def test_step_composition_by_hand() -> None:
    layout = token_layout(6, 2, 1)  # steps (0, 1), (2, 3), (4, 5)
    tokens, images, samples = np.array([10, 30, 20, 20, 40, 0.0]), np.array([10, 0, 10, 10, 0, 0.0]), \
        np.array([1, 3, 2, 2, 4, 1.0])
    got = step_composition(layout, tokens, images, samples)
    share = np.array([10 / 40, 20 / 40, 0.0])
    length = np.array([40 / 4, 40 / 4, 40 / 5])
    assert got["image_share"]["mean"] == pytest.approx(share.mean())
    assert got["image_share"]["std"] == pytest.approx(share.std())
    assert got["mean_length"]["p99"] == pytest.approx(np.percentile(length, 99))


def judge_every_model(parts: np.ndarray, members: np.ndarray, offsets: np.ndarray, layout) -> list[float]:
    """p99 step imbalance of a balanced plan under its model and the 8 models moving parts 1-3 by x0.5 or x2,
    computed here from the records' parts (not from the plan's own figures)."""
    bin_parts = np.zeros((offsets.shape[0] - 1, parts.shape[1]))
    np.add.at(bin_parts, np.repeat(np.arange(offsets.shape[0] - 1), np.diff(offsets)), parts[members])
    out = []
    for factors in [(1, 1, 1)] + [(x, y, z) for x in (0.5, 2) for y in (0.5, 2) for z in (0.5, 2)]:
        cost = bin_parts @ np.array([1.0, *factors])
        loads = np.zeros((layout.steps, layout.dp))
        np.add.at(loads, (layout.step, layout.rank), cost)  # positions are the plan's bins, in output order
        out.append(float(np.percentile(loads.max(axis=1) / loads.mean(axis=1), 99)))
    return out


@pytest.mark.parametrize("dp,m", [(8, 1), (4, 4)])
def test_parts_balance_every_model_of_their_form(dp: int, m: int) -> None:
    tokens, parts, image_tokens = vlm_mixture(60_000, seed=11, parts=True)
    plan = plan_bins(tokens, 4096, seed=0)
    bal = balance_bins(plan.bin_offsets, plan.members, tokens, parts, dp=dp, micro_batches=m, seed=3,
                       image_tokens=image_tokens)
    one = balance_bins(plan.bin_offsets, plan.members, tokens, parts.sum(axis=1), dp=dp, micro_batches=m, seed=3)
    assert sorted(bal.members.tolist()) == sorted(plan.members.tolist()) and bal.bin_tokens.max() <= 4096
    check_layout(bal.layout, bal.bins)
    by_parts = judge_every_model(parts, bal.members, bal.bin_offsets, bal.layout)
    by_scalar = judge_every_model(parts, one.members, one.bin_offsets, one.layout)
    token_only = judge_every_model(parts, plan.members, plan.bin_offsets, token_layout(plan.bins, dp, m))
    assert max(by_parts) <= 1.05 and max(by_parts) < max(by_scalar) < max(token_only)
    assert by_scalar[0] <= 1.01  # the scalar layout balances its own model best, and only that one
    reported = bal.stats["imbalance"]["balanced"]["other_models"]
    assert reported["models"] == 8 and reported["p99_worst"] == pytest.approx(max(by_parts[1:]))
    assert bal.stats["imbalance"]["token_only"]["other_models"]["p99_worst"] == pytest.approx(max(token_only[1:]))
    again = balance_bins(plan.bin_offsets, plan.members, tokens, parts, dp=dp, micro_batches=m, seed=3,
                         image_tokens=image_tokens)
    assert np.array_equal(again.members, bal.members) and np.array_equal(again.layout.rank, bal.layout.rank)
    # what steps hold: the same image tokens overall, spread differently over steps
    share = {k: bal.stats["composition"][k]["image_share"] for k in ("token_only", "balanced")}
    assert share["balanced"]["mean"] == pytest.approx(share["token_only"]["mean"], rel=0.02)
    assert share["balanced"]["std"] > share["token_only"]["std"]  # similar bins share a step


def test_step_mix_trades_balance_for_mixed_steps() -> None:
    tokens, parts, image_tokens = vlm_mixture(60_000, seed=12, parts=True)
    plan = plan_bins(tokens, 4096, seed=0)

    def run(m: int, mix: int):
        bb = balance_bins(plan.bin_offsets, plan.members, tokens, parts, dp=4, micro_batches=m, seed=0, mix=mix,
                          image_tokens=image_tokens)
        check_layout(bb.layout, bb.bins)
        return bb.stats["imbalance"]["balanced"], bb.stats["composition"]["balanced"]["image_share"]["std"]

    (one, std_one), (each, std_each), (every, std_every) = run(4, 1), run(4, 4), run(4, 16)
    assert std_each < 0.8 * std_one and std_every < std_each  # groups from several strata: mixed steps
    assert each["p99"] <= 1.05 and each["other_models"]["p99_worst"] <= 1.05  # a group per micro-batch: still balanced
    assert every["p99"] > each["p99"]  # ranks of one micro-batch from different groups: balance given back
    single, _ = run(1, 1)
    mixed, _ = run(1, 4)
    assert mixed["p99"] > single["p99"] + 0.05  # one micro-batch: mixing costs the balance
    with pytest.raises(UserError, match="step_mix 3 must divide"):
        balanced_layout(np.ones(16), 4, 1, mix=3)
    with pytest.raises(UserError, match="step_mix"):
        balance_options(True, 4, 1, None, step_mix=0)


def test_other_models_by_hand() -> None:
    # one step of two ranks: rank 0 holds only the first part, rank 1 only the second; (parts, steps, ranks)
    loads = np.array([[[2.0, 0.0]], [[0.0, 2.0]]])
    got = other_models(loads)
    assert got["models"] == 2
    assert got["p99_worst"] == pytest.approx(max(2 / 1.5, 4 / 3))  # x0.5: (2, 1); x2: (2, 4)
    assert other_models(loads[:1])["models"] == 0
    parts = np.array([[1.0, 2.0], [3.0, 0.0], [0.5, 0.5], [2.0, 1.0]])
    by_part = rank_loads(parts, token_layout(4, 2, 1))
    assert by_part.shape == (2, 2, 2) and by_part[1].tolist() == [[2.0, 0.0], [0.5, 1.0]]


# The per-sample cost model: formulas against a hand count of every matrix product, YAML loading.
TINY = CostModel(lm_hidden=8, lm_layers=2, lm_heads=2, lm_kv_heads=1, lm_head_dim=4, lm_intermediate=16,
                 lm_vocab=10, lm_gated_mlp=True, vit_hidden=6, vit_layers=3, vit_intermediate=12,
                 vit_gated_mlp=False, patch_size=2, temporal_patch_size=1, in_channels=3, merge_size=2,
                 training_factor=3.0)


def matmul(m: float, k: int, n: float) -> float:
    """FLOPs of an (m × k) · (k × n) product: one multiply and one add per term."""
    return 2.0 * m * k * n


def hand_count(model: CostModel, tokens: int, grids: list[tuple[int, int, int]], vit_heads: int = 3) -> float:
    """Training FLOPs of one sample, summed product by product as a forward pass would run them."""
    d, hd, q, kv = model.lm_hidden, model.lm_head_dim, model.lm_heads, model.lm_kv_heads
    total = 0.0
    for _ in range(model.lm_layers):
        total += matmul(tokens, d, q * hd) + 2 * matmul(tokens, d, kv * hd) + matmul(tokens, q * hd, d)
        total += 2 * matmul(tokens, d, model.lm_intermediate) + matmul(tokens, model.lm_intermediate, d)  # SwiGLU
        for _h in range(q):  # causal: half of the T×T scores are computed
            total += 0.5 * (matmul(tokens, hd, tokens) + matmul(tokens, tokens, hd))
    total += matmul(tokens, d, model.lm_vocab)  # LM head on every position
    big_d, s = model.vit_hidden, model.merge_size
    vhd = big_d // vit_heads
    for t, h, w in grids:
        p = t * h * w
        total += matmul(p, model.in_channels * model.patch_size ** 2 * model.temporal_patch_size, big_d)
        for _ in range(model.vit_layers):
            total += matmul(p, big_d, 3 * big_d) + matmul(p, big_d, big_d)  # qkv, out
            total += matmul(p, big_d, model.vit_intermediate) + matmul(p, model.vit_intermediate, big_d)
            for _h in range(vit_heads):  # full attention inside the image
                total += matmul(p, vhd, p) + matmul(p, p, vhd)
        merged = p / s ** 2
        total += matmul(merged, s * s * big_d, s * s * big_d) + matmul(merged, s * s * big_d, d)
    return model.training_factor * total


def test_formulas_equal_a_hand_count_of_every_product() -> None:
    samples = [(10, []), (37, [(1, 4, 4)]), (123, [(1, 4, 6), (1, 8, 2), (1, 2, 2)]), (1, [])]
    tokens = np.array([t for t, _ in samples])
    patches = np.array([t * h * w for _, g in samples for t, h, w in g])
    owner = np.array([i for i, (_, g) in enumerate(samples) for _ in g])
    got = TINY.sample_costs(tokens, patches, owner)
    want = [hand_count(TINY, t, g) for t, g in samples]
    np.testing.assert_allclose(got, want, rtol=1e-12)
    # a non-gated LM MLP has two matrices, not three
    plain = CostModel(**{**TINY.to_dict(), "lm_gated_mlp": False})
    diff = TINY.sample_costs(np.array([5]), patches[:0], owner[:0]) - plain.sample_costs(np.array([5]), patches[:0],
                                                                                          owner[:0])
    assert diff[0] == pytest.approx(3.0 * TINY.lm_layers * matmul(5, TINY.lm_hidden, TINY.lm_intermediate))


def test_default_model_prices_image_tokens_above_text_tokens() -> None:
    model = CostModel()
    a, b, c, e = model.coefficients()
    text = model.sample_costs(np.array([4096]), np.zeros(0), np.zeros(0))[0]
    # the same 4096 tokens as one document page of 4096 image tokens (16384 patches) plus no text
    page = model.sample_costs(np.array([4096]), np.array([16384]), np.array([0]))[0]
    captions = model.sample_costs(np.full(40, 4096 // 40), np.zeros(0), np.zeros(0)).sum()
    assert page > 1.4 * text > 1.4 * captions  # vision work, then attention, grows with one long sample
    assert text == pytest.approx(a * 4096 + b * 4096 ** 2)


def test_image_patches_from_a_grids_column() -> None:
    col = pa.array([[[1, 2, 4]], [], None, [[1, 6, 6], [2, 2, 2]]], pa.list_(pa.list_(pa.int32())))
    patches, owner = image_patches(col)
    assert patches.tolist() == [8, 36, 8] and owner.tolist() == [0, 3, 3]
    table = pa.table({"tokens": pa.array([5, 6, 7, 8], pa.int32()), "image_grids": col})
    np.testing.assert_allclose(table_costs(table, TINY), TINY.sample_costs(np.array([5, 6, 7, 8]), patches, owner))
    no_grids = table.drop_columns(["image_grids"])
    np.testing.assert_allclose(table_costs(no_grids, TINY),
                               TINY.sample_costs(np.array([5, 6, 7, 8]), np.zeros(0), np.zeros(0)))
    with pytest.raises(UserError, match="expected"):
        image_patches(pa.array([[[1, 2]]], pa.list_(pa.list_(pa.int32()))))


def test_cost_model_from_yaml(tmp_path) -> None:
    assert load_cost_model(None) == CostModel()
    path = tmp_path / "model.yaml"
    path.write_text("lm_hidden: 2048\nlm_layers: 28\nvit_gated_mlp: true\ntraining_factor: 4\n")
    model = load_cost_model(path)
    assert (model.lm_hidden, model.lm_layers, model.vit_gated_mlp, model.training_factor) == (2048, 28, True, 4)
    assert model.lm_heads == CostModel().lm_heads
    for text, match in [("lm_hiden: 3\n", "unknown field.*lm_hiden"), ("lm_layers: -1\n", "lm_layers must be >= 1"),
                        ("lm_layers: 2.5\n", "integer"), ("lm_gated_mlp: 1\n", "true or false"),
                        ("- 1\n", "mapping"), ("a: [\n", "not valid YAML")]:
        path.write_text(text)
        with pytest.raises(UserError, match=match) as err:
            load_cost_model(path)
        assert str(path) in str(err.value)
    with pytest.raises(UserError, match="cannot read"):
        load_cost_model(tmp_path / "missing.yaml")


def test_components_dotted_with_the_coefficients_are_the_costs() -> None:
    samples = [(10, []), (37, [(1, 4, 4)]), (123, [(1, 4, 6), (1, 8, 2), (1, 2, 2)]), (1, [])]
    tokens = np.array([t for t, _ in samples])
    patches = np.array([t * h * w for _, g in samples for t, h, w in g])
    owner = np.array([i for i, (_, g) in enumerate(samples) for _ in g])
    comps = sample_components(tokens, patches, owner)
    assert comps[:, 0].tolist() == tokens.tolist() and comps[:, 1].tolist() == (tokens ** 2).tolist()
    assert comps[2, 2] == 24 + 16 + 4 and comps[2, 3] == 24 ** 2 + 16 ** 2 + 4 ** 2 and comps[3, 2:].tolist() == [0, 0]
    np.testing.assert_allclose(comps @ np.array(TINY.coefficients()), TINY.sample_costs(tokens, patches, owner),
                               rtol=1e-12)
    table = pa.table({"tokens": pa.array(tokens, pa.int32()),
                      "image_grids": pa.array([[list(x) for x in g] for _, g in samples],
                                              pa.list_(pa.list_(pa.int32())))})
    np.testing.assert_array_equal(table_components(table), comps)


def test_given_coefficients_replace_the_flops_estimate(tmp_path) -> None:
    fitted = CostModel(per_token=2.0, per_token_sq=0.5, per_patch=3.0, per_patch_sq=0.25)
    assert fitted.fitted and not CostModel().fitted
    assert fitted.coefficients() == (2.0, 0.5, 3.0, 0.25)
    cost = fitted.sample_costs(np.array([4, 1]), np.array([2, 6]), np.array([0, 0]))
    assert cost.tolist() == [2 * 4 + 0.5 * 16 + 3 * 8 + 0.25 * (4 + 36), 2 + 0.5]
    assert CostModel(**fitted.to_dict()) == fitted  # what verify rebuilds from stats.json
    path = tmp_path / "fit.yaml"
    path.write_text("per_token: 1\nper_token_sq: 0\nper_patch: 2.5e-3\nper_patch_sq: 1e-7\n")
    assert load_cost_model(path).coefficients() == (1.0, 0.0, 2.5e-3, 1e-7)
    for text, match in [("per_token: 1\n", "all of per_token"), ("per_token: -1\nper_token_sq: 0\nper_patch: 0\n"
                                                                 "per_patch_sq: 0\n", "per_token must be a number >= 0")]:
        path.write_text(text)
        with pytest.raises(UserError, match=match):
            load_cost_model(path)


# Timing logs: the fit recovers known coefficients, logs are read back and checked.
TRUE = {"per_token": 2e-5, "per_token_sq": 4e-9, "per_patch": 6e-6, "per_patch_sq": 3e-9}
OVERHEAD = 0.004


def measured_rows(n: int, seed: int, noise: float) -> dict[str, np.ndarray]:
    """Packed sequences of random composition, timed by a known model (times multiplied by 1 ± noise)."""
    rng = np.random.default_rng(seed)
    rows = {c: np.zeros(n) for c in COMPONENTS}
    for i in range(n):
        samples = int(rng.integers(1, 12))
        tokens = rng.integers(20, 1500, samples)
        images = rng.integers(0, 3, samples)
        owner = np.repeat(np.arange(samples), images)
        patches = rng.integers(16, 4096, owner.size)
        comps = sample_components(tokens, patches, owner).sum(axis=0)
        for c, v in zip(COMPONENTS, comps):
            rows[c][i] = v
    truth = sum(TRUE[f] * rows[c] for f, c in zip(COEFFICIENT_FIELDS, COMPONENTS)) + OVERHEAD
    rows["seconds"] = truth * (1 + rng.uniform(-noise, noise, n))
    return rows


def test_fit_recovers_known_coefficients() -> None:
    exact = fit_coefficients(measured_rows(300, seed=0, noise=0.0))
    for name, value in TRUE.items():
        assert exact["coefficients"][name] == pytest.approx(value, rel=1e-6)
    assert exact["per_sequence"] == pytest.approx(OVERHEAD, rel=1e-6)
    assert exact["rms_relative_error"] < 1e-8 and exact["r2"] == pytest.approx(1.0)
    noisy = fit_coefficients(measured_rows(400, seed=1, noise=0.05))
    for name, value in TRUE.items():
        assert noisy["coefficients"][name] == pytest.approx(value, rel=0.15)
    assert 0.01 < noisy["rms_relative_error"] < 0.05 and noisy["max_relative_error"] <= 0.06
    # a component that no row has cannot be fitted: its coefficient is 0 and it is named
    text_only = measured_rows(100, seed=2, noise=0.0)
    text_only["seconds"] -= TRUE["per_patch"] * text_only["patches"] + TRUE["per_patch_sq"] * text_only["patches_sq"]
    text_only["patches"][:] = 0
    text_only["patches_sq"][:] = 0
    fit = fit_coefficients(text_only)
    assert fit["unmeasured"] == ["patches", "patches_sq"] and fit["coefficients"]["per_patch"] == 0.0
    assert fit["coefficients"]["per_token"] == pytest.approx(TRUE["per_token"], rel=1e-6)


@pytest.mark.parametrize("suffix", [".csv", ".parquet"])
def test_a_written_log_is_read_back_and_fitted(tmp_path, suffix) -> None:
    rows = measured_rows(60, seed=3, noise=0.0)
    path = tmp_path / f"timings{suffix}"
    log = TimingLog(path)
    for i in range(60):  # one row as a training loop would add it: sample bounds and image grids
        tokens = int(rows["tokens"][i])
        log.add({"cu_seqlens": np.array([0, tokens]), "image_grid_thw": None}, rows["seconds"][i], step=i)
    written = log.write()
    table = pacsv.read_csv(written) if suffix == ".csv" else pq.read_table(written)
    assert table.column_names == [*COMPONENTS, "seconds", "sequences", "step"]
    assert table.column("step").to_pylist() == list(range(60))
    back = read_timing_log(written)
    np.testing.assert_array_equal(back["tokens"], rows["tokens"])
    np.testing.assert_array_equal(back["tokens_sq"], rows["tokens"] ** 2)  # one sample per row here
    model, report = load_model(written)
    assert isinstance(model, CostModel) and model.fitted and report["file"] == str(written)
    assert model.coefficients()[0] > 0 and "fitted to 60 timings" in describe_fit(report)


def test_sequence_components_of_a_packed_sequence() -> None:
    comps = sequence_components(np.array([0, 100, 130, 400]), np.array([[1, 4, 6], [2, 2, 2]]))
    assert comps == {"tokens": 400.0, "tokens_sq": 100.0 ** 2 + 30 ** 2 + 270 ** 2, "patches": 32.0,
                     "patches_sq": 24.0 ** 2 + 8 ** 2}
    assert is_timing_log("a/b.CSV") and is_timing_log("x.parquet") and not is_timing_log("model.yaml")
    with pytest.raises(UserError, match=".csv or .parquet"):
        TimingLog("timings.json")


def test_bad_logs_are_named(tmp_path) -> None:
    good = measured_rows(20, seed=4, noise=0.0)

    def write(name: str, columns: dict) -> str:
        path = tmp_path / name
        pacsv.write_csv(pa.table(columns), path)
        return str(path)

    missing = write("missing.csv", {k: v for k, v in good.items() if k != "patches_sq"})
    with pytest.raises(UserError, match="missing.csv.*missing patches_sq"):
        read_timing_log(missing)
    negative = {**good, "seconds": np.where(np.arange(20) == 5, -1.0, good["seconds"])}
    with pytest.raises(UserError, match="row 6: seconds is -1.0; expected a positive number"):
        read_timing_log(write("negative.csv", negative))
    with pytest.raises(UserError, match="3 rows; a fit needs at least 8"):
        read_timing_log(write("short.csv", {k: v[:3] for k, v in good.items()}))
    with pytest.raises(UserError, match="column tokens holds string"):
        read_timing_log(write("text.csv", {**good, "tokens": ["many"] * 20}))
    with pytest.raises(UserError, match="no such file"):
        read_timing_log(tmp_path / "absent.csv")
    flat = {**good, "seconds": np.full(20, 1e-9)}
    flat.update({c: np.zeros(20) for c in COMPONENTS})
    with pytest.raises(UserError, match="no cost to any component"):
        load_model(write("flat.csv", flat))
