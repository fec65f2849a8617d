"""Dropped and errored records with their reasons: a seeded sample per reason, filterable on the page."""

from __future__ import annotations

from pathlib import Path

import pyarrow.parquet as pq

from curate.report.assets import sample_indices
from curate.report.html import Raw, esc, filters, section, table


def _sample_rows(path: Path, per_reason: int, seed: int) -> tuple[list[dict[str, str]], int]:
    """Up to ``per_reason`` rows of each (kind, reason), seeded; and the total number of rows.

    Only the ``kind`` and ``reason`` columns are read in full; the other columns of the
    chosen rows only.
    """
    pf = pq.ParquetFile(path)
    total = pf.metadata.num_rows
    if total == 0:
        return [], 0
    keys = pq.read_table(path, columns=["kind", "reason"])
    kinds, reasons = keys.column("kind").to_pylist(), keys.column("reason").to_pylist()
    groups: dict[tuple[str, str], list[int]] = {}
    for i, key in enumerate(zip(kinds, reasons)):
        groups.setdefault(key, []).append(i)
    chosen: list[int] = []
    for salt, key in enumerate(sorted(groups)):
        rows = groups[key]
        chosen.extend(rows[j] for j in sample_indices(len(rows), per_reason, seed, salt))
    chosen.sort()
    table_ = pq.read_table(path).take(chosen) if total <= 2_000_000 else _take_large(pf, chosen)
    return table_.to_pylist(), total


def _take_large(pf: pq.ParquetFile, rows: list[int]):  # noqa: ANN202 - pyarrow Table
    """Read only the row groups holding ``rows``."""
    import pyarrow as pa

    out, start = [], 0
    for g in range(pf.num_row_groups):
        n = pf.metadata.row_group(g).num_rows
        local = [r - start for r in rows if start <= r < start + n]
        if local:
            out.append(pf.read_row_group(g).take(local))
        start += n
    return pa.concat_tables(out)


def rejects_html(folder: Path, per_reason: int, seed: int, *, anchor: str = "rejects") -> str:
    """The rejects section of a stage folder (empty when it has no ``rejects.parquet``)."""
    path = folder / "rejects.parquet"
    if not path.exists():
        return ""
    rows, total = _sample_rows(path, per_reason, seed)
    if not rows:
        return section("Dropped and errored records", "<p class=muted>none</p>", anchor)
    body = [[Raw(f'<span class="pill">{esc(r["kind"])}</span>'), Raw(f"<code>{esc(r['reason'])}</code>"),
             r["source"], Raw(f"<code>{esc(r['id'])}</code>"), r.get("detail") or ""] for r in rows]
    attrs = [{"row": "1", "reason": r["reason"], "source": r["source"], "kind": r["kind"]} for r in rows]
    tid = f"{anchor}-table"
    inner = (f"<p class=muted>{len(rows):,} of {total:,} rows shown (a seeded sample of at most {per_reason} per "
             "reason); the full list is rejects.parquet.</p>"
             + filters(tid, {"kind": sorted({r["kind"] for r in rows}),
                             "reason": sorted({r["reason"] for r in rows}),
                             "source": sorted({r["source"] for r in rows})}, "search ids, details")
             + table(["kind", "reason", "source", "id", "detail"], body, row_attrs=attrs, tid=tid))
    return section("Dropped and errored records", inner, anchor)
