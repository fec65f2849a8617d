"""The rl-filter and score pages: sampled prompts with their responses and rewards; sampled scored responses."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
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
