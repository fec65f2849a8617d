"""V-Triune's math accuracy and verl's geometry3k accuracy, as their reward code computes them.

* ``method: v-triune`` (default): V-Triune's ``mathverify`` verifier (MiniMax-AI/One-RL-to-See-Them-All
  ``reward_server/verify.py`` lines 133-175): response and solution lower-cased; the solution parsed by
  math-verify's default extraction (``first_match``), the response by LaTeX extraction only, ``\\boxed`` first and
  never without an anchor (so a bare ``42`` is no answer: the file's own checks, lines 570-580, score
  ``("42", "42")`` 0 and ``("\\boxed{42}", "42")`` 1); 0 when the solution does not parse.
* ``method: detection``: V-Triune's ``detection`` verifier (``verify.py`` lines 353-512, :func:`detection_accuracy`):
  the weighted mix of its greedy IoU matchings, COCO mAP/AP50/AP75 and the 0.6 count penalty, by the row's
  ``verifier_parm.det_reward_ratio`` (no weights: 0, as the seed), the IoU threshold ``dynamic`` by default
  (``scripts/reward_server.sh`` line 4; the training ``--progress`` as its step ratio, 0 without it). Boxes are
  read as the seed reads them (:func:`curate.rewards.format.v_triune_boxes`); the prediction is taken in the
  gold's coordinates (``det_verifier_normalized``, which needs the trainer's image grid, is not applied).
* ``method: geo3k``: verl's geometry3k accuracy (volcengine/verl ``verl/utils/reward_score/geo3k.py`` lines 25-30):
  the last ``\\boxed{…}`` of the response against the gold, 0 without one. verl grades with mathruler's
  ``grade_answer``; curate compares with math-verify (:func:`curate.rewards.verifiers.math.compare`), which agrees
  on numbers and most expressions.

math-verify runs in a worker under the verifier's time limit (no signal timeouts).
"""

from __future__ import annotations

from typing import Any, Mapping

from curate.rewards.extract import last_boxed_span
from curate.rewards.verdict import Context, Deferred, RecordError, param, where

DEFAULT_TIME_LIMIT = 10.0
METHODS = ("v-triune", "geo3k", "detection")


def math_accuracy(predict: str, solution: str) -> float:
    """Worker task: V-Triune's ``verify_accuracy`` of ``MathVerifyVerifier`` (see the module docstring)."""
    import math_verify
    from latex2sympy2_extended import NormalizationConfig

    predict, solution = predict.lower(), solution.lower()
    gold = math_verify.parse(solution, extraction_mode="first_match", parsing_timeout=None)
    if not gold:
        return 0.0
    config = math_verify.LatexExtractionConfig(
        normalization_config=NormalizationConfig(nits=False, malformed_operators=False, basic_latex=True,
                                                 boxed="all", units=True),
        boxed_match_priority=0, try_extract_without_anchor=False)
    answer = math_verify.parse(predict, extraction_config=[config], extraction_mode="first_match",
                               parsing_timeout=None)
    try:
        return float(math_verify.verify(gold, answer, timeout_seconds=None))
    except Exception:  # noqa: BLE001 - the seed scores a failed verification 0
        return 0.0


def verify(response: str, golds: list[str], params: Mapping[str, Any], ctx: Context) -> float | Deferred:
    """The accuracy of ``response`` by ``parameters.method`` (see the module docstring)."""
    method = str(param(params, "method", "v-triune"))
    limit = float(param(params, "time_limit", DEFAULT_TIME_LIMIT))
    if method == "detection":
        return verify_detection(response, golds, params, ctx)
    if method == "v-triune":
        return Deferred("curate.rewards.verifiers.v_triune:math_accuracy", (response, golds[0]), limit=limit)
    if method == "geo3k":
        span = last_boxed_span(response)
        if span is None:
            return 0.0
        boxed = response[span[1]:span[2]]
        return Deferred("curate.rewards.verifiers.math:compare", (tuple(golds), boxed.strip(), 6), limit=limit)
    raise RecordError(f"{where(ctx.record.get('id'))}: method {method!r} is not one of {', '.join(METHODS)}")


# ---------------------------------------------------------------------------- V-Triune's detection accuracy
#: V-Triune's IoU thresholds (``reward_server/verify.py`` line 329).
IOU_THRESHOLDS = (0.5, 0.55, 0.6, 0.65, 0.7, 0.75, 0.8, 0.85, 0.9, 0.95, 0.99)
#: The parts of V-Triune's detection score, weighted by ``det_reward_ratio`` (``verify.py`` lines 204-210, 483-497).
DET_PARTS = ("iou_max_iou_first", "iou_max_label_first", "map", "map50", "map75")
SIZE_PENALTY = 0.6  # verify.py line 425


def _iou(a: tuple, b: tuple) -> float:
    """``compute_iou`` (``reward_server/utils/det_helper.py`` lines 56-87)."""
    x1, y1, x2, y2 = max(a[0], b[0]), max(a[1], b[1]), min(a[2], b[2]), min(a[3], b[3])
    if x2 <= x1 or y2 <= y1:
        return 0.0
    inter = (x2 - x1) * (y2 - y1)
    return float(inter) / ((a[2] - a[0]) * (a[3] - a[1]) + (b[2] - b[0]) * (b[3] - b[1]) - inter)


def _max_iou_first(pred: tuple, gold: tuple, threshold: float) -> list[float]:
    """``greedy_match_by_iou_max_iou_first`` (det_helper.py lines 137-181), as it runs: the highest IoU left is
    found, but the pair it records is the last unmatched prediction with the last unmatched gold box (the loop
    names it keeps are the loops' own), scored that IoU when their labels agree, else 0."""
    table = [[_iou(p[1], g[1]) for g in gold] for p in pred]
    free_p, free_g = list(range(len(pred))), list(range(len(gold)))
    matches = []
    while free_p and free_g:
        best = max(table[i][j] for i in free_p for j in free_g)
        if best < threshold:
            break
        i, j = free_p[-1], free_g[-1]
        matches.append(best if pred[i][0] == gold[j][0] else 0.0)
        free_p.remove(i)
        free_g.remove(j)
    return matches


