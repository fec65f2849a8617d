"""Test vectors: (record, response) -> expected accuracy, each worked out by hand.

Every case listed under "Why" in the rewards issue is here, next to the anchors'
documented behaviour where it is right. Expected values are derived in the comments,
never produced by running the code under test.
"""

from __future__ import annotations

import json

import pytest

from curate.rewards.registry import score


def rec(answer_type: str, answer, **extra) -> dict:
    return {"id": "t", "answer": answer, "answer_type": answer_type, **extra}


def A(text: str) -> str:
    """A response with its answer in tags."""
    return f"<answer>{text}</answer>"


SQ = [[0.1, 0.1, 0.5, 0.5]]  # the anchor's IoU example, first box

# (name, record, response, expected accuracy)
VECTORS = [
    # ------------------------------------------------------------------ math
    ("math frac12 = 0.5", rec("math-expressions", "\\frac12"), A("0.5"), 1.0),
    ("math 0.5 = frac12", rec("math-expressions", "0.5"), A("\\frac12"), 1.0),
    ("math 1/2 = 2/4", rec("math-expressions", "1/2"), A("2/4"), 1.0),
    ("math 2/4 = 1/2", rec("math-expressions", "2/4"), A("1/2"), 1.0),
    ("math frac{1}{2} boxed", rec("math-expressions", "\\frac{1}{2}"), "so \\boxed{\\frac{1}{2}}", 1.0),
    ("math 1/2 != 0.25", rec("math-expressions", "1/2"), A("0.25"), 0.0),
    ("math -5 = -5.0", rec("math-expressions", "-5"), A("-5.0"), 1.0),
    ("math 12 = 12.0 boxed", rec("math-expressions", "12"), "\\boxed{12.0}", 1.0),
    ("math 1234 = 1,234", rec("math-expressions", "1234"), A("1,234"), 1.0),
    ("math 1,234 = 1234", rec("math-expressions", "1,234"), A("1234"), 1.0),
    ("math 50% = 0.5", rec("math-expressions", "50\\%"), A("0.5"), 1.0),
    ("math 50% = 50", rec("math-expressions", "50%"), A("50"), 1.0),
    ("math polynomial", rec("math-expressions", "x^2+2x+1"), "\\boxed{(x+1)^2}", 1.0),
    ("math boxed inside answer", rec("math-expressions", "3"), A("\\boxed{\\frac{6}{2}}"), 1.0),
    ("math nested braces", rec("math-expressions", "\\frac{\\sqrt{3}}{2}"), "the result is \\boxed{\\frac{\\sqrt{3}}{2}}", 1.0),
    ("math last boxed wins (2)", rec("math-expressions", "2"), "first \\boxed{3} then \\boxed{2}", 1.0),
    ("math last boxed wins (3)", rec("math-expressions", "3"), "first \\boxed{3} then \\boxed{2}", 0.0),
    ("math last answer block wins", rec("math-expressions", "7"), A("6") + " wait, " + A("7"), 1.0),
    ("math unbalanced last box skipped", rec("math-expressions", "4"), "\\boxed{4} and then \\boxed{5", 1.0),
    ("math bare answer judged", rec("math-expressions", "5"), "The answer is 5", 1.0),
    ("math essay without tags is no answer", rec("math-expressions", "5"), "The answer is 5. " + "Because. " * 30, 0.0),
    ("math unfinished think is no answer", rec("math-expressions", "5", prompt_type="think"), "<think>so it is 5", 0.0),
    ("math bare answer after think", rec("math-expressions", "5", prompt_type="think"), "<think>2+3</think> 5", 1.0),
    ("math 2pi commutes", rec("math-expressions", "2\\pi"), A("\\pi \\cdot 2"), 1.0),
    ("math sqrt2 without braces", rec("math-expressions", "\\sqrt{2}"), A("\\sqrt2"), 1.0),
    ("math 1/3 != 0.3333", rec("math-expressions", "0.3333"), A("1/3"), 0.0),
    ("math tolerance 1e-6", rec("math-expressions", "3.14"), A("3.1400001"), 1.0),
    ("math 7 != 8", rec("math-expressions", "7"), A("8"), 0.0),
    ("math interval string-equal", rec("math-expressions", "(1,2)"), A("(1, 2)"), 1.0),
    ("math equation gold", rec("math-expressions", "x=3"), A("3"), 1.0),
    ("math $ delimiters", rec("math-expressions", "\\frac{3}{4}"), A("$0.75$"), 1.0),
    ("math dfrac", rec("math-expressions", "\\frac{3}{4}"), A("\\dfrac{3}{4}"), 1.0),
    ("math several golds", rec("math-expressions", ["4", "-4"]), A("-4"), 1.0),
    ("math empty answer", rec("math-expressions", "0"), A("  "), 0.0),
    # ------------------------------------------------------------------ multiple choice
    ("choice B", rec("multiple-choice", "B"), A("B"), 1.0),
    ("choice (B)", rec("multiple-choice", "B"), A("(B)"), 1.0),
    ("choice (B).", rec("multiple-choice", "B"), A("(B)."), 1.0),
    ("choice B. cat", rec("multiple-choice", "B"), A("B. cat"), 1.0),
    ("choice boxed B", rec("multiple-choice", "B"), "\\boxed{B}", 1.0),
    ("choice boxed text B", rec("multiple-choice", "B"), "\\boxed{\\text{B}}", 1.0),
    ("choice the answer is B", rec("multiple-choice", "B"), A("The answer is B"), 1.0),
    ("choice both A and B", rec("multiple-choice", "B"), A("Both A and B"), 0.0),
    ("choice both A and B (gold A)", rec("multiple-choice", "A"), A("Both A and B"), 0.0),
    ("choice article a", rec("multiple-choice", "A"), A("It is a cat"), 0.0),
    ("choice capital article A", rec("multiple-choice", "A"), A("A cat sits on the mat"), 0.0),
    ("choice word containing B", rec("multiple-choice", "B"), A("Bird"), 0.0),
    ("choice gold (B)", rec("multiple-choice", "(B)"), A("B"), 1.0),
    ("choice gold (B) vs (B)", rec("multiple-choice", "(B)"), A("(B)"), 1.0),
    ("choice gold B. cat", rec("multiple-choice", "B. cat"), A("B"), 1.0),
    ("choice wrong letter", rec("multiple-choice", "B"), A("C"), 0.0),
    ("choice A or B", rec("multiple-choice", "B"), A("A or B"), 0.0),
    ("choice B, D", rec("multiple-choice", "B"), A("B, D"), 0.0),
    ("choice lowercase whole answer", rec("multiple-choice", "B"), A("b"), 1.0),
    ("choice Answer: (B)", rec("multiple-choice", "B"), A("Answer: (B)"), 1.0),
    ("choice I think B", rec("multiple-choice", "B"), A("I think the answer is B"), 1.0),
    ("choice B) dog", rec("multiple-choice", "B"), A("B) dog"), 1.0),
    ("choice [B]", rec("multiple-choice", "B"), A("[B]"), 1.0),
    ("choice bold", rec("multiple-choice", "B"), A("**B**"), 1.0),
    ("choice dollars", rec("multiple-choice", "B"), A("$B$"), 1.0),
    ("choice several golds", rec("multiple-choice", ["B", "C"]), A("C"), 1.0),
    ("choice none of the above", rec("multiple-choice", "A"), A("None of the above"), 0.0),
    ("choice option B is correct", rec("multiple-choice", "B"), A("Option B is correct"), 1.0),
    ("choice B. A cat", rec("multiple-choice", "B"), A("B. A cat"), 1.0),
    ("choice bare letter judged", rec("multiple-choice", "B"), "B", 1.0),
    ("choice bare wrong letter", rec("multiple-choice", "B"), "(C)", 0.0),
    # ------------------------------------------------------------------ number
    ("number -5", rec("number", "-5"), A("-5"), 1.0),
    # overflow and non-finite numbers: read whole, they are no number, never the finite gold
    ("number 1e999999999 != 1", rec("number", "1"), A("1e999999999"), 0.0),
    ("number 1E999999999 != 1", rec("number", "1"), A("1E999999999"), 0.0),
    ("number 1.0e+999999999 != 1", rec("number", "1"), A("1.0e+999999999"), 0.0),
    ("number 1e400 != 1", rec("number", "1"), A("1e400"), 0.0),
    ("number -1e400 != -1", rec("number", "-1"), A("-1e400"), 0.0),
    ("number inf != 1", rec("number", "1"), A("inf"), 0.0),
    ("number nan != 0", rec("number", "0"), A("nan"), 0.0),
    ("number 1e999999999 then 1 reads 1", rec("number", "1"), A("1e999999999, no: 1"), 1.0),
    ("number 1e-999999999 is 0", rec("number", "0"), A("1e-999999999"), 1.0),
    ("number 2e3 = 2000", rec("number", "2000"), A("2e3"), 1.0),
    ("math 1e999999999 != 1", rec("math-expressions", "1"), A("1e999999999"), 0.0),
    ("math infty != 1", rec("math-expressions", "1"), A("\\infty"), 0.0),
    ("math nan != 1", rec("math-expressions", "1"), A("nan"), 0.0),
    ("number '-5' anchor bug", rec("number", "-5"), A("The answer is -5"), 1.0),
    ("number unicode minus", rec("number", "-5"), A("\u22125"), 1.0),
    ("number sign matters", rec("number", "-5"), A("5"), 0.0),
    ("number 12.0 = 12", rec("number", "12"), A("12.0"), 1.0),
    ("number 12 = 12.0", rec("number", "12.0"), A("12"), 1.0),
    ("number 12.5 != 12", rec("number", "12"), A("12.5"), 0.0),
    ("number 1,234 = 1234", rec("number", "1234"), A("1,234"), 1.0),
    ("number gold 1,234", rec("number", "1,234"), A("1234"), 1.0),
    ("number in a sentence", rec("number", "3"), A("There are 3 apples"), 1.0),
    ("number last one counts", rec("number", "3"), A("I see 2 cats and 3 dogs"), 1.0),
    ("number last one counts (2)", rec("number", "2"), A("I see 2 cats and 3 dogs"), 0.0),
    ("number seven", rec("number", "7"), A("seven"), 1.0),
    ("number Seven.", rec("number", "7"), A("Seven."), 1.0),
    ("number twenty-one", rec("number", "21"), A("twenty-one"), 1.0),
    ("number zero", rec("number", "0"), A("zero"), 1.0),
    ("number 1e3", rec("number", "1000"), A("1e3"), 1.0),
    ("number .5", rec("number", "0.5"), A(".5"), 1.0),
    ("number percent sign", rec("number", "100"), A("100%"), 1.0),
    ("number boxed", rec("number", "12"), "\\boxed{12}", 1.0),
    ("number bare answer judged", rec("number", "12"), "12", 1.0),
    ("number no number", rec("number", "4"), A("many"), 0.0),
    ("number 5-3 last is 3", rec("number", "3"), A("5-3"), 1.0),
    ("number gold with unit", rec("number", "12 cm"), A("12"), 1.0),
    ("number gold int answer", rec("number", 8), A("8"), 1.0),
    # ------------------------------------------------------------------ boolean
    ("bool Yes", rec("boolean", "yes"), A("Yes"), 1.0),
    ("bool yes.", rec("boolean", "yes"), A("yes."), 1.0),
    ("bool No vs yes", rec("boolean", "yes"), A("No"), 0.0),
    ("bool I don't know (yes)", rec("boolean", "yes"), A("I don't know"), 0.0),
    ("bool I don't know (no)", rec("boolean", "no"), A("I don't know"), 0.0),
    ("bool not sure (no)", rec("boolean", "no"), A("not sure"), 0.0),
    ("bool not sure (yes)", rec("boolean", "yes"), A("not sure"), 0.0),
    ("bool True", rec("boolean", "yes"), A("True"), 1.0),
    ("bool It is true", rec("boolean", "yes"), A("It is true"), 1.0),
    ("bool yes or no", rec("boolean", "yes"), A("yes or no"), 0.0),
    ("bool Yesterday", rec("boolean", "yes"), A("Yesterday"), 0.0),
    ("bool Nobody", rec("boolean", "no"), A("Nobody"), 0.0),
    ("bool leading No", rec("boolean", "no"), A("No, it is not true"), 1.0),
    ("bool false = no", rec("boolean", "no"), A("false"), 1.0),
    ("bool NO", rec("boolean", "no"), A("NO"), 1.0),
    ("bool gold True", rec("boolean", "True"), A("yes"), 1.0),
    ("bool gold false", rec("boolean", "false"), A("no"), 1.0),
    ("bool chinese yes", rec("boolean", "是"), A("是"), 1.0),
    ("bool chinese no", rec("boolean", "no"), A("不是"), 1.0),
    ("bool cannot determine", rec("boolean", "no"), A("cannot determine"), 0.0),
    ("bool bare answer judged", rec("boolean", "yes"), "yes", 1.0),
    # ------------------------------------------------------------------ OCR
    ("ocr anchor Helo World", rec("ocrtext", "hello world"), A("Helo World"), 1 - 1 / 11),
    ("ocr exact", rec("ocrtext", "hello world"), A("hello world"), 1.0),
    ("ocr case and spaces", rec("ocrtext", "hello world"), A("HELLO   WORLD"), 1.0),
    ("ocr unrelated", rec("ocrtext", "hello world"), A("xyz"), 0.0),
    ("ocr best of golds", rec("ocrtext", ["foo bar", "hello world"]), A("hello world"), 1.0),
    ("ocr one substitution", rec("ocrtext", "abcd"), A("abce"), 0.75),
    ("ocr at threshold", rec("ocrtext", "abcd"), A("ab"), 0.5),
    ("ocr below threshold", rec("ocrtext", "abcd"), A("a"), 0.0),
    ("ocr kitten sitting", rec("ocrtext", "kitten"), A("sitting"), 4 / 7),
    ("ocr empty answer", rec("ocrtext", "abc"), A(""), 0.0),
    # ------------------------------------------------------------------ string (any) and critic
    ("string case", rec("any", "Paris"), A("paris"), 1.0),
    ("string period", rec("any", "Paris"), A("Paris."), 1.0),
    ("string text wrapper", rec("any", "Paris"), A("\\text{Paris}"), 1.0),
    ("string spaces", rec("any", "Paris"), A("  PARIS "), 1.0),
    ("string other", rec("any", "Paris"), A("Lyon"), 0.0),
    ("string longer", rec("any", "Paris"), A("Paris, France"), 0.0),
    ("string several golds", rec("any", ["NYC", "New York"]), A("new york"), 1.0),
    ("string boxed", rec("any", "blue"), "\\boxed{Blue}", 1.0),
    ("critic correct", rec("critic", "Correct"), A("correct"), 1.0),
    ("critic incorrect", rec("critic", "Correct"), A("incorrect"), 0.0),
    ("critic number", rec("critic", "3"), A("3.0"), 1.0),
    ("critic yes", rec("critic", "yes"), A("Yes"), 1.0),
    ("critic yes vs no", rec("critic", "yes"), A("No"), 0.0),
    # ------------------------------------------------------------------ bbox
    ("bbox anchor IoU 1/7", rec("bbox", json.dumps(SQ[0])), A("[0.3, 0.3, 0.7, 0.7]"), 1 / 7),
    ("bbox identical", rec("bbox", "[0.1, 0.1, 0.5, 0.5]"), A("[0.1, 0.1, 0.5, 0.5]"), 1.0),
    ("bbox zero area", rec("bbox", "[0.1, 0.1, 0.5, 0.5]"), A("[0.1, 0.1, 0.1, 0.5]"), 0.0),
    ("bbox inverted", rec("bbox", "[0.1, 0.1, 0.5, 0.5]"), A("[0.5, 0.5, 0.1, 0.1]"), 0.0),
    ("bbox json bbox_2d", rec("bbox", "[0, 0, 2, 2]"), A('{"bbox_2d": [1, 0, 3, 2], "label": "x"}'), 1 / 3),
    ("bbox nested list", rec("bbox", "[0, 0, 2, 2]"), A("[[1, 0, 3, 2]]"), 1 / 3),
    ("bbox disjoint", rec("bbox", "[0, 0, 10, 10]"), A("[20, 20, 30, 30]"), 0.0),
    # auto: a gold in [0, 1] is norm1; a prediction beyond 1 with no image size is read on the 0-1000 grid
    ("bbox norm1 gold, auto norm1000 pred", rec("bbox", "[0.1, 0.1, 0.3, 0.5]"), A("[100, 100, 300, 500]"), 1.0),
    ("bbox qwen pairs", rec("bbox", "[10, 20, 30, 40]"), A("(10,20),(30,40)"), 1.0),
    ("bbox json fence without tags", rec("bbox", "[10, 20, 30, 40]"), '```json\n[{"bbox_2d": [10, 20, 30, 40]}]\n```', 1.0),
    ("bbox no box", rec("bbox", "[10, 20, 30, 40]"), A("somewhere on the left"), 0.0),
    ("bbox infinite coordinate", rec("bbox", "[0, 0, 1, 1]"), A('{"bbox_2d": [0, 0, 1e999, 1]}'), 0.0),
    ("bbox malformed json", rec("bbox", "[0, 0, 1, 1]"), A('{"bbox_2d": [0, 0, 1, '), 0.0),
    ("bbox several golds", rec("bbox", ["[0, 0, 1, 1]", "[0.5, 0.5, 1, 1]"]), A("[0.5, 0.5, 1, 1]"), 1.0),
    ("bbox first predicted box judged", rec("bbox", "[0, 0, 10, 10]"), A("[[20, 20, 30, 30], [0, 0, 10, 10]]"), 0.0),
    # pixels of a 1000x500 image vs fractions: [100,50,300,250] / (1000,500) = [0.1,0.1,0.3,0.5]
    ("bbox pixel gold, norm1 pred", rec("bbox", "[100, 50, 300, 250]", image_size=[1000, 500]),
     A("[0.1, 0.1, 0.3, 0.5]"), 1.0),
    # 0-1000 grid: [100,100,300,500]/1000 = [0.1,0.1,0.3,0.5] -> same box
    ("bbox pixel gold, norm1000 pred", rec("bbox", "[100, 50, 300, 250]", image_size=[1000, 500], pred_coords="norm1000"),
     A("[100, 100, 300, 500]"), 1.0),
    # model input 1000x500 for a 2000x1000 image: halve the gold
    ("bbox pixel gold, resized pred", rec("bbox", "[200, 100, 600, 500]", image_size=[2000, 1000],
                                          resized_size=[1000, 500], pred_coords="resized"),
     A("[100, 50, 300, 250]"), 1.0),
    # smart_resize(1000, 500, 3136, 1003520) = (1008, 504): x * 1.008
    ("bbox resized via min/max pixels", rec("bbox", "[100, 50, 300, 250]", image_size=[1000, 500], min_pixels=3136,
                                            max_pixels=1003520, pred_coords="resized"),
     A("[100.8, 50.4, 302.4, 252]"), 1.0),
    ("bbox norm1 gold, pixel pred", rec("bbox", "[0.1, 0.1, 0.3, 0.5]", image_size=[1000, 500]),
     A("[100, 50, 300, 250]"), 1.0),
]


