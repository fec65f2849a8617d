"""Rows shaped as each RL seed's loader reads them get the reward that seed's own reward code gives.

Every expected value below was worked out by hand from the seed's code (file and lines named per table), never
by running curate. Each table's rows go through the layout reader (:func:`curate.core.records.to_canonical`,
the one path ``rl-filter`` and ``score`` read with) and :func:`curate.rewards.registry.score_many`.

The two VLM-R1 ``default`` rows marked *math-verify* rest on math-verify itself (the library the seed calls at
``grpo_jsonl.py`` lines 792-797): it reads ``\\frac{1}{2}`` as 0.5 and the number 2 in "2 apples"; without it
the seed's fallback would give 0 and the Levenshtein ratio 14/15.
"""

from __future__ import annotations

import json

import pytest

from curate.core.records import to_canonical
from curate.rewards.registry import score_many

J_CAT = '```json\n[{"bbox_2d": [10, 10, 50, 50], "label": "cat"}]\n```'


def _boxes(boxes: list[list[int]], label: str = "cat") -> str:
    return "```json\n" + json.dumps([{"bbox_2d": b, "label": label} for b in boxes]) + "\n```"


# --- VLM-R1 (om-ai-lab/VLM-R1 at 90052f4, src/open-r1-multimodal/src/open_r1/) -----------------------------------
# (accu_reward_method, the gpt turn's answer, response, accuracy, format). Accuracy: grpo_jsonl.py accuracy_reward
# (826-879) and its functions; rec: vlm_modules/qwen_module.py iou_reward (107-176). Format: grpo_jsonl.py
# format_reward (882-897), rec: qwen_module.py format_reward_rec (88-105). The reward is their sum, halved.
VLM_R1 = [
    ("mcq", "B", "<think>x</think><answer>B</answer>", 1.0, 1.0),
    ("mcq", "B", "<answer>C</answer>", 0.0, 0.0),
    ("mcq", "B", "<answer>The answer is B.</answer>", 1.0, 0.0),  # B stands before "."
    ("mcq", "A", "<answer>(A) cat</answer>", 0.0, 0.0),  # ")" is not one of extract_choice's marks (122)
    ("mcq", "C", "<think>Option A is wrong; the answer is C.</think><answer>C</answer>", 1.0, 1.0),  # first answer
    ("yes_no", "Yes", "<answer>yes</answer>", 1.0, 0.0),
    ("yes_no", "No", "<answer>No, it is not.</answer>", 1.0, 0.0),
    ("yes_no", "Yes", "<answer>I do not know</answer>", 0.0, 0.0),  # "no" inside "not" (228-231)
    ("yes_no", "No", "I don't know", 1.0, 0.0),  # no tags: the whole text; "no" inside "know"
    ("yes_no", "Yes", "<answer>maybe</answer>", 0.0, 0.0),
    ("all_match", "Paris", "<answer>paris.</answer>", 1.0, 0.0),  # clean_text drops one trailing "." (774)
    ("all_match", "Paris", "<answer>Paris, France</answer>", 0.0, 0.0),
    ("default", "3", "<think>I count three</think><answer>3</answer>", 1.0, 1.0),  # counting
    ("default", "3", "<answer>4</answer>", 0.0, 0.0),  # numeric_reward: 4.0 != 3.0
    ("default", "3", "<answer>three</answer>", 0.0, 0.0),  # not a float: ratio("three", "3") = 0
    ("default", "\\frac{1}{2}", "<answer>0.5</answer>", 1.0, 0.0),  # math-verify
    ("default", "STOP", "<answer>stop</answer>", 1.0, 0.0),  # OCR: ratio("stop", "stop")
    ("default", "Hello World", "<answer>Helo World</answer>", 20 / 21, 0.0),  # OCR: 1 - 1/(10 + 11)
    ("default", "2 apples", "<answer>2 apple</answer>", 1.0, 0.0),  # math-verify
    ("default", "B", "<answer>B</answer>", 1.0, 0.0),
    ("default", "B", "<answer>C</answer>", 0.0, 0.0),  # extract_choice: C != B (812-817)
    ("rec", "[10, 10, 50, 50]", '<think>x</think> <answer>{"bbox_2d": [10, 10, 50, 50]}</answer>', 1.0, 1.0),
    ("rec", "[10, 10, 50, 50]", "<answer>[30, 10, 70, 50]</answer>", 800 / 2400, 0.0),  # 20 x 40 of 2400
    ("rec", "[10, 10, 50, 50]", "<answer>[10.5, 10, 50, 50]</answer>", 0.0, 0.0),  # integers only (135)
    ("rec", "[10, 10, 50, 50]", "<answer>[60, 60, 90, 90]</answer>", 0.0, 0.0),
    ("rec", "[10, 10, 50, 50]", "[10, 10, 50, 50]", 0.0, 0.0),  # no answer block
    ("rec", "[10, 10, 50, 50]", '<think>a</think><answer>{"bbox": [10, 10, 49, 50]}</answer>', 1560 / 1600, 1.0),
    ("od_ap", J_CAT, "<think>x</think><answer>" + J_CAT + "</answer>", 1.0, 1.0),
    ("od_ap", J_CAT, '<answer>[{"bbox_2d": [10, 10, 50, 50], "label": "cat"}]</answer>', 0.0, 0.0),  # no ```json
    ("od_ap", J_CAT, "<answer>" + _boxes([[10, 10, 50, 50]], "dog") + "</answer>", 0.0, 0.0),  # label not in gold
    ("odLength", J_CAT, "<answer>" + _boxes([[10, 10, 50, 50], [100, 100, 150, 150]]) + "</answer>", 0.5, 0.0),
    ("od_ap", J_CAT, "<answer>" + _boxes([[10, 10, 50, 50], [100, 100, 150, 150]]) + "</answer>", 1.0, 0.0),
    ("od_ap", "None", "<answer>None</answer>", 1.0, 0.0),  # od_reward 379-380
    ("od_ap50", J_CAT, "<answer>" + _boxes([[10, 10, 50, 40]]) + "</answer>", 1.0, 0.0),  # IoU 0.75 >= 0.5
    ("weighted_sum", J_CAT, "<answer>" + _boxes([[30, 10, 70, 50]]) + "</answer>", 0.0, 0.0),  # IoU 1/3 < 0.5
    ("weighted_sum", J_CAT, "<answer>" + J_CAT + "</answer>", 1.0, 0.0),
    ("weighted_sum", J_CAT, "<answer>" + _boxes([[10, 10, 50, 50]], "dog") + "</answer>", 0.3, 0.0),  # 529-535
    ("weighted_sum", J_CAT, "<answer>" + _boxes([[10, 10, 49, 50], [100, 100, 150, 150]]) + "</answer>",
     0.7 * 0.975 + 0.3 * 0.75, 0.0),
]

