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

from curate.core.errors import UserError
from curate.core.io import Location, atomic_open, is_url, read_json
from curate.report.assets import Assets
from curate.report.funnel import counts, funnel_html, settings_html
from curate.report.html import Raw, esc, page, section, table
from curate.report.rejects import rejects_html
from curate.report.pages import samples_html
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
