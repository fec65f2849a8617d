"""``curate verify`` on a compute-balanced pack: the step and rank of every sequence.

Checked, naming each problem:

* every sequence's JSON has ``step``, ``rank``, ``micro`` and ``cost`` within range,
  and ``dp``, ``micro_batches``, ``steps`` equal to the run's;
* no (step, rank, micro-batch) slot is used twice; every step but the last is full
  (unless records errored while writing);
* a tar holds the sequences of one rank, and keys run rank-major (rank, then
  step, then micro-batch), the order the loader relies on;
* ``cost`` equals the cost model of ``stats.json`` recomputed from the JSON's
  tokens and image grids, and ``plan.parquet``'s ``step``, ``rank`` and ``cost`` agree.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import numpy as np
import pyarrow.parquet as pq

from packer.cost import CostModel


@dataclass
class StepRecorder:
    """Collects the step fields of every sequence while ``verify`` reads the shards."""

    settings: dict[str, Any]
    rows: list[tuple[str, int, int, int, int, float, float]] = field(default_factory=list)
    model: CostModel = field(init=False)

    def __post_init__(self) -> None:
        self.model = CostModel(**self.settings["cost_model"])

    def add(self, shard: str, meta: dict[str, Any], where: str, problem: Callable[[str], None]) -> None:
        """Record one sequence (``meta`` is its JSON); report missing or inconsistent fields."""
        missing = [k for k in ("step", "rank", "micro", "cost", "dp", "micro_batches", "steps") if k not in meta]
        if missing:
            problem(f"{where}: compute-balanced pack but the JSON has no {', '.join(missing)}")
            return
        dp, m = self.settings["dp"], self.settings["micro_batches"]
        if (meta["dp"], meta["micro_batches"]) != (dp, m):
            problem(f"{where}: dp {meta['dp']} x {meta['micro_batches']} micro-batches, the run used {dp} x {m}")
        tokens = np.asarray(meta.get("tokens", []), dtype=np.int64)
        grids = np.asarray(meta.get("image_grids", []), dtype=np.int64).reshape(-1, 3)
        per_sample = np.asarray(meta.get("images_per_sample", []), dtype=np.int64)
        if grids.shape[0] != int(per_sample.sum()) or per_sample.shape[0] != tokens.shape[0]:
            return  # reported by the sequence check
        owner = np.repeat(np.arange(tokens.shape[0]), per_sample)
        expect = float(self.model.sample_costs(tokens, grids.prod(axis=1), owner).sum())
        self.rows.append((shard, int(meta["key"]), int(meta["step"]), int(meta["rank"]), int(meta["micro"]),
                          float(meta["cost"]), expect))

    def check(self, stats: dict[str, Any], plan_path: Path, errored: bool, problem: Callable[[str], None]) -> None:
        """Check the whole pack once every sequence was added."""
        dp, m = self.settings["dp"], self.settings["micro_batches"]
        steps = int((stats.get("balance") or {}).get("steps", -1))
        if not self.rows:
            return
        shard, key, step, rank, micro, cost, expect = (np.asarray(c) for c in zip(*self.rows))
        bad = (step < 0) | (step >= steps) | (rank < 0) | (rank >= dp) | (micro < 0) | (micro >= m)
        for i in np.flatnonzero(bad)[:5].tolist():
            problem(f"{shard[i]}:{key[i]:010d}: step {step[i]}, rank {rank[i]}, micro-batch {micro[i]} out of range "
                    f"({steps} steps, dp {dp}, {m} micro-batches)")
        if bad.any():
            return
        slot = (step * dp + rank) * m + micro
        uniq, counts = np.unique(slot, return_counts=True)
        if (counts > 1).any():
            problem(f"{int((counts > 1).sum())} (step, rank, micro-batch) slots hold more than one sequence")
        per_step = np.bincount(step, minlength=steps)
        short = np.flatnonzero(per_step[:-1] < dp * m)
        if short.size and not errored:
            problem(f"{short.size} steps before the last hold fewer than {dp * m} sequences, e.g. step {int(short[0])}")
        for name in np.unique(shard).tolist():
            ranks = np.unique(rank[shard == name])
            if ranks.size > 1:
                problem(f"{name} holds sequences of ranks {ranks.tolist()[:4]}; a tar must hold one rank")
        order = np.argsort(key, kind="stable")
        major = (rank[order] * steps + step[order]) * m + micro[order]
        if (np.diff(major) <= 0).any():
            problem("sequence keys do not run rank-major (rank, then step, then micro-batch)")
        off = ~np.isclose(cost, expect, rtol=1e-9, atol=0.0)
        for i in np.flatnonzero(off)[:5].tolist():
            problem(f"{shard[i]}:{key[i]:010d}: cost {cost[i]:.6g}, the cost model gives {expect[i]:.6g}")
        if plan_path.exists():
            self._check_plan(plan_path, key, step, rank, cost, problem)

    @staticmethod
    def _check_plan(plan_path: Path, key: np.ndarray, step: np.ndarray, rank: np.ndarray, cost: np.ndarray,
                    problem: Callable[[str], None]) -> None:
        table = pq.read_table(plan_path)
        need = {"bin", "step", "rank", "cost"}
        if not need <= set(table.column_names):
            problem(f"plan.parquet lacks {', '.join(sorted(need - set(table.column_names)))} for a balanced pack")
            return
        bins = table.column("bin").to_numpy()
        first = np.unique(bins, return_index=True)[1]
        ub = bins[first]
        pos = np.searchsorted(ub, key)
        found = (pos < ub.size) & (ub[np.minimum(pos, ub.size - 1)] == key)
        if not found.all():
            problem(f"{int((~found).sum())} sequences have no bin in plan.parquet")
        rows = first[pos[found]]
        same = ((table.column("step").to_numpy()[rows] == step[found])
                & (table.column("rank").to_numpy()[rows] == rank[found])
                & np.isclose(table.column("cost").to_numpy()[rows], cost[found], rtol=1e-12))
        if not same.all():
            problem(f"{int((~same).sum())} sequences disagree with plan.parquet on step, rank or cost")
