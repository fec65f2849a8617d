"""Hash-bucket bin packing: token lengths → bins of at most ``ctx`` tokens.

The planner never looks at records one by one. It groups records into buckets
by exact token length (a histogram with at most ``ctx`` distinct lengths) and
packs the *counts*:

1. A bin is opened with the longest remaining length and filled greedily with
   the longest remaining length that still fits (best fit, longest first),
   taking as many copies of a length at once as fit. The result is a *pattern*,
   for example ``{6000: 1, 2100: 1, 92: 1}``.
2. The same pattern is what the greedy would choose again as long as every
   length in it still has enough records, so it is repeated ``k`` times in one
   step, ``k = min(count[l] // copies[l])``. A few thousand patterns cover
   millions of bins.
3. Records are then put into slots with vectorised numpy. The bins of the
   patterns ("canonical" bins, pattern after pattern) get their output position
   from a seeded permutation, so bins of similar shape do not cluster. The
   records of each length are put in a seeded random order, and every
   (pattern, length) takes the next records of its length and writes them in one
   scatter into its column of slots in all the bins of that pattern.

Filling one bin at a time with the longest record that fits chooses the same
bins as first-fit decreasing (FFD's first open bin receives exactly that
sequence, then its second bin the same on what is left), so the plan has FFD's
quality at a small fraction of its cost: O(n) numpy work plus a Python loop over
patterns, not over records.

Conventions:

* A record longer than ``ctx`` is never truncated: ``bin_of == -1`` and it is
  listed in ``PackPlan.too_long``.
* A record of 0 tokens cannot be a training sample (it would give an empty
  segment in ``cu_seqlens``): ``bin_of == -2`` and it is listed in
  ``PackPlan.empty``. A negative length is corrupt input and raises
  :class:`curate.core.errors.UserError`.
* Within a bin, records are ordered by decreasing length (the order the greedy
  chose them); with varlen attention the order inside a bin does not matter.
* The plan depends on ``(lengths, ctx, seed)`` only: ``workers`` changes speed,
  never the result. Different seeds give the same multiset of bin *shapes*
  (sorted token counts per bin) in a different bin order, with different records
  of equal length swapped between slots.

This module also holds the two baselines the plan is measured against:
random batches padded to their longest (:func:`padding_reduction`, reported
by ``curate pack``) and plain first-fit decreasing
(:func:`first_fit_decreasing`, used by the tests and ``benchmarks/bench_plan.py``).
"""

from __future__ import annotations

import functools
import math
from bisect import bisect_right
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, Callable

import numpy as np

from curate.core.errors import UserError
from curate.core.validate import integer
from packer.config import MAX_CTX

TOO_LONG = -1
"""``bin_of`` value of a record longer than ``ctx``."""
EMPTY = -2
"""``bin_of`` value of a record of 0 tokens."""


_PARALLEL_MIN = 1 << 20
_PIECE = 1 << 14


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


@dataclass(frozen=True, eq=False)
class PackPlan:
    """Which records go into which bin, in which order.

    Attributes:
        ctx: Bin capacity in tokens.
        seed: Seed the plan was made with.
        records: Number of records planned (packed or not).
        bin_offsets: int64, ``bins + 1`` values: bin ``b`` holds
            ``members[bin_offsets[b]:bin_offsets[b + 1]]``.
        members: int64 record indices, bin after bin, in order within each bin.
        bin_tokens: int64 used tokens per bin.
        too_long: int64 indices of records longer than ``ctx``, ascending.
        empty: int64 indices of records of 0 tokens, ascending.
        lower_bound_bins: ``ceil(sum of packable tokens / ctx)``.
        packed_tokens: Sum of the tokens of the packed records.
    """

    ctx: int
    seed: int
    records: int
    bin_offsets: np.ndarray
    members: np.ndarray
    bin_tokens: np.ndarray
    too_long: np.ndarray
    empty: np.ndarray
    lower_bound_bins: int
    packed_tokens: int
    workers: int = 1

    @functools.cached_property
    def bin_of(self) -> np.ndarray:
        """int64 per record: its bin, ``TOO_LONG`` (-1) or ``EMPTY`` (-2) (made on first use)."""
        bin_of = np.full(self.records, TOO_LONG, dtype=np.int64)
        bin_of[self.empty] = EMPTY
        _scatter_bins(bin_of, self.members, self.bin_offsets, self.workers)
        return bin_of

    @property
    def bins(self) -> int:
        """Number of bins."""
        return int(self.bin_tokens.shape[0])

    @property
    def order(self) -> np.ndarray:
        """Alias of ``members``: packed record indices in output order."""
        return self.members

    @property
    def records_packed(self) -> int:
        """Number of records placed in a bin."""
        return int(self.members.shape[0])

    @property
    def bin_sizes(self) -> np.ndarray:
        """Number of records per bin (int64)."""
        return np.diff(self.bin_offsets)

    @property
    def fill_ratio(self) -> float:
        """Packed tokens / (bins × ctx); 0.0 when there is no bin."""
        if self.bins == 0:
            return 0.0
        return self.packed_tokens / (self.bins * self.ctx)

    @property
    def padding_tokens(self) -> int:
        """Unused tokens over all bins: ``bins × ctx − packed tokens``."""
        return self.bins * self.ctx - self.packed_tokens

    def bin_members(self, b: int) -> np.ndarray:
        """Record indices of bin ``b``, in order."""
        return self.members[self.bin_offsets[b] : self.bin_offsets[b + 1]]

    def stats(self) -> dict[str, Any]:
        """JSON-ready summary: bins, lower bound, fill ratio and counts."""
        return {
            "ctx": self.ctx,
            "seed": self.seed,
            "records_packed": self.records_packed,
            "too_long": int(self.too_long.shape[0]),
            "empty": int(self.empty.shape[0]),
            "bins": self.bins,
            "lower_bound_bins": self.lower_bound_bins,
            "bins_over_lower_bound": (
                self.bins / self.lower_bound_bins if self.lower_bound_bins else 1.0
            ),
            "packed_tokens": self.packed_tokens,
            "fill_ratio": self.fill_ratio,
        }


