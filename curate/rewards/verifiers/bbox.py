"""Bounding-box verifier (one box): IoU between the predicted and the gold box.

The first box of the answer is judged (see :mod:`curate.rewards.boxes` for the accepted
forms and coordinate reconciliation); with several golds the best IoU counts.
Zero-area, inverted or unparsable predictions score 0 and never raise.

Parameters (``reward.parameters``):
    iou_threshold: ``None`` (default: the score is the IoU), a number, or ``"dynamic"``
        (V-Triune's 0.85 / 0.95 / 0.99 by training ``progress``; 0.5 without progress).
    binary: with a threshold, score 1 when IoU >= threshold (default ``True``, V-Triune's
        definite reward); ``False`` keeps the IoU when it reaches the threshold.
    box_coords, pred_coords, image_size, resized_size, min_pixels, max_pixels: see boxes.
"""

from __future__ import annotations

from typing import Any, Mapping

from curate.rewards import boxes as bx
from curate.rewards.verdict import Context, RecordError, param, where


def threshold_for(params: Mapping[str, Any], progress: float | None, record_id: Any) -> float | None:
    """The IoU threshold the parameters ask for (``None`` for none)."""
    t = params.get("iou_threshold")
    if t is None:
        return None
    if t == "dynamic":
        return bx.dynamic_iou_threshold(progress)
    try:
        value = float(t)
    except (TypeError, ValueError):
        raise RecordError(f"{where(record_id)}: iou_threshold must be a number or 'dynamic', got {t!r}") from None
    if not 0.0 <= value <= 1.0:
        raise RecordError(f"{where(record_id)}: iou_threshold must be in [0, 1], got {t!r}")
    return value


def reconciled(response: str, golds: list[Any], params: Mapping[str, Any], ctx: Context) -> tuple[list[bx.Box], list[bx.Box]]:
    """``(gold_boxes, predicted_boxes)`` in the gold's coordinate system."""
    rid = ctx.record.get("id")
    gold = [b for g in golds for b in bx.gold_boxes(g, rid)]
    gold_decl = param(params, "box_coords", ctx.record.get("box_coords"))
    pred_decl = param(params, "pred_coords", ctx.record.get("pred_coords"))
    for name, what in ((gold_decl, "box_coords"), (pred_decl, "pred_coords")):
        if name is not None:
            bx.check_system(name, what, rid)
    frame = bx.frame_from(ctx.record, params)
    text = bx.response_box_text(response)
    pred = bx.parse_boxes(text) if text is not None else []
    gsys = bx.gold_system(gold, frame, gold_decl)
    psys = bx.pred_system(pred, frame, gsys, pred_decl)
    if psys != gsys and (frame.extent(psys) is None or frame.extent(gsys) is None):
        raise RecordError(f"{where(rid)}: comparing {psys} boxes with {gsys} boxes needs image_size "
                          "(and resized_size or min_pixels/max_pixels for resized coordinates)")
    if not gold or not pred:
        return gold, pred
    return gold, bx.convert(pred, psys, gsys, frame)


def check_gold(golds: list[Any], record_id: Any = None) -> None:
    """Refuse a gold without a box (e.g. two numbers): the record cannot be scored, whatever the answer.

    Raises:
        RecordError: no valid box in any gold.
    """
    if not any(bx.gold_boxes(g, record_id) for g in golds):
        raise RecordError(f"{where(record_id)}: bbox gold has no box (four numbers x1, y1, x2, y2): {golds[0]!r:.200}")


def verify(response: str, golds: list[Any], params: Mapping[str, Any], ctx: Context) -> float:
    """IoU of the first predicted box with the best-matching gold box (thresholded if asked)."""
    threshold = threshold_for(params, ctx.progress, ctx.record.get("id"))
    gold, pred = reconciled(response, golds, params, ctx)
    if not gold:
        raise RecordError(f"{where(ctx.record.get('id'))}: bbox gold has no box")
    if not pred:
        return 0.0
    best = max(bx.iou(pred[0], g) for g in gold)
    if threshold is None:
        return best
    if best <= 0.0 or best < threshold:
        return 0.0
    return 1.0 if bool(param(params, "binary", True)) else best