@pytest.mark.parametrize("name,record,response,expected", VECTORS, ids=[v[0] for v in VECTORS])
def test_vector(name: str, record: dict, response: str, expected: float) -> None:
    result = score(record, response)
    assert result.error is None, result
    assert result.accuracy == pytest.approx(expected, abs=1e-9), (name, result)
    assert 0.0 <= result.reward <= 1.0


# IoU of [0,0,10,10] and [0,0,10,9] is 90/100 = 0.9.
BOX = "[0, 0, 10, 10]"
NEAR = A("[0, 0, 10, 9]")
THRESHOLD_VECTORS = [
    ("static 0.5 on 1/7", {"iou_threshold": 0.5}, None, rec("bbox", "[0.1, 0.1, 0.5, 0.5]"), A("[0.3, 0.3, 0.7, 0.7]"), 0.0),
    ("static 0.3 on 1/3 binary", {"iou_threshold": 0.3}, None, rec("bbox", "[0, 0, 2, 2]"), A("[1, 0, 3, 2]"), 1.0),
    ("static 0.3 on 1/3 keep iou", {"iou_threshold": 0.3, "binary": False}, None, rec("bbox", "[0, 0, 2, 2]"),
     A("[1, 0, 3, 2]"), 1 / 3),
    ("dynamic early 0.85", {"iou_threshold": "dynamic"}, 0.05, rec("bbox", BOX), NEAR, 1.0),
    ("dynamic at 10% still 0.85", {"iou_threshold": "dynamic"}, 0.10, rec("bbox", BOX), NEAR, 1.0),
    ("dynamic middle 0.95", {"iou_threshold": "dynamic"}, 0.2, rec("bbox", BOX), NEAR, 0.0),
    ("dynamic late 0.99", {"iou_threshold": "dynamic"}, 0.5, rec("bbox", BOX), A("[0, 0, 10, 9.95]"), 1.0),
    ("dynamic late 0.99 miss", {"iou_threshold": "dynamic"}, 0.5, rec("bbox", BOX), A("[0, 0, 10, 9.8]"), 0.0),
    ("dynamic without progress is 0.5", {"iou_threshold": "dynamic"}, None, rec("bbox", BOX), A("[0, 0, 10, 6]"), 1.0),
    ("dynamic without progress below 0.5", {"iou_threshold": "dynamic"}, None, rec("bbox", BOX), A("[0, 0, 10, 4]"), 0.0),
]


