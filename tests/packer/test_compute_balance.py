"""The swap pass of compute balance: it lowers the worst steps, never raises p99 or max, keeps the bins."""

from __future__ import annotations

import numpy as np
import pytest

from packer.compute_balance import balance_bins, judge_weights, step_worst, swap_pass
from packer.cost import CostModel, sample_components
from packer.plan import plan_bins
from packer.steps import balanced_layout


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
