"""VLM-R1's accuracy rewards, method by method, as its trainer computes them.

Read from om-ai-lab/VLM-R1 at 90052f4, ``src/open-r1-multimodal/src/open_r1/grpo_jsonl.py`` (``accuracy_reward``,
lines 826-879, and the functions it calls) and ``vlm_modules/qwen_module.py`` (``iou_reward``, lines 107-176),
and written here. The gold is the row's solution, which VLM-R1's loader hands its reward functions as
``"<answer> " + solution + " </answer>"`` (``grpo_jsonl.py`` line 1002); every extraction below is the seed's,
including where it searches without ``re.DOTALL`` (a multi-line solution then keeps its tags).

Parameters (``reward.parameters``):
    method: the row's ``accu_reward_method`` (:data:`METHODS`; any other name is ``default``, as the seed's
        ``else`` branch), or ``rec`` for VLM-R1's REC reward (``--task_type rec``).

``llm`` (a judge model) and ``math`` (``utils/math.py``) are not reproduced: such a row is the record's error,
naming the fix (a judge is not a rule; ``answer_type: math`` is curate's math verifier). The mAP methods run
pycocotools in a worker (:func:`curate.rewards.verifiers.detection.coco_map`: with every detection counted, as
COCO's 100 detections are for up to 100 boxes).
"""

from __future__ import annotations

import json
import re
from collections import Counter
from typing import Any, Mapping

from curate.rewards.verdict import Context, Deferred, RecordError, param, where

METHODS = ("default", "mcq", "yes_no", "map", "weighted_sum", "od_ap", "od_ap50", "odLength", "all_match", "rec")
UNSUPPORTED = {"llm": "VLM-R1's llm method asks a judge model; curate's rewards are rules (use answer_type any or "
                      "ocrtext for text answers)",
               "math": "VLM-R1's math method (utils/math.py) is not reproduced; use answer_type math-expressions"}
DEFAULT_TIME_LIMIT = 10.0
_ANSWER = re.compile(r"<answer>(.*?)</answer>")  # the seed's pattern without DOTALL (for solutions, short)
_CHOICE = re.compile(r"(?<![A-Z])([A-Z])(?=[\.\,\?\!\:\;]|$)")
_YES_NO = re.compile(r"(yes|no)")
_INT_BOX = re.compile(r"\[(\d+),\s*(\d+),\s*(\d+),\s*(\d+)]")
_KEYWORDS = ("答案", "选择", "正确", "是", "对", "answer", "correct", "choose", "select", "right", "认为", "应该",
             "觉得", "think", "believe", "should")
_DIGIT = re.compile(r"\d")


def blocks(text: str, start: str, end: str) -> list[str]:
    """What ``re.findall(start + "(.*?)" + end, text, re.DOTALL)`` gives, in one linear scan (no regular
    expression: a response with many openings and no closing would make the lazy pattern quadratic)."""
    out, at = [], 0
    while True:
        i = text.find(start, at)
        if i < 0:
            return out
        j = text.find(end, i + len(start))
        if j < 0:
            return out
        out.append(text[i + len(start):j])
        at = j + len(end)


def _first_block(text: str, start: str, end: str) -> str | None:
    i = text.find(start)
    j = text.find(end, i + len(start)) if i >= 0 else -1
    return text[i + len(start):j] if j >= 0 else None


def solution(gold: str) -> str:
    """The solution as VLM-R1's reward functions receive it (``grpo_jsonl.py`` line 1002)."""
    return f"<answer> {gold} </answer>"


def _gold_answer(sol: str) -> str:
    """The seed's ground truth of a solution: its first ``<answer>`` on one line, else the whole, stripped."""
    m = _ANSWER.search(sol)
    return m.group(1).strip() if m else sol.strip()


def _last_answer(content: str) -> str:
    found = blocks(content, "<answer>", "</answer>")
    return found[-1].strip() if found else content.strip()


def _first_answer(content: str) -> str:
    first = _first_block(content, "<answer>", "</answer>")
    return first.strip() if first is not None else content.strip()


def extract_choice(text: str) -> str | None:
    """The option letter VLM-R1 reads in a text (``grpo_jsonl.py`` lines 116-160): capitals standing alone before
    punctuation or the end; with several, the one scored highest by nearby keywords, a place in the last 30 %
    and punctuation after it (the first of equal scores)."""
    text = re.sub(r"\s+", " ", text.upper())
    choices = _CHOICE.findall(text)
    if not choices:
        return None
    if len(choices) == 1:
        return choices[0]
    # the seed scores every occurrence of a letter at the letter's first place in the text: the same points each
    # time, so a letter's score is its points once times its occurrences (one pass, whatever the length)
    scores = {}
    for c, times in Counter(choices).items():  # in order of first occurrence, as the seed's dict
        pos = text.find(c)
        context = text[max(0, pos - 20):min(len(text), pos + 20)]
        once = sum(1 for k in _KEYWORDS if k.upper() in context)
        once += 2 if pos > len(text) * 0.7 else 0
        once += 1 if pos < len(text) - 1 and text[pos + 1] in "。.!！,，" else 0
        scores[c] = once * times
    return max(scores.items(), key=lambda kv: kv[1])[0]


