"""The samples each stage's report page shows, one view per stage (``view=`` in :mod:`curate.stages` names
``pages:<function>``): balance, dedup, pack, recaption, rl-filter and score."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from curate.report.site import (Assets, Raw, esc, filters, image_html as _img, inputs_of, lookup_records, num,
                                 read_sampled, sample_indices, section, table, chosen_groups as _chosen_groups)



# The balance page: most and least frequent concepts, with thumbnails of selected records tagged with them.
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


# The dedup page: the kinds of copies found, benchmark overlap, and duplicate clusters side by side.
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


# The pack page: one strip per sampled packed sequence (image tokens, text tokens, padding).
#: Records per batch of the baseline ``padding_reduction`` compares with (``packer.pack``: random batches of 8,
#: each padded to its longest record).
BASELINE_BATCH = 8
#: Below this many packed records the padding comparison rests on a handful of batches: said so beside it.
FEW_RECORDS = 8 * BASELINE_BATCH


def padding_summary(stats: dict[str, Any], *, short: bool = False) -> str:
    """What pack's ``padding_reduction`` compares, in words: the padding of the packed sequences against that of
    the same records batched at random :data:`BASELINE_BATCH` at a time, each batch padded to its longest; with
    the counts behind it, and a word when the run is too small for the figure to mean much (a ``0.0×`` of 7
    records, whose one random batch needs no padding, is not a result)."""
    red, packed, n = stats.get("padding_reduction"), stats.get("padding_tokens_packed"), stats.get("records_packed")
    few = isinstance(n, int) and n < FEW_RECORDS
    note = f"; only {n:,} records: too few for the figure to mean much" if few else ""
    if not isinstance(packed, int):  # an older stats.json: the figure alone
        return f"padding reduction {num(red)}× (vs random batches of {BASELINE_BATCH}){note}"
    if red is None:
        return f"no padding in the packed sequences (random batches of {BASELINE_BATCH} would have some){note}"
    baseline = round(red * packed)
    if not baseline:
        if short:
            return f"padding {packed:,} tokens, random batches of {BASELINE_BATCH} would pad none{note}"
        return (f"padding: {packed:,} tokens in the packed sequences; the same records in random batches of "
                f"{BASELINE_BATCH}, each padded to its longest, would need none here{note}")
    times = f"{red:.1f}× less" if red >= 1 else f"{1 / red:.1f}× more"
    if short:
        return f"padding {packed:,} tokens, {times} than random batches of {BASELINE_BATCH}{note}"
    return (f"padding: {packed:,} tokens in the packed sequences against {baseline:,} for the same records in random "
            f"batches of {BASELINE_BATCH}, each padded to its longest ({times}){note}")


def pack_html(folder: Path, stats: dict[str, Any], assets: Assets, samples: int, seed: int) -> str:
    """One strip per sampled packed sequence: its samples as segments (image tokens, text tokens), then padding."""
    plan_path = folder / "plan.parquet"
    if not plan_path.exists():
        return ""
    plan, total_rows, partial = read_sampled(plan_path, ["bin", "id", "tokens"], seed)
    ctx = int((stats.get("settings") or {}).get("ctx") or stats.get("ctx") or 0)
    bins = pc.unique(plan.column("bin")).to_pylist()
    if partial:  # a sequence may straddle the row groups read: keep those seen whole
        whole = _whole_bins(plan_path, seed)
        bins = [b for b in bins if b in whole]
    bins.sort()
    picks = [bins[i] for i in sample_indices(len(bins), samples, seed)]
    chosen = plan.filter(pc.is_in(plan.column("bin"), pa.array(picks, plan.schema.field("bin").type)))
    parts: dict[str, tuple[int, int]] = {}
    lengths_path = folder / "lengths.parquet"
    if lengths_path.exists():
        lengths = pq.read_table(lengths_path, columns=["id", "text_tokens", "image_tokens"],
                                filters=[("id", "in", chosen.column("id").to_pylist())]) if chosen.num_rows else None
        if lengths is not None:
            for r in lengths.to_pylist():
                parts[r["id"]] = (int(r["image_tokens"] or 0), int(r["text_tokens"] or 0))
    seqs: dict[int, list[tuple[str, int]]] = {}
    for b, rid, tokens in zip(chosen.column("bin").to_pylist(), chosen.column("id").to_pylist(),
                              chosen.column("tokens").to_pylist()):
        seqs.setdefault(b, []).append((rid, int(tokens)))
    ctx = ctx or max(sum(t for _, t in s) for s in seqs.values())
    strips = []
    for b in picks:
        members = seqs.get(b, [])
        used = sum(t for _, t in members)
        spans = []
        for rid, tokens in members:
            img, txt = parts.get(rid, (0, tokens))
            title = f"{rid}: {tokens:,} tokens ({img:,} image, {txt:,} text)"
            if img:
                spans.append(f'<span class="seg-image" style="width:{100 * img / ctx:.4f}%" title="{esc(title)}">'
                             f"{esc(rid)}</span>")
            spans.append(f'<span class="seg-text" style="width:{100 * (tokens - img) / ctx:.4f}%" '
                         f'title="{esc(title)}">{"" if img else esc(rid)}</span>')
        if ctx > used:
            spans.append(f'<span class="seg-pad" style="width:{100 * (ctx - used) / ctx:.4f}%" '
                         f'title="padding: {ctx - used:,} tokens">pad</span>')
        ids = " ".join(f"<code>{esc(rid)}</code>" for rid, _ in members)
        strips.append(f'<div data-row="1"><div class="muted">sequence {b}: {len(members)} samples, {used:,} of '
                      f'{ctx:,} tokens ({used / ctx:.1%}) — {ids}</div><div class="strip">{"".join(spans)}</div></div>')
    legend = ('<p><span class="pill seg-image" style="color:#fff">image tokens</span> <span class="pill seg-text" '
              'style="color:#fff">text tokens</span> <span class="pill seg-pad">padding</span> '
              f'<span class="muted">{len(picks):,} of {stats.get("bins") or len(bins):,} sequences (a seeded sample); fill ratio '
              f'{num(stats.get("fill_ratio"))} (used tokens / sequences × ctx); hover a segment for its id and counts.'
              f'</span></p><p class="muted" id="padding">{esc(padding_summary(stats))}.</p>')
    return section("Packed sequences", legend + filters("pack-strips", {}, "search ids")
                   + f'<div id="pack-strips">{"".join(strips)}</div>', "samples")


def _whole_bins(plan_path: Path, seed: int) -> set[int]:
    """Bins of the sampled row groups that do not touch a row group's first or last row."""
    pf = pq.ParquetFile(plan_path)
    whole: set[int] = set()
    for g in _chosen_groups(pf, seed):
        col = pf.read_row_group(g, columns=["bin"]).column("bin")
        inner = set(pc.unique(col).to_pylist()) - {col[0].as_py(), col[-1].as_py()}
        whole |= inner
    return whole