# --- verl and V-Triune ----------------------------------------------------------------------------------------------
# (data_source, reward_model, response, accuracy, format, reward). V-Triune (MiniMax-AI/One-RL-to-See-Them-All):
# reward_server/verify.py MathVerifyVerifier (112-175; its own checks at 570-580), reward mix of
# reward_serving_fastapi.py (99-118: a 1.0, f 0.1 when not given). verl geometry3k: verl/utils/reward_score/geo3k.py.
MV = {"style": "rule", "verifier": "mathverify"}
TAGS = "<think>\nreason\n</think>\n<answer>\n{}\n</answer>"
VERL = [
    ("virl", {**MV, "ground_truth": "42"}, "42", 0.0, 0.0, 0.0),  # verify.py 570-571
    ("virl", {**MV, "ground_truth": "\\boxed{42}"}, "42", 0.0, 0.0, 0.0),  # 573-574
    ("virl", {**MV, "ground_truth": "42"}, "\\boxed{42}", 1.0, 0.0, 1 / 1.1),  # 576-577
    ("virl", {**MV, "ground_truth": "\\boxed{42}"}, "\\boxed{42}", 1.0, 0.0, 1 / 1.1),  # 579-580
    ("virl", {**MV, "ground_truth": "42"}, TAGS.format("\\boxed{42}"), 1.0, 1.0, 1.0),  # four tags once each
    ("virl", {**MV, "ground_truth": "42"}, TAGS.format("42"), 0.0, 1.0, 0.1 / 1.1),  # no LaTeX anchor
    ("virl", {**MV, "ground_truth": "42"}, "<think>r</think><answer>\\boxed{42}</answer>", 1.0, 0.0, 1 / 1.1),
    ("virl", {**MV, "ground_truth": "42"}, "<think>\nr\n</think>\n\\boxed{42}", 1.0, 0.5, 1.05 / 1.1),
    ("virl", {**MV, "ground_truth": "42"}, "The answer is $42$.", 1.0, 0.0, 1 / 1.1),  # a LaTeX anchor
    ("virl", {**MV, "ground_truth": "\\frac{1}{2}"}, "\\boxed{\\frac{2}{4}}", 1.0, 0.0, 1 / 1.1),
    ("virl", {**MV, "ground_truth": "4"}, "\\boxed{3}", 0.0, 0.0, 0.0),
    ("virl", {**MV, "ground_truth": "5"}, "There are \\boxed{5} dogs.", 1.0, 0.0, 1 / 1.1),  # counting
    ("virl", {**MV, "ground_truth": "5", "accuracy_ratio": 1.0, "format_ratio": 0.0}, "\\boxed{5}", 1.0, 0.0, 1.0),
    ("virl", {**MV, "ground_truth": "5", "accuracy_ratio": 0.5, "format_ratio": 0.5}, TAGS.format("\\boxed{4}"),
     0.0, 1.0, 0.5),
    ("virl", {**MV, "ground_truth": "5", "accuracy_ratio": 3.0, "format_ratio": 1.0}, TAGS.format("\\boxed{5}"),
     1.0, 1.0, 1.0),
    ("virl", {**MV, "ground_truth": "5", "accuracy_ratio": 3.0, "format_ratio": 1.0}, "<answer>\n\\boxed{5}\n</answer>",
     1.0, 0.25, 0.75 + 0.25 * 0.25),  # only "\n</answer>" once (and "\n<answer>\n" is not: the text starts with it)
    ("hiyouga/geometry3k", {"style": "rule", "ground_truth": "7"}, "<think>a</think> \\boxed{7}", 1.0, 1.0, 1.0),
    ("hiyouga/geometry3k", {"style": "rule", "ground_truth": "7"}, "7", 0.0, 0.0, 0.0),  # no box: no answer
    ("hiyouga/geometry3k", {"style": "rule", "ground_truth": "7"}, "<think>a</think> so \\boxed{8}", 0.0, 1.0, 0.1),
    ("hiyouga/geometry3k", {"style": "rule", "ground_truth": "7"}, "\\boxed{7}", 1.0, 0.0, 0.9),
    ("hiyouga/geometry3k", {"style": "rule", "ground_truth": "7"}, " <think>a</think>\\boxed{7}", 1.0, 0.0, 0.9),
    ("hiyouga/geometry3k", {"style": "rule", "ground_truth": "\\frac{1}{2}"}, "<think>a</think>\\boxed{\\frac{2}{4}}",
     1.0, 1.0, 1.0),
    ("hiyouga/geometry3k", {"style": "rule", "ground_truth": "30"}, "<think>x</think>The angle is \\boxed{30}.", 1.0,
     1.0, 1.0),
    ("hiyouga/geometry3k", {"style": "rule", "ground_truth": "30"}, "<think>x</think>\\boxed{31}", 0.0, 1.0, 0.1),
]

