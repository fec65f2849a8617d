"""Timing logs: measured times of packed sequences with their cost components, and the coefficients they give.

A *timing log* is a table with one row per measured micro-batch or packed
sequence (CSV with a header line, or Parquet):

============  ===============================================================
``tokens``       ΣT: tokens of its samples, summed
``tokens_sq``    ΣT²: each sample's tokens squared, summed
``patches``      ΣP: patches of its images (``t·h·w`` of ``image_grid_thw``, before the merge)
``patches_sq``   ΣP²: each image's patches squared, summed
``seconds``      its measured time (forward + backward; synchronise the GPU before reading the clock)
``sequences``    optional: packed sequences in the row (default 1)
============  ===============================================================

Other columns (``step``, ``rank``, ...) are ignored. :class:`TimingLog` writes one
from any training loop; :func:`fit_coefficients` fits ``seconds ≈ a·tokens +
b·tokens_sq + c·patches + e·patches_sq + o·sequences`` with non-negative
coefficients (``scipy.optimize.nnls``, rows weighted by ``1 / seconds`` so that
the *relative* error is what is minimised) and reports the fit's error; the
per-sequence overhead ``o`` is the same on every rank (each rank trains the same
number of sequences per step), so the plan uses ``(a, b, c, e)`` only.
``curate pack --balance-compute --cost-model LOG.csv`` plans with the fitted
coefficients (:func:`load_model`).
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

from curate.core.errors import UserError
from curate.core.io import open_input, text_of
from packer.cost import COEFFICIENT_FIELDS, COMPONENTS, CostModel

SECONDS = "seconds"
SEQUENCES = "sequences"
LOG_SUFFIXES = (".csv", ".parquet", ".pq")
MIN_ROWS = 8


def is_timing_log(path: str | os.PathLike[str]) -> bool:
    """Whether ``path`` names a timing log (by its suffix: ``.csv``, ``.parquet``, ``.pq``)."""
    return Path(text_of(path)).suffix.lower() in LOG_SUFFIXES  # a path or a bucket's URL


def sequence_components(cu_seqlens: Any, image_grid_thw: Any = None) -> dict[str, float]:
    """:data:`packer.cost.COMPONENTS` of one packed sequence or micro-batch.

    Args:
        cu_seqlens: Sample boundaries (``[0, T1, T1 + T2, ...]``; a tensor or array).
        image_grid_thw: ``(images, 3)`` grids of its images (patches before the merge), or None.
    """
    bounds = np.asarray(_numpy(cu_seqlens), dtype=np.float64).reshape(-1)
    t = np.diff(bounds)
    grids = np.zeros((0, 3)) if image_grid_thw is None else np.asarray(_numpy(image_grid_thw), np.float64)
    p = grids.reshape(-1, 3).prod(axis=1)
    return dict(zip(COMPONENTS, (float(t.sum()), float((t * t).sum()), float(p.sum()), float((p * p).sum()))))


def _numpy(value: Any) -> Any:
    return value.detach().cpu().numpy() if hasattr(value, "detach") else value


class TimingLog:
    """Rows of a timing log, written to ``path`` (``.csv`` or ``.parquet``) by :meth:`write` or on leaving ``with``.

    In a training loop::

        with TimingLog("timings.csv") as log:
            for batch in loader:
                with log.measure(batch):      # synchronises CUDA before and after
                    loss = model(**inputs(batch)).loss
                    loss.backward()
                optimizer.step(); optimizer.zero_grad()

    ``batch`` is an item of :class:`packer.loader.PackedDataset` (or anything with
    ``cu_seqlens`` and, for images, ``image_grid_thw``). Extra keyword arguments
    (``step=``, ``rank=``) become columns.
    """

    def __init__(self, path: str | os.PathLike[str]) -> None:
        if not is_timing_log(path):
            raise UserError(f"{path}: a timing log is written as .csv or .parquet")
        self.path = Path(path)
        self.rows: list[dict[str, float]] = []

    def add(self, batch: Mapping[str, Any], seconds: float, *, sequences: int = 1, **extra: float) -> None:
        """Record one measured micro-batch (its components from ``batch``) and its time."""
        row = sequence_components(batch["cu_seqlens"], batch.get("image_grid_thw"))
        self.rows.append({**row, SECONDS: float(seconds), SEQUENCES: float(sequences), **extra})

    @contextmanager
    def measure(self, batch: Mapping[str, Any], *, sequences: int = 1, **extra: float) -> Iterator[None]:
        """Time the block (CUDA synchronised on both sides when it is in use) and :meth:`add` the row."""
        _synchronize()
        start = time.perf_counter()
        yield
        _synchronize()
        self.add(batch, time.perf_counter() - start, sequences=sequences, **extra)

    def write(self) -> Path:
        """Write the rows (atomically) and return the path."""
        from curate.core.io import atomic_open, write_parquet

        names = list(dict.fromkeys(k for row in self.rows for k in row)) or [*COMPONENTS, SECONDS, SEQUENCES]
        table = pa.table({k: pa.array([row.get(k) for row in self.rows], pa.float64()) for k in names})
        self.path.parent.mkdir(parents=True, exist_ok=True)
        if self.path.suffix.lower() == ".csv":
            import pyarrow.csv as pacsv

            with atomic_open(self.path, "wb") as fh:
                pacsv.write_csv(table, fh)
        else:
            write_parquet(self.path, table)
        return self.path

    def __enter__(self) -> TimingLog:
        return self

    def __exit__(self, *exc: object) -> None:
        if exc[0] is None:
            self.write()


def _synchronize() -> None:
    import sys

    torch = sys.modules.get("torch")  # a loop that measures a model has torch loaded already
    if torch is not None and torch.cuda.is_available() and torch.cuda.is_initialized():
        torch.cuda.synchronize()


def read_timing_log(path: str | os.PathLike[str]) -> dict[str, np.ndarray]:
    """The columns of a timing log (float64), checked; raises :class:`UserError` naming the file."""
    where = f"--cost-model {path}"
    try:
        with open_input(path) as fh:  # a local file or an object in a bucket
            if Path(text_of(path)).suffix.lower() == ".csv":
                import pyarrow.csv as pacsv

                table = pacsv.read_csv(fh)
            else:
                import pyarrow.parquet as pq

                table = pq.read_table(fh)
    except FileNotFoundError:
        raise UserError(f"{where}: no such file") from None
    except (OSError, pa.ArrowInvalid) as exc:
        raise UserError(f"{where}: not a readable timing log ({str(exc).splitlines()[0]})") from None
    missing = [c for c in (*COMPONENTS, SECONDS) if c not in table.column_names]
    if missing:
        raise UserError(f"{where}: a timing log needs the columns {', '.join((*COMPONENTS, SECONDS))} "
                        f"(and optionally {SEQUENCES}); missing {', '.join(missing)}")
    out: dict[str, np.ndarray] = {}
    for name in (*COMPONENTS, SECONDS, SEQUENCES):
        if name not in table.column_names:
            continue
        col = table.column(name)
        if not (pa.types.is_integer(col.type) or pa.types.is_floating(col.type)):
            raise UserError(f"{where}: column {name} holds {col.type}, not numbers")
        if col.null_count:
            raise UserError(f"{where}: column {name} has {col.null_count} empty values")
        values = col.to_numpy().astype(np.float64)
        bad = ~np.isfinite(values) | (values < 0) | ((values <= 0) if name == SECONDS else False)
        if bad.any():
            i = int(np.flatnonzero(bad)[0])
            what = "a positive number" if name == SECONDS else "a number >= 0"
            raise UserError(f"{where}: row {i + 1}: {name} is {float(values[i])!r}; expected {what}")
        out[name] = values
    if table.num_rows < MIN_ROWS:
        raise UserError(f"{where}: {table.num_rows} rows; a fit needs at least {MIN_ROWS} measured sequences "
                        "(a few hundred of varied composition give a good one)")
    out.setdefault(SEQUENCES, np.ones(table.num_rows))
    return out


def fit_coefficients(columns: Mapping[str, np.ndarray]) -> dict[str, Any]:
    """Fit ``seconds`` to the components (non-negative least squares on the relative error).

    Args:
        columns: :data:`packer.cost.COMPONENTS`, ``seconds`` and optionally ``sequences`` (see
            :func:`read_timing_log`).

    Returns:
        JSON-ready report: ``rows``, ``coefficients`` (``per_token`` ... ``per_patch_sq``),
        ``per_sequence`` (overhead), ``unmeasured`` (components that are 0 in every row: their
        coefficient is 0), and the error of the fitted times against the measured ones:
        ``rms_relative_error``, ``median_relative_error``, ``p90_relative_error``,
        ``max_relative_error`` and ``r2``.
    """
    from scipy.optimize import nnls

    y = np.asarray(columns[SECONDS], dtype=np.float64)
    counts = columns.get(SEQUENCES, np.ones(y.shape[0]))
    design = np.stack([np.asarray(columns[c], dtype=np.float64) for c in COMPONENTS] + [counts], axis=1)
    weighted = design / y[:, None]  # minimise Σ ((fit - y) / y)²
    scale = np.abs(weighted).max(axis=0)
    used = scale > 0
    coef = np.zeros(design.shape[1])
    solution, _ = nnls(weighted[:, used] / scale[used], np.ones_like(y))
    coef[used] = solution / scale[used]
    fit = design @ coef
    rel = np.abs(fit - y) / y
    total = float(((y - y.mean()) ** 2).sum())
    return {
        "rows": int(y.shape[0]),
        "coefficients": dict(zip(COEFFICIENT_FIELDS, map(float, coef[:4]))),
        "per_sequence": float(coef[4]),
        "unmeasured": [c for c, u in zip(COMPONENTS, used[:4]) if not u],
        "rms_relative_error": float(np.sqrt((rel * rel).mean())),
        "median_relative_error": float(np.median(rel)),
        "p90_relative_error": float(np.percentile(rel, 90)),
        "max_relative_error": float(rel.max()),
        "r2": float(1.0 - ((fit - y) ** 2).sum() / total) if total > 0 else 1.0,
    }


def load_model(path: str | os.PathLike[str]) -> tuple[CostModel, dict[str, Any]]:
    """The :class:`packer.cost.CostModel` fitted to a timing log, and the fit's report (:func:`fit_coefficients`).

    Raises:
        UserError: On an unreadable log, or a fit that prices every component at 0.
    """
    report = fit_coefficients(read_timing_log(path))
    coefficients = report["coefficients"]
    if not any(coefficients.values()):
        raise UserError(f"--cost-model {path}: the fit gives no cost to any component (times do not grow with "
                        "tokens or patches); measure sequences of more varied sizes")
    return CostModel(**coefficients), {"file": str(path), **report}


def describe_fit(report: Mapping[str, Any]) -> str:
    """One line on a fit: its coefficients and its error."""
    c = report["coefficients"]
    coefs = ", ".join(f"{k} {v:.3g}" for k, v in c.items())
    note = f"; not in the log: {', '.join(report['unmeasured'])}" if report.get("unmeasured") else ""
    return (f"cost model fitted to {report['rows']:,} timings ({coefs}, per sequence {report['per_sequence']:.3g} s); "
            f"error: RMS {report['rms_relative_error']:.1%}, p90 {report['p90_relative_error']:.1%}, "
            f"max {report['max_relative_error']:.1%}, R² {report['r2']:.4f}{note}")
