"""The report page of each stage: one module per stage draws its browsable samples (``view=`` in
:mod:`curate.stages` names ``pages.<module>:<function>``); :func:`samples_html` looks it up."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from curate.report.assets import Assets
from curate.report.html import esc
from curate.stages import STAGES


def image_html(assets: Assets, image: Any, alt: str = "") -> str:
    """An ``<img>`` of a record's image (its thumbnail), or a note that it could not be read."""
    src = assets.thumb(image)
    if src is None:
        return '<div class="muted">(image not readable)</div>'
    return f'<img src="{esc(src)}" alt="{esc(alt)}">'



def samples_html(stage: str, folder: Path, stats: dict[str, Any], assets: Assets, samples: int, seed: int) -> str:
    """The browsable samples of one stage, drawn by its spec's view (:mod:`curate.stages`; "" for none)."""
    import importlib

    spec = STAGES.get(stage)
    if spec is None or spec.view is None:
        return ""
    module, _, function = spec.view.partition(":")
    view = getattr(importlib.import_module(f"curate.report.{module}"), function)
    return view(folder, stats, assets, samples, seed)