def clean_text(text: str) -> str:
    """VLM-R1's ``clean_text`` (lines 757-774): the last answer's content, line breaks after a space dropped and
    others made spaces, stripped, one trailing full stop off, lower case."""
    found = blocks(text, "<answer>", "</answer>")
    if found:
        text = found[-1]
    for char in ("\n", "\r"):
        text = re.sub(r"(?<=\s)" + re.escape(char), "", text)
        text = re.sub(r"(?<!\s)" + re.escape(char), " ", text)
    return text.strip().rstrip(".").lower()


def ratio(a: str, b: str) -> float:
    """``Levenshtein.ratio``: 1 - indel distance / (len a + len b) (rapidfuzz's Indel similarity, the same)."""
    from rapidfuzz.distance import Indel

    return float(Indel.normalized_similarity(a, b))


def mcq(content: str, sol: str) -> float:
    """``mcq_reward`` (lines 197-213)."""
    truth = _gold_answer(sol)
    letter = extract_choice(truth)
    correct = letter.upper() if letter else sol.strip()
    student = extract_choice(_first_answer(content))
    return 1.0 if student and student == correct else 0.0


def yes_no(content: str, sol: str) -> float:
    """``yes_no_reward`` (lines 216-235): the first ``yes`` or ``no`` (inside words too) of each side agree."""
    truth = _gold_answer(sol.lower())
    student = _first_answer(content.lower())
    g, s = _YES_NO.search(truth), _YES_NO.search(student)
    return 1.0 if (g.group(1) if g else "") == (s.group(1) if s else "") else 0.0


def all_match(content: str, sol: str) -> float:
    """``all_match_reward`` (lines 776-779)."""
    return 1.0 if clean_text(content) == clean_text(sol) else 0.0


def _numeric(student: str, truth: str) -> float | None:
    """``numeric_reward`` (lines 745-752): both cleaned texts as floats, equal or not; None when one is no number."""
    try:
        return 1.0 if float(clean_text(student)) == float(clean_text(truth)) else 0.0
    except ValueError:
        return None


def default_fallback(student: str, truth: str) -> float:
    """The second half of ``default_accuracy_reward`` (lines 799-822), after math-verify said no."""
    if _DIGIT.search(truth):
        out = _numeric(student, truth)
        return ratio(clean_text(student), clean_text(truth)) if out is None else out
    letter = extract_choice(truth)
    if letter:
        mine = extract_choice(student)
        return (1.0 if mine == letter.upper() else 0.0) if mine else 0.0
    return ratio(clean_text(student), clean_text(truth))


def math_verified(student: str, truth: str) -> float:
    """Worker task: ``parse`` and ``verify`` of math-verify as the seed calls them (lines 792-797): 1.0 when
    ``verify(parse(student), parse(truth))``; 0.0 when not or when either raises."""
    from math_verify import parse, verify

    try:
        return 1.0 if float(verify(parse(student, parsing_timeout=None), parse(truth, parsing_timeout=None),
                                   timeout_seconds=None)) > 0 else 0.0
    except Exception:  # noqa: BLE001 - the seed passes on any failure
        return 0.0


def _json_list(text: str, strict: bool, rid: Any) -> list:
    """The last ```` ```json ```` block of ``text`` as a list (``map_reward`` lines 311-331): none is an empty list;
    a bad block is an empty list for a response, the record's error for the gold (the seed raises)."""
    found = blocks(text, "```json", "```")
    if not found:
        return []
    try:
        data = json.loads(found[-1].strip())
        return [item for item in data]
    except (ValueError, TypeError):
        if strict:
            raise RecordError(f"{where(rid)}: the solution's ```json block is not a JSON list") from None
        return []


def _coco_boxes(pred: list, gold: list, rid: Any) -> tuple[tuple, tuple]:
    """Gold and predicted boxes as ``(label, x1, y1, x2, y2)``, as ``calculate_map`` builds them (lines 238-284):
    categories are the gold's labels; a prediction with another label or no usable box is left out."""
    try:
        g = tuple((str(b["label"]), *(float(v) for v in b["bbox_2d"][:4])) for b in gold)
    except (KeyError, TypeError, ValueError, IndexError):
        raise RecordError(f"{where(rid)}: every gold box needs a label and a bbox_2d of four numbers") from None
    labels = {b[0] for b in g}
    p = []
    for b in pred:
        try:
            label, box = b["label"], [float(v) for v in b["bbox_2d"][:4]]
        except (KeyError, TypeError, ValueError, IndexError):
            continue
        if label in labels and len(box) == 4:
            p.append((label, *box))
    return g, tuple(p)


