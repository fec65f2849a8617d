"""``curate rl-filter``, step 2 (on the driver): Pass@N / Pass@1 selection and per-source monitoring.

For a prompt with ``n`` scored samples of which ``c`` pass (accuracy ≥ the pass
threshold), the unbiased estimator of pass@k is ``1 − C(n−c, k) / C(n, k)``:
pass@1 = c/n and pass@N = 1 if c > 0 else 0.

A prompt is kept when its metric (``mean_reward`` by default) lies inside the
band — strictly, ``lo < m < hi``, as the LLaVA-OneVision-1.5-RL filter —,
``pass@N − pass@1 ≥ min_gap`` and, when ``min_reward_std`` is set, the spread of
its rewards is above it (``--min-reward-std 0``: DAPO's dynamic sampling, std > 0).
Otherwise it is dropped as ``too_hard`` (m ≤ lo), ``too_easy`` (m ≥ hi),
``small_gap`` or ``low_spread``. Prompts whose generation failed are
errored, not dropped.

Per-source thresholds come from a YAML or JSON file::

    default:                      # overrides the built-in defaults, below the CLI flags
      band: [0.0, 0.6]
    sources:
      chart_qa: {band: [0.1, 0.9], min_gap: 0.2}
      geometry3k: {filter: false}                 # keep every prompt of this source
      refcoco: {metric: reward_sum, band: [2, 10], inclusive: true, pass_threshold: 0.5}

The last line is V-Triune's perception rule: the sum of IoU rewards over the
samples within [2, 10]. Metrics: ``mean_reward``, ``reward_sum``, ``pass_at_1``.
"""

from __future__ import annotations

import json
import math
import os
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np

from curate.core.errors import UserError
from curate.rewards.monitor import BOX_FIGURES

METRICS = ("mean_reward", "reward_sum", "pass_at_1")
DEFAULT_BAND = (0.0, 0.6)
CLI = "command-line thresholds"  #: where the flags' thresholds are named in messages


@dataclass(frozen=True)
class Thresholds:
    """Selection settings for one source."""

    band: tuple[float, float] = DEFAULT_BAND
    min_gap: float = 0.0
    pass_threshold: float = 1.0
    metric: str = "mean_reward"
    inclusive: bool = False
    filter: bool = True
    #: Keep only prompts whose samples' reward spread (population std) is strictly above this; None: no such rule.
    #: 0 is DAPO's dynamic sampling (a group whose rewards are all equal teaches GRPO nothing).
    min_reward_std: float | None = None

    def check(self, where: str) -> Thresholds:
        """Validate; raise a one-line UserError naming ``where``."""
        lo, hi = self.band
        if not lo < hi and not (self.inclusive and lo <= hi):
            raise UserError(f"{where}: band must have lo < hi, got {list(self.band)}")
        if self.metric not in METRICS:
            raise UserError(f"{where}: metric must be one of {', '.join(METRICS)}, got {self.metric!r}")
        flags = where == CLI  # the flags' names on the command line, the file's keys otherwise
        top = math.inf if self.metric == "reward_sum" else 1.0  # rewards and pass@1 lie in [0, 1]; a sum over samples
        empty = (lo > top or hi < 0.0) if self.inclusive else (lo >= top or hi <= 0.0)  # no value of the metric is in
        if empty:
            raise UserError(f"{where}: {'--band' if flags else 'band'} {lo:g},{hi:g} holds no value {self.metric} can "
                            f"take ([0, {'N' if top == math.inf else '1'}]): every prompt would be dropped")
        if not 0.0 <= self.min_gap <= 1.0:
            raise UserError(f"{where}: {'--min-gap' if flags else 'min_gap'} must be within [0, 1] (pass@N - pass@1 "
                            f"is), got {self.min_gap:g}")
        if self.min_reward_std is not None and not 0.0 <= self.min_reward_std < 0.5:
            raise UserError(f"{where}: {'--min-reward-std' if flags else 'min_reward_std'} must be within [0, 0.5) (the "
                            f"spread of rewards in [0, 1] is at most 0.5), got {self.min_reward_std:g}")
        if not 0.0 <= self.pass_threshold <= 1.0:
            raise UserError(f"{where}: pass_threshold must be within [0, 1], got {self.pass_threshold}")
        return self