# V-Triune detection (REC: one box, OVD: several): reward_server/verify.py DetectionVerifier (213-229 format,
# 353-512 accuracy), utils/det_helper.py (extract_bbox 9-53, compute_iou 56-87, the greedy matchings 137-215); the
# IoU threshold "dynamic" (scripts/reward_server.sh line 4) at step 0: 0.85 (verify.py 455-462).
GOLD1 = "<answer> [{'bbox_2d': [10, 10, 50, 50], 'label': 'cat'}] </answer>"
GOLD2 = "<answer> [{'bbox_2d': [10, 10, 50, 50], 'label': 'cat'}, {'bbox_2d': [100, 100, 150, 150], 'label': 'dog'}] </answer>"
LF, IF = {"iou_max_label_first": 1.0}, {"iou_max_iou_first": 1.0}


def _det(gold: str, ratios: dict) -> dict:
    return {"style": "rule", "verifier": "detection", "ground_truth": gold, "verifier_parm": {"det_reward_ratio": ratios}}


def _said(*boxes: tuple[str, list[int]]) -> str:
    return "<think>\nx\n</think>\n<answer>\n" + json.dumps([{"bbox_2d": b, "label": l} for l, b in boxes]) + "\n</answer>"


CAT, FAR, DOG = [10, 10, 50, 50], [100, 100, 150, 150], [100, 100, 150, 150]
VERL += [
    ("refcoco", _det(GOLD1, LF), _said(("cat", CAT)), 1.0, 1.0, 1.0),
    ("refcoco", _det(GOLD1, LF), _said(("cat", [10, 10, 50, 46])), 0.9, 1.0, 1.0 / 1.1),  # IoU 0.9 >= 0.85
    ("refcoco", _det(GOLD1, LF), _said(("cat", [10, 10, 50, 40])), 0.0, 1.0, 0.1 / 1.1),  # IoU 0.75 < 0.85
    ("refcoco", _det(GOLD1, {**LF, "iou_completeness": 0.3}), _said(("cat", [10, 10, 50, 46])), 0.93, 1.0, 1.03 / 1.1),
    ("coco", _det(GOLD1, {**LF, "iou_completeness": 0.3}), _said(("cat", CAT), ("cat", FAR)),
     0.6 * (0.7 + 0.3 * 0.75), 1.0, (0.6 * 0.925 + 0.1) / 1.1),  # one false alarm: completeness 0.75, 0.6 penalty
    ("coco", _det(GOLD1, LF), _said(("dog", CAT)), 0.0, 1.0, 0.1 / 1.1),  # no prediction of the gold's label
    ("coco", _det(GOLD2, IF), _said(("dog", DOG), ("cat", CAT)), 0.0, 1.0, 0.1 / 1.1),  # det_helper 159-173 as it runs
    ("coco", _det(GOLD2, LF), _said(("dog", DOG), ("cat", CAT)), 1.0, 1.0, 1.0),
    ("coco", _det(GOLD1, {"map": 1.0}), _said(("cat", [10, 10, 50, 47])), 0.9, 1.0, 1.0 / 1.1),  # IoU .925: 9 of 10
    ("coco", _det(GOLD1, {"map50": 1.0}), _said(("cat", [10, 10, 50, 40])), 1.0, 1.0, 1.0),
    ("coco", _det(GOLD1, {}), _said(("cat", CAT)), 0.0, 1.0, 0.1 / 1.1),  # no det_reward_ratio: 0 (verify.py 497-499)
    ("refcoco", _det(GOLD1, LF), "<answer>[{'bbox_2d': [10, 10, 50, 50], 'label': 'CAT'}]</answer>", 1.0, 0.0, 1 / 1.1),
    ("refcoco", _det(GOLD1, LF), "no boxes here", 0.0, 0.0, 0.0),
    ("coco", _det(GOLD1, {**LF, "map": 1.0}), _said(("cat", [10, 10, 50, 47])), (0.925 + 0.9) / 2, 1.0,
     ((0.925 + 0.9) / 2 + 0.1) / 1.1),
]