# The recaption page: each sampled image with its captions side by side per language.
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


# The rl-filter and score pages: sampled prompts with their responses and rewards; sampled scored responses.
def rl_filter_html(folder: Path, stats: dict[str, Any], assets: Assets, samples: int, seed: int) -> str:
    """Each sampled prompt with its image, gold answer, N responses with their rewards, pass@1/pass@N, decision."""
    prompts_path, rollouts_path = folder / "prompts.parquet", folder / "rollouts.parquet"
    if not prompts_path.exists():
        return ""
    read, total, _ = read_sampled(prompts_path, None, seed)
    prompts = read.to_pylist()
    prompts.sort(key=lambda r: str(r["id"]))
    picks = [prompts[i] for i in sample_indices(len(prompts), samples, seed)]
    ids = [p["id"] for p in picks]
    rollouts: dict[str, list[dict[str, Any]]] = {}
    if rollouts_path.exists() and ids:
        table_ = pq.read_table(rollouts_path, filters=[("id", "in", ids)])
        for r in table_.to_pylist():
            rollouts.setdefault(r["id"], []).append(r)
    records = lookup_records([str(folder / "records")], ids) if (folder / "records").is_dir() else {}
    if len(records) < len(ids):  # fall back on the inputs named on the command line
        records = {**lookup_records(inputs_of(stats, "rl-filter"), set(ids) - set(records)), **records}
    cards = []
    for p in picks:
        rid = p["id"]
        rec = records.get(rid) or {}
        raw_user = next((m["content"] for m in rec.get("messages", []) if m["role"] == "user"), "")
        gold = next((m["content"] for m in rec.get("messages", []) if m["role"] == "assistant"), "")
        decision = str(p.get("decision") or ("kept" if p.get("kept") else "dropped"))
        why = f" ({p['reason']})" if p.get("reason") else ""
        metric = ", ".join(f"{k} {num(p.get(k))}" for k in ("pass_at_1", "pass_at_n", "mean_reward") if k in p)
        rows = [[r.get("sample"), Raw(f"<pre>{esc(r.get('response'))}</pre>"), r.get("accuracy"), r.get("format"),
                 r.get("reward"), r.get("error") or ""]
                for r in sorted(rollouts.get(rid, []), key=lambda r: r.get("sample") or 0)]
        imgs = rec.get("images") or []
        cards.append(
            f'<div class="card wide" data-row="1" data-source="{esc(p.get("source"))}" data-decision="{esc(decision)}">'
            f'<div style="display:flex;gap:12px"><div>{_thumb(assets, imgs[0] if imgs else None, rid)}</div>'
            f'<div style="flex:1"><code>{esc(rid)}</code> <span class="pill">{esc(p.get("source"))}</span> '
            f'<b class="{"ok" if decision == "kept" else "bad"}">{esc(decision + why)}</b> <span class="muted">{esc(metric)}'
            f'</span><pre>{esc(raw_user)}</pre><div>gold: <code>{esc(gold)}</code></div></div></div>'
            + table(["#", "response", "accuracy", "format", "reward", "error"], rows, numeric={2, 3, 4}) + "</div>")
    decisions = sorted({str(p.get("decision") or ("kept" if p.get("kept") else "dropped")) for p in picks})
    inner = (f"<p class=muted>{len(picks):,} of {total:,} prompts (a seeded sample).</p>"
             + filters("rl-cards", {"source": sorted({str(p.get("source")) for p in picks}), "decision": decisions},
                       "search prompts, responses")
             + f'<div id="rl-cards" class="cards">{"".join(cards)}</div>')
    return monitoring_html(stats) + section("Prompts and responses", inner, "samples")


