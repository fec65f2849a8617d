"""Browsable samples of the pack, rl-filter and score stages."""

from __future__ import annotations

import shlex
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from curate.report.assets import Assets, chosen_groups as _chosen_groups, inputs_of, lookup_records, read_sampled, \
    sample_indices
from curate.report.html import Raw, esc, filters, num, section, table


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
              f'{num(stats.get("fill_ratio"))}, padding reduction {num(stats.get("padding_reduction"))}×; hover a '
              "segment for its id and counts.</span></p>")
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
    return section("Prompts and responses", inner, "samples")


def _thumb(assets: Assets, image: Any, alt: str) -> str:
    src = assets.thumb(image) if image is not None else None
    return f'<img src="{esc(src)}" alt="{esc(alt)}">' if src else ""


def score_html(folder: Path, stats: dict[str, Any], assets: Assets, samples: int, seed: int) -> str:
    """Per-verifier counts and a seeded sample of scored responses."""
    path = folder / "scores.parquet"
    if not path.exists():
        return ""
    read, n, _ = read_sampled(path, None, seed)
    rows = read.take(sample_indices(read.num_rows, samples, seed)).to_pylist() if read.num_rows else []
    body = [[r.get("id"), r.get("sample"), r.get("source"), r.get("verifier"), r.get("accuracy"), r.get("format"),
             r.get("reward"), r.get("error") or ""] for r in rows]
    attrs = [{"row": "1", "source": str(r.get("source")), "verifier": str(r.get("verifier"))} for r in rows]
    inner = (f"<p class=muted>{len(rows):,} of {n:,} scored responses (a seeded sample).</p>"
             + filters("score-rows", {"source": sorted({a["source"] for a in attrs}),
                                      "verifier": sorted({a["verifier"] for a in attrs})})
             + table(["id", "sample", "source", "verifier", "accuracy", "format", "reward", "error"], body,
                     numeric={4, 5, 6}, row_attrs=attrs, tid="score-rows"))
    return section("Scores", inner, "samples")
