"""Dropped and errored records with their reasons: a seeded sample per reason, filterable on the page."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from curate.report.assets import read_sampled, sample_indices
from curate.report.html import Raw, esc, filters, section, table


def _sample_rows(path: Path, per_reason: int, seed: int) -> tuple[list[dict[str, str]], int, bool]:
    """Up to ``per_reason`` rows of each (kind, reason), seeded; the file's row count; whether row groups were sampled."""
    table, total, partial = read_sampled(path, None, seed)
    if table.num_rows == 0:
        return [], total, partial
    # group rows by (kind, reason) through dictionary codes: no Python object per row
    kind = table.column("kind").combine_chunks().dictionary_encode()
    reason = table.column("reason").combine_chunks().dictionary_encode()
    n_reasons = len(reason.dictionary)
    key = kind.indices.to_numpy().astype(np.int64) * n_reasons + reason.indices.to_numpy()
    kinds, reasons = kind.dictionary.to_pylist(), reason.dictionary.to_pylist()
    groups = {(kinds[k // n_reasons], reasons[k % n_reasons]): k for k in np.unique(key).tolist()}
    chosen: list[int] = []
    for salt, name in enumerate(sorted(groups)):
        rows = np.flatnonzero(key == groups[name])
        chosen.extend(rows[sample_indices(len(rows), per_reason, seed, salt)].tolist())
    chosen.sort()
    return table.take(chosen).to_pylist(), total, partial


def rejects_html(folder: Path, per_reason: int, seed: int, *, anchor: str = "rejects") -> str:
    """The rejects section of a stage folder (empty when it has no ``rejects.parquet``)."""
    path = folder / "rejects.parquet"
    if not path.exists():
        return ""
    rows, total, partial = _sample_rows(path, per_reason, seed)
    if not rows:
        return section("Dropped and errored records", "<p class=muted>none</p>", anchor)
    body = [[Raw(f'<span class="pill">{esc(r["kind"])}</span>'), Raw(f"<code>{esc(r['reason'])}</code>"),
             r["source"], Raw(f"<code>{esc(r['id'])}</code>"), r.get("detail") or ""] for r in rows]
    attrs = [{"row": "1", "reason": r["reason"], "source": r["source"], "kind": r["kind"]} for r in rows]
    tid = f"{anchor}-table"
    where = " of a seeded choice of row groups" if partial else ""
    inner = (f"<p class=muted>{len(rows):,} of {total:,} rows shown (a seeded sample of at most {per_reason} per "
             f"reason{where}); the full list is rejects.parquet.</p>"
             + filters(tid, {"kind": sorted({r["kind"] for r in rows}),
                             "reason": sorted({r["reason"] for r in rows}),
                             "source": sorted({r["source"] for r in rows})}, "search ids, details")
             + table(["kind", "reason", "source", "id", "detail"], body, row_attrs=attrs, tid=tid))
    return section("Dropped and errored records", inner, anchor)
