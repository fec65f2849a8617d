"""The rl-filter and score pages: sampled prompts with their responses and rewards; sampled scored responses."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pyarrow.parquet as pq

from curate.report.assets import Assets, inputs_of, lookup_records, read_sampled, sample_indices
from curate.report.html import Raw, esc, filters, num, section, table


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
