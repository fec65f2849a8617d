"""The recaption page: each sampled image with its captions side by side per language."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from curate.report.assets import Assets, inputs_of, lookup_records, read_sampled, sample_indices
from curate.report.html import esc, filters, section
from curate.report.pages import image_html as _img


def recaption_html(folder: Path, stats: dict[str, Any], assets: Assets, samples: int, seed: int) -> str:
    """Each sampled image with its captions side by side per language; failed captions with their reason."""
    path = folder / "captions.parquet"
    if not path.exists():
        return ""
    table, _, partial = read_sampled(path, ["id", "source", "lang", "image", "caption", "error", "detail", "raw"],
                                     seed)
    rows = table.to_pylist()
    by_id: dict[str, list[dict[str, Any]]] = {}
    for r in rows:
        by_id.setdefault(r["id"], []).append(r)
    ids = sorted(by_id)
    langs = sorted({r["lang"] for r in rows})
    picks = [ids[i] for i in sample_indices(len(ids), samples, seed)]
    carried = _carried_images(stats, [rid for rid in picks if str(by_id[rid][0]["image"]).startswith("sha256:")])
    cards = []
    for rid in picks:
        caps = {r["lang"]: r for r in by_id[rid]}
        first = by_id[rid][0]
        failed = [f"{r['lang']}:{r['error']}" for r in by_id[rid] if r["error"]]
        cols = []
        for lang in langs:
            r = caps.get(lang)
            if r is None:
                cols.append(f"<div><b>{esc(lang)}</b> <span class=muted>(not asked)</span></div>")
            elif r["error"]:
                cols.append(f'<div><b>{esc(lang)}</b> <span class="bad">✗ {esc(r["error"])}</span> '
                            f'<span class="muted">{esc(r["detail"])}</span><pre>{esc(r["raw"])}</pre></div>')
            else:
                cols.append(f'<div><b>{esc(lang)}</b> <span class="ok">✓</span>\n{esc(r["caption"])}</div>')
        status = "failed" if failed else "kept"
        cards.append(f'<div class="card wide" data-row="1" data-source="{esc(first["source"])}" '
                     f'data-status="{status}"><div style="display:flex;gap:12px"><div>'
                     f'{_img(assets, carried.get(rid, first["image"]), rid)}</div><div style="flex:1"><code>{esc(rid)}</code> '
                     f'<span class="pill">{esc(first["source"])}</span>'
                     f'<div class="pair" style="grid-template-columns:repeat({len(langs)},1fr)">{"".join(cols)}'
                     f"</div></div></div></div>")
    of = f"{len(ids):,}" if not partial else f"{len(ids):,} read (a seeded choice of row groups)"
    inner = (f"<p class=muted>{len(picks):,} of {of} images (a seeded sample). Failed captions show the "
             "reason and the model's raw answer.</p>"
             + filters("caption-cards", {"source": sorted({by_id[r][0]["source"] for r in picks}),
                                         "status": ["kept", "failed"]}, "search captions, ids")
             + f'<div id="caption-cards" class="cards">{"".join(cards)}</div>')
    return section("Captions", inner, "samples")


def _carried_images(stats: dict[str, Any], ids: list[str]) -> dict[str, bytes]:
    """The images that travelled as bytes (``captions.parquet`` names them ``sha256:…``), from the input records."""
    if not ids:
        return {}
    records = lookup_records(inputs_of(stats, "recaption"), ids)
    return {rid: rec["images"][0] for rid, rec in records.items()
            if rec["images"] and isinstance(rec["images"][0], bytes)}
