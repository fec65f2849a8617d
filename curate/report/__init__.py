"""``curate report``: a static HTML site in ``OUT/report/`` showing what each stage did to the data.

It opens from the file system (no server, no network: CSS and script inline,
thumbnails and plots as files in ``report/assets/``). Per stage: the funnel
(records in → kept, dropped and errored by reason, per source), its plots, browsable
samples (a seeded sample of ``samples`` per page, so a report on a huge run stays
small and fast) and the dropped/errored records, filterable by reason and source.

``OUT`` is a stage folder (it holds a ``stats.json``) or a ``curate run`` folder
(steps in ``OUT/NN-name/``); the report goes to ``OUT/report/`` either way.
"""

from __future__ import annotations

import re
import shutil
from pathlib import Path
from typing import Any

import numpy as np

from curate.core.errors import UserError
from curate.core.io import Location, atomic_open, is_url, read_json
from curate.report.site import Assets, Raw, esc, filters, num, page, read_sampled, sample_indices, section, table
from curate.stages import STAGES


__all__ = ["find_stages", "write_report"]

_STEP = re.compile(r"^\d{2}-[A-Za-z][A-Za-z0-9_-]*$")


def find_stages(out: Path) -> list[tuple[str, Path]]:
    """(page name, folder) of each stage under ``out``: the folder itself, or its ``NN-name`` steps."""
    if (out / "stats.json").exists():
        return [("stage", out)]
    return [(p.name, p) for p in sorted(out.iterdir()) if p.is_dir() and _STEP.match(p.name)
            and (p / "stats.json").exists()]


def _stage_page(name: str, folder: Path, stats: dict[str, Any], assets: Assets, samples: int, seed: int,
                nav: list[tuple[str, str]]) -> str:
    stage = str(stats.get("stage", "?"))
    parts = [funnel_html(stats)]
    plots = [assets.copy(folder / p, name) for p in (STAGES[stage].plots if stage in STAGES else ())]
    plots = [p for p in plots if p]
    if plots:
        parts.append(section("Plots", "".join(f'<img class="plot" src="{esc(p)}" alt="plot">' for p in plots), "plots"))
    parts.append(samples_html(stage, folder, stats, assets, samples, seed))
    parts.append(rejects_html(folder, samples, seed))
    history = "../history.json" if name == "stage" else f"../{name}/history.json"
    parts.append(settings_html(stats, history if (folder / "history.json").exists() else None))
    title = f"{name if name != 'stage' else folder.name}: {stage}"
    return page(title, "".join(p for p in parts if p), nav)


def _index(out: Path, stages: list[tuple[str, Path, dict[str, Any]]], nav: list[tuple[str, str]]) -> str:
    rows = []
    for name, folder, stats in stages:
        c = counts(stats)
        rows.append([Raw(f'<a href="{esc(name)}.html">{esc(name)}</a>'), stats.get("stage", "?"), c["in"], c["kept"],
                     sum(c["dropped"].values()), sum(c["errored"].values()),
                     ", ".join(f"{k} {v:,}" for k, v in sorted(c["dropped"].items())) or "–",
                     ", ".join(f"{k} {v:,}" for k, v in sorted(c["errored"].items())) or "–"])
    inner = table(["step", "stage", "in", "kept", "dropped", "errored", "dropped by reason", "errored by reason"],
                  rows, numeric={2, 3, 4, 5}, tid="steps")
    lock = out / "recipe.lock.yaml"
    extra = f'<p>Recipe settings and versions: <a href="../recipe.lock.yaml">recipe.lock.yaml</a></p>' if lock.exists() else ""
    return page(f"curate report: {out.name or out}", section("Steps", inner + extra, "steps"), nav)


def _stats(path: Path) -> dict[str, Any]:
    """A stage's ``stats.json``, or one line naming it (cut short, not JSON, not an object)."""
    try:
        stats = read_json(path)
    except (OSError, ValueError) as exc:  # UnicodeDecodeError and JSONDecodeError are ValueErrors
        raise UserError(f"{path}: not a readable stats file ({type(exc).__name__}: {str(exc)[:120]}); rerun the "
                        "stage that wrote it") from None
    except RecursionError:
        raise UserError(f"{path}: not a readable stats file (nested too deep)") from None
    if not isinstance(stats, dict):
        raise UserError(f"{path}: holds a JSON {type(stats).__name__}, not a stage's stats object; rerun the stage "
                        "that wrote it")
    return stats