@pytest.mark.parametrize("name,params,progress,record,response,expected", THRESHOLD_VECTORS,
                         ids=[v[0] for v in THRESHOLD_VECTORS])
def test_iou_threshold_vector(name, params, progress, record, response, expected) -> None:
    record = {**record, "reward": {"verifier": "bbox", "parameters": params}}
    result = score(record, response, progress=progress)
    assert result.error is None
    assert result.accuracy == pytest.approx(expected, abs=1e-9)


def det(*boxes) -> str:
    return json.dumps([{"bbox_2d": list(b[1:]), "label": b[0]} for b in boxes])


CAT, DOG = ("cat", 0, 0, 10, 10), ("dog", 20, 20, 30, 30)
STRAY = ("dog", 50, 50, 60, 60)
CAT_NEAR = ("cat", 0, 0, 10, 9)  # IoU 0.9 with CAT
DETECTION_VECTORS = [
    ("od_length exact", {}, None, det(CAT, DOG), A(det(CAT, DOG)), 1.0),
    # AP stays 1 (the true positives come first) but the length factor is 2/3
    ("od_length redundant box", {}, None, det(CAT, DOG), A(det(CAT, DOG, STRAY)), 2 / 3),
    ("map redundant box not penalised", {"method": "map"}, None, det(CAT, DOG), A(det(CAT, DOG, STRAY)), 1.0),
    ("od_length wrong label", {}, None, det(CAT), A(det(("dog", 0, 0, 10, 10))), 0.0),
    # one of two gold boxes found: precision 1 up to recall 0.5 -> 51 of COCO's 101 recall points
    ("map half recall", {"method": "map"}, None, det(CAT, ("cat", 20, 20, 30, 30)), A(det(CAT)), 51 / 101),
    ("map dynamic 0.85 early", {"method": "map", "iou_threshold": "dynamic"}, 0.05, det(CAT), A(det(CAT_NEAR)), 1.0),
    ("map dynamic 0.95 middle", {"method": "map", "iou_threshold": "dynamic"}, 0.2, det(CAT), A(det(CAT_NEAR)), 0.0),
    ("weighted exact", {"method": "weighted"}, None, det(CAT, DOG), A(det(CAT, DOG)), 1.0),
    # mean IoU 1, miss 0, false alarm 1/2 -> completeness 0.75; (0.7 + 0.225) * 0.6
    ("weighted extra box", {"method": "weighted"}, None, det(CAT), A(det(CAT, STRAY)), 0.925 * 0.6),
    # mean IoU 1, miss 1/2, false alarm 0 -> completeness 0.75; (0.7 + 0.225) * 0.6
    ("weighted missing box", {"method": "weighted"}, None, det(CAT, DOG), A(det(CAT)), 0.925 * 0.6),
    # 0.7 * 0.9 + 0.3 * 1
    ("weighted iou 0.9", {"method": "weighted"}, None, det(CAT), A(det(CAT_NEAR)), 0.93),
    ("weighted dynamic 0.95 no match", {"method": "weighted", "iou_threshold": "dynamic"}, 0.2, det(CAT),
     A(det(CAT_NEAR)), 0.0),
    # c = 0.5: 0.5 * 0.9 + 0.5 * 1
    ("weighted c=0.5", {"method": "weighted", "completeness_weight": 0.5}, None, det(CAT), A(det(CAT_NEAR)), 0.95),
    ("weighted wrong label", {"method": "weighted"}, None, det(CAT), A(det(("dog", 0, 0, 10, 10))), 0.0),
    ("empty gold and prediction", {}, None, "[]", A("[]"), 1.0),
    ("empty prediction", {}, None, det(CAT), A("[]"), 0.0),
    ("prediction without gold", {}, None, "[]", A(det(CAT)), 0.0),
    ("class-agnostic gold", {"method": "weighted"}, None, "[[0, 0, 10, 10]]", A(det(("anything", 0, 0, 10, 10))), 1.0),
    ("labels case-insensitive", {}, None, det(("Cat", 0, 0, 10, 10)), A(det(("CAT", 0, 0, 10, 10))), 1.0),
    ("zero-area prediction", {}, None, det(CAT), A(det(("cat", 0, 0, 0, 10))), 0.0),
]