def map_reward(content: str, sol: str, rid: Any, *, length: bool = False, ap50: bool = False,
               limit: float = DEFAULT_TIME_LIMIT) -> float | Deferred:
    """``map_reward`` (lines 297-349): COCO mAP (or AP50) of the last ```` ```json ```` lists, times
    ``min(1, N_gold / N_pred)`` with ``length``; both empty is 1, one empty 0."""
    gold = _json_list(sol, True, rid)
    pred = _json_list(content, False, rid)
    if not gold or not pred:
        return 1.0 if not gold and not pred else 0.0
    factor = (1.0 if len(gold) >= len(pred) else len(gold) / len(pred)) if length else 1.0
    g, p = _coco_boxes(pred, gold, rid)
    if not p:
        return 0.0
    return Deferred("curate.rewards.verifiers.detection:coco_map", (g, p, 0.5 if ap50 else None),
                    post=(lambda v, f=factor: v * f), limit=limit)


def od(content: str, sol: str, rid: Any, *, length: bool = False, ap50: bool = False,
       limit: float = DEFAULT_TIME_LIMIT) -> float | Deferred:
    """``od_reward`` and ``odLength_reward`` (lines 351-416): the answers' ``None`` both ways is 1, else
    :func:`map_reward` of the answers."""
    truth = _first_block(sol, "<answer>", "</answer>")
    truth = truth.strip() if truth is not None else None
    found = blocks(content, "<answer>", "</answer>")
    student = found[-1].strip() if found else None
    if student is None:
        return 0.0
    if truth == "None" and student == "None":
        return 1.0
    if truth is None:
        raise RecordError(f"{where(rid)}: the solution has no <answer> block")
    return map_reward(student, truth, rid, length=length, ap50=ap50, limit=limit)


def seed_iou(a: list[float], b: list[float]) -> float:
    """VLM-R1's IoU (``qwen_module.py`` lines 114-124, ``grpo_jsonl.py`` lines 418-428): the overlap counted in
    whole pixels from ``x1`` to ``x2 - 1``, the areas as ``(x2 - x1) * (y2 - y1)``."""
    ix1, iy1 = max(a[0], b[0]), max(a[1], b[1])
    ix2, iy2 = min(a[2] - 1, b[2] - 1), min(a[3] - 1, b[3] - 1)
    inter = (ix2 - ix1 + 1) * (iy2 - iy1 + 1) if ix1 < ix2 and iy1 < iy2 else 0
    union = (a[2] - a[0]) * (a[3] - a[1]) + (b[2] - b[0]) * (b[3] - b[1]) - inter
    return float(inter) / union


def weighted_sum(content: str, sol: str) -> float:
    """The ``weighted_sum`` method (lines 842-851 and ``detection_score``, lines 431-563): ``none`` both ways is 1;
    else greedy matching by IoU (>= 0.5; a wrong label matches with IoU 0), 0.7 × matched IoU per gold box
    + 0.3 × completeness."""
    content, sol = clean_text(content), clean_text(sol)
    if sol == "none":
        return 1.0 if content == "none" else 0.0

    def boxes(text: str, strict: bool) -> list:
        block = _first_block(clean_text(text), "```json", "```")
        if block is None:
            return []
        try:
            return [item for item in json.loads(block.strip())]
        except (ValueError, TypeError):
            if strict:
                raise RecordError("the solution's ```json block is not a JSON list") from None
            return []

    pred, gold = boxes(content, False), boxes(sol, True)
    if not gold:
        return 1.0 if not pred else 0.0
    if not pred:
        return 0.0
    table = []
    for p in pred:
        row = []
        for g in gold:
            try:
                row.append(seed_iou(p["bbox_2d"], g["bbox_2d"]))
            except Exception:  # noqa: BLE001 - the seed scores any failure 0
                row.append(0.0)
        table.append(row)
    free_p, free_g = list(range(len(pred))), list(range(len(gold)))
    matched = []
    while free_p and free_g:
        best, bp, bg = -1.0, -1, -1
        for i in free_p:
            for j in free_g:
                if table[i][j] > best:
                    best, bp, bg = table[i][j], i, j
        if best < 0.5:
            break

        def label(item: Any) -> str:
            try:
                return item["label"].lower()
            except Exception:  # noqa: BLE001
                return ""

        matched.append(best if label(pred[bp]) == label(gold[bg]) else 0.0)
        free_p.remove(bp)
        free_g.remove(bg)
    position = sum(matched) / len(gold) if matched else 0.0
    completeness = 1.0 - (len(free_g) / len(gold) + len(free_p) / len(pred)) / 2.0
    return (0.7 * position + 0.3 * completeness) / 1.0


