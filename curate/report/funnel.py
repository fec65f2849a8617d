"""The funnel of a stage from its ``stats.json``: records in → kept, dropped and errored by reason, per source."""

from __future__ import annotations

from typing import Any

from curate.report.html import Raw, esc, num, section, table


_IN = ("records_in", "prompts_in", "responses_in", "responses")
_OUT = ("records_out", "records_selected", "records_packed", "kept", "scored")
#: Per-source quality figures shown beside the counts when a stage reports them.
METRICS = ("mean_reward", "mean_pass_at_1", "mean_pass_at_n", "mean_accuracy", "truncation_rate",
           "format_failure_rate")


def counts(stats: dict[str, Any]) -> dict[str, Any]:
    """In, kept, dropped and errored (by reason) of a stage's stats.

    Stages name their output count differently (``records_out``, ``records_selected``,
    ``records_packed``, ``kept``); kept is read from ``records_out`` when present, else
    in − dropped − errored.
    """
    dropped = dict(stats.get("dropped") or {})
    errored = dict(stats.get("errored") or {})
    n_in = next((stats[k] for k in _IN if isinstance(stats.get(k), int)), None)
    kept = next((stats[k] for k in _OUT if isinstance(stats.get(k), int)), None)
    if kept is None and n_in is not None:
        kept = n_in - sum(dropped.values()) - sum(errored.values())
    unit = "responses" if "responses_in" in stats else "prompts" if "prompts_in" in stats else "records"
    return {"in": n_in, "kept": kept, "dropped": dropped, "errored": errored, "unit": unit}


def _bar(c: dict[str, Any]) -> str:
    total = c["in"] or 0
    if not total:
        return ""
    parts = [("kept", c["kept"] or 0), ("dropped", sum(c["dropped"].values())),
             ("errored", sum(c["errored"].values()))]
    spans = "".join(f'<span class="{k}" style="width:{100.0 * v / total:.3f}%" title="{k}: {v:,}"></span>'
                    for k, v in parts if v)
    return f'<div class="bar">{spans}</div>'


def funnel_html(stats: dict[str, Any]) -> str:
    """The funnel section: totals, a bar, reasons, and the per-source table."""
    if stats.get("stage") == "verify":
        checked = ", ".join(str(p) for p in stats.get("checked") or [])
        ok = '<b class="ok">✓ consistent</b>' if stats.get("ok") else '<b class="bad">✗ problems found</b>'
        return section("Verify", f"<p>{ok}: every shard, boundary and count of <code>{esc(checked)}</code> "
                                 "checked against its JSON, the plan and stats.json.</p>", "funnel")
    c = counts(stats)
    n_drop, n_err = sum(c["dropped"].values()), sum(c["errored"].values())
    head = (f'<p><b data-count="records_in">{num(c["in"])}</b> {c["unit"]} in → '
            f'<b class="ok" data-count="kept">{num(c["kept"])}</b> kept, '
            f'<b data-count="dropped">{num(n_drop)}</b> dropped, '
            f'<b class="bad" data-count="errored">{num(n_err)}</b> errored</p>{_bar(c)}')
    reasons = [[Raw(f'<span class="pill">{esc(kind)}</span>'), Raw(f'<code>{esc(r)}</code>'),
                Raw(f'<span data-reason-count="{esc(kind)}:{esc(r)}">{num(n)}</span>')]
               for kind in ("dropped", "errored") for r, n in sorted(c[kind].items(), key=lambda kv: -kv[1])]
    inner = head
    if reasons:
        inner += "<h3>By reason</h3>" + table(["kind", "reason", "records"], reasons, numeric={2})
    per_source = stats.get("per_source") or {}
    if per_source:
        rows = []
        metrics = [m for m in METRICS if any(isinstance(e.get(m), (int, float)) for e in per_source.values())]
        for src, e in sorted(per_source.items()):
            sc = counts(e)
            rows.append([src, sc["in"], sc["kept"],
                         ", ".join(f"{k} {v:,}" for k, v in sorted(sc["dropped"].items())) or "–",
                         ", ".join(f"{k} {v:,}" for k, v in sorted(sc["errored"].items())) or "–",
                         *[e.get(m) for m in metrics]])
        inner += "<h3>Per source</h3>" + table(["source", "in", "kept", "dropped", "errored",
                                                *[m.replace("_", " ") for m in metrics]], rows,
                                               numeric={1, 2, *range(5, 5 + len(metrics))}, tid="per-source")
    return section("Funnel", inner, "funnel")


def settings_html(stats: dict[str, Any], history: str | None = None) -> str:
    """The command, seed, settings and versions of a stage, folded.

    No wall times: a page is a function of the stage's outputs, the same bytes for a straight and a resumed run;
    ``history``, the link to the folder's ``history.json`` (where the times are), when it has one.
    """
    settings = stats.get("settings") or {}
    rows = [[k, Raw(f"<code>{esc(v)}</code>")] for k, v in sorted(settings.items())]
    vers = ", ".join(f"{k} {v}" for k, v in sorted((stats.get("versions") or {}).items()))
    seed = stats.get("seed")
    facts = [f"seed {esc(seed)}"] if seed is not None and str(seed) != "" else []
    if history:
        facts.append(f'wall times and resumes: <a href="{esc(history)}">history.json</a>')
    inner = f'<p><code>{esc(stats.get("command", ""))}</code></p>'
    if facts:
        inner += f'<p class="muted">{"; ".join(facts)}</p>'
    inner += f"<p class=muted>{esc(vers)}</p>"
    if rows:
        inner += "<details><summary>settings</summary>" + table(["setting", "value"], rows) + "</details>"
    return section("Command and settings", inner, "settings")
