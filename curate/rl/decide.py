"""``curate rl-filter`` on the driver, on columns: metrics, decisions, accounting and reports of every prompt at once.

The rules are those of :mod:`curate.rl.selection` (:func:`~curate.rl.selection.evaluate`
for one prompt); here they run on the Arrow table of all prompts with numpy: the
per-sample lists are flattened once (values and their row), counted per row with
``bincount``, and the thresholds of each source are looked up through the
dictionary codes of the ``source`` column. Nothing calls Python once per prompt
except the rejects (one row per dropped or errored prompt) and the kept records.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from curate.core.columns import as_array, counts_by_source, first_occurrences, rows, source_codes
from curate.core.stats import StageStats
from curate.rewards.monitor import BOX_FIGURES
from curate.rl.selection import METRICS, Thresholds, box_report

KEPT, DROPPED, ERRORED = 0, 1, 2
DUPLICATE = "duplicate_id"
DECISIONS = ("kept", "dropped", "errored")
_REASONS = ("", "unfiltered", "too_hard", "too_easy", "small_gap", "low_spread")
OUTPUT_COLUMNS = ("id", "source", "answer_type", "prompt_type", "n", "passes", "pass_at_1", "pass_at_n", "gap",
                  "mean_reward", "reward_std", "reward_sum", "decision", "reason")


def flat(column: pa.Array | pa.ChunkedArray) -> tuple[np.ndarray, np.ndarray]:
    """The values of a list column and the row each belongs to (nulls count as empty lists)."""
    arr = as_array(column)
    values = pc.list_flatten(arr)
    parents = pc.list_parent_indices(arr)
    return (np.asarray(values.to_numpy(zero_copy_only=False)),
            np.asarray(parents.to_numpy(zero_copy_only=False), dtype=np.int64))


def _per_code(names: list[str], default: Thresholds, per_source: Mapping[str, Thresholds]) -> dict[str, np.ndarray]:
    ths = [per_source.get(name, default) for name in names]
    return {"lo": np.array([t.band[0] for t in ths], float), "hi": np.array([t.band[1] for t in ths], float),
            "min_gap": np.array([t.min_gap for t in ths], float),
            "pass_threshold": np.array([t.pass_threshold for t in ths], float),
            "metric": np.array([METRICS.index(t.metric) for t in ths], np.int64),
            "inclusive": np.array([t.inclusive for t in ths], bool), "filter": np.array([t.filter for t in ths], bool),
            "min_std": np.array([-np.inf if t.min_reward_std is None else t.min_reward_std for t in ths], float)}


def mark_repeats(prompts: pa.Table) -> pa.Table:
    """Prompts whose id an earlier shard already had are errored (``duplicate_id``), found by one stable sort.

    A shard errors the repeats within itself as it reads them; this catches those across shards.
    """
    keep = first_occurrences(prompts.column("id"))
    if keep.all():
        return prompts
    repeat = pa.array(~keep)
    error = pc.if_else(repeat, pa.scalar(DUPLICATE, pa.string()), as_array(prompts.column("error")).cast(pa.string()))
    detail = pc.if_else(repeat, pa.scalar("id already seen in an earlier shard", pa.string()),
                        as_array(prompts.column("error_detail")).cast(pa.string()))
    out = prompts.set_column(prompts.schema.get_field_index("error"), "error", error)
    return out.set_column(out.schema.get_field_index("error_detail"), "error_detail", detail)


def decide(prompts: pa.Table, default: Thresholds, per_source: Mapping[str, Thresholds]) -> pa.Table:
    """Metrics and decision of every prompt (rows of ``prompts/*.parquet``), as :func:`~curate.rl.selection.evaluate`.

    Returns:
        ``prompts`` with ``n, passes, pass_at_1, pass_at_n, gap, mean_reward, reward_std,
        reward_sum, decision, reason`` set (``n`` and ``passes`` as int64).
    """
    size = prompts.num_rows
    codes, names = source_codes(prompts.column("source"), size)
    th = {k: v[codes] for k, v in _per_code(names, default, per_source).items()} if names else {}
    acc, acc_row = flat(prompts.column("accuracy"))
    rew, rew_row = flat(prompts.column("reward"))
    n = np.bincount(acc_row, minlength=size).astype(np.int64)
    passes = np.bincount(acc_row, weights=acc >= th["pass_threshold"][acc_row] if size else None,
                         minlength=size).astype(np.int64)
    with np.errstate(divide="ignore", invalid="ignore"):
        p1 = np.where(n <= 0, 0.0, np.where(passes >= n, 1.0, 1.0 - (n - passes) / np.maximum(n, 1)))
        pn = np.where((n > 0) & (passes > 0), 1.0, 0.0)
        nr = np.bincount(rew_row, minlength=size)
        total = np.bincount(rew_row, weights=rew, minlength=size)
        mean = np.where(nr > 0, total / np.maximum(nr, 1), 0.0)
        dev = np.bincount(rew_row, weights=(rew - mean[rew_row]) ** 2, minlength=size)
        std = np.where(nr > 0, np.sqrt(dev / np.maximum(nr, 1)), 0.0)
    total = np.where(nr > 0, total, 0.0)
    gap = pn - p1
    err = as_array(prompts.column("error")).cast(pa.string())
    errored = pc.fill_null(pc.greater(pc.utf8_length(err), 0), False).to_numpy(zero_copy_only=False)
    reason_code = np.zeros(size, np.int8)
    decision = np.full(size, KEPT, np.int8)
    if size:
        value = np.choose(th["metric"], [mean, total, p1])
        below = np.where(th["inclusive"], value < th["lo"], value <= th["lo"])
        above = np.where(th["inclusive"], value > th["hi"], value >= th["hi"])
        small = gap < th["min_gap"]
        flat_rewards = ~(std > th["min_std"])
        filt = th["filter"]
        inside = filt & ~below & ~above
        rules = [~filt, filt & below, filt & ~below & above, inside & small, inside & ~small & flat_rewards]
        for code, mask in zip((1, 2, 3, 4, 5), rules):
            reason_code[mask & ~errored] = code
        decision[(reason_code >= 2) & ~errored] = DROPPED
        decision[errored] = ERRORED
    fixed = pa.DictionaryArray.from_arrays(pa.array(reason_code), pa.array(_REASONS)).cast(pa.string())
    first = pc.list_element(pc.split_pattern(pc.fill_null(err, ""), ":", max_splits=1), 0)
    reason = pc.if_else(pa.array(errored), first, fixed)
    labels = pa.DictionaryArray.from_arrays(pa.array(decision), pa.array(DECISIONS)).cast(pa.string())
    out = prompts
    for name, col in (("n", pa.array(n)), ("passes", pa.array(passes)), ("pass_at_1", pa.array(p1)),
                      ("pass_at_n", pa.array(pn)), ("gap", pa.array(gap)), ("mean_reward", pa.array(mean)),
                      ("reward_std", pa.array(std)), ("reward_sum", pa.array(total)),
                      ("decision", labels), ("reason", reason)):
        at = out.schema.get_field_index(name)
        out = out.set_column(at, name, col) if at >= 0 else out.append_column(name, col)
    return out


def account(decided: pa.Table) -> StageStats:
    """The selection's counts: every prompt seen, kept ones out, the others dropped or errored with their reason."""
    stats = StageStats()
    codes, names = source_codes(decided.column("source"), decided.num_rows)
    decision = pc.index_in(as_array(decided.column("decision")), pa.array(DECISIONS)).to_numpy(zero_copy_only=False)
    stats.seen_many(counts_by_source(codes, names))
    stats.kept_many(counts_by_source(codes, names, decision == KEPT))
    ids, sources = as_array(decided.column("id")), as_array(decided.column("source")).cast(pa.string())
    reasons = as_array(decided.column("reason"))
    listed: list[np.ndarray] = []  # the rows of the rejects, in the order they are added
    for kind, code in (("dropped", DROPPED), ("errored", ERRORED)):
        picked = decision == code
        if not picked.any():
            continue
        for reason in sorted(set(rows(reasons, np.flatnonzero(picked)))):
            idx = np.flatnonzero(picked & pc.equal(reasons, reason).to_numpy(zero_copy_only=False))
            if kind == "dropped":
                p1, pn, mean = (decided.column(c).to_numpy()[idx] for c in ("pass_at_1", "pass_at_n", "mean_reward"))
                details = [f"pass@1 {a:.3f}, pass@N {b:.3f}, mean reward {m:.3f}" for a, b, m in zip(p1, pn, mean)]
            else:
                given = rows(as_array(decided.column("error_detail")), idx)
                details = [d or reason for d in given]
            stats.reject_many(kind, reason, rows(ids, idx), rows(sources, idx), details)
            listed.append(idx)
    if listed:  # rejects.parquet lists the prompts in their input order, as every stage does
        order = np.argsort(np.concatenate(listed), kind="stable")
        stats.rejects = [stats.rejects[i] for i in order.tolist()]
    return stats


def _mean(values: np.ndarray) -> float | None:
    return float(np.mean(values)) if len(values) else None


def _report(idx: np.ndarray, fidx: dict[str, np.ndarray], cols: dict[str, Any]) -> dict[str, Any]:
    """Monitoring figures of the prompts ``idx`` (as :func:`~curate.rl.selection.source_report`).

    ``fidx[key]`` are the positions of those prompts' samples in the flattened list column ``key``,
    in row order.
    """
    decision, reasons = cols["decision"][idx], cols["reason"][idx]
    scored_rows = decision != ERRORED
    scored = idx[scored_rows]

    def by_reason(code: int) -> dict[str, int]:
        picked = reasons[decision == code]
        values, counts = np.unique(picked, return_counts=True) if len(picked) else ([], [])
        return {str(v): int(c) for v, c in zip(values, counts)}

    def samples(key: str) -> np.ndarray:
        values, row = cols[key]
        at = fidx[key]
        return values[at[cols["scored"][row[at]]]]

    chars, truncated, formats, refl, accuracy = (samples(k) for k in ("response_chars", "truncated", "format",
                                                                       "reflection", "accuracy"))
    refl = refl.astype(bool)
    box_values, box_row = cols["box"]
    box_at = fidx["box"]
    boxes = box_values[box_at[cols["scored"][box_row[box_at]]]]
    return {
        "prompts_in": int(len(idx)), "kept": int((decision == KEPT).sum()),
        "dropped": by_reason(DROPPED), "errored": by_reason(ERRORED),
        "mean_reward": _mean(cols["mean_reward"][scored]), "mean_pass_at_1": _mean(cols["pass_at_1"][scored]),
        "mean_pass_at_n": _mean(cols["pass_at_n"][scored]),
        "responses": len(chars), "response_chars_mean": _mean(chars),
        "response_chars_p95": float(np.percentile(chars, 95)) if len(chars) else None,
        "truncation_rate": _mean(truncated.astype(float)), "format_failure_rate": _mean((formats < 1.0).astype(float)),
        "reflection_rate": _mean(refl.astype(float)),
        "truncated": int(truncated.astype(bool).sum()),
        "accuracy_with_reflection": _mean(accuracy[refl]), "accuracy_without_reflection": _mean(accuracy[~refl]),
        "box": box_report(boxes),
    }


def _box_rows(decided: pa.Table) -> tuple[np.ndarray, np.ndarray]:
    """The ``box`` column as one row of figures per answer and the prompt each belongs to (no column: none)."""
    width = len(BOX_FIGURES)
    if "box" not in decided.column_names:
        return np.zeros((0, width)), np.zeros(0, np.int64)
    per_answer = pc.list_flatten(as_array(decided.column("box")))
    parents = np.asarray(pc.list_parent_indices(as_array(decided.column("box"))).to_numpy(zero_copy_only=False),
                         dtype=np.int64)
    values = np.asarray(pc.list_flatten(per_answer).to_numpy(zero_copy_only=False), dtype=float)
    return values.reshape(-1, width), parents


def _groups(codes: np.ndarray, groups: int) -> tuple[np.ndarray, np.ndarray]:
    """Positions sorted by code (stable: row order within a code) and where each code starts and ends."""
    order = np.argsort(codes, kind="stable")
    return order, np.searchsorted(codes[order], np.arange(groups + 1))


def reports(decided: pa.Table, sources: list[str]) -> tuple[dict[str, Any], dict[str, dict[str, Any]]]:
    """Monitoring figures over all prompts and per source (``sources`` may name sources without prompts).

    Each source is one slice of a stable sort by source code, so the work is one pass over
    the columns whatever the number of sources.
    """
    size = decided.num_rows
    codes, names = source_codes(decided.column("source"), size)
    decision = pc.index_in(as_array(decided.column("decision")), pa.array(DECISIONS)).to_numpy(zero_copy_only=False)
    cols: dict[str, Any] = {"decision": decision, "scored": decision != ERRORED,
                            "reason": np.asarray(as_array(decided.column("reason")).to_numpy(zero_copy_only=False),
                                                 dtype=object)}
    for key in ("mean_reward", "pass_at_1", "pass_at_n"):
        cols[key] = decided.column(key).to_numpy()
    lists = ("response_chars", "truncated", "format", "reflection", "accuracy", "box")
    for key in lists[:-1]:
        cols[key] = flat(decided.column(key))
    cols["box"] = _box_rows(decided)
    overall = _report(np.arange(size), {k: np.arange(len(cols[k][0])) for k in lists}, cols)
    order, bounds = _groups(codes, len(names))
    forders = {k: _groups(codes[cols[k][1]], len(names)) for k in lists}
    index = {name: i for i, name in enumerate(names)}
    per = {}
    for s in sources:
        k = index.get(s)
        if k is None:
            per[s] = _report(np.zeros(0, np.int64), {key: np.zeros(0, np.int64) for key in lists}, cols)
            continue
        fidx = {key: fo[fb[k]:fb[k + 1]] for key, (fo, fb) in forders.items()}
        per[s] = _report(order[bounds[k]:bounds[k + 1]], fidx, cols)
    return overall, per


def output_table(decided: pa.Table) -> pa.Table:
    """The columns of ``prompts.parquet``."""
    return decided.select(list(OUTPUT_COLUMNS))
