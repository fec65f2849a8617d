"""The shared helpers: labels -> records, completions and queries -> response texts."""

from __future__ import annotations

import threading

import numpy as np

from curate.rewards import score
from curate.rewards.trainers.common import (
    completion_text,
    progress_of,
    record_from_label,
    response_of,
    score_batch,
    strip_end_tokens,
)


def test_record_from_label_forms() -> None:
    assert record_from_label("7", {"answer_type": "number"}) == {"answer": "7", "answer_type": "number"}
    assert record_from_label('{"answer": "7", "answer_type": "number"}', {"answer_type": "math"}) == {
        "answer": "7", "answer_type": "number"}
    code_gold = '{"tests": [{"input": "1", "output": "2"}]}'  # a structured gold stays a gold
    assert record_from_label(code_gold, {"answer_type": "general-code"})["answer"] == code_gold
    rec = record_from_label({"answer": np.array(["B", "b"], dtype=object), "image_size": np.array([640, 480]),
                             "reward": '{"accuracy_ratio": 0.5, "format_ratio": 0.5}'}, {"answer_type": "choice"})
    assert rec == {"answer": ["B", "b"], "image_size": [640, 480], "answer_type": "choice",
                   "reward": {"accuracy_ratio": 0.5, "format_ratio": 0.5}}
    assert type(rec["image_size"][0]) is int


def test_completion_and_query_texts() -> None:
    assert strip_end_tokens("<answer>7</answer>\n<|im_end|><|endoftext|>") == "<answer>7</answer>\n"
    assert strip_end_tokens("no end  ") == "no end  "
    assert completion_text([{"role": "assistant", "content": "<answer>7</answer><|im_end|>"}]) == "<answer>7</answer>"
    assert completion_text([{"role": "assistant", "content": [{"type": "text", "text": "a"},
                                                               {"type": "text", "text": "b"}]}]) == "ab"
    prompt = "<|im_start|>user\n<|vision_start|><|image_pad|><|vision_end|>Count.<|im_end|>\n<|im_start|>assistant\n"
    query = prompt.replace("<|image_pad|>", "<|image_pad|>" * 16) + "<answer>3</answer><|im_end|>"
    assert response_of(query, prompt) == "<answer>3</answer>"
    assert response_of(prompt + "x", prompt) == "x"
    assert response_of("just text", "another prompt") == "just text"


def test_progress_of_trainer_state() -> None:
    class State:
        global_step, max_steps = 5, 20

    assert progress_of(State()) == 0.25
    assert progress_of(None) is None


def test_math_scoring_off_the_main_thread() -> None:
    """math-verify's own timeout needs the main thread; curate's limits do not."""
    records = [{"answer": "\\frac{1}{2}", "answer_type": "math-expressions"}] * 2
    texts = ["<answer>0.5</answer>", "<answer>0.6</answer>"]
    out: list = []
    t = threading.Thread(target=lambda: out.extend(score_batch(records, texts)))
    t.start()
    t.join(60)
    assert [r.accuracy for r in out] == [score(r, x).accuracy for r, x in zip(records, texts)] == [1.0, 0.0]
    assert all(r.error is None for r in out)


def test_unscorable_record_scores_zero() -> None:
    (res,) = score_batch([{"answer": "7", "answer_type": "no-such-type"}], ["7"])
    assert res.reward == 0.0 and res.error.startswith("record_error")


def test_trl_functions_without_an_answer_column_say_what_to_add() -> None:
    import pytest

    from curate.core.errors import UserError
    from curate.rewards.trainers.trl import accuracy_reward

    with pytest.raises(UserError, match="'answer'"):
        accuracy_reward(prompts=["p"], completions=["7"], answer_type=["number"])
