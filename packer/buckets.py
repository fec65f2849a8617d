"""The length histogram side of the planner: input checks, grouping by length, fill patterns.

:func:`fill_patterns` is the greedy longest-first fill of :mod:`packer.plan`, run on
the histogram of token lengths (one entry per distinct length) instead of on
records; the radix grouping and the seeded in-group shuffle give the order in
which records of each length take their slots.
"""

from __future__ import annotations

from bisect import bisect_right
from typing import Any

import numpy as np

from curate.core.errors import UserError
from curate.core.validate import integer


def check_int(name: str, value: Any, minimum: int) -> int:
    """``value`` as an int, or a UserError naming ``name`` when it is not an integer >= ``minimum``."""
    if value is None:
        raise UserError(f"{name} must be an integer, got None")
    return integer(name, value, minimum)


def check_lengths(lengths: Any, *, keep_int: bool = False) -> np.ndarray:
    """Token lengths as a 1-D int64 array, or a UserError naming the first bad entry.

    With ``keep_int``, an int32 or int64 array is checked and returned as it is (no int64 copy).
    """
    arr = np.asarray(lengths)
    if arr.ndim != 1:
        raise UserError(f"lengths must be a 1-D array of token counts, got shape {arr.shape}")
    if arr.size == 0:
        return np.zeros(0, dtype=np.int64)
    if arr.dtype.kind == "f":
        bad = ~np.isfinite(arr) | (arr != np.floor(arr))
        if bad.any():
            i = int(np.flatnonzero(bad)[0])
            raise UserError(f"record {i}: token count {arr[i]!r} is not an integer")
    elif arr.dtype.kind not in "iu":
        raise UserError(f"lengths must be integer token counts, got dtype {arr.dtype}")
    if arr.dtype == np.uint64 and int(arr.max()) > np.iinfo(np.int64).max:
        raise UserError("token counts do not fit in int64")
    if not (keep_int and arr.dtype in (np.int32, np.int64)):
        arr = arr.astype(np.int64, copy=False)
    neg = arr < 0
    if neg.any():
        i = int(np.flatnonzero(neg)[0])
        raise UserError(f"record {i}: negative token count {int(arr[i])}; token counts are >= 0")
    return arr


def length_histogram(key: np.ndarray) -> np.ndarray:
    """Records per key value (index = value), int64, at least one entry."""
    if key.size == 0:
        return np.zeros(1, dtype=np.int64)
    return np.bincount(key).astype(np.int64, copy=False)



def fill_patterns(
    vals: list[int], cnts: list[int], ctx: int
) -> tuple[list[list[int]], list[list[int]], list[int]]:
    """Greedy longest-first fill on the length histogram, one pattern at a time.

    Args:
        vals: Sorted distinct lengths (all in 1..ctx).
        cnts: Records per length.
        ctx: Capacity.

    Returns:
        For each pattern: its lengths (decreasing), copies of each, and how many
        bins use it. Patterns come in the order the greedy made them.
    """
    d = len(vals)
    cnt = [0] + list(cnts)  # rank r (1-based) ↔ vals[r - 1]; rank 0 is "none"
    # parent[r] leads to the largest rank <= r that still has records (union-find).
    parent = list(range(d + 1))
    pat_lens: list[list[int]] = []
    pat_mults: list[list[int]] = []
    pat_reps: list[int] = []
    top = d
    while True:
        # Largest rank still available.
        root = top
        while parent[root] != root:
            root = parent[root]
        top = root
        if top == 0:
            break
        room = ctx
        hi = top  # ranks 1..hi may still be chosen for this bin
        ranks: list[int] = []
        mults: list[int] = []
        while hi > 0 and room > 0:
            x = bisect_right(vals, room, 0, hi)
            root = x
            while parent[root] != root:
                root = parent[root]
            while parent[x] != root:  # path compression
                parent[x], x = root, parent[x]
            if root == 0:
                break
            length = vals[root - 1]
            take = min(cnt[root], room // length)
            ranks.append(root)
            mults.append(take)
            room -= take * length
            hi = root - 1
        reps = cnt[ranks[0]] // mults[0]
        for r, m in zip(ranks, mults):
            if cnt[r] // m < reps:
                reps = cnt[r] // m
        for r, m in zip(ranks, mults):
            cnt[r] -= reps * m
            if cnt[r] == 0:
                parent[r] = r - 1
        pat_lens.append([vals[r - 1] for r in ranks])
        pat_mults.append(mults)
        pat_reps.append(reps)
    return pat_lens, pat_mults, pat_reps


def stable_group_order(values: np.ndarray, max_value: int) -> np.ndarray:
    """Stable argsort of non-negative integers below 2**32 (LSD radix, 16-bit digits)."""
    if max_value < 1 << 16:
        return np.argsort(values.astype(np.uint16, copy=False), kind="stable")
    low = np.argsort((values & 0xFFFF).astype(np.uint16), kind="stable")
    high = np.argsort((values[low] >> 16).astype(np.uint16), kind="stable")
    return low[high]


def shuffle_groups(order: np.ndarray, counts: np.ndarray, rng: np.random.Generator) -> None:
    """Shuffle, in place, each consecutive run of ``counts[i]`` entries."""
    ends = np.cumsum(counts).tolist()
    start = 0
    for end in ends:
        if end - start > 1:
            rng.shuffle(order[start:end])
        start = end