def plan_bins(lengths: np.ndarray, ctx: int, *, seed: int = 0, workers: int = 1) -> PackPlan:
    """Pack records of the given token lengths into bins of at most ``ctx`` tokens.

    Args:
        lengths: Token count per record (index = record position); integers
            (integral floats are accepted), 1-D.
        ctx: Bin capacity in tokens (>= 1).
        seed: Seed for the bin order and for which record of a given length
            takes which slot.
        workers: Threads for the parallel parts (the scatters of record indices
            into slots and of bin ids into ``bin_of``); the plan is identical for
            any value.

    Returns:
        The :class:`PackPlan`.

    Raises:
        UserError: On a bad ``ctx``, ``seed`` or ``workers``, or on lengths that
            are not 1-D non-negative integers.
    """
    lengths = check_lengths(lengths, keep_int=True)  # int32 counts stay int32: comparisons and keys only
    ctx = check_int("ctx", ctx, 1)
    if ctx > MAX_CTX:
        raise UserError(f"ctx {ctx} is larger than the supported maximum {MAX_CTX}")
    workers = check_int("workers", workers, 1)
    seed = check_int("seed", seed, 0)
    n = lengths.shape[0]

    # Bucket key: the length, or 0 for a record that cannot be packed (too long
    # or empty). Records grouped by key, in a seeded random order within a key.
    too_long = np.flatnonzero(lengths > ctx)
    if ctx < 1 << 16:
        key = lengths.astype(np.uint16)
        key[too_long] = 0
    else:
        key = np.where(lengths <= ctx, lengths, 0) if too_long.size else lengths
    counts = length_histogram(key)
    vals = np.flatnonzero(counts[1:]) + 1
    cnts = counts[vals]
    total = int((vals * cnts).sum())
    order = stable_group_order(key, int(vals[-1]) if vals.size else 0)
    del key
    order = order[int(counts[0]) if counts.size else 0 :]
    shuffle_groups(order, cnts, np.random.default_rng([seed, 1]))

    pat_lens, pat_mults, pat_reps = fill_patterns(vals.tolist(), cnts.tolist(), ctx)
    members, bin_offsets, bin_tokens = _place(
        order, vals, cnts, pat_lens, pat_mults, pat_reps, np.random.default_rng([seed, 0]), workers
    )
    del order

    empty = np.flatnonzero(lengths == 0)
    return PackPlan(
        ctx=ctx,
        seed=seed,
        records=n,
        bin_offsets=bin_offsets,
        members=members,
        bin_tokens=bin_tokens,
        too_long=too_long.astype(np.int64),
        empty=empty.astype(np.int64),
        lower_bound_bins=-(-total // ctx),
        packed_tokens=total,
        workers=workers,
    )


# ---------------------------------------------------------------------------
# Internals: the length histogram, the fill patterns, the placement
# ---------------------------------------------------------------------------


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


def _place(
    order: np.ndarray,
    vals: np.ndarray,
    cnts: np.ndarray,
    pat_lens: list[list[int]],
    pat_mults: list[list[int]],
    pat_reps: list[int],
    rng: np.random.Generator,
    workers: int,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Lay the bins of the patterns out in seeded random order and fill them.

    Canonical bins are the patterns' bins in pattern order; output bin ``i`` is
    canonical bin ``perm[i]``. ``order`` holds record indices grouped by length
    (ascending), each group in seeded random order; every (pattern, length)
    takes the next records of its length and writes them, in one vectorised
    scatter, to its column of slots in all the bins of the pattern.

    Returns:
        ``(members, bin_offsets, bin_tokens)`` in output order.
    """
    n_pat = len(pat_reps)
    pat_size = np.array([sum(m) for m in pat_mults], dtype=np.int64)
    pat_tok = np.array(
        [sum(x * m for x, m in zip(ls, ms)) for ls, ms in zip(pat_lens, pat_mults)],
        dtype=np.int64,
    )
    reps = np.array(pat_reps, dtype=np.int64)
    n_bins = int(reps.sum())
    perm = rng.permutation(n_bins)
    out_pat = np.repeat(np.arange(n_pat, dtype=np.int64), reps)[perm]
    sizes = pat_size[out_pat]
    offsets = np.zeros(n_bins + 1, dtype=np.int64)
    np.cumsum(sizes, out=offsets[1:])
    del sizes
    start = np.empty(n_bins, dtype=np.int64)  # output offset of each canonical bin
    start[perm] = offsets[:-1]
    del perm

    # One task per (pattern, length), cut into pieces of at most _PIECE bins:
    # (first canonical bin, bins, column in the bin, copies, first record in order).
    group_start = np.zeros(vals.shape[0], dtype=np.int64)
    np.cumsum(cnts[:-1], out=group_start[1:])
    next_of = dict(zip(vals.tolist(), group_start.tolist()))
    tasks: list[tuple[int, int, int, int, int]] = []
    first = 0
    for ls, ms, k in zip(pat_lens, pat_mults, pat_reps):
        col = 0
        for length, m in zip(ls, ms):
            src = next_of[length]
            for lo in range(0, k, _PIECE):
                bins = min(_PIECE, k - lo)
                tasks.append((first + lo, bins, col, m, src + lo * m))
            next_of[length] = src + k * m
            col += m
        first += k

    members = np.empty(order.shape[0], dtype=np.int64)

    def run(part: list[tuple[int, int, int, int, int]]) -> None:
        for b0, bins, col, m, src in part:
            starts = start[b0 : b0 + bins]
            recs = order[src : src + bins * m]
            if m == 1:
                members[starts + col] = recs
            else:
                members[(starts[:, None] + np.arange(col, col + m)).ravel()] = recs

    if workers <= 1 or order.shape[0] < _PARALLEL_MIN:
        run(tasks)
    else:
        with ThreadPoolExecutor(workers) as pool:
            list(pool.map(run, [tasks[i::workers] for i in range(workers)]))
    return members, offsets, pat_tok[out_pat]


def _scatter_bins(out: np.ndarray, members: np.ndarray, offsets: np.ndarray, workers: int) -> None:
    """``out[members[j]] = bin of slot j``, a piece of bins at a time (no array of every slot's bin id)."""
    n_bins = offsets.shape[0] - 1
    step = _PIECE * 4

    def part(lo: int, hi: int) -> None:
        for b0 in range(lo, hi, step):
            b1 = min(hi, b0 + step)
            bins = np.repeat(np.arange(b0, b1, dtype=np.int64), np.diff(offsets[b0 : b1 + 1]))
            out[members[offsets[b0] : offsets[b1]]] = bins

    _split(n_bins, workers, part)


def _split(n: int, workers: int, fn: Callable[[int, int], Any]) -> None:
    """Run ``fn(lo, hi)`` over pieces of ``range(n)``, dealt to ``workers`` threads."""
    if workers <= 1 or n < _PARALLEL_MIN:
        fn(0, n)
        return
    pieces = [(lo, min(n, lo + _PIECE * 4)) for lo in range(0, n, _PIECE * 4)]

    def run(part: list[tuple[int, int]]) -> None:
        for lo, hi in part:
            fn(lo, hi)

    with ThreadPoolExecutor(workers) as pool:
        list(pool.map(run, [pieces[i::workers] for i in range(workers)]))


# ---------------------------------------------------------------------------
# Baseline 1: random batches padded to their longest (reported by `curate pack`)
# ---------------------------------------------------------------------------


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


# ---------------------------------------------------------------------------
# Baseline 2: plain first-fit decreasing (tests and benchmarks/bench_plan.py)
# ---------------------------------------------------------------------------


# Records are taken from the longest to the shortest (ties by position) and each
# goes into the first bin, in opening order, that still has room; a new bin is
# opened when none has. "First bin with room" is found with a max segment tree
# over the bins' free space, so one record costs O(log n) instead of a scan over
# all open bins. It works record by record in plain Python, as a straightforward
# packer would, and is kept only to measure plan_bins against.


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
