"""The log-log chart drawn with Pillow (curate.core.chart): where its lines fall, its ticks, its bytes."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from curate.core.chart import Layout, Series, _limits, _ticks, loglog_png, tick_label

RED = (0xC0, 0x39, 0x2B)


def _pixels(path: Path) -> np.ndarray:
    with Image.open(path) as image:
        return np.asarray(image.convert("RGB"), np.int16)


def _near(pixels: np.ndarray, colour: tuple[int, int, int], tolerance: int = 40) -> np.ndarray:
    return (np.abs(pixels - np.array(colour)).sum(axis=2) < tolerance)


def test_a_power_law_is_a_straight_line_where_the_axes_put_it(tmp_path: Path) -> None:
    x = np.arange(1, 1001, dtype=np.float64)
    loglog_png(tmp_path / "c.png", [Series(x, 1e4 / x, "y = 10^4 / x", "#c0392b")], title="t", xlabel="x",
               ylabel="y")
    lay = Layout()
    pixels = _pixels(tmp_path / "c.png")
    assert pixels.shape == (lay.height, lay.width, 3)
    x0, x1 = round(lay.left * lay.width), round(lay.right * lay.width)
    y0, y1 = round((1 - lay.top) * lay.height), round((1 - lay.bottom) * lay.height)
    xlim, ylim = _limits([x]), _limits([1e4 / x])
    red = _near(pixels, RED)
    for value in (2.0, 10.0, 50.0, 300.0):
        column = round(x0 + (math.log10(value) - xlim[0]) / (xlim[1] - xlim[0]) * (x1 - x0))
        expected = y1 - (math.log10(1e4 / value) - ylim[0]) / (ylim[1] - ylim[0]) * (y1 - y0)
        rows = np.flatnonzero(red[y0:y1, column]) + y0
        assert rows.size and abs(rows.mean() - expected) < 2.5, (value, rows, expected)
    assert red[y0:y0 + 60, x1 - 200:x1].any()  # the legend's sample line, upper right


def test_same_inputs_same_bytes_and_bad_points_left_out(tmp_path: Path) -> None:
    series = [Series(np.array([1, 2, 3, 0, -1]), np.array([5, 0, 2, 4, 4]), "a", "#2471a3")]
    loglog_png(tmp_path / "a.png", series, title="t", xlabel="x", ylabel="y")
    loglog_png(tmp_path / "b.png", series, title="t", xlabel="x", ylabel="y")
    clean = [Series(np.array([1, 3]), np.array([5, 2]), "a", "#2471a3")]
    loglog_png(tmp_path / "c.png", clean, title="t", xlabel="x", ylabel="y")
    assert (tmp_path / "a.png").read_bytes() == (tmp_path / "b.png").read_bytes() == (tmp_path / "c.png").read_bytes()


def test_no_points_draw_the_note_and_no_line(tmp_path: Path) -> None:
    loglog_png(tmp_path / "e.png", [Series(np.array([1.0]), np.array([0.0]), "a", "#c0392b")], title="t",
               xlabel="x", ylabel="y", empty="nothing here")
    pixels = _pixels(tmp_path / "e.png")
    assert not _near(pixels, RED).any()
    lay = Layout()
    middle = pixels[lay.height // 2 - 10:lay.height // 2 + 10, lay.width // 2 - 60:lay.width // 2 + 60]
    assert (middle.sum(axis=2) < 200).any()  # dark text in the middle


@pytest.mark.parametrize(("lo", "hi", "expected"), [
    (-0.1, 3.2, [1, 10, 100, 1000]),
    (0.2, 0.9, [2, 5]),
    (-0.5, 0.5, [0.5, 1, 2]),
])
def test_ticks(lo: float, hi: float, expected: list[float]) -> None:
    assert _ticks(lo, hi) == pytest.approx(expected)


def test_limits_and_tick_labels() -> None:
    assert _limits([np.array([1.0, 1000.0])]) == pytest.approx((-0.15, 3.15))
    assert _limits([np.array([10.0])]) == pytest.approx((0.5, 1.5))
    assert [tick_label(v) for v in (0.5, 1, 10, 1000, 1e5, 1e6)] == ["0.5", "1", "10", "1,000", "1e+05",
                                                                        "1e+06"]
