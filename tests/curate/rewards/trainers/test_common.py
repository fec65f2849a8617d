"""The shared helpers: labels -> records, completions and queries -> response texts."""

from __future__ import annotations

import threading

import numpy as np

from curate.rewards.registry import score
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


def test_format_rewards_run_the_format_check_only() -> None:
    """TRL's format_reward and AReaL's format_reward_fn never call a verifier: a right format with a
    wrong math answer gets the format reward, and the math verifier (and its worker pool) is not used."""
    from curate.rewards.counters import counters
    from curate.rewards.registry import score
    from curate.rewards.runtime.limits import get_pool
    from curate.rewards.trainers import areal
    from curate.rewards.trainers import trl as curate_trl

    think = "<think>" + "add the two fractions, then simplify " * 3 + "</think><answer>x^2 + 1</answer>"
    texts = ["<answer>\\frac{1}{3}</answer>", think, "it is 1", "<answer>2</answer><answer>3</answer>"]
    cols = {"answer": ["\\frac{1}{2}", "x^3", "1", "2"], "answer_type": ["math"] * 4,
            "prompt_type": ["normal", "think", "normal", "normal"]}
    calls, tasks = counters().get("calls:math", 0), get_pool().counts["tasks"]
    fmt = curate_trl.format_reward(prompts=["p"] * 4, completions=texts, **cols)
    no_gold = curate_trl.format_reward(prompts=["p"] * 4, completions=texts, prompt_type=cols["prompt_type"])
    one = areal.format_reward_fn("p", texts[0] + "<|im_end|>", [], [], answer="\\frac{1}{2}", answer_type="math")
    bad = curate_trl.format_reward(prompts=["p"], completions=[texts[0]], answer=["1"], prompt_type=["weird"])
    assert counters().get("calls:math", 0) == calls and get_pool().counts["tasks"] == tasks  # no verifier ran
    assert fmt == no_gold == [1.0, 1.0, 0.0, 0.0] and one == 1.0 and bad == [0.0]
    records = [{"answer": a, "answer_type": "math", "prompt_type": p} for a, p in zip(cols["answer"], cols["prompt_type"])]
    full = [score(r, t) for r, t in zip(records, texts)]
    assert [r.format for r in full] == fmt  # the same format scores as the full scoring
    assert full[0].accuracy == 0.0 and full[1].accuracy == 0.0  # wrong answers: only the format was rewarded
    assert counters().get("calls:math", 0) > calls  # (the full scoring does go through the math verifier)