# --- LLaVA-OneVision-1.5-RL (EvolvingLMMs-Lab/LLaVA-OneVision-1.5-RL at 9f9ce7d, reward/) -------------------------
# (answer_type, answer, problem_type, response, accuracy, reward): the functions named in reward_system.py (21-33),
# the spatial-reasoning bonus of 0.5 x must_have_bbox_reward_fn (65-68, format.py 26-34); the reward is the accuracy.
LLAVA = [
    ("number", ["3"], "counting", "<think>c</think><answer>3</answer>", 1.0, 1.0),
    ("number", ["3"], "counting", "<answer>3 cats</answer>", 1.0, 1.0),
    ("number", ["3"], "counting", "<answer>3.0</answer>", 0.0, 0.0),  # "3.0" != "3" as text
    ("number", ["3"], "counting", "<answer>three</answer>", 0.0, 0.0),
    ("number", ["3"], "counting", "3", 0.0, 0.0),  # no answer block
    ("number", ["12"], "counting", "<answer>about 1, maybe 12</answer>", 1.0, 1.0),  # the last run of digits
    ("boolean", ["Yes"], "general", "<answer>yes</answer>", 1.0, 1.0),
    ("boolean", ["No"], "general", "<answer>False</answer>", 1.0, 1.0),
    ("boolean", ["Yes"], "general", "<answer>no</answer>", 0.0, 0.0),
    ("boolean", ["Yes"], "general", "<answer>maybe</answer>", 0.0, 0.0),
    ("boolean", ["No"], "general", "<answer>I do not know</answer>", 1.0, 1.0),  # "no" inside "not"
    ("multiple-choice", ["B"], "stem", "<answer>(B)</answer>", 1.0, 1.0),
    ("multiple-choice", ["B"], "stem", "<answer>B. a cat</answer>", 1.0, 1.0),
    ("multiple-choice", ["B"], "stem", "<answer>b</answer>", 1.0, 1.0),
    ("multiple-choice", ["B"], "stem", "<answer>C</answer>", 0.0, 0.0),
    ("multiple-choice", ["B"], "stem", "B", 0.0, 0.0),
    ("multiple-choice", ["B"], "stem", "<answer>The answer is B</answer>", 0.0, 0.0),  # first character "T"
    ("ocrtext", ["Hello World"], "ocr", "<answer>helo world</answer>", 10 / 11, 10 / 11),  # 1 edit of 11
    ("ocrtext", ["Hello World"], "ocr", "<answer>hello</answer>", 0.0, 0.0),  # 1 - 6/11 < 0.5
    ("ocrtext", ["STOP", "Stop sign"], "ocr", "<answer> stop </answer>", 1.0, 1.0),
    ("ocrtext", ["xyz"], "ocr", "<answer>abc</answer>", 0.0, 0.0),
    ("any", ["Paris"], "general", "<answer> paris </answer>", 1.0, 1.0),
    ("any", ["Paris"], "general", "<answer>Paris.</answer>", 0.0, 0.0),
    ("bbox", ["[10, 10, 50, 50]"], "grounding", "<answer>[30, 10, 70, 50]</answer>", 800 / 2400, 800 / 2400),
    ("bbox", ["[10, 10, 50, 50]"], "grounding", "<answer>[10,10,50,50]</answer>", 1.0, 1.0),
    ("bbox", ["[10, 10, 50, 50]"], "grounding", "<answer>(10, 10, 50, 50)</answer>", 0.0, 0.0),
    ("bbox", ["[10, 10, 50, 50]"], "grounding", "<answer>[10, 10, 50]</answer>", 0.0, 0.0),
    ("multiple-choice", ["B"], "spatial-reasoning", "<think>the cup at [1, 2, 3, 4]</think><answer>B</answer>", 1.0, 1.5),
    ("multiple-choice", ["B"], "spatial-reasoning", "<think>the cup is left</think><answer>B</answer>", 1.0, 1.0),
    ("multiple-choice", ["B"], "spatial-reasoning", "<think>cup [1.5, 2, 3, 4]</think><answer>A</answer>", 0.0, 0.5),
    ("multiple-choice", ["B"], "spatial-reasoning", "<answer>B</answer> [1, 2, 3, 4]", 1.0, 1.0),  # not in think
]