@pytest.mark.parametrize("name,params,progress,gold,response,expected", DETECTION_VECTORS,
                         ids=[v[0] for v in DETECTION_VECTORS])
def test_detection_vector(name, params, progress, gold, response, expected) -> None:
    record = {"id": "d", "answer": gold, "answer_type": "bbox", "reward": {"verifier": "detection", "parameters": params}}
    result = score(record, response, progress=progress)
    assert result.error is None, result
    assert result.verifier == "detection"
    assert result.accuracy == pytest.approx(expected, abs=1e-9)


HTML_GOLD = "<p>hello world</p>"
HTML_VECTORS = [
    ("html identical", HTML_GOLD, A(HTML_GOLD), 1.0),
    # tokens {<,p,>,hello,/} vs {<,p,>,hello,world,/}: 5/6; tags {p,/p} equal: 0.6*5/6 + 0.4
    ("html one word missing", HTML_GOLD, A("<p>hello</p>"), 0.9),
    # tokens {abc} vs gold tokens: 0/7; no tags: 0
    ("html unrelated", HTML_GOLD, A("abc"), 0.0),
    ("html normalised exact", "<div class='a'> x </div>", A('<DIV class="a">\n   x </DIV>'), 1.0),
    ("html comment ignored", "<b>x</b>", A("<b>x</b><!-- note -->"), 1.0),
    # tokens {<,b,>,x,/} vs {<,i,>,x,/}: 4/6; tags {b,/b} vs {i,/i}: 0 -> 0.6*2/3
    ("html other tag", "<b>x</b>", A("<i>x</i>"), 0.4),
    ("html fenced", HTML_GOLD, "Here:\n```html\n<p>hello world</p>\n```", 1.0),
]


