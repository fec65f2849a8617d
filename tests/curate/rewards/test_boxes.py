"""Box helpers: the Qwen2-VL resize, coordinate systems and IoU edge cases."""

from __future__ import annotations

import math
import random

import pytest

from curate.rewards import boxes as bx
from curate.rewards.boxes import dynamic_iou_threshold, smart_resize


@pytest.mark.slow  # importing transformers takes several seconds
def test_smart_resize_matches_the_transformers_processor() -> None:
    qwen = pytest.importorskip("transformers.models.qwen2_vl.image_processing_qwen2_vl")
    rng = random.Random(7)
    sizes = [(32, 32), (1000, 500), (4000, 3000), (640, 480), (28, 2000), (1000, 10), (10, 1000), (300, 5),
             (13, 13), (1, 1)] + [(rng.randint(28, 4000), rng.randint(28, 4000)) for _ in range(200)] + [
        (rng.randint(1, 27), rng.randint(1, 2000)) for _ in range(100)]
    for w, h in sizes:
        if max(w, h) / min(w, h) > 150:
            continue
        for lo, hi in ((56 * 56, 28 * 28 * 1280), (3136, 12845056), (256 * 28 * 28, 512 * 28 * 28)):
            rh, rw = qwen.smart_resize(h, w, factor=28, min_pixels=lo, max_pixels=hi)
            assert smart_resize(w, h, lo, hi) == (rw, rh), (w, h, lo, hi)


@pytest.mark.parametrize(
    "size,expected",
    # 1000x500: 36x18 patches of 28 -> 1008x504 (area 508,032 within [3136, 1,003,520])
    # 4000x3000: 12,000,000 > max: beta = sqrt(12e6 / 1003520) = 3.458; floor(4000/3.458/28)*28 = 1148,
    #            floor(3000/3.458/28)*28 = 840
    # 32x32: rounds to 28x28 = 784 < 3136: beta = sqrt(3136/1024) = 1.75; ceil(56/28)*28 = 56
    [((1000, 500), (1008, 504)), ((4000, 3000), (1148, 840)), ((32, 32), (56, 56))],
)
def test_smart_resize_worked_examples(size, expected) -> None:
    assert smart_resize(size[0], size[1], 3136, 1003520) == expected


@pytest.mark.parametrize(
    "progress,expected",
    [(None, 0.5), (0.0, 0.85), (0.05, 0.85), (0.10, 0.85), (0.11, 0.95), (0.25, 0.95), (0.26, 0.99), (1.0, 0.99)],
)
def test_dynamic_threshold_schedule(progress, expected) -> None:
    assert dynamic_iou_threshold(progress) == expected


def test_iou_edge_cases() -> None:
    a = bx.Box(0, 0, 2, 2)
    assert bx.iou(a, a) == 1.0
    assert bx.iou(a, bx.Box(2, 0, 4, 2)) == 0.0  # touching edges
    assert bx.iou(a, bx.Box(0, 0, 0, 2)) == 0.0  # zero area
    assert bx.iou(a, bx.Box(2, 2, 0, 0)) == 0.0  # inverted
    assert bx.iou(a, bx.Box(math.nan, 0, 1, 1)) == 0.0
    assert bx.iou(bx.Box(-1e308, -1e308, 1e308, 1e308), a) == 0.0  # overflowing union
    assert bx.iou(bx.Box(0.1, 0.1, 0.5, 0.5), bx.Box(0.3, 0.3, 0.7, 0.7)) == pytest.approx(1 / 7)


def test_coordinate_systems() -> None:
    frame = bx.frame_from({"image_size": [1000, 500], "min_pixels": 3136, "max_pixels": 1003520}, {})
    assert frame.resized_size == (1008.0, 504.0)
    gold = [bx.Box(100, 50, 300, 250)]
    assert bx.gold_system(gold, frame, None) == "pixel"
    assert bx.gold_system([bx.Box(0.1, 0.1, 0.3, 0.5)], frame, None) == "norm1"
    assert bx.pred_system([bx.Box(0.1, 0.1, 0.3, 0.5)], frame, "pixel", None) == "norm1"
    assert bx.pred_system([bx.Box(100, 600, 300, 900)], frame, "pixel", None) == "norm1000"  # y beyond 504
    (moved,) = bx.convert([bx.Box(100, 100, 300, 500)], "norm1000", "pixel", frame)
    assert (moved.x1, moved.y1, moved.x2, moved.y2) == pytest.approx((100, 50, 300, 250))
    with pytest.raises(bx.VerifierFailure):
        bx.convert(gold, "pixel", "norm1", bx.Frame())


def test_parse_boxes_forms() -> None:
    assert [b.label for b in bx.parse_boxes('[{"bbox_2d": [1, 2, 3, 4], "label": "Cat"}, {"box": [5, 6, 7, 8]}]')] == ["cat", None]
    assert len(bx.parse_boxes("<|box_start|>(1,2),(3,4)<|box_end|>")) == 1
    assert bx.parse_boxes("no boxes here") == []
    assert not bx.parse_boxes('{"bbox_2d": [true, 1, 2, 3]}')[0].valid
    assert bx.parse_boxes("[" * 3000 + "]" * 3000) == []
