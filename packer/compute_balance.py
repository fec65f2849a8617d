"""Compute-balanced packing: the token plan's bins, laid out in steps of equal cost per rank.

:func:`balance_bins` takes the bins of :func:`packer.plan.plan_bins` (every bin
still holds at most ``ctx`` tokens) and the cost of every record, split in its
parts (:mod:`packer.compute_balance`: ``a·T``, ``b·T²``, ``c·ΣP``, ``e·ΣP²``), and

1. measures the step imbalance of the token-only plan as a trainer would read it
   (:func:`packer.compute_balance.token_layout`);
2. splits the few most expensive bins that hold at least two records in two
   halves of nearly equal cost until the number of bins is a multiple of
   ``dp × micro_batches`` (at most ``dp × M − 1`` extra bins), so that every rank
   gets the same number of sequences and no step is left incomplete;
3. groups the bins into steps (:func:`packer.compute_balance.balanced_layout`: bins of a
   step carry nearly equal amounts of every part, so the plan stays balanced
   when the real weights of the parts differ from the model's) and puts them in
   rank-major output order;
4. exchanges bins between steps where that lowers a bad step's imbalance under
   the worst of the models below (:func:`swap_pass`: the k-d groups are sparse
   when there are few bins, tens of thousands, and some steps stay unbalanced
   under a model far from the plan's);
5. reports the imbalance under the model and under the models that move its
   attention and vision weights by x0.5 or x2 (:func:`packer.compute_balance.other_models`),
   and how much what steps hold varies (:func:`packer.compute_balance.step_composition`).

The bins themselves are not re-planned: swapping records of equal length
between bins to even out bin costs (which keeps every bin's tokens) was measured
on the benchmark mixture and lowered the spread of bin costs only from 10.4% to
9.4% (coefficient of variation) for about three times the planning time, while
grouping bins of similar parts already brings the step imbalance to about 1.01
under every model of the benchmark.

Below the layout, in sections: training steps (which sequence each rank trains at each step, their imbalance),
the per-sample cost model (training FLOPs in four parts) and timing logs (measured times that fit its coefficients).
"""

from __future__ import annotations

import dataclasses
import itertools
import math
import os
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from curate.core.errors import UserError
from curate.core.io import open_input, text_of
from curate.core.validate import integer


@dataclass(frozen=True, eq=False)
class BalancedBins:
    """Bins in output order with their step, rank, micro-batch and cost.

    Attributes:
        bin_offsets: ``bins + 1`` offsets into ``members``.
        members: Record indices (as given to :func:`balance_bins`), bin after bin.
        bin_tokens: Tokens per bin.
        bin_cost: Cost per bin (training FLOPs).
        layout: The :class:`packer.compute_balance.StepLayout` (``order`` refers to the bins after splitting).
        split: Bins split to reach a multiple of ``dp × micro_batches``.
        stats: JSON-ready summary (imbalance before and after, steps, split bins).
        step_ratio: ``{"token_only": ..., "balanced": ...}``: max/mean rank load of every step.
    """

    bin_offsets: np.ndarray
    members: np.ndarray
    bin_tokens: np.ndarray
    bin_cost: np.ndarray
    layout: StepLayout
    split: int
    stats: dict[str, Any]
    step_ratio: dict[str, np.ndarray]

    @property
    def bins(self) -> int:
        """Number of bins."""
        return int(self.bin_tokens.shape[0])


def segment_sums(values: np.ndarray, offsets: np.ndarray) -> np.ndarray:
    """Sum of ``values[offsets[b]:offsets[b + 1]]`` for every bin ``b`` (float64); per column for 2-D values."""
    values = np.asarray(values)
    if values.ndim == 2:
        return np.stack([segment_sums(np.ascontiguousarray(values[:, k]), offsets) for k in range(values.shape[1])],
                        axis=1) if values.shape[1] else np.zeros((offsets.shape[0] - 1, 0))
    return _sums(values.astype(np.float64, copy=False), offsets)


def _sums(values: np.ndarray, offsets: np.ndarray) -> np.ndarray:
    """Segment sums by ``np.add.reduceat`` (0 for an empty segment), in ``values``' dtype."""
    bins = offsets.shape[0] - 1
    if bins == 0 or values.shape[0] == 0:
        return np.zeros(bins, dtype=values.dtype)
    starts = np.minimum(offsets[:-1], values.shape[0] - 1)
    out = np.add.reduceat(values, starts)
    out[offsets[1:] == offsets[:-1]] = 0
    return out