#: The per-source figures the RL seeds log, as ``stats.json`` has them (curate.rl.selection.source_report).
MONITORED = (("responses", "answers"), ("response_chars_mean", "answer chars"), ("truncated", "truncated"),
             ("reflection_rate", "reflection rate"), ("accuracy_with_reflection", "accuracy, reflecting"),
             ("accuracy_without_reflection", "accuracy, not reflecting"))
BOX_COLUMNS = ("iou", "precision@0.5", "recall@0.5", "precision@0.75", "recall@0.75", "precision@0.95", "recall@0.95")


def monitoring_html(stats: dict[str, Any]) -> str:
    """Per source: answer length, truncation, reflection and accuracy with and without it; for box answers IoU,
    precision and recall at IoU 0.5, 0.75 and 0.95 (what V-Triune logs)."""
    per = stats.get("per_source") or {}
    if not per:
        return ""
    rows = [[src, *(fig.get(k) for k, _ in MONITORED)] for src, fig in sorted(per.items())]
    out = table(["source", *(name for _, name in MONITORED)], rows, numeric=set(range(1, len(MONITORED) + 1)))
    boxes = [[src, *((fig.get("box") or {}).get(k) for k in BOX_COLUMNS)] for src, fig in sorted(per.items())
             if fig.get("box")]
    if boxes:
        out += "<h3>Box answers</h3>" + table(["source", *BOX_COLUMNS], boxes, numeric=set(range(1, 8)))
    return section("Monitoring per source", out, "monitoring")


