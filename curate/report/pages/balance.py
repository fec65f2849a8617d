"""The balance page: most and least frequent concepts, with thumbnails of selected records tagged with them."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pyarrow.compute as pc
import pyarrow.parquet as pq

from curate.report.assets import Assets, lookup_records, read_sampled, sample_indices
from curate.report.html import esc, section
from curate.report.pages import image_html as _img

CONCEPTS_SHOWN = 5
IMAGES_PER_CONCEPT = 6


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