def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased pass@k from ``n`` samples with ``c`` passes: ``1 − C(n−c, k) / C(n, k)``."""
    if n <= 0 or k <= 0:
        return 0.0
    k = min(k, n)
    if n - c < k:
        return 1.0
    return 1.0 - math.comb(n - c, k) / math.comb(n, k)


def _parse(entry: Any, where: str, base: Thresholds) -> Thresholds:
    if not isinstance(entry, dict):
        raise UserError(f"{where}: expected a mapping of settings, got {type(entry).__name__}")
    unknown = set(entry) - {"band", "min_gap", "pass_threshold", "metric", "inclusive", "filter", "min_reward_std"}
    if unknown:
        raise UserError(f"{where}: unknown setting(s) {', '.join(sorted(unknown))}")
    values: dict[str, Any] = {}
    if "band" in entry:
        band = entry["band"]
        if not (isinstance(band, (list, tuple)) and len(band) == 2 and all(isinstance(x, (int, float)) for x in band)):
            raise UserError(f"{where}: band must be [lo, hi]")
        values["band"] = (float(band[0]), float(band[1]))
    for key in ("min_gap", "pass_threshold", "min_reward_std"):
        if key in entry and entry[key] is not None:
            values[key] = float(entry[key])
    for key in ("inclusive", "filter"):
        if key in entry:
            values[key] = bool(entry[key])
    if "metric" in entry:
        values["metric"] = str(entry["metric"])
    return replace(base, **values).check(where)


def load_thresholds(path: str | os.PathLike[str] | None, cli: dict[str, Any],
                    preset: dict[str, dict[str, Any]] | None = None) -> tuple[Thresholds, dict[str, Thresholds]]:
    """Default and per-source thresholds: built-ins < file ``default`` < CLI flags given < file ``sources``; a
    preset's per-source entries (``preset``, :mod:`curate.rl.presets`) stand under the file's."""
    base = Thresholds()
    data: dict[str, Any] = {}
    if path is not None:
        from curate.core.remote import local_file

        p = local_file(path, "--thresholds")  # a local file, or a bucket's object (a cached copy)
        assert p is not None
        if not p.is_file():
            raise UserError(f"--thresholds {path}: no such file")
        text = p.read_text(encoding="utf-8")
        try:
            data = json.loads(text) if p.suffix.lower() == ".json" else __import__("yaml").safe_load(text) or {}
        except Exception as exc:  # JSON and YAML raise different types
            raise UserError(f"--thresholds {path}: cannot parse ({exc})") from None
        if not isinstance(data, dict) or not set(data) <= {"default", "sources"}:
            raise UserError(f"--thresholds {path}: expected a mapping with keys default and/or sources")
        if "default" in data:
            base = _parse(data["default"], f"{path}: default", base)
    given = {k: v for k, v in cli.items() if v is not None}
    if given:
        base = _parse(given, CLI, base)
    entries = {**(preset or {}), **(data.get("sources") or {})}
    per_source = {str(src): _parse(entry, f"--thresholds: sources.{src}", base) for src, entry in entries.items()}
    return base, per_source


def evaluate(row: dict[str, Any], th: Thresholds) -> dict[str, Any]:
    """Metrics and the decision for one prompt (a row of ``prompts/*.parquet``)."""
    accuracy = row["accuracy"] or []
    rewards = row["reward"] or []
    n = len(accuracy)
    c = sum(1 for a in accuracy if a >= th.pass_threshold)
    p1, pn = pass_at_k(n, c, 1), pass_at_k(n, c, n)
    mean = float(np.mean(rewards)) if rewards else 0.0
    metrics = {"n": n, "passes": c, "pass_at_1": p1, "pass_at_n": pn, "gap": pn - p1, "mean_reward": mean,
               "reward_std": float(np.std(rewards)) if rewards else 0.0, "reward_sum": float(np.sum(rewards))}
    if row.get("error"):
        return {**metrics, "decision": "errored", "reason": row["error"].split(":")[0]}
    if not th.filter:
        return {**metrics, "decision": "kept", "reason": "unfiltered"}
    value = metrics[th.metric]
    lo, hi = th.band
    below = value < lo if th.inclusive else value <= lo
    above = value > hi if th.inclusive else value >= hi
    if below:
        return {**metrics, "decision": "dropped", "reason": "too_hard"}
    if above:
        return {**metrics, "decision": "dropped", "reason": "too_easy"}
    if metrics["gap"] < th.min_gap:
        return {**metrics, "decision": "dropped", "reason": "small_gap"}
    if th.min_reward_std is not None and not metrics["reward_std"] > th.min_reward_std:
        return {**metrics, "decision": "dropped", "reason": "low_spread"}
    return {**metrics, "decision": "kept", "reason": ""}


def source_report(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Monitoring figures of a group of prompts (one source, or all)."""
    kept = [r for r in rows if r["decision"] == "kept"]
    dropped: dict[str, int] = {}
    errored: dict[str, int] = {}
    for r in rows:
        if r["decision"] == "dropped":
            dropped[r["reason"]] = dropped.get(r["reason"], 0) + 1
        elif r["decision"] == "errored":
            errored[r["reason"]] = errored.get(r["reason"], 0) + 1
    scored = [r for r in rows if r["decision"] != "errored"]
    chars = [c for r in scored for c in r["response_chars"]]
    flat = lambda key: [x for r in scored for x in r[key]]  # noqa: E731
    truncated, formats, refl = flat("truncated"), flat("format"), flat("reflection")
    accuracy = [a for r in scored for a in (r["accuracy"] if r.get("accuracy") is not None else [])]
    boxes = [b for r in scored for b in (r.get("box") or [])]

    def mean(values: list[float]) -> float | None:
        return float(np.mean(values)) if values else None

    return {
        "prompts_in": len(rows), "kept": len(kept), "dropped": dict(sorted(dropped.items())),
        "errored": dict(sorted(errored.items())),
        "mean_reward": mean([r["mean_reward"] for r in scored]),
        "mean_pass_at_1": mean([r["pass_at_1"] for r in scored]),
        "mean_pass_at_n": mean([r["pass_at_n"] for r in scored]),
        "responses": len(chars),
        "response_chars_mean": mean(chars),
        "response_chars_p95": float(np.percentile(chars, 95)) if chars else None,
        "truncation_rate": mean([float(t) for t in truncated]),
        "format_failure_rate": mean([float(f < 1.0) for f in formats]),
        "reflection_rate": mean([float(x) for x in refl]),
        "truncated": int(sum(bool(t) for t in truncated)),
        "accuracy_with_reflection": mean([a for a, x in zip(accuracy, refl) if x]),
        "accuracy_without_reflection": mean([a for a, x in zip(accuracy, refl) if not x]),
        "box": box_report(np.asarray(boxes, float).reshape(-1, len(BOX_FIGURES))),
    }


def box_report(figures: np.ndarray) -> dict[str, float] | None:
    """The mean of each box figure (:data:`curate.rewards.monitor.BOX_FIGURES`) over answers (rows), or None."""
    if not len(figures):
        return None
    return {name: float(v) for name, v in zip(BOX_FIGURES, figures.mean(axis=0))}


def plot_pass_at_1(path: Path, prompts: Any, thresholds: dict[str, Thresholds]) -> None:
    """``rl_filter.png``: per source, the distribution of pass@1, the kept band marked, kept share in the title.

    ``prompts``: a table (``pyarrow.Table``) or rows (dicts) with ``source``, ``decision`` and ``pass_at_1``.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from curate.core.io import atomic_open

    if isinstance(prompts, list):
        cols = {k: [r[k] for r in prompts] for k in ("source", "decision", "pass_at_1")}
    else:
        cols = {k: prompts.column(k).to_pylist() if k != "pass_at_1" else prompts.column(k) for k in
                ("source", "decision", "pass_at_1")}
    source = np.asarray(cols["source"], dtype=object)
    decision = np.asarray(cols["decision"], dtype=object)
    p1 = np.asarray(cols["pass_at_1"], dtype=float)
    sources = sorted(set(source.tolist())) or ["(none)"]
    cols_n = min(3, len(sources))
    nrows = -(-len(sources) // cols_n)
    fig, axes = plt.subplots(nrows, cols_n, figsize=(4.2 * cols_n, 3.0 * nrows), dpi=100, squeeze=False)
    bins = np.linspace(0, 1, 18)
    for ax, src in zip(axes.ravel(), sources):
        group = (source == src) & (decision != "errored")
        kept = p1[group & (decision == "kept")]
        other = p1[group & (decision != "kept")]
        ax.hist([kept, other], bins=bins, stacked=True, color=["#55a868", "#c8c8c8"], label=["kept", "dropped"])
        th = thresholds.get(src)
        if th is not None and th.filter and th.metric in ("mean_reward", "pass_at_1"):
            lo, hi = th.band
            ax.axvspan(max(lo, 0), min(hi, 1), color="#55a868", alpha=0.12, label=f"band ({th.metric})")
        ax.set_title(f"{src}: kept {len(kept)}/{int(group.sum())}", fontsize=10)
        ax.set_xlabel("pass@1")
        ax.set_xlim(0, 1)
        ax.legend(fontsize=7)
    for ax in axes.ravel()[len(sources):]:
        ax.axis("off")
    fig.suptitle("pass@1 per source (band marked where the rule is on mean reward or pass@1)", fontsize=10)
    fig.tight_layout()
    with atomic_open(path, "wb") as fh:
        fig.savefig(fh, format="png", metadata={"Software": None})
    plt.close(fig)
