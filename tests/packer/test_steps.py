"""Compute-balanced steps: layouts, rank loads, imbalance, and balancing a token plan."""

from __future__ import annotations

import numpy as np
import pytest

from curate.core.errors import UserError
from packer.compute_balance import balance_bins, balance_options, segment_sums
from packer.cost import CostModel, sample_components
from packer.plan import plan_bins
from packer.steps import (
    balanced_layout,
    imbalance_stats,
    micro_batch_imbalance,
    other_models,
    rank_loads,
    similar_groups,
    step_composition,
    token_layout,
)


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
