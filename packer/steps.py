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
* :func:`balanced_layout`: a bin's cost is a sum of parts, one per cost component
  (:data:`packer.cost.COMPONENTS`: ``a·ΣT``, ``b·ΣT²``, ``c·ΣP``, ``e·ΣP²``). Bins
  are grouped by :func:`similar_groups` into groups whose bins carry nearly the
  same amount of *every* part (cells of a k-d tree over the parts), so a step
  whose ranks hold bins of one group is balanced under every cost model of that
  form, not only the one that priced the bins. A step is made of ``mix`` groups
  (default ``micro_batches``: each micro-batch one group of ``dp`` similar bins,
  so every micro-batch is balanced across ranks too), taken from ``mix``
  different strata of the k-d order (matched at random), so that a step mixes
  sequences of different kinds; rank by rank, the costliest bin of the next
  micro-batch goes to the least loaded rank. Step order and the ranks within a
  step are then shuffled with the seed. When the bins do not fill whole steps,
  the cheapest ``bins mod (dp × M)`` make a short last step.

Output positions are rank-major: ``position = rank_start[rank] + step × M + micro``,
so each rank reads a contiguous run of sequences (and of shards).
"""

from __future__ import annotations

import itertools
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


def similar_groups(points: np.ndarray, size: int, *, min_spread: float = 0.0) -> np.ndarray:
    """An order of the rows of ``points`` in which every run of ``size`` rows is a group of similar rows.

    A k-d tree built level by level on all cells at once: each cell is sorted
    along its coordinate of largest variance and cut into parts of whole groups
    (eight while it holds 64 groups or more, four down to 4 groups, then two),
    until cells hold one group. Vectorised: one stable sort of ``rows`` keys per
    level. Cutting in two at every level matches slightly better (on the
    benchmark, p99 step imbalance 1.0118 instead of 1.0145 under the worst of
    the other cost models at one micro-batch) for 40% more time.

    Args:
        points: ``(rows, dims)`` coordinates; ``rows`` a multiple of ``size``.
        size: Rows per group.
        min_spread: Coordinates whose standard deviation over all rows is at most this are left out.

    Returns:
        int64 row indices; deterministic (ties by row index).
    """
    points = np.asarray(points, dtype=np.float64)
    if points.ndim == 1:
        points = points[:, None]
    n = points.shape[0]
    if n % size:
        raise ValueError(f"{n} rows do not make groups of {size}")
    spread = points.std(axis=0) if n else np.zeros(points.shape[1])
    values = np.ascontiguousarray(points[:, (spread > 0) & (spread > min_spread)].T)
    order = np.arange(n, dtype=np.int64)
    dims = values.shape[0]
    if dims == 0 or n <= size:
        return order
    ranks = np.empty((dims, n), dtype=np.int32 if n < 2 ** 31 else np.int64)  # row's place along each coordinate
    by_coordinate = []
    for k in range(dims):
        by_coordinate.append(np.argsort(values[k], kind="stable"))
        ranks[k, by_coordinate[k]] = order
    bounds = np.array([0, n], dtype=np.int64)
    while True:
        lens = np.diff(bounds)
        groups = lens // size
        if groups.max() <= 1:
            return order
        starts = bounds[:-1]
        mean = np.add.reduceat(values, starts, axis=1) / lens
        var = np.add.reduceat(values * values, starts, axis=1) / lens - mean * mean
        widest = np.argmax(var, axis=0)
        if starts.shape[0] == 1:  # the first cell: its sorted order is known
            perm = by_coordinate[int(widest[0])]
        else:
            axis = np.repeat(widest, lens)
            along = ranks[0].copy()
            for k in range(1, dims):
                np.copyto(along, ranks[k], where=axis == k)
            key = np.repeat(np.arange(starts.shape[0], dtype=np.int64) * n, lens)
            key += along
            perm = np.argsort(key, kind="stable")
        order, ranks, values = order[perm], np.take(ranks, perm, axis=1), np.take(values, perm, axis=1)
        ways = np.where(groups >= 64, 8, np.where(groups >= 4, 4, np.minimum(groups, 2)))  # fewer sorting rounds
        cell = np.repeat(np.arange(starts.shape[0]), ways)
        part = np.arange(cell.shape[0]) - np.repeat(np.cumsum(ways) - ways, ways)
        g, w = groups[cell], ways[cell]
        bounds = np.concatenate([[0], np.cumsum((g * (part + 1) // w - g * part // w) * size)])


MIN_SPREAD = 1e-3
"""A cost part whose standard deviation over the bins is at most this share of the mean bin cost is not
matched: it cannot unbalance a step by more than a few tenths of a percent (on the benchmark mixture, the
linear LM part ``a·ΣT``, 0.06%: the token plan's bins are nearly all full)."""


def cheapest(cost: np.ndarray, count: int) -> np.ndarray:
    """The ``count`` cheapest bins, costliest of them first (the tail of a stable sort by decreasing cost)."""
    if count <= 0:
        return np.zeros(0, dtype=np.int64)
    return np.argsort(-cost, kind="stable")[cost.shape[0] - count:]


def check_mix(mix: int | None, dp: int, micro_batches: int) -> int:
    """Groups per step (default ``micro_batches``); raises :class:`UserError` unless it divides ``dp × M``."""
    if mix is None:
        return micro_batches
    mix = integer("--step-mix", mix, 1)
    if (dp * micro_batches) % mix:
        raise UserError(f"--step-mix {mix} must divide dp x micro-batches = {dp * micro_batches}")
    return mix


def balanced_layout(bin_cost: np.ndarray, dp: int, micro_batches: int, *, seed: int = 0,
                    mix: int | None = None) -> StepLayout:
    """Group bins into steps so that the ranks of a step carry nearly equal cost, part by part (module docstring).

    Args:
        bin_cost: Cost of each bin, ``(bins,)``, or its parts ``(bins, k)`` (one column per
            cost component, in cost units: the row sums are the costs).
        dp: Data-parallel ranks.
        micro_batches: Sequences per rank per step.
        seed: Seed of the step order, the strata-to-step matching and the ranks.
        mix: Groups of similar bins per step (divides ``dp × micro_batches``; default
            ``micro_batches``). 1 gives the most similar bins in a step; more groups mix
            steps at the price of balance once a micro-batch holds more than one group.

    Returns:
        The :class:`StepLayout`, deterministic for ``(bin_cost, dp, micro_batches, seed, mix)``.
    """
    dp, m = check_dp(dp, micro_batches)
    mix = check_mix(mix, dp, m)
    parts = np.asarray(bin_cost, dtype=np.float64)
    parts = parts[:, None] if parts.ndim == 1 else parts
    cost = parts.sum(axis=1)
    bins = cost.shape[0]
    per_step = dp * m
    full = bins // per_step  # complete steps; the cheapest bins % per_step bins make a short last step
    rng = np.random.default_rng([seed, 3])
    rest = cheapest(cost, bins % per_step)
    main = np.arange(bins) if rest.size == 0 else np.setdiff1d(np.arange(bins), rest)
    scale = float(cost[main].mean()) if main.size and cost[main].mean() > 0 else 1.0
    groups = similar_groups(parts[main] / scale, per_step // mix, min_spread=MIN_SPREAD)
    strata = main[groups].reshape(mix, full, per_step // mix)
    for j in range(1, mix):  # which group of a stratum goes to which step: at random (stratum 0 fixes the steps)
        strata[j] = strata[j][rng.permutation(full)]
    chosen = strata.transpose(1, 0, 2).reshape(full, per_step)  # the bins of each step
    slot = np.full((full + (bins % per_step > 0), dp, m), -1, dtype=np.int64)  # [step, rank, micro] = bin
    load = np.zeros((full, dp))
    rows = np.arange(full)[:, None]
    if m == 1:  # one micro-batch: which rank holds which bin of the step is left to the shuffle below
        slot[:full, :, 0] = chosen
    for j in range(m if m > 1 else 0):  # micro-batch j: its costliest bin to the least loaded rank, and so on
        group = chosen[:, j * dp:(j + 1) * dp]
        group = np.take_along_axis(group, np.argsort(-cost[group], axis=1, kind="stable"), axis=1)
        by_load = np.argsort(load, axis=1, kind="stable")
        slot[rows, by_load, j] = group
        load[rows, by_load] += cost[group]
    # Shuffle the ranks within each complete step, then the complete steps.
    ranks = rng.permuted(np.tile(np.arange(dp), (full, 1)), axis=1)  # one permutation of the ranks per step
    slot[:full] = slot[np.arange(full)[:, None], ranks][rng.permutation(full)]
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
    """Load of every rank at every step, shape ``(steps, dp)``; ``cost`` is per input bin.

    With cost parts ``(bins, k)``, the load of each part: shape ``(k, steps, dp)``.
    """
    cost = np.asarray(cost, dtype=np.float64)
    if cost.ndim == 2:
        return np.stack([rank_loads(np.ascontiguousarray(cost[:, k]), layout) for k in range(cost.shape[1])])
    cost = cost[layout.order]
    flat = np.bincount(layout.step * layout.dp + layout.rank, weights=cost, minlength=layout.steps * layout.dp)
    return flat.reshape(layout.steps, layout.dp)


MODEL_FACTORS = (0.5, 2.0)
"""How far :func:`other_models` moves each part's weight: the attention, ViT and ViT-attention weights."""


def other_models(part_loads: np.ndarray) -> dict[str, Any]:
    """Step imbalance under the cost models that scale every part but the first by x0.5 or x2.

    With the four parts of :data:`packer.cost.COMPONENTS` these are the 8 models that
    move the LM attention, ViT and ViT attention weights (``b``, ``c``, ``e``) against
    the linear LM weight ``a``: a plan balanced for one model only is unbalanced under them.

    Args:
        part_loads: ``(k, steps, dp)`` from :func:`rank_loads` on cost parts.

    Returns:
        ``models`` (how many), ``p99_worst`` and ``mean_worst`` (the worst over the models of
        the p99 and the mean step imbalance); 1.0 for fewer than two parts.
    """
    k = part_loads.shape[0] if part_loads.ndim == 3 else 1
    if k < 2 or part_loads.size == 0:
        return {"models": 0, "p99_worst": 1.0, "mean_worst": 1.0}
    by_part = np.ascontiguousarray(part_loads.transpose(0, 2, 1))  # (k, dp, steps): reductions across ranks vectorise
    p99, mean = [], []
    for factors in itertools.product(MODEL_FACTORS, repeat=k - 1):
        loads = by_part[0].copy()
        for f, part in zip(factors, by_part[1:]):
            loads += f * part
        total = loads.sum(axis=0)
        ok = total > 0
        ratio = loads.max(axis=0)[ok] * loads.shape[0] / total[ok]
        p99.append(float(np.percentile(ratio, 99)) if ratio.size else 1.0)
        mean.append(float(ratio.mean()) if ratio.size else 1.0)
    return {"models": len(p99), "p99_worst": max(p99), "mean_worst": max(mean)}


def step_composition(layout: StepLayout, tokens: np.ndarray, image_tokens: np.ndarray,
                     samples: np.ndarray) -> dict[str, Any]:
    """How much what steps hold varies across the complete steps: image-token share and mean sample length.

    Args:
        layout: The layout.
        tokens, image_tokens, samples: Per input bin: tokens, image tokens, samples.

    Returns:
        ``image_share`` and ``mean_length``, each ``{"mean", "std", "p1", "p99"}`` over steps.
    """
    full = np.bincount(layout.step, minlength=layout.steps) == layout.dp * layout.micro_batches
    out: dict[str, Any] = {}
    sums = [np.bincount(layout.step, weights=np.asarray(v, dtype=np.float64)[layout.order],
                        minlength=layout.steps)[full] for v in (tokens, image_tokens, samples)]
    for name, num, den in (("image_share", sums[1], sums[0]), ("mean_length", sums[0], sums[2])):
        ok = den > 0
        value = num[ok] / den[ok]
        out[name] = ({"mean": float(value.mean()), "std": float(value.std()), "p1": float(np.percentile(value, 1)),
                      "p99": float(np.percentile(value, 99))} if value.size else
                     {"mean": 0.0, "std": 0.0, "p1": 0.0, "p99": 0.0})
    return out


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
