"""Compute-balanced steps: layouts, rank loads, imbalance, and balancing a token plan."""

from __future__ import annotations

import numpy as np
import pytest

from curate.core.errors import UserError
from packer.balance import balance_bins, balance_options, segment_sums
from packer.cost import CostModel
from packer.plan import plan_bins
from packer.steps import balanced_layout, imbalance_stats, micro_batch_imbalance, rank_loads, token_layout


def vlm_mixture(n: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Tokens and cost per sample: text-only, photo and document samples with 0-3 images of 64-2000 tokens."""
    rng = np.random.default_rng(seed)
    n_img = rng.choice(4, n, p=[.2, .5, .2, .1])
    owner = np.repeat(np.arange(n), n_img)
    image_tokens = np.where(rng.random(owner.size) < 0.2, rng.integers(1000, 2000, owner.size),
                            rng.integers(64, 600, owner.size))
    text = rng.lognormal(np.log(150), 1.0, n).astype(np.int64) + 10
    tokens = text + np.bincount(owner, weights=image_tokens, minlength=n).astype(np.int64)
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
    with pytest.raises(UserError, match="needs --dp"):
        balance_options(True, None, 2, None)
    with pytest.raises(UserError, match="only applies with --balance-compute"):
        balance_options(False, 8, None, None)
    with pytest.raises(UserError, match="--micro-batches must be >= 1"):
        balance_options(True, 8, 0, None)
