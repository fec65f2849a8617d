"""A log-log line chart as a PNG, drawn with Pillow: the long-tail plot of ``curate resample``.

matplotlib's import alone costs 0.6–0.7 s of CPU, more than drawing this chart
takes with it, and more than half of what ``resample`` otherwise adds to reading
its 10M records on two cores. Pillow imports in a few milliseconds and draws the
same picture (lines, decade ticks and grid, labels, legend, title) in tens of
them. Measured at 10M records in issue 38 (``benchmarks/bench_process_tuning.py``,
whole ``python -m curate resample`` processes, matplotlib's Agg plot against this one,
rounds in rotated order on 2 shared cores at load 6–12): 1.07× wall and 1.06× CPU
(5 rounds), 1.17× and 1.26× (5 rounds), 0.93× and 0.99× (4 rounds); the import alone
0.61–0.67 s of CPU. Below issue 38's 10% bar in two sets of three; kept because
matplotlib would draw different ``balance.png`` bytes (the lead's call).
Lines are drawn at twice the size and scaled down (smooth edges); text is
set at the final size. The font is DejaVu Sans (matplotlib's own copy or the
system's) when found, else Pillow's bundled font. The same inputs give the same
bytes with the same Pillow and font.
"""

from __future__ import annotations

import importlib.util
import math
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from PIL import Image, ImageDraw, ImageFont

from curate.core.io import atomic_open

SCALE = 2
"""Lines and grid are drawn at this multiple of the final size, then scaled down."""
_GRID, _FRAME, _TEXT = (223, 223, 223), (0, 0, 0), (0, 0, 0)
_SYSTEM_FONT = Path("/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf")


@dataclass(frozen=True)
class Series:
    """One line: points ``(x, y)`` (positive values; others are left out), its legend label and colour."""

    x: np.ndarray
    y: np.ndarray
    label: str
    color: str


@dataclass(frozen=True)
class Layout:
    """Size in pixels, the plot area's margins as fractions of it, and the font sizes in pixels."""

    width: int = 770
    height: int = 495
    left: float = 0.12
    right: float = 0.97
    bottom: float = 0.12
    top: float = 0.90
    text: int = 14
    title: int = 14
    legend: int = 11
    line: float = 2.4


def font_file() -> Path | None:
    """DejaVu Sans from matplotlib's data (found without importing it) or the system's; None if neither."""
    spec = importlib.util.find_spec("matplotlib")
    for folder in (spec.submodule_search_locations or []) if spec else []:
        candidate = Path(folder) / "mpl-data" / "fonts" / "ttf" / "DejaVuSans.ttf"
        if candidate.is_file():
            return candidate
    return _SYSTEM_FONT if _SYSTEM_FONT.is_file() else None


def _font(size: int) -> ImageFont.FreeTypeFont | ImageFont.ImageFont:
    path = font_file()
    return ImageFont.truetype(str(path), size) if path else ImageFont.load_default(size)


def tick_label(value: float) -> str:
    """``0.5``, ``1``, ``10``, ``1,000``, ``1e+06``: plain text."""
    if 1e-3 <= value < 1:
        return f"{value:g}"
    return f"{value:,.0f}" if 1 <= value < 1e5 else f"{value:.0e}"


def _limits(values: list[np.ndarray]) -> tuple[float, float]:
    """log10 limits of an axis: the data's range and 5% of it on each side (half a decade when flat)."""
    finite = [v for v in values if v.size]
    if not finite:
        return 0.0, 1.0
    lo = min(float(np.log10(v.min())) for v in finite)
    hi = max(float(np.log10(v.max())) for v in finite)
    if hi - lo < 1e-9:
        return lo - 0.5, hi + 0.5
    pad = 0.05 * (hi - lo)
    return lo - pad, hi + pad


def _ticks(lo: float, hi: float) -> list[float]:
    """Decades within ``[lo, hi]`` (log10), with 2× and 5× between them when fewer than two decades fit."""
    decades = list(range(math.ceil(lo), math.floor(hi) + 1))
    if len(decades) >= 2:
        return [10.0 ** d for d in decades]
    steps = [m * 10.0 ** d for d in range(math.floor(lo), math.ceil(hi) + 1) for m in (1, 2, 5)]
    return [s for s in steps if lo <= math.log10(s) <= hi]


