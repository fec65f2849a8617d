"""``pack --lengths --plan-only`` against a plain-Python reference of the same step.

The reference dedupes ids with a Python set, lists rejects record by record
(:meth:`StageStats.error` / :meth:`StageStats.drop`) and builds the plan table from
Python lists; both sides write through :func:`curate.core.io.write_parquet`. The
columnar driver path must give the same bytes for ``plan.parquet`` and
``rejects.parquet`` and the same counts in ``stats.json``.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from curate.core.io import read_json, write_parquet
from curate.core.stats import StageStats
from packer.pack import pack
from packer.plan import plan_bins

CTX = 512


def _lengths_file(path, n: int, seed: int) -> pa.Table:
    """Repeated ids, null and missing sources, empty and too-long records, several row groups."""
    rng = np.random.default_rng(seed)
    ids = [f"s{seed}-{k}" for k in rng.integers(0, int(n * 0.8), n)]
    sources = [None if k == 3 else f"src{k}" for k in rng.integers(0, 4, n)]
    tokens = rng.integers(1, 400, n)
    tokens[rng.random(n) < 0.03] = 0
    tokens[rng.random(n) < 0.05] = CTX + 7
    table = pa.table({"id": ids, "source": pa.array(sources, pa.string()), "tokens": pa.array(tokens, pa.int32())})
    pq.write_table(table, path, row_group_size=n // 3)
    return table


def _reference(table: pa.Table, seed: int) -> tuple[pa.Table, StageStats]:
    ids, tokens = table["id"].to_pylist(), table["tokens"].to_pylist()
    sources = ["unknown" if s is None else s for s in table["source"].to_pylist()]
    stats, seen, cand = StageStats(), set(), []
    for i, (rid, src) in enumerate(zip(ids, sources)):
        stats.seen(src)
        if rid in seen:
            stats.error(rid, src, "duplicate_id", "id already seen earlier in the input")
        else:
            seen.add(rid)
            cand.append(i)
    plan = plan_bins(np.array([tokens[i] for i in cand]), CTX, seed=seed)
    for j in plan.too_long.tolist():
        i = cand[j]
        stats.drop(ids[i], sources[i], "too_long", f"{tokens[i]} tokens > ctx {CTX}")
    for j in plan.empty.tolist():
        stats.drop(ids[cand[j]], sources[cand[j]], "empty", "0 tokens")
    bins, rows = [], []
    for b in range(plan.bins):
        for j in plan.bin_members(b).tolist():
            bins.append(b)
            rows.append(cand[j])
            stats.kept(sources[cand[j]])
    stats.check()
    plan_table = pa.table({"bin": pa.array(bins, pa.int64()), "id": pa.array([ids[i] for i in rows], pa.string()),
                           "tokens": pa.array([tokens[i] for i in rows], pa.int32())})
    return plan_table, stats


@pytest.mark.parametrize(("seed", "workers"), [(0, 1), (3, 2)])  # 2: plan written by the background thread
def test_plan_only_bytes_equal_a_python_reference(tmp_path, seed: int, workers: int) -> None:
    table = _lengths_file(tmp_path / "lengths.parquet", 3000, seed)
    out = tmp_path / "out"
    stats = pack([], out=out, ctx=CTX, lengths=tmp_path / "lengths.parquet", plan_only=True, seed=seed,
                 workers=workers, plot=workers > 1)
    plan_table, ref = _reference(table, seed)
    write_parquet(tmp_path / "plan.parquet", plan_table)
    write_parquet(tmp_path / "rejects.parquet", ref.rejects_table())
    assert (out / "plan.parquet").read_bytes() == (tmp_path / "plan.parquet").read_bytes()
    assert (out / "rejects.parquet").read_bytes() == (tmp_path / "rejects.parquet").read_bytes()
    counts = ref.to_dict()
    assert read_json(out / "stats.json")["per_source"] == counts["per_source"] == stats["per_source"]
    assert (stats["records_in"], stats["records_packed"]) == (counts["records_in"], counts["records_out"])
    assert stats["dropped"] == counts["dropped"] and stats["errored"] == counts["errored"]
