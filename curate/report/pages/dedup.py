"""The dedup page: the kinds of copies found, benchmark overlap, and duplicate clusters side by side."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pyarrow.compute as pc

from curate.report.assets import Assets, lookup_records, read_sampled, sample_indices
from curate.report.html import esc, filters, num, section, table

#: Removed copies shown per cluster (the kept record comes first).
COPIES_SHOWN = 6


def _card(assets: Assets, rec: dict[str, Any] | None, rid: str, source: str, status: str, note: str) -> str:
    images = (rec or {}).get("images") or []
    src = assets.thumb(images[0]) if images else None
    img = f'<img src="{esc(src)}" alt="{esc(rid)}">' if src else '<div class="muted">(image not found)</div>'
    cls = "ok" if status == "kept" else "bad"
    return (f'<div class="card">{img}<div><code>{esc(rid)}</code> <span class="pill">{esc(source)}</span></div>'
            f'<div class="{cls}">{esc(status)}</div><div class="muted">{esc(note)}</div></div>')


def _counts_html(stats: dict[str, Any]) -> str:
    """The kinds of copies found and the benchmark overlap (the copies removed per source and reason are the
    funnel's per-source table, above: not repeated here)."""
    d = stats.get("duplicates") or {}
    inner = (f"<p>exact copies: {num(d.get('exact_same_bytes'))} with the same bytes, {num(d.get('exact_same_pixels'))} "
              f"with the same pixels in another encoding; {num(d.get('near'))} near and {num(d.get('semantic'))} "
              f"semantic duplicates; {num(d.get('kept_with_copies'))} kept records had copies.</p>")
    bits = stats.get("near_bits") or {}
    if bits:
        inner += "<p class=muted>near duplicates removed by distance (bits): " + ", ".join(
            f"{esc(k)}: {num(v)}" for k, v in bits.items()) + "</p>"
    overlap = stats.get("benchmark_overlap")
    if overlap:
        parts = []
        for key, title in (("by_benchmark", "benchmark"), ("by_source", "source"), ("by_match", "match")):
            items = sorted((overlap.get(key) or {}).items())
            parts.append(table([title, "records removed"], [[k, v] for k, v in items], numeric={1}))
        refs = overlap.get("references") or {}
        inner += (f"<h3>Benchmark overlap</h3><p>{num(overlap.get('records'))} records copy one of "
                  f"{num(refs.get('hashed'))} reference images.</p><div style=\"display:flex;gap:24px\">"
                  + "".join(parts) + "</div>")
    return section("Copies found", inner, "dedup-counts")


def dedup_html(folder: Path, stats: dict[str, Any], assets: Assets, samples: int, seed: int) -> str:
    """Counts, then a seeded sample of duplicate clusters: the kept record (or reference) beside its copies."""
    path = folder / "rejects.parquet"
    if not path.exists():
        return ""
    rejects, _, partial = read_sampled(path, None, seed)
    if "duplicate_of" not in rejects.column_names:
        return _counts_html(stats)
    removed = rejects.filter(pc.is_valid(rejects.column("duplicate_of"))).to_pylist()
    clusters: dict[tuple[bool, str], list[dict[str, Any]]] = {}
    for r in removed:
        clusters.setdefault((r["reason"] == "benchmark_overlap", r["duplicate_of"]), []).append(r)
    keys = sorted(clusters)
    picks = [keys[i] for i in sample_indices(len(keys), samples, seed)]
    settings = stats.get("settings") or {}
    wanted = {r["id"] for k in picks for r in clusters[k][:COPIES_SHOWN]} | {k[1] for k in picks if not k[0]}
    records = lookup_records(list(stats.get("inputs") or []), wanted) if wanted else {}
    ref_ids = {k[1] for k in picks if k[0]}
    refs = lookup_records(list(settings.get("against") or []), ref_ids) if ref_ids else {}
    cards = []
    for is_ref, kept in picks:
        members = sorted(clusters[(is_ref, kept)], key=lambda r: (r["distance"] or 0, r["id"]))
        head = refs.get(kept) if is_ref else records.get(kept)
        status = "benchmark reference" if is_ref else "kept"
        first = _card(assets, head, kept, (head or {}).get("source", "?"), status, "")
        rest = [_card(assets, records.get(r["id"]), r["id"], r["source"], r["reason"],
                      f"distance {r['distance']:g}" if r["distance"] is not None else "") for r in members[:COPIES_SHOWN]]
        more = f'<div class="muted">and {len(members) - COPIES_SHOWN:,} more</div>' if len(members) > COPIES_SHOWN else ""
        reasons = sorted({r["reason"] for r in members})
        sources = sorted({r["source"] for r in members})
        cards.append(f'<div class="card wide" data-row="1" data-reason="{esc(reasons[0])}" '
                     f'data-source="{esc(sources[0])}"><div class="muted">{len(members):,} removed as copies of '
                     f'<code>{esc(kept)}</code> ({esc(", ".join(reasons))})</div>'
                     f'<div class="cards">{first}{"".join(rest)}{more}</div></div>')
    where = " (from a seeded choice of row groups)" if partial else ""
    inner = (f"<p class=muted>{len(picks):,} of {len(keys):,} clusters{where}, a seeded sample: the record kept (or "
             "the benchmark image) first, then the removed copies with their reason and distance (bits for near "
             "duplicates, 1 − cosine for semantic ones).</p>"
             + filters("dedup-clusters", {"reason": sorted({r["reason"] for r in removed}),
                                          "source": sorted({r["source"] for r in removed})}, "search ids")
             + f'<div id="dedup-clusters">{"".join(cards) or "<p class=muted>no duplicates</p>"}</div>')
    return _counts_html(stats) + section("Duplicate clusters", inner, "samples")