def loglog_png(path: str | os.PathLike[str], series: Sequence[Series], *, title: str, xlabel: str, ylabel: str,
               empty: str = "no data", layout: Layout | None = None) -> Path:
    """Draw ``series`` on log-log axes with a legend (upper right) and write a PNG to ``path`` (atomically).

    With no positive point at all the axes carry ``empty`` in their middle.
    """
    lay = layout or Layout()
    kept = []
    for s in series:
        x, y = np.asarray(s.x, np.float64), np.asarray(s.y, np.float64)
        ok = (x > 0) & (y > 0)
        if ok.any():
            kept.append(Series(x[ok], y[ok], s.label, s.color))
    x0, x1 = round(lay.left * lay.width), round(lay.right * lay.width)
    y0, y1 = round((1 - lay.top) * lay.height), round((1 - lay.bottom) * lay.height)
    xlim, ylim = _limits([s.x for s in kept]), _limits([s.y for s in kept])

    def px(v: np.ndarray | float, lim: tuple[float, float], a: int, b: int) -> np.ndarray:
        return a + (np.log10(v) - lim[0]) / (lim[1] - lim[0]) * (b - a)

    xticks, yticks = (_ticks(*xlim), _ticks(*ylim)) if kept else ([], [])
    big = Image.new("RGB", (lay.width * SCALE, lay.height * SCALE), "white")
    draw = ImageDraw.Draw(big)
    for t in xticks:
        at = float(px(t, xlim, x0, x1)) * SCALE
        draw.line([(at, y0 * SCALE), (at, y1 * SCALE)], fill=_GRID, width=SCALE)
    for t in yticks:
        at = float(px(t, ylim, y1, y0)) * SCALE
        draw.line([(x0 * SCALE, at), (x1 * SCALE, at)], fill=_GRID, width=SCALE)
    width = max(1, round(lay.line * SCALE))
    for s in kept:
        points = np.column_stack([px(s.x, xlim, x0, x1), px(s.y, ylim, y1, y0)]) * SCALE
        draw.line([tuple(p) for p in points.tolist()], fill=s.color, width=width, joint="curve")
    image = big.resize((lay.width, lay.height), Image.Resampling.LANCZOS)
    _frame_and_text(image, lay, (x0, y0, x1, y1), kept, (xticks, xlim), (yticks, ylim), title, xlabel, ylabel,
                    empty)
    path = Path(path)
    with atomic_open(path, "wb") as fh:
        image.save(fh, format="PNG")
    return path


def _frame_and_text(image: Image.Image, lay: Layout, box: tuple[int, int, int, int], kept: list[Series],
                    xaxis: tuple[list[float], tuple[float, float]], yaxis: tuple[list[float], tuple[float, float]],
                    title: str, xlabel: str, ylabel: str, empty: str) -> None:
    """The frame, ticks and their labels, axis labels, title, legend (or the ``empty`` note), at final size."""
    x0, y0, x1, y1 = box
    draw = ImageDraw.Draw(image)
    text, small, heading = _font(lay.text), _font(lay.legend), _font(lay.title)
    draw.rectangle([x0, y0, x1, y1], outline=_FRAME, width=1)
    for t in xaxis[0]:
        at = x0 + (math.log10(t) - xaxis[1][0]) / (xaxis[1][1] - xaxis[1][0]) * (x1 - x0)
        draw.line([(at, y1), (at, y1 + 5)], fill=_FRAME, width=1)
        draw.text((at, y1 + 8), tick_label(t), font=text, fill=_TEXT, anchor="mt")
    for t in yaxis[0]:
        at = y1 - (math.log10(t) - yaxis[1][0]) / (yaxis[1][1] - yaxis[1][0]) * (y1 - y0)
        draw.line([(x0 - 5, at), (x0, at)], fill=_FRAME, width=1)
        draw.text((x0 - 8, at), tick_label(t), font=text, fill=_TEXT, anchor="rm")
    draw.text(((x0 + x1) / 2, lay.height - 8), xlabel, font=text, fill=_TEXT, anchor="md")
    label = Image.new("L", (lay.height, lay.text * 2), 0)
    ImageDraw.Draw(label).text((lay.height / 2 - (y0 + y1 - lay.height) / 2, lay.text), ylabel, font=text,
                               fill=255, anchor="mm")
    rotated = label.rotate(90, expand=True)
    image.paste(Image.new("RGB", rotated.size, _TEXT), (4, 0), rotated)
    draw.text(((x0 + x1) / 2, y0 - 10), title, font=heading, fill=_TEXT, anchor="md")
    if not kept:
        draw.text(((x0 + x1) / 2, (y0 + y1) / 2), empty, font=text, fill=_TEXT, anchor="mm")
        return
    rows = [draw.textbbox((0, 0), s.label, font=small) for s in kept]
    row_h = max(b[3] - b[1] for b in rows) + 8
    box_w = max(b[2] - b[0] for b in rows) + 52
    lx1, ly0 = x1 - 8, y0 + 8
    lx0 = lx1 - box_w
    draw.rounded_rectangle([lx0, ly0, lx1, ly0 + row_h * len(kept) + 8], radius=3, fill="white",
                           outline=(204, 204, 204))
    for i, s in enumerate(kept):
        mid = ly0 + 4 + row_h * i + row_h / 2
        draw.line([(lx0 + 8, mid), (lx0 + 36, mid)], fill=s.color, width=max(1, round(lay.line)))
        draw.text((lx0 + 44, mid), s.label, font=small, fill=_TEXT, anchor="lm")