def _thumb(assets: Assets, image: Any, alt: str) -> str:
    src = assets.thumb(image) if image is not None else None
    return f'<img src="{esc(src)}" alt="{esc(alt)}">' if src else ""


#: Bars of the reward histogram on the score page.
REWARD_BINS = 10


def reward_histogram(rewards: np.ndarray) -> str:
    """An inline SVG histogram of rewards (every scored response, not a sample): :data:`REWARD_BINS` bars over
    [0, 1] (over the values' range when some fall outside it), each labelled with its count."""
    values = rewards[np.isfinite(rewards)]
    if not values.size:
        return "<p class=muted>no rewards to show</p>"
    lo, hi = (0.0, 1.0) if values.min() >= 0 and values.max() <= 1 else (float(values.min()), float(values.max()))
    counts, edges = np.histogram(values, bins=REWARD_BINS, range=(lo, hi if hi > lo else lo + 1))
    width, height, pad = 44, 120, 18
    top = int(counts.max())
    bars = []
    for i, n in enumerate(counts.tolist()):
        h = 0 if not n else max(2, round(height * n / top))
        x = pad + i * width
        bars.append(f'<g data-bin="{i}" data-count="{n}"><title>{edges[i]:.2f}–{edges[i + 1]:.2f}: {n:,} responses'
                    f'</title><rect x="{x + 2}" y="{pad + height - h}" width="{width - 4}" height="{h}" '
                    f'fill="#4c78a8"></rect><text x="{x + width / 2}" y="{pad + height - h - 4}" font-size="11" '
                    f'text-anchor="middle">{n:,}</text></g>')
    bars.extend(f'<text x="{pad + i * width}" y="{pad + height + 14}" font-size="10" fill="#66707a" '
                f'text-anchor="middle">{edge:.1f}</text>' for i, edge in enumerate(edges.tolist()))
    w = pad * 2 + REWARD_BINS * width
    return (f'<svg id="reward-histogram" width="{w}" height="{pad * 2 + height + 12}" role="img" '
            f'aria-label="reward histogram">{"".join(bars)}</svg>')


def _responses(path: str, wanted: set[tuple[str, int]], max_rows: int = 2_000_000) -> dict[tuple[str, int], str]:
    """The response texts of the wanted ``(id, sample)`` pairs of a responses file (JSONL or Parquet), numbering a
    row without ``sample`` by its rank among its id's rows, as ``curate score`` does; {} when it cannot be read."""
    import json

    found: dict[tuple[str, int], str] = {}
    ranks: dict[str, int] = {}
    ids = {rid for rid, _ in wanted}

    def take(rid: Any, sample: Any, text: Any) -> None:
        rid = str(rid)
        rank = ranks.get(rid, 0)
        ranks[rid] = rank + 1
        key = (rid, sample if isinstance(sample, int) else rank)
        if key in wanted and isinstance(text, str):
            found[key] = text

    try:
        if path.endswith(".jsonl"):
            with open(path, encoding="utf-8", errors="replace") as fh:
                for n, line in enumerate(fh):
                    if n >= max_rows or len(found) == len(wanted):
                        break
                    try:
                        row = json.loads(line) if line.strip() else None
                    except ValueError:
                        continue
                    if isinstance(row, dict) and str(row.get("id")) in ids:
                        take(row.get("id"), row.get("sample"), row.get("response"))
        else:
            names = pq.ParquetFile(path).schema_arrow.names
            cols = [c for c in ("id", "sample", "response") if c in names]
            table = pq.read_table(path, columns=cols, filters=[("id", "in", sorted(ids))])
            for row in table.to_pylist():
                take(row["id"], row.get("sample"), row.get("response"))
    except Exception:  # noqa: BLE001 - the file moved or changed since the run: the scores show without texts
        return {}
    return found


#: The ``error`` of a scores row that was not scored (errored in ``stats.json``), before its first ``:``.
NOT_SCORED = frozenset({"bad_record", "unknown_id", "malformed_response", "record_error"})


