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
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    panels = 3 if step_ratio is not None else 2
    fig, axes = plt.subplots(1, panels, figsize=(5.5 * panels, 4), dpi=110)
    left, right = axes[0], axes[1]
    if lengths.size:
        counts, edges = np.histogram(lengths, bins=min(80, max(10, int(np.sqrt(lengths.size)))))
        left.stairs(counts, edges, fill=True, color="#4c72b0")  # histogram first: 10M points in one numpy call
        left.axvline(ctx, color="#c44e52", ls="--", lw=1, label=f"ctx {ctx}")
        left.set_yscale("log")
        left.legend(loc="upper right")
    left.set_xlabel("tokens per sample")
    left.set_ylabel("samples (log)")
    left.set_title(f"sample lengths (n={lengths.size:,})")
    if bin_tokens.size:
        fill = bin_tokens / ctx
        counts, edges = np.histogram(fill, bins=np.linspace(0, 1, 41))
        right.stairs(counts, edges, fill=True, color="#55a868")
        right.axvline(float(fill.mean()), color="#333333", ls=":", lw=1, label=f"mean fill {fill.mean():.3f}")
        right.legend(loc="upper left")
    right.set_xlabel("bin fill (used tokens / ctx)")
    right.set_ylabel("bins")
    right.set_title(f"bin fill (bins={bin_tokens.size:,})")
    if step_ratio is not None:
        _imbalance_panel(axes[2], step_ratio)
    if title:
        fig.suptitle(title)
    fig.tight_layout()
    with atomic_open(path, "wb") as fh:
        fig.savefig(fh, format="png", metadata={"Software": None})
    plt.close(fig)


def _imbalance_panel(ax: object, step_ratio: dict[str, np.ndarray]) -> None:
    """Histogram of per-step max/mean rank cost, token-only vs compute-balanced (log counts)."""
    before, after = step_ratio["token_only"], step_ratio["balanced"]
    both = np.concatenate([before, after]) if before.size or after.size else np.ones(1)
    hi = float(np.percentile(both, 99.9)) if both.size > 10 else float(both.max())
    edges = np.linspace(1.0, max(hi, 1.01), 61)
    for values, color, label in ((before, "#c44e52", "token-only"), (after, "#4c72b0", "compute-balanced")):
        if values.size:
            p99 = float(np.percentile(values, 99))
            ax.hist(np.minimum(values, edges[-1]), bins=edges, color=color, alpha=0.6,
                    label=f"{label}: mean {values.mean():.3f}, p99 {p99:.3f}")
    ax.set_yscale("log")
    ax.set_xlabel("step imbalance (max / mean rank cost)")
    ax.set_ylabel("steps (log)")
    ax.set_title("per-step imbalance, before and after")
    ax.legend(loc="upper right", fontsize=8)