def rec(content: str, sol: str, record: Mapping[str, Any], rid: Any) -> float:
    """``iou_reward`` (``qwen_module.py`` lines 107-176): the first integer box of the first answer, scaled from the
    model's input size to the image's, against the solution's box; 0 on any failure. The sizes are the record's
    ``resized_size`` and ``image_size`` (``[w, h]``); without them the box is taken as it is."""
    found = blocks(sol, "<answer>", "</answer>")
    try:
        gold = json.loads(found[-1].strip())
        gold = [float(v) for v in gold[:4]]
        assert len(gold) == 4
    except Exception:  # noqa: BLE001 - the seed raises: the record cannot be scored
        raise RecordError(f"{where(rid)}: the REC solution must be <answer>[x1, y1, x2, y2]</answer>") from None
    first = _first_block(content, "<answer>", "</answer>")
    if first is None:
        return 0.0
    box_m = _INT_BOX.search(first.strip())
    if not box_m:
        return 0.0
    box = [float(int(v)) for v in box_m.groups()]
    image, resized = record.get("image_size"), record.get("resized_size")
    try:
        if image is not None and resized is not None:
            sx, sy = float(image[0]) / float(resized[0]), float(image[1]) / float(resized[1])
            box = [box[0] * sx, box[1] * sy, box[2] * sx, box[3] * sy]
        return seed_iou(box, gold)
    except Exception:  # noqa: BLE001 - the seed scores any failure 0
        return 0.0


#: The pixel bounds VLM-R1 hands the Qwen2-VL processor (``grpo_jsonl.py`` lines 89-96): the model input's size.
MIN_PIXELS, MAX_PIXELS = 3136, 12845056


def with_input_sizes(record: dict[str, Any]) -> dict[str, Any]:
    """A REC record (method ``rec``) with ``image_size`` (the first image's, from its header) and ``resized_size``
    (Qwen2-VL's resize within VLM-R1's pixel bounds: the ``image_grid_thw`` x 14 its ``iou_reward`` scales the
    answer's box from, ``qwen_module.py`` lines 138-156) set when it has neither; other records as they are.
    An image whose header cannot be read leaves the record without sizes (the box is then taken as it is).
    The record is changed in place and returned."""
    reward = record.get("reward")
    params = reward.get("parameters") if isinstance(reward, dict) else None
    if not (isinstance(params, dict) and reward.get("verifier") == "vlm-r1" and params.get("method") == "rec"):
        return record
    if record.get("image_size") is not None or record.get("resized_size") is not None or not record.get("images"):
        return record
    from curate.core.images import ImageError, probe
    from curate.rewards.boxes import smart_resize

    try:
        info = probe(record["images"][0])
    except (ImageError, OSError):
        return record
    record["image_size"] = [info.width, info.height]
    record["resized_size"] = list(smart_resize(info.width, info.height, MIN_PIXELS, MAX_PIXELS))
    return record


def verify(response: str, golds: list[str], params: Mapping[str, Any], ctx: Context) -> float | Deferred:
    """VLM-R1's accuracy of ``response`` by ``parameters.method`` (see the module docstring)."""
    rid = ctx.record.get("id")
    method = str(param(params, "method", "default"))
    if method in UNSUPPORTED:
        raise RecordError(f"{where(rid)}: {UNSUPPORTED[method]}")
    sol = solution(golds[0])
    limit = float(param(params, "time_limit", DEFAULT_TIME_LIMIT))
    if method == "mcq":
        return mcq(response, sol)
    if method == "yes_no":
        return yes_no(response, sol)
    if method == "all_match":
        return all_match(response, sol)
    if method == "map":
        return map_reward(response, sol, rid, limit=limit)
    if method in ("od_ap", "od_ap50", "odLength"):
        return od(response, sol, rid, length=method == "odLength", ap50=method == "od_ap50", limit=limit)
    if method == "weighted_sum":
        return weighted_sum(response, sol)
    if method == "rec":
        return rec(response, sol, ctx.record, rid)
    truth, student = _gold_answer(sol), _last_answer(response)
    return Deferred("curate.rewards.verifiers.vlm_r1:math_verified", (student, truth),
                    post=(lambda v, s=student, t=truth: 1.0 if v > 0 else default_fallback(s, t)), limit=limit)
