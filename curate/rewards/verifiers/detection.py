"""Detection verifier (several labelled boxes).

Gold and prediction are lists of ``{"bbox_2d": [x1, y1, x2, y2], "label": "..."}`` (or any
form :mod:`curate.rewards.boxes` reads), reconciled to the gold's coordinate system.
Labels compare case-insensitively; a gold without labels makes the task class-agnostic
(as does ``match_labels: false``).

Parameters (``reward.parameters``):
    method: ``"od_length"`` (default; VLM-R1: mAP x min(1, N_gold / N_pred), which removes
        the reward for redundant boxes), ``"map"`` (mAP alone) or ``"weighted"`` (V-Triune:
        ``((1 - c) * mean matched IoU + c * completeness) * 0.6 ** |N_pred - N_gold|``).
    iou_threshold: ``None`` (default: COCO mAP@[.5:.95] for the mAP methods, 0.5 for
        the greedy matching of ``weighted``), a number, or ``"dynamic"`` (0.85 / 0.95 /
        0.99 by training ``progress``, 0.5 without progress). With a threshold, mAP is
        the AP at that single IoU.
    completeness_weight: ``c`` of ``weighted`` (default 0.3).
    count_penalty: base of the count penalty of ``weighted`` (default 0.6).

``weighted`` matches greedily: same-label (gold, prediction) pairs by decreasing IoU, each
box used once, pairs below the threshold never matched. *Mean matched IoU* is the mean
over the matched pairs (0 without a match); *completeness* is
``1 - (missed_gold / N_gold + unmatched_pred / N_pred) / 2``. mAP comes from pycocotools
(COCOeval with every prediction at score 1, in answer order), run in a worker process.
Empty gold and empty prediction score 1; one of them empty scores 0.
"""

from __future__ import annotations

from typing import Any, Mapping

from curate.rewards import boxes as bx
from curate.rewards.verifiers.bbox import reconciled, threshold_for
from curate.rewards.verdict import Context, Deferred, RecordError, param, where

METHODS = ("od_length", "map", "weighted")
DEFAULT_TIME_LIMIT = 10.0


def _labels_used(gold: list[bx.Box], params: Mapping[str, Any]) -> bool:
    return bool(param(params, "match_labels", True)) and any(g.label for g in gold)


def greedy_match(gold: list[bx.Box], pred: list[bx.Box], threshold: float, use_labels: bool) -> list[tuple[int, int, float]]:
    """Greedy one-to-one matching: ``(pred_index, gold_index, iou)`` by decreasing IoU."""
    pairs = []
    for i, p in enumerate(pred):
        if not p.valid:
            continue
        for j, g in enumerate(gold):
            if use_labels and (p.label or "") != (g.label or ""):
                continue
            v = bx.iou(p, g)
            if v >= threshold and v > 0.0:
                pairs.append((-v, i, j))
    pairs.sort()
    used_p: set[int] = set()
    used_g: set[int] = set()
    out = []
    for neg, i, j in pairs:
        if i in used_p or j in used_g:
            continue
        used_p.add(i)
        used_g.add(j)
        out.append((i, j, -neg))
    return out


def weighted_score(gold: list[bx.Box], pred: list[bx.Box], threshold: float, c: float = 0.3,
                   base: float = 0.6, use_labels: bool = True) -> float:
    """V-Triune's weighted detection score (see the module docstring)."""
    if not gold or not pred:
        return 1.0 if not gold and not pred else 0.0
    matches = greedy_match(gold, pred, threshold, use_labels)
    mean_iou = sum(m[2] for m in matches) / len(matches) if matches else 0.0
    miss = (len(gold) - len(matches)) / len(gold)
    false_alarm = (len(pred) - len(matches)) / len(pred)
    completeness = 1.0 - (miss + false_alarm) / 2.0
    return ((1.0 - c) * mean_iou + c * completeness) * base ** abs(len(pred) - len(gold))


def coco_map(gold: tuple, pred: tuple, iou_threshold: float | None) -> float:
    """mAP of ``pred`` against ``gold`` with pycocotools (runs in a worker: it prints).

    Args:
        gold: ``(label, x1, y1, x2, y2)`` tuples.
        pred: ``(label, x1, y1, x2, y2)`` tuples, valid boxes only, in answer order.
        iou_threshold: ``None`` for COCO's 0.50:0.95, else the single IoU threshold.
    """
    import numpy as np
    from pycocotools.coco import COCO
    from pycocotools.cocoeval import COCOeval

    labels = sorted({g[0] for g in gold} | {p[0] for p in pred})
    cat = {name: i + 1 for i, name in enumerate(labels)}
    coco = COCO()
    coco.dataset = {
        "images": [{"id": 1}],
        "categories": [{"id": cat[n], "name": n} for n in labels],
        "annotations": [
            {"id": k + 1, "image_id": 1, "category_id": cat[l], "bbox": [x1, y1, x2 - x1, y2 - y1],
             "area": (x2 - x1) * (y2 - y1), "iscrowd": 0}
            for k, (l, x1, y1, x2, y2) in enumerate(gold)
        ],
    }
    coco.createIndex()
    dets = coco.loadRes([
        {"image_id": 1, "category_id": cat[l], "bbox": [x1, y1, x2 - x1, y2 - y1], "score": 1.0}
        for (l, x1, y1, x2, y2) in pred
    ])
    ev = COCOeval(coco, dets, "bbox")
    ev.params.maxDets = [max(1, len(pred))]
    if iou_threshold is not None:
        ev.params.iouThrs = np.array([float(iou_threshold)])
    ev.evaluate()
    ev.accumulate()
    precision = ev.eval["precision"][:, :, :, 0, -1]
    valid = precision[precision > -1]
    return float(valid.mean()) if valid.size else 0.0


def _length_factor(n_gold: int, n_pred: int) -> float:
    return 1.0 if n_pred <= n_gold else n_gold / n_pred


def verify(response: str, golds: list[Any], params: Mapping[str, Any], ctx: Context) -> float | Deferred:
    """Detection score by the chosen ``method`` (mAP methods are deferred to a worker)."""
    rid = ctx.record.get("id")
    method = str(param(params, "method", "od_length")).lower()
    if method not in METHODS:
        raise RecordError(f"{where(rid)}: detection method {method!r} is not one of {', '.join(METHODS)}")
    threshold = threshold_for(params, ctx.progress, rid)
    gold, pred = reconciled(response, golds, params, ctx)
    if not gold or not pred:
        return 1.0 if not gold and not pred else 0.0
    use_labels = _labels_used(gold, params)
    if method == "weighted":
        return weighted_score(gold, pred, 0.5 if threshold is None else threshold,
                              float(param(params, "completeness_weight", 0.3)),
                              float(param(params, "count_penalty", 0.6)), use_labels)

    def key(b: bx.Box) -> str:
        return (b.label or "") if use_labels else "object"

    g = tuple((key(b), b.x1, b.y1, b.x2, b.y2) for b in gold)
    p = tuple((key(b), b.x1, b.y1, b.x2, b.y2) for b in pred if b.valid)
    if not p:
        return 0.0
    factor = _length_factor(len(gold), len(pred)) if method == "od_length" else 1.0
    limit = float(param(params, "time_limit", DEFAULT_TIME_LIMIT))
    return Deferred("curate.rewards.verifiers.detection:coco_map", (g, p, threshold),
                    post=(lambda v, f=factor: v * f), limit=limit)
