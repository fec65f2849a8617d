"""Routing, weighting, record errors and batch scoring."""

from __future__ import annotations

import threading

import pytest

from curate.core.errors import UserError
from curate.rewards.counters import counters
from curate.rewards.registry import ANSWER_TYPES, VERIFIERS, answer_types, score, score_many
from curate.rewards.verdict import RecordError, RewardResult, UnknownAnswerType

THOUGHT = "<think>" + "I compare the two options and check each of them. " * 4 + "</think>"


def test_every_anchor_answer_type_routes() -> None:
    expected = {"number": "number", "math-expressions": "math", "html-code": "html", "svg-code": "svg",
                "boolean": "boolean", "multiple-choice": "choice", "ocrtext": "ocr", "general-code": "code",
                "bbox": "bbox", "critic": "critic", "any": "string"}
    assert ANSWER_TYPES == expected
    assert answer_types()[: len(expected)] == list(expected)
    for name in expected.values():
        assert name in VERIFIERS


@pytest.mark.parametrize("answer_type", ["MULTIPLE_CHOICE", "multiple_choice", " Multiple-Choice "])
def test_answer_type_spelling_is_forgiving(answer_type: str) -> None:
    assert score({"answer": "B", "answer_type": answer_type}, "<answer>B</answer>").verifier == "choice"


def test_unknown_answer_type_raises_a_user_error() -> None:
    with pytest.raises(UnknownAnswerType) as info:
        score({"id": "r7", "answer": "B", "answer_type": "colour"}, "<answer>B</answer>")
    assert isinstance(info.value, UserError) and isinstance(info.value, ValueError)
    message = str(info.value)
    assert "'r7'" in message and "'colour'" in message and "multiple-choice" in message


@pytest.mark.parametrize(
    "record,needle",
    [
        ({"answer_type": "number"}, "no 'answer'"),
        ({"answer": "1"}, "no 'answer_type'"),
        ({"answer": "B", "answer_type": "multiple-choice", "prompt_type": "cot"}, "prompt_type"),
        ({"answer": "B", "answer_type": "multiple-choice", "reward": "x"}, "'reward' must be an object"),
        ({"answer": "B", "answer_type": "multiple-choice", "reward": {"verifier": "llm-judge"}}, "unknown verifier"),
        ({"answer": "cat", "answer_type": "multiple-choice"}, "not an option letter"),
        ({"answer": "maybe", "answer_type": "boolean"}, "not yes/no"),
        ({"answer": "many", "answer_type": "number"}, "not a number"),
        ({"answer": "[0, 0, 0, 5]", "answer_type": "bbox"}, "zero area"),
        ({"answer": "not json", "answer_type": "general-code"}, "not JSON"),
        ({"answer": "[1,2,3,4]", "answer_type": "bbox", "pred_coords": "inches"}, "pred_coords"),
        ({"answer": "B", "answer_type": "multiple-choice", "reward": {"accuracy_ratio": -1}}, ">= 0"),
    ],
)
def test_bad_records_raise_record_errors(record: dict, needle: str) -> None:
    with pytest.raises(RecordError) as info:
        score(record, "<answer>B</answer>")
    assert needle in str(info.value)
    assert "\n" not in str(info.value)


def test_reward_object_selects_verifier_and_weights() -> None:
    record = {"answer": "B", "answer_type": "any", "prompt_type": "think",
              "reward": {"verifier": "multiple_choice", "accuracy_ratio": 0.8, "format_ratio": 0.2}}
    right_unformatted = score(record, "<answer>(B)</answer>")
    assert (right_unformatted.verifier, right_unformatted.accuracy, right_unformatted.format) == ("choice", 1.0, 0.0)
    assert right_unformatted.reward == pytest.approx(0.8)
    wrong_formatted = score(record, THOUGHT + "<answer>C</answer>")
    assert (wrong_formatted.accuracy, wrong_formatted.format) == (0.0, 1.0)
    assert wrong_formatted.reward == pytest.approx(0.2)