def _figures(r: dict[str, Any]) -> str:
    if str(r.get("error") or "").split(":", 1)[0] in NOT_SCORED:
        return '<b class="bad">not scored</b>'
    return (f"reward <b>{num(r.get('reward'))}</b> · accuracy {num(r.get('accuracy'))} · "
            f"format {num(r.get('format'))}")


def score_html(folder: Path, stats: dict[str, Any], assets: Assets, samples: int, seed: int) -> str:
    """The rewards of every response (a histogram, the means per verifier), then a seeded sample of scored
    responses, each with its text, the record's gold answer and what the verifier gave (and its error)."""
    path = folder / "scores.parquet"
    if not path.exists():
        return ""
    scores = pq.read_table(path, columns=["reward", "error"])
    reasons = pc.utf8_slice_codeunits(pc.fill_null(scores.column("error"), ""), 0, 40)
    scored = pc.invert(pc.is_in(pc.list_element(pc.split_pattern(reasons, ":", max_splits=1), 0),
                                pa.array(sorted(NOT_SCORED))))
    rewards = scores.filter(scored).column("reward").to_numpy(zero_copy_only=False)
    verifiers = stats.get("per_verifier") or {}
    rows = [[v, e.get("responses"), e.get("mean_accuracy"), e.get("mean_format"), e.get("mean_reward"),
             ", ".join(f"{k} {n:,}" for k, n in sorted((e.get("verifier_errors") or {}).items())) or "–"]
            for v, e in sorted(verifiers.items())]
    summary = (f"<p class=muted>Rewards of all {len(rewards):,} scored responses (accuracy: the answer agrees with the "
               "record's gold answer; format: the response follows the answer format the prompt asks for; reward: "
               "what a trainer is given).</p>" + reward_histogram(np.asarray(rewards, dtype=np.float64))
               + ("<h3>Per verifier</h3>" + table(["verifier", "responses", "mean accuracy", "mean format",
                                                   "mean reward", "verifier errors"], rows, numeric={1, 2, 3, 4},
                                                  tid="per-verifier") if rows else ""))
    read, n, _ = read_sampled(path, None, seed)
    picks = read.take(sample_indices(read.num_rows, samples, seed)).to_pylist() if read.num_rows else []
    settings = stats.get("settings") or {}
    texts = _responses(str(settings.get("responses") or ""), {(str(r["id"]), int(r["sample"] or 0)) for r in picks})
    records = lookup_records([str(p) for p in settings.get("records") or []], {str(r["id"]) for r in picks})
    cards = []
    for r in picks:
        rid = str(r["id"])
        rec = records.get(rid) or {}
        gold = next((m["content"] for m in rec.get("messages", []) if m["role"] == "assistant"), None)
        text = texts.get((rid, int(r["sample"] or 0)))
        error = f'<div class="bad">error: <code>{esc(r["error"])}</code></div>' if r.get("error") else ""
        cards.append(
            f'<div class="card wide" data-row="1" data-source="{esc(r.get("source"))}" '
            f'data-verifier="{esc(r.get("verifier"))}"><code>{esc(rid)}</code> sample {esc(r.get("sample"))} '
            f'<span class="pill">{esc(r.get("source"))}</span> <span class="pill">{esc(r.get("verifier"))}</span> '
            f'<span>{_figures(r)}</span>{error}'
            f'<div class="pair"><div><b>response</b>\n{esc(text) if text is not None else "(text not found)"}</div>'
            f'<div><b>gold answer</b>\n{esc(gold) if gold is not None else "(record not found)"}</div></div></div>')
    inner = (f"<p class=muted>{len(picks):,} of {n:,} scored responses (a seeded sample).</p>"
             + filters("score-cards", {"source": sorted({str(r.get("source")) for r in picks}),
                                       "verifier": sorted({str(r.get("verifier")) for r in picks})},
                       "search ids, responses")
             + f'<div id="score-cards" class="cards">{"".join(cards)}</div>')
    return section("Rewards", summary, "rewards") + section("Scored responses", inner, "samples")