def _close(a: float, b: float) -> bool:
    return abs(a - b) < 1e-9


def test_tables_cover_every_task_of_the_issue() -> None:
    assert len(VLM_R1) >= 30 and len(VERL) >= 30 and len(LLAVA) >= 30
    assert {m for m, *_ in VLM_R1} >= {"rec", "od_ap", "odLength", "default", "mcq", "yes_no", "weighted_sum"}
    assert {t for t, *_ in LLAVA} >= {"number", "boolean", "multiple-choice", "ocrtext", "bbox", "any"}


def test_vlm_r1_rows_get_vlm_r1s_rewards() -> None:
    rows = [{"id": f"v{i}", "image": "a.png", "accu_reward_method": method,
             "conversations": [{"from": "human", "value": "<image>question"},
                               {"from": "gpt", "value": f"<answer>{answer}</answer>"}]}
            for i, (method, answer, *_) in enumerate(VLM_R1)]
    records = [to_canonical(r, "/data/images", fallback_id="x", fallback_source="vlm") for r in rows]
    assert records[0]["images"] == ["/data/images/a.png"] and records[0]["answer"] == "B"
    results = score_many([(rec, row[2]) for rec, row in zip(records, VLM_R1)])
    for row, got in zip(VLM_R1, results):
        _, _, response, accuracy, fmt = row
        assert got.error is None and got.verifier == "vlm-r1", (row, got)
        assert _close(got.accuracy, accuracy) and got.format == fmt, (row, got)
        assert _close(got.reward, (accuracy + fmt) / 2), (row, got)


def test_verl_rows_get_v_triunes_and_verls_rewards() -> None:
    rows = [{"data_source": source, "prompt": [{"role": "user", "content": "<image>Solve."}], "ability": "math",
             "images": [{"bytes": b"\x89PNG", "path": "x.png"}], "reward_model": model,
             "extra_info": {"split": "train", "index": i}}
            for i, (source, model, *_) in enumerate(VERL)]
    records = [to_canonical(r, "/d", fallback_id=f"train:{i}", fallback_source="train") for i, r in enumerate(rows)]
    assert [r["source"] for r in records][:1] == ["virl"] and records[-1]["source"] == "coco"
    results = score_many([(rec, row[2]) for rec, row in zip(records, VERL)])
    for row, got in zip(VERL, results):
        _, _, _, accuracy, fmt, reward = row
        assert got.error is None, (row, got)
        assert _close(got.accuracy, accuracy) and got.format == fmt and _close(got.reward, reward), (row, got)