def reorder_bins(offsets: np.ndarray, members: np.ndarray, order: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``(offsets, members)`` with bin ``order[p]`` moved to position ``p``."""
    sizes = np.diff(offsets)[order]
    new_offsets = np.zeros(order.shape[0] + 1, dtype=np.int64)
    np.cumsum(sizes, out=new_offsets[1:])
    shift = np.repeat(offsets[:-1][order] - new_offsets[:-1], sizes)
    return new_offsets, members[shift + np.arange(new_offsets[-1], dtype=np.int64)]


def _split_bins(offsets: np.ndarray, members: np.ndarray, cost: Callable[[np.ndarray], np.ndarray],
                bin_cost: np.ndarray, need: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Split the ``need`` most expensive bins holding >= 2 records in two (fewer if there are not enough).

    ``cost(records)`` gives the records' costs. Returns the new offsets and members and, for
    every new bin, the old bin it comes from.
    """
    candidates = np.flatnonzero(np.diff(offsets) >= 2)
    costs = bin_cost[candidates]
    if candidates.size > need:  # the need costliest (ties: the lower bin), without sorting every bin
        threshold = np.partition(costs, candidates.size - need)[candidates.size - need]
        above = costs > threshold
        at = np.flatnonzero(costs == threshold)[:need - int(above.sum())]
        candidates = np.sort(np.concatenate([candidates[above], candidates[at]]))
        costs = bin_cost[candidates]
    chosen = candidates[np.argsort(-costs, kind="stable")[:need]]
    if chosen.size == 0:
        return offsets, members, np.arange(offsets.shape[0] - 1)
    members = members.copy()
    cuts: list[int] = []
    for b in sorted(chosen.tolist()):  # a split bin becomes two neighbouring segments
        lo, hi = int(offsets[b]), int(offsets[b + 1])
        recs = members[lo:hi]
        costs = cost(recs)
        halves: tuple[list[int], list[int]] = ([], [])
        loads = [0.0, 0.0]
        for j in np.argsort(-costs, kind="stable").tolist():  # costliest first, to the lighter half
            k = 0 if loads[0] <= loads[1] else 1
            halves[k].append(int(recs[j]))
            loads[k] += float(costs[j])
        members[lo:hi] = halves[0] + halves[1]
        cuts.append(lo + len(halves[0]))
    new_offsets = np.insert(offsets, np.searchsorted(offsets, cuts, side="right"), cuts)
    return new_offsets, members, np.searchsorted(offsets, new_offsets[:-1], side="right") - 1


def _bin_sums(per_record: list[np.ndarray], offsets: np.ndarray, members: np.ndarray) -> list[np.ndarray]:
    """Per-bin sums of each per-record array (an empty array gives zeros); one scatter, then bincounts."""
    bins = offsets.shape[0] - 1  # records in no bin count in an extra bin, dropped
    bin_of = np.full(per_record[0].shape[0], bins, dtype=np.int64)
    bin_of[members] = np.repeat(np.arange(bins, dtype=np.int64), np.diff(offsets))
    return [np.bincount(bin_of, weights=v, minlength=bins + 1)[:bins] if v.size else np.zeros(bins)
            for v in per_record]


def _split_sums(sums: list[np.ndarray], per_record: list[np.ndarray], offsets: np.ndarray, members: np.ndarray,
                source: np.ndarray) -> list[np.ndarray]:
    """Per-bin sums after :func:`_split_bins`: the halves' from their records, the other bins' as they were."""
    halves = np.flatnonzero(source[1:] == source[:-1])
    out = [x[source] for x in sums]
    for j in np.sort(np.concatenate([halves, halves + 1])).tolist():
        recs = members[offsets[j]:offsets[j + 1]]
        for x, v in zip(out, per_record):
            x[j] = v[recs].sum() if v.size else 0.0
    return out


def judge_weights(parts: int) -> np.ndarray:
    """``(models, parts)`` weights: the plan's model (all 1) and the models scaling every part but the first
    by x0.5 or x2 (:data:`packer.compute_balance.MODEL_FACTORS`; 9 models for the four cost parts)."""
    rows = [np.ones(parts)]
    rows += [np.array([1.0, *f]) for f in itertools.product(MODEL_FACTORS, repeat=parts - 1)] if parts > 1 else []
    return np.stack(rows)


def step_worst(bin_parts: np.ndarray, layout: StepLayout) -> np.ndarray:
    """Imbalance (max / mean rank load) of every step under the worst of :func:`judge_weights` (1.0 when empty)."""
    parts = np.asarray(bin_parts, dtype=np.float64)
    parts = parts[:, None] if parts.ndim == 1 else parts
    return _worst(_model_loads(parts, judge_weights(parts.shape[1]), layout))


def _model_loads(parts: np.ndarray, weights: np.ndarray, layout: StepLayout) -> np.ndarray:
    """``(steps, dp, models)`` rank loads under each model: ``(bins, k)`` parts summed per rank, then weighted."""
    idx = layout.step * layout.dp + layout.rank
    cols = [np.bincount(idx, weights=parts[layout.order, k], minlength=layout.steps * layout.dp)
            for k in range(parts.shape[1])]
    return _weigh(np.stack(cols, axis=1), weights).reshape(layout.steps, layout.dp, weights.shape[0])


def _weigh(parts: np.ndarray, weights: np.ndarray) -> np.ndarray:
    """``parts @ weights.T`` summed part by part (no BLAS threads: (rows, 4) by (4, 9) is memory-bound)."""
    out = np.multiply.outer(parts[:, 0], weights[:, 0])
    for k in range(1, parts.shape[1]):
        out += np.multiply.outer(parts[:, k], weights[:, k])
    return out


def _worst(loads: np.ndarray) -> np.ndarray:
    """Max over models of max / mean rank load, per step, for ``(..., dp, models)`` loads."""
    total = loads.sum(axis=-2)
    top = loads.max(axis=-2)
    ratio = np.where(total > 0, top * loads.shape[-2] / np.where(total > 0, total, 1.0), 1.0)
    return ratio.max(axis=-1)


SWAP_SHARE = 0.02
"""Share of the complete steps, the worst under the models, that :func:`swap_pass` tries to improve per round."""
SWAP_ROUNDS = 6
SWAP_MIN_STEPS = 64
"""Steps tried per round at least (small plans)."""
SWAP_FLOOR = 1.02
"""Steps at or below this imbalance under every model are not worth an exchange."""
SWAP_WINDOW = 512
"""Candidate bins per exchange on each side of the wanted cost (in bins sorted by cost under the plan's model)."""


def swap_pass(bin_parts: np.ndarray, layout: StepLayout, *, share: float | None = None, rounds: int | None = None,
              window: int | None = None) -> tuple[StepLayout, int]:
    """Exchange bins between complete steps to lower the worst steps' imbalance under every model.

    Each round takes the ``share`` of complete steps (at least :data:`SWAP_MIN_STEPS`) with the
    highest imbalance under the worst of :func:`judge_weights`, above :data:`SWAP_FLOOR`, worst
    first, leaving out steps for which no exchange was found in an earlier round. For a bin on such a step's most or least loaded rank
    (under the model that judges it worst), the candidates are the ``2 × window`` bins of other
    complete steps whose cost under the plan's model is nearest to the cost that would bring that
    rank to the step's mean. The exchange kept is the one with the lowest larger imbalance of the
    two steps, provided the step improves and the partner step ends no higher than it was or than
    the 90th percentile of the steps' imbalance before the pass. So, for every level at or above that
    percentile, the number of steps above it never grows: the p99 and the maximum never rise.

    Positions keep their step, rank and micro-batch; only which bin sits where changes (the short
    last step is left alone). Deterministic: no randomness, ties to the lower index.

    Args:
        bin_parts: ``(bins, k)`` cost parts per input bin (or ``(bins,)`` costs).
        layout: The layout to improve (:func:`packer.compute_balance.balanced_layout`).
        share, rounds, window: Effort (module constants by default).

    Returns:
        The new layout and the number of exchanges made.
    """
    share = SWAP_SHARE if share is None else share
    rounds = SWAP_ROUNDS if rounds is None else rounds
    window = SWAP_WINDOW if window is None else window
    parts = np.asarray(bin_parts, dtype=np.float64)
    parts = parts[:, None] if parts.ndim == 1 else parts
    dp = layout.dp
    full = np.bincount(layout.step, minlength=layout.steps) == dp * layout.micro_batches
    n_full = int(full.sum())
    if dp < 2 or n_full < 2 or rounds < 1 or share <= 0:
        return layout, 0
    state = _Swaps(parts, layout, full, window)
    if not (state.worst[full] > SWAP_FLOOR).any():
        return layout, 0
    state.prepare()
    stuck = np.zeros(layout.steps, dtype=bool)
    swaps = 0
    for _ in range(rounds):
        bad = np.flatnonzero(full & ~stuck)  # a step no exchange helped is not tried again
        count = min(n_full, max(SWAP_MIN_STEPS, math.ceil(share * n_full)))
        bad = bad[np.argsort(-state.worst[bad], kind="stable")[:count]]
        bad = bad[state.worst[bad] > SWAP_FLOOR]
        before = swaps
        with np.errstate(divide="ignore", invalid="ignore"):  # a step of cost 0 can never be improved
            for s in bad.tolist():
                made = state.improve(s)
                stuck[s] = not made
                swaps += made
        if swaps == before:
            break
    if not swaps:
        return layout, 0
    return StepLayout(dp, layout.micro_batches, layout.steps, state.order, layout.step, layout.rank,
                      layout.micro), swaps


class _Swaps:
    """The state of :func:`swap_pass`: where each bin sits, rank loads under every model and their top two."""

    def __init__(self, parts: np.ndarray, layout: StepLayout, full: np.ndarray, window: int) -> None:
        weights = judge_weights(parts.shape[1])
        self.layout, self.window, self.full = layout, window, full
        self.loads = _model_loads(parts, weights, layout)  # (steps, dp, models)
        steps, _, models = self.loads.shape
        self.total, self.top1, self.top2 = (np.zeros((steps, models)) for _ in range(3))
        self.arg1 = np.zeros((steps, models), dtype=np.int64)
        self.worst = np.ones(steps)
        self.refresh(np.arange(steps))
        self.tau = float(np.percentile(self.worst[full], 90))
        self.parts, self.weights = parts, weights

    def prepare(self) -> None:
        """Where each bin sits and the bins sorted by cost (only once some step is worth an exchange)."""
        layout, bc = self.layout, _weigh(self.parts, self.weights)  # (bins, models)
        self.bc = bc
        self.order = layout.order.copy()
        self.pos_of = np.empty_like(self.order)
        self.pos_of[self.order] = np.arange(self.order.shape[0])
        self.by_cost = np.argsort(bc[:, 0], kind="stable")  # bins by cost under the plan's model
        self.sorted_cost = bc[self.by_cost, 0]
        self.bc_sorted = bc[self.by_cost]
        self.place = np.empty_like(self.by_cost)  # a bin's place in by_cost
        self.place[self.by_cost] = np.arange(self.by_cost.shape[0])
        self.pos_sorted = self.pos_of[self.by_cost]  # kept up to date with pos_of
        self.swappable = self.full[layout.step]  # per position: in a complete step
        self.starts = layout.rank_starts()

    def refresh(self, steps: np.ndarray) -> None:
        """Recompute the totals, top two loads and worst imbalance of ``steps`` from their loads."""
        loads = self.loads[steps]
        dp = loads.shape[1]
        self.total[steps] = loads.sum(axis=1)
        self.arg1[steps] = loads.argmax(axis=1)
        part = np.partition(loads, dp - 2, axis=1) if dp > 1 else np.concatenate([loads, 0 * loads], axis=1)
        self.top1[steps], self.top2[steps] = part[:, dp - 1], part[:, dp - 2]
        self.worst[steps] = _worst(loads)

    def improve(self, s: int) -> int:
        """One exchange for step ``s`` if one helps (:func:`swap_pass`); returns 0 or 1."""
        lay, bc, dp = self.layout, self.bc, self.layout.dp
        ls, total = self.loads[s], self.total[s]
        w = int(np.argmax(self.top1[s] / total))
        ranks = np.unique([int(np.argmax(ls[:, w])), int(np.argmin(ls[:, w]))])
        m = lay.micro_batches
        outs = (self.starts[ranks][:, None] + s * m + np.arange(m)).ravel()  # rank-major; s is a complete step
        want = bc[self.order[outs], 0] - (ls[lay.rank[outs], 0] - total[0] / dp)  # brings the rank to the mean
        at = np.searchsorted(self.sorted_cost, want)
        lo, hi = np.maximum(at - self.window, 0), np.minimum(at + self.window, self.sorted_cost.shape[0])
        # Candidates are runs of the bins sorted by cost: slices, not gathers, until the step's side is judged.
        d = np.concatenate([self.bc_sorted[a:z] - bc[self.order[p]] for a, z, p in zip(lo, hi, outs)])
        in_pos = np.concatenate([self.pos_sorted[a:z] for a, z in zip(lo, hi)])
        out_pos = np.repeat(outs, hi - lo)
        if d.shape[0] == 0:
            return 0
        r_s = lay.rank[out_pos]
        excl_s = np.where(np.arange(dp)[:, None] == self.arg1[s], self.top2[s], self.top1[s])  # (dp, models)
        new_s = (np.maximum(excl_s[r_s], ls[r_s] + d) * dp / (total + d)).max(axis=1)
        better = new_s < self.worst[s] - 1e-12  # the step's side first: most candidates stop here
        better[better] = self.swappable[in_pos[better]] & (lay.step[in_pos[better]] != s)
        if not better.any():
            return 0
        d, r_s, new_s, in_pos, out_pos = d[better], r_s[better], new_s[better], in_pos[better], out_pos[better]
        t, r_t = lay.step[in_pos], lay.rank[in_pos]
        excl_t = np.where(self.arg1[t] == r_t[:, None], self.top2[t], self.top1[t])
        new_t = (np.maximum(excl_t, self.loads[t, r_t] - d) * dp / (self.total[t] - d)).max(axis=1)
        ok = new_t <= np.maximum(self.worst[t], self.tau)
        if not ok.any():
            return 0
        j = int(np.argmin(np.where(ok, np.maximum(new_s, new_t), np.inf)))
        ps, pt, ts = int(out_pos[j]), int(in_pos[j]), int(t[j])
        b, c = int(self.order[ps]), int(self.order[pt])
        self.order[ps], self.order[pt] = c, b
        self.pos_of[b], self.pos_of[c] = pt, ps
        self.pos_sorted[self.place[b]], self.pos_sorted[self.place[c]] = pt, ps
        self.loads[s, int(r_s[j])] += d[j]
        self.loads[ts, int(r_t[j])] -= d[j]
        self.refresh(np.array([s, ts]))
        return 1


def balance_bins(bin_offsets: np.ndarray, members: np.ndarray, lengths: np.ndarray, cost: np.ndarray, *,
                 dp: int, micro_batches: int = 1, seed: int = 0, mix: int | None = None,
                 image_tokens: np.ndarray | None = None, swap: bool = True) -> BalancedBins:
    """Lay the bins of a token plan out in compute-balanced steps (module docstring).

    Args:
        bin_offsets: Offsets of the plan's bins into ``members``.
        members: Record indices, bin after bin.
        lengths: Tokens per record (indexed by record).
        cost: Cost per record (indexed by record), ``(records,)``, or its parts
            ``(records, k)`` whose row sums are the costs (e.g. :func:`packer.compute_balance.table_components`
            times the model's coefficients): bins are then matched part by part.
        dp: Data-parallel ranks.
        micro_batches: Sequences per rank per step.
        seed: Seed of the layout.
        mix: Groups of similar bins per step (:func:`packer.compute_balance.balanced_layout`).
        image_tokens: Image tokens per record, for the composition report (0 when None).
        swap: Run :func:`swap_pass` on the layout (off: the k-d grouping alone, for comparisons).

    Returns:
        The :class:`BalancedBins`.
    """
    mix = check_mix(mix, *check_dp(dp, micro_batches))
    cost = np.asarray(cost, dtype=np.float64)
    columns = [cost] if cost.ndim == 1 else [np.ascontiguousarray(cost[:, k]) for k in range(cost.shape[1])]
    per_record = [np.asarray(lengths, dtype=np.float64),
                  np.zeros(0) if image_tokens is None else np.asarray(image_tokens, dtype=np.float64), *columns]

    sums = _bin_sums(per_record, bin_offsets, members)  # tokens, image tokens, cost parts: per bin
    bin_parts = np.stack(sums[2:], axis=1)
    bin_cost = bin_parts.sum(axis=1)
    before = token_layout(bin_cost.shape[0], dp, micro_batches)
    before_parts = rank_loads(bin_parts, before)
    before_loads = before_parts.sum(axis=0)
    token_stats = {**imbalance_stats(before_loads), **micro_batch_imbalance(bin_cost, before),
                   "other_models": other_models(before_parts)}
    token_mix = step_composition(before, sums[0], sums[1], np.diff(bin_offsets))
    need = (-bin_cost.shape[0]) % (dp * micro_batches)
    split = 0
    if need:
        offsets, members, source = _split_bins(bin_offsets, members, lambda r: sum(c[r] for c in columns), bin_cost,
                                               need)
        split = int(offsets.shape[0] - bin_offsets.shape[0])
        if split:
            sums = _split_sums(sums, per_record, offsets, members, source)
            bin_parts = np.stack(sums[2:], axis=1)
            bin_cost = bin_parts.sum(axis=1)
        bin_offsets = offsets
    layout = balanced_layout(bin_parts, dp, micro_batches, seed=seed, mix=mix)
    swaps = 0
    if swap:
        layout, swaps = swap_pass(bin_parts, layout)
    after_parts = rank_loads(bin_parts, layout)
    after_loads = after_parts.sum(axis=0)
    after = {**imbalance_stats(after_loads), **micro_batch_imbalance(bin_cost, layout),
             "other_models": other_models(after_parts)}
    offsets, ordered = reorder_bins(bin_offsets, members, layout.order)
    stats = {"dp": dp, "micro_batches": micro_batches, "step_mix": mix, "steps": layout.steps, "split_bins": split,
             "swaps": swaps,
             "imbalance": {"token_only": token_stats, "balanced": after},
             "composition": {"token_only": token_mix,
                             "balanced": step_composition(layout, sums[0], sums[1], np.diff(bin_offsets))},
             "cost_total": float(bin_cost.sum()),
             "bin_cost_cv": float(bin_cost.std() / bin_cost.mean()) if bin_cost.size and bin_cost.mean() else 0.0}
    ratios = {"token_only": step_ratios(before_loads), "balanced": step_ratios(after_loads)}
    return BalancedBins(offsets, ordered, sums[0][layout.order].astype(np.int64), bin_cost[layout.order], layout,
                        split, stats, ratios)


@dataclass(frozen=True)
class BalanceOptions:
    """What ``curate pack --balance-compute`` balances for.

    Attributes:
        dp: Data-parallel ranks.
        micro_batches: Sequences per rank per step.
        cost_model: The :class:`packer.compute_balance.CostModel`.
        step_mix: Groups of similar bins per step (None: one per micro-batch).
        calibration: The fit's report when the model was fitted to a timing log (:mod:`packer.compute_balance`).
    """

    dp: int
    micro_batches: int
    cost_model: CostModel
    step_mix: int | None = None
    calibration: dict[str, Any] | None = None

    def settings(self) -> dict[str, Any]:
        """JSON-ready settings (recorded in ``stats.json``)."""
        return {"dp": self.dp, "micro_batches": self.micro_batches, "step_mix": self.step_mix,
                "cost_model": self.cost_model.to_dict()}


def balance_options(balance_compute: bool, dp: int | None, micro_batches: int | None,
                    cost_model: str | os.PathLike[str] | None, step_mix: int | None = None) -> BalanceOptions | None:
    """Check the ``--balance-compute`` flags; ``None`` when balancing is off.

    ``cost_model`` is a YAML of :class:`packer.compute_balance.CostModel` fields, or a timing log
    (``.csv`` / ``.parquet``) whose coefficients are fitted (:func:`packer.compute_balance.load_model`).

    Raises:
        UserError: ``--dp`` missing with ``--balance-compute``, balance flags without it, or bad values.
    """
    if not balance_compute:
        given = [name for name, v in (("--dp", dp), ("--micro-batches", micro_batches), ("--cost-model", cost_model),
                                      ("--step-mix", step_mix)) if v is not None]
        if given:
            verb = "applies" if len(given) == 1 else "apply"
            raise UserError(f"{', '.join(given)} only {verb} with --balance-compute; add it or drop "
                            f"{'it' if len(given) == 1 else 'them'}")
        return None
    if dp is None:
        raise UserError("--balance-compute needs --dp N, the number of data-parallel ranks that train on the pack")
    dp, m = check_dp(dp, 1 if micro_batches is None else micro_batches)
    check_mix(step_mix, dp, m)
    if cost_model is not None and is_timing_log(cost_model):
        model, fit = load_model(cost_model)
        return BalanceOptions(dp, m, model, step_mix, fit)
    return BalanceOptions(dp, m, load_cost_model(cost_model), step_mix)


def balance_table(table: pa.Table, bin_offsets: np.ndarray, members: np.ndarray, options: BalanceOptions, *,
                  seed: int) -> BalancedBins:
    """:func:`balance_bins` for a lengths table (``members`` index its rows); cost parts from ``options.cost_model``."""
    tokens = table.column("tokens").to_numpy(zero_copy_only=False).astype(np.int64)
    parts = table_components(table)
    parts *= np.array(options.cost_model.coefficients())
    image_tokens = (pc.fill_null(table.column("image_tokens"), 0).to_numpy(zero_copy_only=False).astype(np.int64)
                    if "image_tokens" in table.column_names else None)
    bb = balance_bins(bin_offsets, members, tokens, parts, dp=options.dp, micro_batches=options.micro_batches,
                      seed=seed, mix=options.step_mix, image_tokens=image_tokens)
    if options.calibration is not None:
        bb.stats["calibration"] = options.calibration
    return bb


def plan_arrays(bb: BalancedBins) -> dict[str, np.ndarray]:
    """Per-bin arrays the shard writer puts into each sequence's JSON (``_plan/plan.npz``)."""
    lay = bb.layout
    return {"bin_cost": bb.bin_cost, "bin_step": lay.step, "bin_rank": lay.rank, "bin_micro": lay.micro,
            "balance": np.array([lay.dp, lay.micro_batches, lay.steps], dtype=np.int64)}


def plan_columns(bb: BalancedBins) -> dict[str, np.ndarray]:
    """Per-bin columns added to ``plan.parquet``: ``step``, ``rank``, ``micro`` (when M > 1) and ``cost``."""
    lay = bb.layout
    cols = {"step": lay.step, "rank": lay.rank}
    if lay.micro_batches > 1:
        cols["micro"] = lay.micro
    return {**cols, "cost": bb.bin_cost}


# Training steps: which packed sequence each data-parallel rank trains on at each step.
#
# A step is ``dp`` ranks × ``micro_batches`` sequences per rank; ranks meet at the
# gradient all-reduce once per step, so a step lasts as long as its slowest rank,
# whose load is the sum of the costs of its micro-batches. The *imbalance* of a
# step is ``max / mean`` of its ranks' loads (1.0 is perfect; a rank left without
# a sequence counts as load 0), and its *idle fraction* ``1 − mean / max`` is the
# share of the step's GPU time spent waiting.
#
# Two layouts:
#
# * :func:`token_layout`: the order of the token-only plan cut into consecutive
#   steps (what a trainer gets from a plan that ignores cost), the baseline;
# * :func:`balanced_layout`: a bin's cost is a sum of parts, one per cost component
#   (:data:`packer.compute_balance.COMPONENTS`: ``a·ΣT``, ``b·ΣT²``, ``c·ΣP``, ``e·ΣP²``). Bins
#   are grouped by :func:`similar_groups` into groups whose bins carry nearly the
#   same amount of *every* part (cells of a k-d tree over the parts), so a step
#   whose ranks hold bins of one group is balanced under every cost model of that
#   form, not only the one that priced the bins. A step is made of ``mix`` groups
#   (default ``micro_batches``: each micro-batch one group of ``dp`` similar bins,
#   so every micro-batch is balanced across ranks too), taken from ``mix``
#   different strata of the k-d order (matched at random), so that a step mixes
#   sequences of different kinds; rank by rank, the costliest bin of the next
#   micro-batch goes to the least loaded rank. Step order and the ranks within a
#   step are then shuffled with the seed. When the bins do not fill whole steps,
#   the cheapest ``bins mod (dp × M)`` make a short last step.
#
# Output positions are rank-major: ``position = rank_start[rank] + step × M + micro``,
# so each rank reads a contiguous run of sequences (and of shards).
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

    With the four parts of :data:`packer.compute_balance.COMPONENTS` these are the 8 models that
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


# A per-sample compute cost model: estimated training FLOPs of one sample.
#
# A packed sequence is trained with variable-length attention, so attention stays
# inside each sample (the language model) and inside each image (the vision
# encoder, which encodes every image at its native resolution). The cost of a
# sample with ``T`` tokens (text + image tokens) and images of ``P_j`` patches each
# (patches *before* the ``merge × merge`` merge: ``P = t · h · w`` of the image's
# grid) is, in forward FLOPs (2 per multiply-add)::
#
#     LM linear      T · 2 · [L · (d · hd · (2·H + 2·K) + m · d · F) + d · V]
#     LM attention   T² · 2 · L · H · hd                      (QKᵀ and A·V, causal: half of T²)
#     ViT linear     P · 2 · [c · p² · tp · D + Lv · (4 · D² + mv · D · Fv)]
#     ViT attention  P² · 4 · Lv · D                           (bidirectional, per image)
#     merger         (P / s²) · 2 · [(s² · D)² + s² · D · d]   (MLP from s²·D to s²·D to d)
#
# with ``d, L, H, K, hd, F, V`` the language model's hidden size, layers, attention
# heads, key/value heads, head size, MLP size and vocabulary (the LM head is
# applied to every token); ``m`` = 3 for a gated (SwiGLU) MLP, 2 otherwise;
# ``D, Lv, Fv, mv`` the same for the vision encoder; ``p, tp, c`` its patch size,
# temporal patch size and input channels; ``s`` the spatial merge size. The
# sample's cost is ``training_factor`` (3: forward + backward) times the sum.
# Norms, rotary embeddings, softmax and the loss are left out (a few percent,
# nearly linear in tokens).
#
# So ``cost = a·T + b·T² + Σ_images (c·P + e·P²)`` with the coefficients of
# :meth:`CostModel.coefficients`: a sample's cost is the dot product of its four
# *components* (:data:`COMPONENTS`: ``T``, ``T²``, ``ΣP``, ``ΣP²``, from
# :func:`sample_components`) with ``(a, b, c, e)``, and so is a packed sequence's
# (its samples' components summed). The defaults describe LLaVA-OneVision-1.5-8B: a
# Qwen3-8B language model (hidden 4096, 36 layers, 32 heads, 8 key/value heads of
# 128, MLP 12288, vocabulary 151936) and a RICE-ViT-L/14 encoder (hidden 1024,
# 24 layers, 16 heads, MLP 4096, GELU, patch 14, 2×2 merge). Other architectures
# come from a YAML file of the same field names (``curate pack --cost-model FILE``);
# the four coefficients can also be given directly (``per_token``, ``per_token_sq``,
# ``per_patch``, ``per_patch_sq``: a model fitted to measured step times, see
# :mod:`packer.compute_balance`), and then replace the FLOPs estimate.
COMPONENTS = ("tokens", "tokens_sq", "patches", "patches_sq")
"""The cost components of a sample (or a sum of samples): ``ΣT``, ``ΣT²``, ``ΣP`` and ``ΣP²``."""

COEFFICIENT_FIELDS = ("per_token", "per_token_sq", "per_patch", "per_patch_sq")
""":class:`CostModel` fields that give the coefficients of :data:`COMPONENTS` directly."""

@dataclass(frozen=True)
class CostModel:
    """Architecture parameters of the cost model (defaults: LLaVA-OneVision-1.5-8B).

    Attributes:
        lm_hidden: Language model hidden size ``d``.
        lm_layers: Language model layers ``L``.
        lm_heads: Attention (query) heads ``H``.
        lm_kv_heads: Key/value heads ``K`` (grouped-query attention).
        lm_head_dim: Size of one attention head ``hd``.
        lm_intermediate: MLP size ``F``.
        lm_vocab: Vocabulary size ``V`` (LM head); 0 leaves the head out.
        lm_gated_mlp: SwiGLU MLP (3 matrices) instead of 2.
        vit_hidden: Vision encoder hidden size ``D``.
        vit_layers: Vision encoder layers ``Lv``.
        vit_intermediate: Vision encoder MLP size ``Fv``.
        vit_gated_mlp: Gated vision MLP (3 matrices) instead of 2.
        patch_size: Patch side ``p`` in pixels.
        temporal_patch_size: Frames per patch ``tp``.
        in_channels: Image channels ``c``.
        merge_size: Spatial merge ``s`` (image tokens = patches / s²).
        training_factor: Multiplier from forward to training FLOPs.
        per_token, per_token_sq, per_patch, per_patch_sq: The coefficients ``(a, b, c, e)``
            themselves (all four or none), e.g. fitted to measured step times; when
            given they replace the FLOPs estimate of the fields above (cost is then in
            their unit, seconds for a fit).
    """

    lm_hidden: int = 4096
    lm_layers: int = 36
    lm_heads: int = 32
    lm_kv_heads: int = 8
    lm_head_dim: int = 128
    lm_intermediate: int = 12288
    lm_vocab: int = 151936
    lm_gated_mlp: bool = True
    vit_hidden: int = 1024
    vit_layers: int = 24
    vit_intermediate: int = 4096
    vit_gated_mlp: bool = False
    patch_size: int = 14
    temporal_patch_size: int = 1
    in_channels: int = 3
    merge_size: int = 2
    training_factor: float = 3.0
    per_token: float | None = None
    per_token_sq: float | None = None
    per_patch: float | None = None
    per_patch_sq: float | None = None

    def __post_init__(self) -> None:
        given = [getattr(self, name) is not None for name in COEFFICIENT_FIELDS]
        if any(given) and not all(given):
            raise UserError(f"cost model: give all of {', '.join(COEFFICIENT_FIELDS)} or none")
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            if f.name in COEFFICIENT_FIELDS:
                if value is None:
                    continue
                if isinstance(value, bool) or not isinstance(value, (int, float)) or not value >= 0 \
                        or value == float("inf"):
                    raise UserError(f"cost model: {f.name} must be a number >= 0, got {value!r}")
                continue
            if f.type in ("bool", bool):
                if not isinstance(value, bool):
                    raise UserError(f"cost model: {f.name} must be true or false, got {value!r}")
                continue
            minimum = 0 if f.name in ("lm_vocab", "vit_layers") else 1
            if f.type in ("int", int) and value is not None:
                integer(f"cost model: {f.name}", value, minimum)
                continue
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                raise UserError(f"cost model: {f.name} must be a number, got {value!r}")
            if value < minimum:
                raise UserError(f"cost model: {f.name} must be >= {minimum}, got {value!r}")

    def coefficients(self) -> tuple[float, float, float, float]:
        """``(a, b, c, e)`` of ``cost = a·T + b·T² + Σ_images (c·P + e·P²)``: training FLOPs, or the given ones."""
        if self.per_token is not None:
            return tuple(float(getattr(self, name)) for name in COEFFICIENT_FIELDS)  # type: ignore[return-value]
        d, hd = self.lm_hidden, self.lm_head_dim
        m = 3 if self.lm_gated_mlp else 2
        lm_layer = d * hd * (2 * self.lm_heads + 2 * self.lm_kv_heads) + m * d * self.lm_intermediate
        a = 2.0 * (self.lm_layers * lm_layer + d * self.lm_vocab)
        b = 2.0 * self.lm_layers * self.lm_heads * hd
        big_d, s2 = self.vit_hidden, self.merge_size ** 2
        mv = 3 if self.vit_gated_mlp else 2
        embed = self.in_channels * self.patch_size ** 2 * self.temporal_patch_size * big_d
        vit_layer = 4 * big_d * big_d + mv * big_d * self.vit_intermediate
        merger = (s2 * big_d) ** 2 + s2 * big_d * d
        c = 2.0 * (embed + self.vit_layers * vit_layer) + 2.0 * merger / s2
        e = 4.0 * self.vit_layers * big_d
        f = float(self.training_factor)
        return a * f, b * f, c * f, e * f

    def sample_costs(self, tokens: np.ndarray, patches: np.ndarray, owner: np.ndarray) -> np.ndarray:
        """Training FLOPs per sample (float64).

        Args:
            tokens: Tokens ``T`` per sample (text + image tokens).
            patches: Patches ``P`` per image (before the merge), all images.
            owner: Sample index of each image (same length as ``patches``).
        """
        a, b, c, e = self.coefficients()
        t = np.asarray(tokens, dtype=np.float64)
        cost = a * t + b * t * t
        p = np.asarray(patches, dtype=np.float64)
        if p.size:
            cost += np.bincount(np.asarray(owner, dtype=np.int64), weights=c * p + e * p * p, minlength=t.shape[0])
        return cost

    @property
    def fitted(self) -> bool:
        """Whether the coefficients are given (fitted) rather than estimated from the architecture."""
        return self.per_token is not None

    def to_dict(self) -> dict[str, Any]:
        """The parameters as a plain dict (the YAML layout of :func:`load_cost_model`)."""
        return dataclasses.asdict(self)


def sample_components(tokens: np.ndarray, patches: np.ndarray, owner: np.ndarray) -> np.ndarray:
    """The :data:`COMPONENTS` of every sample, shape ``(samples, 4)`` (float64).

    Args:
        tokens: Tokens ``T`` per sample.
        patches: Patches ``P`` per image (before the merge), all images.
        owner: Sample index of each image.
    """
    t = np.asarray(tokens, dtype=np.float64)
    out = np.zeros((t.shape[0], len(COMPONENTS)), order="F")  # column by column: each component contiguous
    out[:, 0] = t
    out[:, 1] = t * t
    p = np.asarray(patches, dtype=np.float64)
    if p.size:
        owner = np.asarray(owner, dtype=np.int64)
        out[:, 2] = np.bincount(owner, weights=p, minlength=t.shape[0])
        out[:, 3] = np.bincount(owner, weights=p * p, minlength=t.shape[0])
    return out


def load_cost_model(path: str | os.PathLike[str] | None) -> CostModel:
    """The default model, or one read from a YAML (or JSON) file of :class:`CostModel` field names.

    Fields left out keep their defaults. Raises :class:`UserError` naming the file
    on a missing or unreadable file, an unknown field or a bad value. A timing log
    (``.csv`` or ``.parquet``) is fitted instead: see :func:`packer.compute_balance.load_model`.
    """
    if path is None:
        return CostModel()
    import yaml

    try:
        with open_input(path, "r") as fh:  # a local file or an object in a bucket
            data = yaml.safe_load(fh)
    except OSError as exc:
        raise UserError(f"--cost-model {path}: cannot read it ({exc.strerror})") from None
    except yaml.YAMLError as exc:
        raise UserError(f"--cost-model {path}: not valid YAML ({str(exc).splitlines()[0]})") from None
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise UserError(f"--cost-model {path}: expected a mapping of field: value, got {type(data).__name__}")
    names = [f.name for f in dataclasses.fields(CostModel)]
    unknown = sorted(set(map(str, data)) - set(names))
    if unknown:
        raise UserError(f"--cost-model {path}: unknown field(s) {', '.join(unknown)}; valid: {', '.join(names)}")
    for name in (*COEFFICIENT_FIELDS, "training_factor"):  # YAML 1.1 reads 1e-7 (no dot) as a string
        if isinstance(data.get(name), str):
            try:
                data[name] = float(data[name])
            except ValueError:
                pass
    try:
        return CostModel(**data)
    except UserError as exc:
        raise UserError(f"--cost-model {path}: {exc}") from None


def image_patches(grids: pa.ChunkedArray | pa.Array) -> tuple[np.ndarray, np.ndarray]:
    """Patches per image and the owning sample of each image, from a ``list<list<int>>`` column of grids.

    Args:
        grids: One list of ``[t, h, w]`` grids (in patches, before the merge) per sample.

    Returns:
        ``(patches, owner)``: int64 arrays with one entry per image.
    """
    col = grids.combine_chunks() if isinstance(grids, pa.ChunkedArray) else grids
    n = len(col)
    per_sample = pc.fill_null(pc.list_value_length(col), 0).to_numpy(zero_copy_only=False).astype(np.int64)
    if n == 0 or not per_sample.any():
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    images = pc.list_flatten(col)
    sizes = pc.fill_null(pc.list_value_length(images), 0).to_numpy(zero_copy_only=False)
    if (sizes != 3).any():
        i = int(np.flatnonzero(sizes != 3)[0])
        raise UserError(f"image_grids: image {i} has a grid of {int(sizes[i])} values; expected [t, h, w]")
    thw = pc.list_flatten(images).to_numpy(zero_copy_only=False).astype(np.int64).reshape(-1, 3)
    owner = np.repeat(np.arange(n, dtype=np.int64), per_sample)
    return thw.prod(axis=1), owner


def _table_images(table: pa.Table) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    tokens = table.column("tokens").to_numpy(zero_copy_only=False).astype(np.int64)
    if "image_grids" in table.column_names:
        patches, owner = image_patches(table.column("image_grids"))
    else:
        patches = owner = np.zeros(0, np.int64)
    return tokens, patches, owner


def table_costs(table: pa.Table, model: CostModel) -> np.ndarray:
    """Training FLOPs of every row of a lengths table (``tokens``, optional ``image_grids``).

    Lengths without ``image_grids`` (counted elsewhere) get the language-model
    part only.
    """
    return model.sample_costs(*_table_images(table))


def table_components(table: pa.Table) -> np.ndarray:
    """:func:`sample_components` of every row of a lengths table (image parts 0 without ``image_grids``)."""
    return sample_components(*_table_images(table))


# Timing logs: measured times of packed sequences with their cost components, and the coefficients they give.
#
# A *timing log* is a table with one row per measured micro-batch or packed
# sequence (CSV with a header line, or Parquet):
#
# ============  ===============================================================
# ``tokens``       ΣT: tokens of its samples, summed
# ``tokens_sq``    ΣT²: each sample's tokens squared, summed
# ``patches``      ΣP: patches of its images (``t·h·w`` of ``image_grid_thw``, before the merge)
# ``patches_sq``   ΣP²: each image's patches squared, summed
# ``seconds``      its measured time (forward + backward; synchronise the GPU before reading the clock)
# ``sequences``    optional: packed sequences in the row (default 1)
# ============  ===============================================================
#
# Other columns (``step``, ``rank``, ...) are ignored. :class:`TimingLog` writes one
# from any training loop; :func:`fit_coefficients` fits ``seconds ≈ a·tokens +
# b·tokens_sq + c·patches + e·patches_sq + o·sequences`` with non-negative
# coefficients (``scipy.optimize.nnls``, rows weighted by ``1 / seconds`` so that
# the *relative* error is what is minimised) and reports the fit's error; the
# per-sequence overhead ``o`` is the same on every rank (each rank trains the same
# number of sequences per step), so the plan uses ``(a, b, c, e)`` only.
# ``curate pack --balance-compute --cost-model LOG.csv`` plans with the fitted
# coefficients (:func:`load_model`).
SECONDS = "seconds"
SEQUENCES = "sequences"
LOG_SUFFIXES = (".csv", ".parquet", ".pq")
MIN_ROWS = 8


def is_timing_log(path: str | os.PathLike[str]) -> bool:
    """Whether ``path`` names a timing log (by its suffix: ``.csv``, ``.parquet``, ``.pq``)."""
    return Path(text_of(path)).suffix.lower() in LOG_SUFFIXES  # a path or a bucket's URL


def sequence_components(cu_seqlens: Any, image_grid_thw: Any = None) -> dict[str, float]:
    """:data:`packer.compute_balance.COMPONENTS` of one packed sequence or micro-batch.

    Args:
        cu_seqlens: Sample boundaries (``[0, T1, T1 + T2, ...]``; a tensor or array).
        image_grid_thw: ``(images, 3)`` grids of its images (patches before the merge), or None.
    """
    bounds = np.asarray(_numpy(cu_seqlens), dtype=np.float64).reshape(-1)
    t = np.diff(bounds)
    grids = np.zeros((0, 3)) if image_grid_thw is None else np.asarray(_numpy(image_grid_thw), np.float64)
    p = grids.reshape(-1, 3).prod(axis=1)
    return dict(zip(COMPONENTS, (float(t.sum()), float((t * t).sum()), float(p.sum()), float((p * p).sum()))))


def _numpy(value: Any) -> Any:
    return value.detach().cpu().numpy() if hasattr(value, "detach") else value


class TimingLog:
    """Rows of a timing log, written to ``path`` (``.csv`` or ``.parquet``) by :meth:`write` or on leaving ``with``.

    In a training loop::

        with TimingLog("timings.csv") as log:
            for batch in loader:
                with log.measure(batch):      # synchronises CUDA before and after
                    loss = model(**inputs(batch)).loss
                    loss.backward()
                optimizer.step(); optimizer.zero_grad()

    ``batch`` is an item of :class:`packer.loader.PackedDataset` (or anything with
    ``cu_seqlens`` and, for images, ``image_grid_thw``). Extra keyword arguments
    (``step=``, ``rank=``) become columns.
    """

    def __init__(self, path: str | os.PathLike[str]) -> None:
        if not is_timing_log(path):
            raise UserError(f"{path}: a timing log is written as .csv or .parquet")
        self.path = Path(path)
        self.rows: list[dict[str, float]] = []

    def add(self, batch: Mapping[str, Any], seconds: float, *, sequences: int = 1, **extra: float) -> None:
        """Record one measured micro-batch (its components from ``batch``) and its time."""
        row = sequence_components(batch["cu_seqlens"], batch.get("image_grid_thw"))
        self.rows.append({**row, SECONDS: float(seconds), SEQUENCES: float(sequences), **extra})

    @contextmanager
    def measure(self, batch: Mapping[str, Any], *, sequences: int = 1, **extra: float) -> Iterator[None]:
        """Time the block (CUDA synchronised on both sides when it is in use) and :meth:`add` the row."""
        _synchronize()
        start = time.perf_counter()
        yield
        _synchronize()
        self.add(batch, time.perf_counter() - start, sequences=sequences, **extra)

    def write(self) -> Path:
        """Write the rows (atomically) and return the path."""
        from curate.core.io import atomic_open, write_parquet

        names = list(dict.fromkeys(k for row in self.rows for k in row)) or [*COMPONENTS, SECONDS, SEQUENCES]
        table = pa.table({k: pa.array([row.get(k) for row in self.rows], pa.float64()) for k in names})
        self.path.parent.mkdir(parents=True, exist_ok=True)
        if self.path.suffix.lower() == ".csv":
            import pyarrow.csv as pacsv

            with atomic_open(self.path, "wb") as fh:
                pacsv.write_csv(table, fh)
        else:
            write_parquet(self.path, table)
        return self.path

    def __enter__(self) -> TimingLog:
        return self

    def __exit__(self, *exc: object) -> None:
        if exc[0] is None:
            self.write()


def _synchronize() -> None:
    import sys

    torch = sys.modules.get("torch")  # a loop that measures a model has torch loaded already
    if torch is not None and torch.cuda.is_available() and torch.cuda.is_initialized():
        torch.cuda.synchronize()


def read_timing_log(path: str | os.PathLike[str]) -> dict[str, np.ndarray]:
    """The columns of a timing log (float64), checked; raises :class:`UserError` naming the file."""
    where = f"--cost-model {path}"
    try:
        with open_input(path) as fh:  # a local file or an object in a bucket
            if Path(text_of(path)).suffix.lower() == ".csv":
                import pyarrow.csv as pacsv

                table = pacsv.read_csv(fh)
            else:
                import pyarrow.parquet as pq

                table = pq.read_table(fh)
    except FileNotFoundError:
        raise UserError(f"{where}: no such file") from None
    except (OSError, pa.ArrowInvalid) as exc:
        raise UserError(f"{where}: not a readable timing log ({str(exc).splitlines()[0]})") from None
    missing = [c for c in (*COMPONENTS, SECONDS) if c not in table.column_names]
    if missing:
        raise UserError(f"{where}: a timing log needs the columns {', '.join((*COMPONENTS, SECONDS))} "
                        f"(and optionally {SEQUENCES}); missing {', '.join(missing)}")
    out: dict[str, np.ndarray] = {}
    for name in (*COMPONENTS, SECONDS, SEQUENCES):
        if name not in table.column_names:
            continue
        col = table.column(name)
        if not (pa.types.is_integer(col.type) or pa.types.is_floating(col.type)):
            raise UserError(f"{where}: column {name} holds {col.type}, not numbers")
        if col.null_count:
            raise UserError(f"{where}: column {name} has {col.null_count} empty values")
        values = col.to_numpy().astype(np.float64)
        bad = ~np.isfinite(values) | (values < 0) | ((values <= 0) if name == SECONDS else False)
        if bad.any():
            i = int(np.flatnonzero(bad)[0])
            what = "a positive number" if name == SECONDS else "a number >= 0"
            raise UserError(f"{where}: row {i + 1}: {name} is {float(values[i])!r}; expected {what}")
        out[name] = values
    if table.num_rows < MIN_ROWS:
        raise UserError(f"{where}: {table.num_rows} rows; a fit needs at least {MIN_ROWS} measured sequences "
                        "(a few hundred of varied composition give a good one)")
    out.setdefault(SEQUENCES, np.ones(table.num_rows))
    return out


def fit_coefficients(columns: Mapping[str, np.ndarray]) -> dict[str, Any]:
    """Fit ``seconds`` to the components (non-negative least squares on the relative error).

    Args:
        columns: :data:`packer.compute_balance.COMPONENTS`, ``seconds`` and optionally ``sequences`` (see
            :func:`read_timing_log`).

    Returns:
        JSON-ready report: ``rows``, ``coefficients`` (``per_token`` ... ``per_patch_sq``),
        ``per_sequence`` (overhead), ``unmeasured`` (components that are 0 in every row: their
        coefficient is 0), and the error of the fitted times against the measured ones:
        ``rms_relative_error``, ``median_relative_error``, ``p90_relative_error``,
        ``max_relative_error`` and ``r2``.
    """
    from scipy.optimize import nnls

    y = np.asarray(columns[SECONDS], dtype=np.float64)
    counts = columns.get(SEQUENCES, np.ones(y.shape[0]))
    design = np.stack([np.asarray(columns[c], dtype=np.float64) for c in COMPONENTS] + [counts], axis=1)
    weighted = design / y[:, None]  # minimise Σ ((fit - y) / y)²
    scale = np.abs(weighted).max(axis=0)
    used = scale > 0
    coef = np.zeros(design.shape[1])
    solution, _ = nnls(weighted[:, used] / scale[used], np.ones_like(y))
    coef[used] = solution / scale[used]
    fit = design @ coef
    rel = np.abs(fit - y) / y
    total = float(((y - y.mean()) ** 2).sum())
    return {
        "rows": int(y.shape[0]),
        "coefficients": dict(zip(COEFFICIENT_FIELDS, map(float, coef[:4]))),
        "per_sequence": float(coef[4]),
        "unmeasured": [c for c, u in zip(COMPONENTS, used[:4]) if not u],
        "rms_relative_error": float(np.sqrt((rel * rel).mean())),
        "median_relative_error": float(np.median(rel)),
        "p90_relative_error": float(np.percentile(rel, 90)),
        "max_relative_error": float(rel.max()),
        "r2": float(1.0 - ((fit - y) ** 2).sum() / total) if total > 0 else 1.0,
    }


def load_model(path: str | os.PathLike[str]) -> tuple[CostModel, dict[str, Any]]:
    """The :class:`packer.compute_balance.CostModel` fitted to a timing log, and the fit's report (:func:`fit_coefficients`).

    Raises:
        UserError: On an unreadable log, or a fit that prices every component at 0.
    """
    report = fit_coefficients(read_timing_log(path))
    coefficients = report["coefficients"]
    if not any(coefficients.values()):
        raise UserError(f"--cost-model {path}: the fit gives no cost to any component (times do not grow with "
                        "tokens or patches); measure sequences of more varied sizes")
    return CostModel(**coefficients), {"file": str(path), **report}


def describe_fit(report: Mapping[str, Any]) -> str:
    """One line on a fit: its coefficients and its error."""
    c = report["coefficients"]
    coefs = ", ".join(f"{k} {v:.3g}" for k, v in c.items())
    note = f"; not in the log: {', '.join(report['unmeasured'])}" if report.get("unmeasured") else ""
    return (f"cost model fitted to {report['rows']:,} timings ({coefs}, per sequence {report['per_sequence']:.3g} s); "
            f"error: RMS {report['rms_relative_error']:.1%}, p90 {report['p90_relative_error']:.1%}, "
            f"max {report['max_relative_error']:.1%}, R² {report['r2']:.4f}{note}")
