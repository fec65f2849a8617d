"""Plain first-fit-decreasing bin packing: the baseline of the planner.

Records are taken from the longest to the shortest (ties by position) and each
goes into the first bin, in opening order, that still has room; a new bin is
opened when none has. "First bin with room" is found with a max segment tree
over the bins' free space, so one record costs O(log n) instead of a scan over
all open bins. It works record by record in plain Python, as a straightforward
packer would, and is kept only to measure :mod:`packer.plan` against.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from packer.buckets import check_int, check_lengths
from packer.plan import EMPTY, TOO_LONG


@dataclass(frozen=True, eq=False)
class FFDResult:
    """Bins found by first-fit decreasing.

    Attributes:
        bin_of: int64 per record: its bin (in opening order), ``TOO_LONG`` (-1)
            or ``EMPTY`` (-2), as in :class:`packer.plan.PackPlan`.
        bin_tokens: int64 used tokens per bin.
    """

    bin_of: np.ndarray
    bin_tokens: np.ndarray

    @property
    def bins(self) -> int:
        """Number of bins."""
        return int(self.bin_tokens.shape[0])


def first_fit_decreasing(lengths: np.ndarray, ctx: int) -> FFDResult:
    """Pack with first-fit decreasing.

    Args:
        lengths: Token count per record, 1-D integers.
        ctx: Bin capacity in tokens.

    Returns:
        The :class:`FFDResult`; records longer than ``ctx`` or of 0 tokens are
        left out exactly as :func:`packer.plan.plan_bins` leaves them out.
    """
    lengths = check_lengths(lengths)
    ctx = check_int("ctx", ctx, 1)
    n = lengths.shape[0]
    bin_of = np.full(n, TOO_LONG, dtype=np.int64)
    bin_of[lengths == 0] = EMPTY
    packable = np.flatnonzero((lengths >= 1) & (lengths <= ctx))
    # Longest first; ties keep their position order.
    order = packable[np.argsort(-lengths[packable], kind="stable")]
    sizes = lengths[order].tolist()

    leaves = 1
    while leaves < max(1, len(sizes)):
        leaves <<= 1
    tree = [ctx] * (2 * leaves)  # tree[i] = most free space in the subtree of node i
    assigned = [0] * len(sizes)
    opened = 0
    for j, size in enumerate(sizes):
        node = 1
        while node < leaves:  # leftmost leaf with free space >= size
            node <<= 1
            if tree[node] < size:
                node += 1
        tree[node] -= size
        b = node - leaves
        assigned[j] = b
        if b >= opened:
            opened = b + 1
        node >>= 1
        while node:
            left = tree[2 * node]
            right = tree[2 * node + 1]
            best = left if left > right else right
            if tree[node] == best:
                break
            tree[node] = best
            node >>= 1

    bin_ids = np.array(assigned, dtype=np.int64)
    bin_of[order] = bin_ids
    bin_tokens = np.bincount(bin_ids, weights=lengths[order], minlength=opened)
    return FFDResult(bin_of=bin_of, bin_tokens=bin_tokens.astype(np.int64))
