"""The packing plot: sample-length histogram, bin-fill histogram and, when balanced, per-step imbalance."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from curate.core.io import atomic_open


def plot_packing(path: Path, lengths: np.ndarray, bin_tokens: np.ndarray, ctx: int, *, title: str = "",
                 step_ratio: dict[str, np.ndarray] | None = None) -> None:
    """Write ``packing.png``: token lengths of the samples (log counts) and fill of the bins.

    With ``step_ratio`` (``{"token_only": ..., "balanced": ...}``, max/mean rank
    cost of every step), a third panel compares the step imbalance of the
    token-only plan and of the compute-balanced one.
    """
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure  # no pyplot: its import and figure manager are not needed for a file

    panels = 3 if step_ratio is not None else 2
    fig = Figure(figsize=(5.5 * panels, 4), dpi=110)
    FigureCanvasAgg(fig)
    axes = fig.subplots(1, panels)
    left, right = axes[0], axes[1]
    if lengths.size:
        values, weights = _value_counts(lengths)  # the histograms are binned from per-value counts
        counts, edges = np.histogram(values, bins=min(80, max(10, int(np.sqrt(lengths.size)))), weights=weights)
        left.stairs(counts, edges, fill=True, color="#4c72b0", baseline=_FLOOR)
        left.axvline(ctx, color="#c44e52", ls="--", lw=1, label=f"ctx {ctx}")
        _log_counts(left, float(counts.max()))
        left.legend(loc="upper right")
    left.set_xlabel("tokens per sample")
    left.set_ylabel("samples (log)")
    left.set_title(f"sample lengths (n={lengths.size:,})")
    if bin_tokens.size:
        values, weights = _value_counts(bin_tokens)
        counts, edges = np.histogram(values / ctx, bins=np.linspace(0, 1, 41), weights=weights)
        mean = float((values * weights).sum() / weights.sum() / ctx)
        right.stairs(counts, edges, fill=True, color="#55a868")
        right.axvline(mean, color="#333333", ls=":", lw=1, label=f"mean fill {mean:.3f}")
        right.legend(loc="upper left")
    right.set_xlabel("bin fill (used tokens / ctx)")
    right.set_ylabel("bins")
    right.set_title(f"bin fill (bins={bin_tokens.size:,})")
    if step_ratio is not None:
        _imbalance_panel(axes[2], step_ratio)
    if title:
        fig.suptitle(title)
    fig.subplots_adjust(left=0.075 if panels == 2 else 0.055, right=0.98, bottom=0.13, top=0.84 if title else 0.9,
                        wspace=0.25)  # fixed margins: tight_layout measured every text (~1 s)
    with atomic_open(path, "wb") as fh:
        fig.savefig(fh, format="png", metadata={"Software": None})


#: The bottom of a log-count axis: a bar of count 1 rises from here to 1, as visible as any other.
_FLOOR = 0.5


def _log_counts(ax: object, most: float) -> None:
    """A log y axis of counts whose bars of count 1 show (the axis starts at :data:`_FLOOR`), labelled with plain
    counts (1, 2, 5, 10, … or 1, 10, 100, … over many decades; never ``2×10⁰``)."""
    from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter

    top = max(2.0, most * 1.6)
    ax.set_yscale("log")
    ax.set_ylim(_FLOOR, top)
    subs = (1.0, 2.0, 5.0) if top <= 2000 else (1.0,)
    ax.yaxis.set_major_locator(LogLocator(base=10, subs=subs))
    ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:,.0f}" if v >= 1 else ""))
    ax.yaxis.set_minor_formatter(NullFormatter())


def _value_counts(values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Distinct values and their counts (``bincount`` for integers: one pass, no sort)."""
    if values.dtype.kind in "iu" and values.size and int(values.min()) >= 0 and int(values.max()) < 1 << 26:
        counts = np.bincount(values)
        found = np.flatnonzero(counts)
        return found, counts[found]
    return np.unique(values, return_counts=True)


def _imbalance_panel(ax: object, step_ratio: dict[str, np.ndarray]) -> None:
    """Histogram of per-step max/mean rank cost, token-only vs compute-balanced (log counts)."""
    before, after = step_ratio["token_only"], step_ratio["balanced"]
    both = np.concatenate([before, after]) if before.size or after.size else np.ones(1)
    hi = float(np.percentile(both, 99.9)) if both.size > 10 else float(both.max())
    edges = np.linspace(1.0, max(hi, 1.01), 61)
    most = 1.0
    for values, color, label in ((before, "#c44e52", "token-only"), (after, "#4c72b0", "compute-balanced")):
        if values.size:
            p99 = float(np.percentile(values, 99))
            counts, _ = np.histogram(np.minimum(values, edges[-1]), bins=edges)
            ax.stairs(counts, edges, fill=True, baseline=_FLOOR, color=color, alpha=0.6,
                      label=f"{label}: mean {values.mean():.3f}, p99 {p99:.3f}")
            most = max(most, float(np.max(counts)))
    _log_counts(ax, most)
    ax.set_xlabel("step imbalance (max / mean rank cost)")
    ax.set_ylabel("steps (log)")
    ax.set_title("per-step imbalance, before and after")
    ax.legend(loc="upper right", fontsize=8)
