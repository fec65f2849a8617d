"""Browsable samples per stage: which section a stage gets, and the balance and recaption sections."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pyarrow.compute as pc
import pyarrow.parquet as pq

from curate.report.assets import Assets, inputs_of, lookup_records, read_sampled, sample_indices
from curate.report.html import esc, filters, section
from curate.stages import STAGES

CONCEPTS_SHOWN = 5
IMAGES_PER_CONCEPT = 6


def _img(assets: Assets, image: Any, alt: str = "") -> str:
    src = assets.thumb(image)
    if src is None:
        return '<div class="muted">(image not readable)</div>'
    return f'<img src="{esc(src)}" alt="{esc(alt)}">'


def _vocab_names(vocab: str | None, wanted: set[int]) -> dict[int, str]:
    """Names of concept ids (vocabulary line − 1); empty when the vocabulary is gone."""
    if not vocab or not wanted:
        return {}
    names: dict[int, str] = {}
    try:
        with open(vocab, encoding="utf-8") as fh:
            for i, line in enumerate(fh):
                if i in wanted:
                    names[i] = line.rstrip("\n").split("\t")[0]
                    if len(names) == len(wanted):
                        break
    except OSError:
        return {}
    return names


def balance_html(folder: Path, stats: dict[str, Any], assets: Assets, samples: int, seed: int) -> str:
    """Most and least frequent concepts with thumbnails of selected images tagged with them and their top-K."""
    tags_path = folder / "tags.parquet"
    if not tags_path.exists():
        return ""
    freq_table, total, partial = read_sampled(tags_path, ["concepts"], seed)
    counted = pc.value_counts(pc.list_flatten(freq_table.column("concepts")))
    if not len(counted):
        return ""
    freq = dict(zip(counted.field("values").to_pylist(), counted.field("counts").to_pylist()))
    ranked = sorted(freq.items(), key=lambda kv: (-kv[1], kv[0]))
    most, least = ranked[:CONCEPTS_SHOWN], ranked[-CONCEPTS_SHOWN:][::-1]
    records = lookup_records([str(folder / "records")], max_rows=max(20_000, samples * 100)) \
        if (folder / "records").exists() else {}
    rows = pq.read_table(tags_path, columns=["id", "concepts", "scores"],
                         filters=[("id", "in", sorted(records))]).to_pylist() if records else []
    tagged = {r["id"]: r for r in rows}
    shown = [c for c, _ in most + least]
    names = _vocab_names((stats.get("settings") or {}).get("vocab"),
                         set(shown) | {c for r in rows for c in r["concepts"]})
    by_concept: dict[int, list[str]] = {}
    for rid in sorted(tagged):
        for c in tagged[rid]["concepts"]:
            by_concept.setdefault(c, []).append(rid)
    selected = set(_selected_ids(folder))
    estimated = f" (estimated on {freq_table.num_rows:,} of {total:,} records)" if partial else ""

    def block(title: str, items: list[tuple[int, int]], salt: int) -> str:
        out = [f"<h3>{esc(title)}</h3>"]
        for k, (c, n) in enumerate(items):
            pool = by_concept.get(c, [])
            picks = [pool[j] for j in sample_indices(len(pool), IMAGES_PER_CONCEPT, seed, salt * 1000 + k)]
            cards = []
            for rid in picks:
                top = "".join(f'<span class="pill">{esc(names.get(cc, cc))} {s:.3f}</span>'
                              for cc, s in zip(tagged[rid]["concepts"], tagged[rid]["scores"]))
                imgs = records[rid].get("images") or [None]
                cards.append(f'<div class="card" data-row="1"><div>{_img(assets, imgs[0], rid)}</div>'
                             f'<div><code>{esc(rid)}</code>{" ✓ selected" if rid in selected else ""}</div>'
                             f"<div>{top}</div></div>")
            out.append(f'<p><b>{esc(names.get(c, c))}</b> <span class="muted">concept {c}, tagged on {n:,} '
                       f'records{estimated}</span></p><div class="cards">{"".join(cards) or "<p class=muted>no selected record with an image carries it</p>"}</div>')
        return "".join(out)

    inner = ("<p class=muted>Concept frequency = records tagged with the concept among their top-K. "
             "Thumbnails: selected records carrying the concept, with their top-K concepts and scores "
             "(a seeded sample).</p>" + block("Most frequent concepts", most, 1)
             + block("Least frequent concepts", least, 2))
    return section("Concepts", inner, "samples")


def _selected_ids(folder: Path) -> list[str]:
    path = folder / "selection.parquet"
    return pq.read_table(path, columns=["id"]).column("id").to_pylist() if path.exists() else []


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


def samples_html(stage: str, folder: Path, stats: dict[str, Any], assets: Assets, samples: int, seed: int) -> str:
    """The browsable samples of one stage, drawn by its spec's view (:mod:`curate.stages`; "" for none)."""
    import importlib

    spec = STAGES.get(stage)
    if spec is None or spec.view is None:
        return ""
    module, _, function = spec.view.partition(":")
    view = getattr(importlib.import_module(f"curate.report.{module}"), function)
    return view(folder, stats, assets, samples, seed)