def test_llava_ov_rl_rows_get_its_rewards() -> None:
    rows = [{"id": f"l{i}", "images": [], "problem": "q", "answer": answer, "answer_type": kind,
             "problem_type": problem_type, "source": "src", "prompt_type": "default"}
            for i, (kind, answer, problem_type, *_) in enumerate(LLAVA)]
    records = [to_canonical(r, "/d", fallback_id="x", fallback_source="s", text_only=True) for r in rows]
    assert all(r["prompt_type"] == "think" for r in records)  # dataset.py 88-94: "default" gets the thinking prompt
    results = score_many([(rec, row[3]) for rec, row in zip(records, LLAVA)])
    for row, got in zip(LLAVA, results):
        *_, accuracy, reward = row
        assert got.error is None, (row, got)
        assert _close(got.accuracy, accuracy) and _close(got.reward, reward), (row, got)


@pytest.mark.parametrize("text, want", [
    ("<think>a</think>\n <answer>b</answer>", 1.0), ("x<think>a</think><answer>b</answer>", 0.0),
    ("<think>a</think><answer>b</answer>\n", 0.0), ("<think>a</think> x <answer>b</answer>", 0.0),
    ("<think>a</think>z</think><answer>b</answer>", 1.0)])
def test_vlm_r1_format_is_the_full_match_of_grpo_jsonl(text: str, want: float) -> None:
    """``format_reward`` (grpo_jsonl.py 884-886): ``<think>.*?</think>\\s*<answer>.*?</answer>`` over the whole text."""
    from curate.rewards.format import vlm_r1_format

    assert vlm_r1_format(text) == want


def test_an_unknown_reward_key_is_the_records_error_naming_it() -> None:
    from curate.rewards.registry import plan
    from curate.rewards.verdict import RecordError

    record = {"id": "d1", "answer": "[1, 2, 3, 4]", "answer_type": "bbox", "reward": {"iou_threshold": "dynamic"}}
    with pytest.raises(RecordError, match="unknown key 'iou_threshold' under 'reward'.*reward.parameters"):
        plan(record)
    record["reward"] = {"parameters": {"iou_threshold": "dynamic"}}
    assert plan(record).params == {"iou_threshold": "dynamic"}


def test_a_detection_answer_given_as_a_json_list_is_read() -> None:
    raw = {"id": "od", "problem": "Find the cats.", "answer_type": "detection",
           "answer": [{"bbox_2d": [10, 10, 50, 50], "label": "cat"}, {"bbox_2d": [60, 60, 90, 90], "label": "cat"}]}
    rec = to_canonical(raw, "/d", fallback_id="x", fallback_source="s", text_only=True)
    assert json.loads(rec["messages"][1]["content"]) == raw["answer"]
    right = '<answer>[{"bbox_2d": [10, 10, 50, 50], "label": "cat"}, {"bbox_2d": [60, 60, 90, 90], "label": "cat"}]</answer>'
    half = '<answer>[{"bbox_2d": [10, 10, 50, 50], "label": "cat"}]</answer>'
    full, part = score_many([(rec, right), (rec, half)])
    assert full.error is None and _close(full.accuracy, 1.0) and 0.0 < part.accuracy < full.accuracy


def test_v_triune_detection_thresholds() -> None:
    """The IoU threshold: ``average`` of the 11 (verify.py 344-350) and ``dynamic`` by the step ratio (455-462)."""
    rec = {"id": "d", "answer": GOLD1, "reward": {"verifier": "v-triune-math", "parameters": {
        "method": "detection", "iou_threshold": "average", "det_reward_ratio": LF}}}
    said = _said(("cat", [10, 10, 50, 46]))  # IoU 0.9: matched at 9 of the 11 thresholds
    assert _close(score_many([(rec, said)])[0].accuracy, 0.9 * 9 / 11)
    rec["reward"]["parameters"]["iou_threshold"] = "dynamic"
    early, late = score_many([(rec, said)], progress=0.05)[0], score_many([(rec, said)], progress=0.5)[0]
    assert _close(early.accuracy, 0.9) and late.accuracy == 0.0  # 0.85, then 0.99
