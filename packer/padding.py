"""Padding of the baseline the packing plan is measured against: random batches padded to their longest."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import numpy as np

from curate.core.errors import UserError
from packer.buckets import check_int, check_lengths

if TYPE_CHECKING:
    from packer.plan import PackPlan


def batch_padding_tokens(lengths: np.ndarray, *, batch_size: int = 8, seed: int = 0) -> int:
    """Padding of random batches of ``batch_size`` samples, each padded to its longest.

    The samples are shuffled with ``seed`` and cut into consecutive batches; the
    last batch may be smaller and is padded to its own longest sample.

    Args:
        lengths: Token count per sample.
        batch_size: Samples per batch (>= 1).
        seed: Seed of the shuffle.

    Returns:
        Σ over batches of (longest × batch size − Σ lengths).
    """
    lengths = check_lengths(lengths, keep_int=True)  # sums below are taken in int64
    batch_size = check_int("batch_size", batch_size, 1)
    seed = check_int("seed", seed, 0)
    n = lengths.shape[0]
    if n == 0:
        return 0
    shuffled = lengths.copy()  # shuffled in place: the same order as lengths[rng.permutation(n)], no index array
    np.random.default_rng([seed, 2]).shuffle(shuffled)
    starts = np.arange(0, n, batch_size)
    longest = np.maximum.reduceat(shuffled, starts)
    sizes = np.diff(np.append(starts, n))
    return int((longest.astype(np.int64) * sizes).sum(dtype=np.int64) - shuffled.sum(dtype=np.int64))


def padding_reduction(
    lengths: np.ndarray, plan: PackPlan, *, batch_size: int = 8, seed: int = 0
) -> float:
    """How many times less padding the plan has than random padded batches.

    The baseline batches the packed records (too-long and empty records are left
    out of both sides) at random into batches of ``batch_size``, each padded to
    its longest sample (see :func:`batch_padding_tokens`); the plan's padding is
    ``ctx − used`` summed over its bins.

    Edge cases: when the bins have no padding at all the reduction is infinite
    and ``math.inf`` is returned (a JSON writer should store it as ``null``);
    when neither side has padding (no records, or e.g. all records of equal
    length filling every bin exactly) the result is 1.0, nothing to reduce.

    Args:
        lengths: The token counts the plan was made from.
        plan: The plan.
        batch_size: Samples per baseline batch.
        seed: Seed of the baseline batching.

    Returns:
        baseline padding / packed padding.
    """
    lengths = check_lengths(lengths)
    if lengths.shape[0] != plan.bin_of.shape[0]:
        raise UserError(
            f"padding_reduction: {lengths.shape[0]} lengths but the plan covers "
            f"{plan.bin_of.shape[0]} records; pass the lengths the plan was made from"
        )
    baseline = batch_padding_tokens(lengths[plan.bin_of >= 0], batch_size=batch_size, seed=seed)
    return reduction_ratio(baseline, plan.padding_tokens)


def reduction_ratio(baseline: int, packed: int) -> float:
    """``baseline / packed`` padding; ``math.inf`` when the bins have none, 1.0 when neither side has any."""
    if packed == 0:
        return 1.0 if baseline == 0 else math.inf
    return baseline / packed