def test_weights_above_one_are_normalised_and_default_is_accuracy() -> None:
    both = {"answer": "B", "answer_type": "multiple-choice", "prompt_type": "think",
            "reward": {"accuracy_ratio": 1.0, "format_ratio": 1.0}}
    assert score(both, THOUGHT + "<answer>B</answer>").reward == pytest.approx(1.0)
    assert score(both, THOUGHT + "<answer>C</answer>").reward == pytest.approx(0.5)
    plain = {"answer": "B", "answer_type": "multiple-choice", "prompt_type": "think"}
    assert score(plain, THOUGHT + "<answer>C</answer>").reward == 0.0
    assert score(plain, "<answer>B</answer>").reward == 1.0


def test_verifier_parameters_aliases() -> None:
    record = {"answer": "[0, 0, 10, 10]", "answer_type": "bbox",
              "reward": {"verifier": "iou", "verifier_parm": {"iou_threshold": 0.95}}}
    assert score(record, "<answer>[0, 0, 10, 9]</answer>").accuracy == 0.0  # IoU 0.9 < 0.95


def test_verifiers_are_callable_directly() -> None:
    result = VERIFIERS["number"]({"answer": "12", "answer_type": "any"}, "<answer>12.0</answer>")
    assert isinstance(result, RewardResult) and result.verifier == "number" and result.accuracy == 1.0


def test_response_types() -> None:
    record = {"answer": "B", "answer_type": "multiple-choice"}
    assert score(record, None).accuracy == 0.0
    assert score(record, b"<answer>B</answer>").accuracy == 1.0
    with pytest.raises(RecordError):
        score(record, 42)


def test_response_too_large_is_a_reason_not_an_exception() -> None:
    result = score({"answer": "B", "answer_type": "multiple-choice"}, "x" * 4_000_001)
    assert (result.accuracy, result.reward, result.error) == (0.0, 0.0, "response_too_large")


def test_verifier_failure_reason() -> None:
    result = score({"answer": "1", "answer_type": "math-expressions"}, "<answer>" + "1+" * 2000 + "1</answer>")
    assert result.error == "answer_too_long" and result.accuracy == 0.0
    deep = "<answer>" + "{" * 40 + "1" + "}" * 40 + "</answer>"
    assert score({"answer": "1", "answer_type": "math-expressions"}, deep).error == "answer_too_deep"


def test_score_many_matches_score_and_keeps_order() -> None:
    items = []
    for i in range(40):
        items.append(({"answer": str(i % 5), "answer_type": "number"}, f"<answer>{i % 3}</answer>"))
        items.append(({"answer": f"\\frac{{{i % 4}}}{{2}}", "answer_type": "math-expressions"},
                      f"<answer>{(i % 3) / 2}</answer>"))
        items.append(({"answer": "B", "answer_type": "multiple-choice"}, "<answer>B</answer>" if i % 2 else "C"))
    batch = score_many(items)
    single = [score(r, s) for r, s in items]
    assert batch == single
    assert [r.accuracy for r in batch[1::3]] == [1.0 if (i % 3) / 2 == (i % 4) / 2 else 0.0 for i in range(40)]


def test_score_many_record_errors_as_results() -> None:
    items = [({"answer": "B", "answer_type": "nope"}, "x"), ({"answer": "B", "answer_type": "multiple-choice"}, "<answer>B</answer>")]
    with pytest.raises(UnknownAnswerType):
        score_many(items)
    out = score_many(items, on_record_error="result")
    assert out[0].error.startswith("record_error:") and "nope" in out[0].error
    assert out[1].accuracy == 1.0


def test_scoring_from_threads() -> None:
    record = {"answer": "\\frac{3}{4}", "answer_type": "math-expressions"}
    outputs: list[list[RewardResult]] = []
    lock = threading.Lock()

    def work(k: int) -> None:
        res = [score(record, f"<answer>{x}</answer>") for x in ("0.75", "3/4", f"{k}/7")]
        with lock:
            outputs.append(res)

    threads = [threading.Thread(target=work, args=(k,)) for k in range(12)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert len(outputs) == 12
    for res in outputs:
        assert [r.accuracy for r in res[:2]] == [1.0, 1.0] and res[2].accuracy == 0.0
        assert all(r.error is None for r in res)


def test_counters_count_calls_and_errors() -> None:
    before = counters()
    score({"answer": "B", "answer_type": "multiple-choice"}, "y" * 4_000_001)
    after = counters()
    assert after.get("calls:choice", 0) == before.get("calls:choice", 0) + 1
    assert after.get("error:response_too_large", 0) == before.get("error:response_too_large", 0) + 1
