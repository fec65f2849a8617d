"""The pack page: one strip per sampled packed sequence (image tokens, text tokens, padding)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from curate.report.assets import Assets, chosen_groups as _chosen_groups, read_sampled, sample_indices
from curate.report.html import esc, filters, num, section

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