@pytest.mark.parametrize("name,gold,response,expected", HTML_VECTORS, ids=[v[0] for v in HTML_VECTORS])
def test_html_vector(name, gold, response, expected) -> None:
    result = score(rec("html-code", gold), response)
    assert result.error is None
    assert result.accuracy == pytest.approx(expected, abs=1e-9)


SVG_GOLD = '<svg xmlns="http://www.w3.org/2000/svg" width="64" height="64"><rect x="8" y="8" width="32" height="32" fill="red"/></svg>'
SVG_VECTORS = [
    ("svg identical", A(SVG_GOLD), 1.0),
    ("svg extra spaces inside tags", A(SVG_GOLD.replace(" width=", "   width=")), 1.0),
    ("svg single quotes", A(SVG_GOLD.replace('"', "'")), 1.0),
    ("svg no svg element", A("a red square"), 0.0),
    ("svg fenced identical", "```svg\n" + SVG_GOLD + "\n```", 1.0),
]


@pytest.mark.parametrize("name,response,expected", SVG_VECTORS, ids=[v[0] for v in SVG_VECTORS])
def test_svg_vector(name, response, expected) -> None:
    result = score(rec("svg-code", SVG_GOLD), response)
    assert result.error is None
    assert result.accuracy == pytest.approx(expected, abs=1e-9)


def test_vector_count() -> None:
    total = len(VECTORS) + len(THRESHOLD_VECTORS) + len(DETECTION_VECTORS) + len(HTML_VECTORS) + len(SVG_VECTORS)
    assert total >= 150