def write_report(out: str | Path, *, samples: int = 48, seed: int = 0) -> Path | Location:
    """Write ``OUT/report/`` and return the path of its ``index.html``.

    Args:
        out: a stage folder or a ``curate run`` folder.
        samples: samples shown per page section (a seeded sample).
        seed: seed of the sample.

    Raises:
        UserError: ``out`` holds no stage output.
    """
    if is_url(out):
        return _in_bucket(str(out).rstrip("/"), samples, seed)
    out = Path(out)
    if not out.is_dir():
        raise UserError(f"{out}: no such folder; give a stage's --out or a curate run folder")
    found = find_stages(out)
    if not found:
        raise UserError(f"{out}: no stats.json here nor in NN-name/ step folders; run a stage or a recipe first")
    report = out / "report"
    tmp = out / ".report.tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    assets = Assets(tmp)
    stages = [(name, folder, _stats(folder / "stats.json")) for name, folder in found]
    nav = [("index", "index.html")] + [(name if name != "stage" else str(s.get("stage", name)), f"{name}.html")
                                       for name, _, s in stages]
    try:
        for name, folder, stats in stages:
            with atomic_open(tmp / f"{name}.html", "w") as fh:
                fh.write(_stage_page(name, folder, stats, assets, samples, seed, nav))
        with atomic_open(tmp / "index.html", "w") as fh:
            fh.write(_index(out, stages, nav))
    except (KeyError, TypeError, ValueError, AttributeError, IndexError) as exc:  # a stats.json of the wrong shape
        shutil.rmtree(tmp, ignore_errors=True)
        raise UserError(f"{out}: a stats.json there is not one curate can report ({type(exc).__name__}: "
                        f"{str(exc)[:200]}); rerun the stage that wrote it") from None
    shutil.rmtree(report, ignore_errors=True)
    tmp.rename(report)
    return report / "index.html"


#: What a report reads of a stage folder (and of each step folder of a run): never the shards' data.
READS = tuple(f"{step}{name}" for step in ("", "[0-9][0-9]-*/")
              for name in ("stats.json", "history.json", "rejects.parquet", "*.png", "tags.parquet", "selection.parquet",
                           "captions.parquet", "plan.parquet", "lengths.parquet", "prompts.parquet",
                           "rollouts.parquet", "scores.parquet")) + ("recipe.lock.yaml",)


def _in_bucket(url: str, samples: int, seed: int) -> Location:
    """The report of a folder in a bucket: made from a temporary copy of what it reads, put at ``URL/report/``."""
    from curate.core.remote import reading, upload

    with reading(url, include=READS) as local:
        write_report(local, samples=samples, seed=seed)
        upload(local / "report", f"{url}/report")
    return Location(f"{url}/report/index.html")


def samples_html(stage: str, folder: Path, stats: dict[str, Any], assets: Assets, samples: int, seed: int) -> str:
    """The browsable samples of one stage, drawn by its spec's view (``view=`` in :mod:`curate.stages` names a
    function of :mod:`curate.report.pages`; "" for none)."""
    import importlib

    spec = STAGES.get(stage)
    if spec is None or spec.view is None:
        return ""
    module, _, function = spec.view.partition(":")
    view = getattr(importlib.import_module(f"curate.report.{module}"), function)
    return view(folder, stats, assets, samples, seed)


# The funnel of a stage from its ``stats.json``: records in → kept, dropped and errored by reason, per source.
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


# Dropped and errored records with their reasons: a seeded sample per reason, filterable on the page.
def _sample_rows(path: Path, per_reason: int, seed: int) -> tuple[list[dict[str, str]], int, bool]:
    """Up to ``per_reason`` rows of each (kind, reason), seeded; the file's row count; whether row groups were sampled."""
    table, total, partial = read_sampled(path, None, seed)
    if table.num_rows == 0:
        return [], total, partial
    # group rows by (kind, reason) through dictionary codes: no Python object per row
    kind = table.column("kind").combine_chunks().dictionary_encode()
    reason = table.column("reason").combine_chunks().dictionary_encode()
    n_reasons = len(reason.dictionary)
    key = kind.indices.to_numpy().astype(np.int64) * n_reasons + reason.indices.to_numpy()
    kinds, reasons = kind.dictionary.to_pylist(), reason.dictionary.to_pylist()
    groups = {(kinds[k // n_reasons], reasons[k % n_reasons]): k for k in np.unique(key).tolist()}
    chosen: list[int] = []
    for salt, name in enumerate(sorted(groups)):
        rows = np.flatnonzero(key == groups[name])
        chosen.extend(rows[sample_indices(len(rows), per_reason, seed, salt)].tolist())
    chosen.sort()
    return table.take(chosen).to_pylist(), total, partial


def rejects_html(folder: Path, per_reason: int, seed: int, *, anchor: str = "rejects") -> str:
    """The rejects section of a stage folder (empty when it has no ``rejects.parquet``)."""
    path = folder / "rejects.parquet"
    if not path.exists():
        return ""
    rows, total, partial = _sample_rows(path, per_reason, seed)
    if not rows:
        return section("Dropped and errored records", "<p class=muted>none</p>", anchor)
    body = [[Raw(f'<span class="pill">{esc(r["kind"])}</span>'), Raw(f"<code>{esc(r['reason'])}</code>"),
             r["source"], Raw(f"<code>{esc(r['id'])}</code>"), r.get("detail") or ""] for r in rows]
    attrs = [{"row": "1", "reason": r["reason"], "source": r["source"], "kind": r["kind"]} for r in rows]
    tid = f"{anchor}-table"
    where = " of a seeded choice of row groups" if partial else ""
    inner = (f"<p class=muted>{len(rows):,} of {total:,} rows shown (a seeded sample of at most {per_reason} per "
             f"reason{where}); the full list is rejects.parquet.</p>"
             + filters(tid, {"kind": sorted({r["kind"] for r in rows}),
                             "reason": sorted({r["reason"] for r in rows}),
                             "source": sorted({r["source"] for r in rows})}, "search ids, details")
             + table(["kind", "reason", "source", "id", "detail"], body, row_attrs=attrs, tid=tid))
    return section("Dropped and errored records", inner, anchor)
