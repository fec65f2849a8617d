"""The packing plot: sample-length histogram and bin-fill histogram."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from curate.io import atomic_open


def plot_packing(path: Path, lengths: np.ndarray, bin_tokens: np.ndarray, ctx: int, *, title: str = "") -> None:
    """Write ``packing.png``: token lengths of the samples (log counts) and fill of the bins."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4), dpi=110)
    if lengths.size:
        left.hist(lengths, bins=min(80, max(10, int(np.sqrt(lengths.size)))), color="#4c72b0")
        left.axvline(ctx, color="#c44e52", ls="--", lw=1, label=f"ctx {ctx}")
        left.set_yscale("log")
        left.legend(loc="upper right")
    left.set_xlabel("tokens per sample")
    left.set_ylabel("samples (log)")
    left.set_title(f"sample lengths (n={lengths.size:,})")
    if bin_tokens.size:
        fill = bin_tokens / ctx
        right.hist(fill, bins=np.linspace(0, 1, 41), color="#55a868")
        right.axvline(float(fill.mean()), color="#333333", ls=":", lw=1, label=f"mean fill {fill.mean():.3f}")
        right.legend(loc="upper left")
    right.set_xlabel("bin fill (used tokens / ctx)")
    right.set_ylabel("bins")
    right.set_title(f"bin fill (bins={bin_tokens.size:,})")
    if title:
        fig.suptitle(title)
    fig.tight_layout()
    with atomic_open(path, "wb") as fh:
        fig.savefig(fh, format="png", metadata={"Software": None})
    plt.close(fig)
