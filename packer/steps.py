"""Training steps: which packed sequence each data-parallel rank trains on at each step.

A step is ``dp`` ranks × ``micro_batches`` sequences per rank; ranks meet at the
gradient all-reduce once per step, so a step lasts as long as its slowest rank,
whose load is the sum of the costs of its micro-batches. The *imbalance* of a
step is ``max / mean`` of its ranks' loads (1.0 is perfect; a rank left without
a sequence counts as load 0), and its *idle fraction* ``1 − mean / max`` is the
share of the step's GPU time spent waiting.

Two layouts:

* :func:`token_layout`: the order of the token-only plan cut into consecutive
  steps (what a trainer gets from a plan that ignores cost), the baseline;
* :func:`balanced_layout`: bins sorted by cost (most expensive first). With one
  micro-batch, each step takes ``dp`` consecutive bins of that order, so its
  bins cost nearly the same. With ``M`` micro-batches, the sorted bins are cut
  into ``M`` strata; each step takes one group of ``dp`` neighbouring bins from
  every stratum (groups matched to steps at random, so a step mixes cheap and
  expensive sequences) and gives the costliest remaining bin to the least
  loaded rank, stratum after stratum. Step order and the ranks within a step
  are then shuffled with the seed. When the bins do not fill whole steps, the
  cheapest ``bins mod (dp × M)`` make a short last step.

Output positions are rank-major: ``position = rank_start[rank] + step × M + micro``,
so each rank reads a contiguous run of sequences (and of shards).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from curate.core.errors import UserError
from curate.core.validate import integer


@dataclass(frozen=True, eq=False)
class StepLayout:
    """Step, rank and micro-batch of every bin, and the output order.

    Attributes:
        dp: Data-parallel ranks.
        micro_batches: Sequences per rank per step.
        steps: Number of steps.
        order: ``order[p]`` is the input bin written at output position ``p``.
        step, rank, micro: int64 per output position.
    """

    dp: int
    micro_batches: int
    steps: int
    order: np.ndarray
    step: np.ndarray
    rank: np.ndarray
    micro: np.ndarray

    def rank_starts(self) -> np.ndarray:
        """First output position of each rank (``dp + 1`` values; the last is the number of bins)."""
        counts = np.bincount(self.rank, minlength=self.dp)
        out = np.zeros(self.dp + 1, dtype=np.int64)
        np.cumsum(counts, out=out[1:])
        return out


def check_dp(dp: int, micro_batches: int) -> tuple[int, int]:
    """Validate ``dp`` and ``micro_batches`` (positive integers) or raise :class:`UserError`."""
    for name, value in (("--dp", dp), ("--micro-batches", micro_batches)):
        if value is None:
            raise UserError(f"{name} must be an integer, got None")
    return integer("--dp", dp, 1), integer("--micro-batches", micro_batches, 1)


def token_layout(bins: int, dp: int, micro_batches: int) -> StepLayout:
    """Consecutive bins form a step: ``step = p // (dp·M)``, then micro-batch, then rank."""
    dp, micro_batches = check_dp(dp, micro_batches)
    p = np.arange(bins, dtype=np.int64)
    per_step = dp * micro_batches
    return StepLayout(dp, micro_batches, -(-bins // per_step), p, p // per_step, p % dp, (p % per_step) // dp)


def balanced_layout(bin_cost: np.ndarray, dp: int, micro_batches: int, *, seed: int = 0) -> StepLayout:
    """Group bins into steps so that the ranks of a step carry nearly equal cost (module docstring).

    Args:
        bin_cost: Cost of each bin.
        dp: Data-parallel ranks.
        micro_batches: Sequences per rank per step.
        seed: Seed of the step order, the stratum-to-step matching and the ranks.

    Returns:
        The :class:`StepLayout`, deterministic for ``(bin_cost, dp, micro_batches, seed)``.
    """
    dp, m = check_dp(dp, micro_batches)
    cost = np.asarray(bin_cost, dtype=np.float64)
    bins = cost.shape[0]
    per_step = dp * m
    full = bins // per_step  # complete steps; the cheapest bins % per_step bins make a short last step
    rng = np.random.default_rng([seed, 3])
    ranked = np.argsort(-cost, kind="stable")  # most expensive first; ties by bin index
    slot = np.full((full + (bins % per_step > 0), dp, m), -1, dtype=np.int64)  # [step, rank, micro] = bin
    if m == 1:
        slot[:full, :, 0] = ranked[:full * dp].reshape(full, dp)
    else:
        load = np.zeros((full, dp))
        rows = np.arange(full)[:, None]
        for j in range(m):
            groups = ranked[j * full * dp:(j + 1) * full * dp].reshape(full, dp)
            if j:  # which group goes to which step: at random (stratum 0 fixes the steps)
                groups = groups[rng.permutation(full)]
            by_load = np.argsort(load, axis=1, kind="stable")  # least loaded rank takes the costliest bin
            slot[rows, by_load, j] = groups
            load[rows, by_load] += cost[groups]
    # Shuffle the ranks within each complete step, then the complete steps.
    ranks = rng.permuted(np.tile(np.arange(dp), (full, 1)), axis=1)  # one permutation of the ranks per step
    slot[:full] = slot[np.arange(full)[:, None], ranks][rng.permutation(full)]
    rest = ranked[full * per_step:]
    if rest.size:  # the short last step: micro-batch 0 of every rank first, ranks from 0 up
        last = np.full(per_step, -1, dtype=np.int64)
        last[:rest.size] = rest
        slot[full] = last.reshape(m, dp).T
    steps = slot.shape[0]
    by_rank = slot.transpose(1, 0, 2).reshape(-1)  # rank-major: (rank, step, micro)
    r, st, mi = np.meshgrid(np.arange(dp), np.arange(steps), np.arange(m), indexing="ij")
    keep = by_rank >= 0
    return StepLayout(dp, m, steps, by_rank[keep], st.reshape(-1)[keep].astype(np.int64),
                      r.reshape(-1)[keep].astype(np.int64), mi.reshape(-1)[keep].astype(np.int64))


def rank_loads(cost: np.ndarray, layout: StepLayout) -> np.ndarray:
    """Load of every rank at every step, shape ``(steps, dp)``; ``cost`` is per input bin."""
    cost = np.asarray(cost, dtype=np.float64)[layout.order]
    flat = np.bincount(layout.step * layout.dp + layout.rank, weights=cost, minlength=layout.steps * layout.dp)
    return flat.reshape(layout.steps, layout.dp)


def micro_batch_imbalance(cost: np.ndarray, layout: StepLayout) -> dict[str, float]:
    """Imbalance of every (step, micro-batch) across ranks: ``micro_mean`` and ``micro_p99``.

    What counts when ranks also meet at every micro-batch (FSDP or ZeRO-3 gather
    parameters layer by layer in each forward and backward).
    """
    cost = np.asarray(cost, dtype=np.float64)[layout.order]
    slots = layout.steps * layout.micro_batches
    flat = np.bincount((layout.step * layout.micro_batches + layout.micro) * layout.dp + layout.rank,
                       weights=cost, minlength=slots * layout.dp)
    ratio = step_ratios(flat.reshape(slots, layout.dp))
    if ratio.size == 0:
        return {"micro_mean": 1.0, "micro_p99": 1.0}
    return {"micro_mean": float(ratio.mean()), "micro_p99": float(np.percentile(ratio, 99))}


def step_ratios(loads: np.ndarray) -> np.ndarray:
    """``max / mean`` rank load of every step with any load (float64)."""
    mean = loads.mean(axis=1)
    ok = mean > 0
    return loads.max(axis=1)[ok] / mean[ok]


def imbalance_stats(loads: np.ndarray) -> dict[str, Any]:
    """Step imbalance (``max / mean`` of rank loads) and idle fractions, JSON-ready.

    Returns:
        ``steps``, ``mean`` and ``p99`` and ``max`` imbalance over steps,
        ``idle_fraction`` (rank-time spent waiting over all steps:
        ``1 − Σ mean / Σ max``) and ``mean_step_idle`` (the mean over steps of
        ``1 − mean / max``).
    """
    if loads.size == 0 or not loads.any():
        return {"steps": int(loads.shape[0]), "mean": 1.0, "p99": 1.0, "max": 1.0,
                "idle_fraction": 0.0, "mean_step_idle": 0.0}
    top = loads.max(axis=1)
    mean = loads.mean(axis=1)
    ok = mean > 0
    ratio = top[ok] / mean[ok]
    return {
        "steps": int(loads.shape[0]),
        "mean": float(ratio.mean()),
        "p99": float(np.percentile(ratio, 99)),
        "max": float(ratio.max()),
        "idle_fraction": float(1.0 - mean.sum() / top.sum()),
        "mean_step_idle": float((1.0 - mean[ok] / top[ok]).mean()),
    }