def _max_label_first(pred: tuple, gold: tuple, threshold: float) -> list[float]:
    """``greedy_match_by_iou_max_label_first`` (det_helper.py lines 184-215): per gold box in order, the unmatched
    prediction of its label with the highest IoU (the first of equal ones), kept at or above the threshold."""
    used: set[int] = set()
    matches = []
    for label, box in gold:
        found = [(i, _iou(p[1], box)) for i, p in enumerate(pred) if i not in used and p[0] == label]
        if not found:
            continue
        i, best = max(found, key=lambda t: t[1])  # max keeps the first of equal values, as np.argmax
        if best >= threshold:
            matches.append(best)
            used.add(i)
    return matches


def _weighted(matches: list[float], n_pred: int, n_gold: int, c: float) -> float:
    """``calculate_iou_score`` (verify.py lines 292-326): mean matched IoU per gold box and completeness."""
    mean_iou = sum(matches) / n_gold if matches else 0.0
    completeness = 1.0 - ((n_gold - len(matches)) / n_gold + (n_pred - len(matches)) / n_pred) / 2.0
    return mean_iou * (1.0 - c) + completeness * c


def _coco(pred: tuple, gold: tuple) -> tuple[float, float, float]:
    """``pack_for_map_score`` (verify.py lines 231-290): COCO mAP, AP50, AP75; predictions of other labels left out."""
    from curate.rewards.verifiers.detection import coco_map

    labels = {g[0] for g in gold}
    g = tuple((lab, *box) for lab, box in gold)
    p = tuple((lab, *box) for lab, box in pred if lab in labels)
    if not p:
        return 0.0, 0.0, 0.0
    return coco_map(g, p, None), coco_map(g, p, 0.5), coco_map(g, p, 0.75)


def detection_accuracy(pred: tuple, gold: tuple, ratios: tuple, iou: Any, progress: float | None) -> float:
    """Worker task: V-Triune's ``DetectionVerifier.verify_accuracy`` final score (verify.py lines 353-512) of
    ``pred`` and ``gold`` (``(label, (x1, y1, x2, y2))``, as :func:`curate.rewards.format.v_triune_boxes` reads them),
    ``ratios`` (``det_reward_ratio`` of :data:`DET_PARTS` and ``iou_completeness``), the IoU threshold (a number,
    ``average`` or ``dynamic``) and the training progress (the dynamic threshold's step ratio, 0 without one)."""
    weights = dict(ratios)
    if not pred:
        return 0.0
    penalty = SIZE_PENALTY ** abs(len(pred) - len(gold))
    c = float(weights.get("iou_completeness", 0.0))
    if iou == "average":
        chosen = IOU_THRESHOLDS
    elif iou == "dynamic":
        step = float(progress or 0.0)
        chosen = (0.85 if step <= 0.1 else 0.95 if step <= 0.25 else 0.99,)
    else:
        chosen = (float(iou),)
    scores = {}
    for name, match in (("iou_max_iou_first", _max_iou_first), ("iou_max_label_first", _max_label_first)):
        if weights.get(name, 0.0):
            scores[name] = sum(_weighted(match(pred, gold, t), len(pred), len(gold), c) for t in chosen) / len(chosen)
    if any(weights.get(k, 0.0) for k in ("map", "map50", "map75")):
        scores["map"], scores["map50"], scores["map75"] = _coco(pred, gold)
    total = sum(float(weights.get(k, 0.0)) for k in DET_PARTS)
    if total <= 0:
        return 0.0
    return sum(scores.get(k, 0.0) * penalty * float(weights.get(k, 0.0)) for k in DET_PARTS) / total


def _answer_boxes(text: str) -> tuple | None:
    from curate.rewards.format import v_triune_boxes

    at = text.find("<answer>")
    end = text.find("</answer>", at + 8) if at >= 0 else -1
    inner = text[at + 8:end].strip().lower() if at >= 0 and end >= 0 else ""
    boxes = v_triune_boxes(inner)
    if boxes is None:
        return None
    return tuple((str(b["label"]), tuple(float(v) for v in b["bbox_2d"])) for b in boxes)


def verify_detection(response: str, golds: list[str], params: Mapping[str, Any], ctx: Context) -> float | Deferred:
    """V-Triune's detection accuracy (see :func:`detection_accuracy`); the gold is the row's solution."""
    gold = _answer_boxes(golds[0].strip())
    if gold is None:
        raise RecordError(f"{where(ctx.record.get('id'))}: the detection solution has no box V-Triune reads "
                          "(<answer>[{'bbox_2d': [x1, y1, x2, y2], 'label': ...}]</answer>)")
    pred = _answer_boxes(response.strip())
    if not pred:
        return 0.0
    ratio = param(params, "det_reward_ratio", {}) or {}
    if not isinstance(ratio, Mapping):
        raise RecordError(f"{where(ctx.record.get('id'))}: det_reward_ratio must be an object")
    ratios = tuple(sorted((str(k), float(v) if 0 <= float(v) <= 1 else 0.0) for k, v in ratio.items()
                          if v is not None))
    iou = param(params, "iou_threshold", "dynamic")
    return Deferred("curate.rewards.verifiers.v_triune:detection_accuracy", (pred, gold, ratios, iou, ctx.progress),
                    limit=float(param(params, "time_limit", DEFAULT_TIME_LIMIT)))
