"""Answer extraction and the format score."""

from __future__ import annotations

import time

import pytest

from curate.rewards.extract import extract_answer, last_answer_block, last_boxed, last_code_block, strip_latex_wrappers
from curate.rewards.format import format_score


@pytest.mark.parametrize(
    "text,expected",
    [
        ("<answer>B</answer>", "B"),
        ("<answer>A</answer> no, <answer>C</answer>", "C"),
        ("<answer>x <answer>y</answer>", "y"),  # the last close pairs with the nearest open
        ("<answer>unclosed", None),
        ("</answer> only", None),
        ("nothing", None),
    ],
)
def test_last_answer_block(text: str, expected: str | None) -> None:
    assert last_answer_block(text) == expected


@pytest.mark.parametrize(
    "text,expected",
    [
        ("\\boxed{5}", "5"),
        ("\\boxed{\\frac{1}{2}}", "\\frac{1}{2}"),
        ("\\boxed{a} and \\boxed{b}", "b"),
        ("\\boxed{a} and \\boxed{b", "a"),
        ("\\boxed{\\{1,2\\}}", "\\{1,2\\}"),
        ("\\fbox{7}", "7"),
        ("\\boxed{{{}}}", "{{}}"),
        ("no box", None),
        ("\\boxed{", None),
    ],
)
def test_last_boxed(text: str, expected: str | None) -> None:
    assert last_boxed(text) == expected


def test_extract_answer_prefers_boxed_inside_answer() -> None:
    assert extract_answer("<answer>so it is \\boxed{4}</answer>") == "4"
    assert extract_answer("\\boxed{3} <answer>5</answer>") == "5"
    assert extract_answer("\\boxed{3} text") == "3"


def test_code_block_and_wrappers() -> None:
    assert last_code_block("```python\na=1\n```\n```js\nb\n```", ("python",)) == "a=1\n"
    assert last_code_block("```\nopen fence") == "open fence"
    assert strip_latex_wrappers("$\\boxed{\\text{B}}$") == "B"
    assert strip_latex_wrappers("**\\mathrm{cm}**") == "cm"


def test_extraction_is_linear_on_hostile_input() -> None:
    # Quadratic regexes would take minutes on these; the scanners take milliseconds.
    hostile = ["<answer>" * 200_000, "\\boxed{" * 150_000, "{" * 1_000_000 + "\\boxed{1}", "}" * 1_000_000]
    for text in hostile:
        t0 = time.perf_counter()
        extract_answer(text)
        format_score(text, "think")
        format_score(text, "normal")
        assert time.perf_counter() - t0 < 2.0


LONG_THOUGHT = "<think>" + "Let me count the objects carefully. " * 5 + "</think>"


@pytest.mark.parametrize(
    "response,prompt_type,expected",
    [
        (LONG_THOUGHT + "<answer>B</answer>", "think", 1.0),
        (LONG_THOUGHT + "\\boxed{B}", "think", 1.0),
        (LONG_THOUGHT + LONG_THOUGHT + "<answer>B</answer>", "think", 0.0),  # two think blocks
        (LONG_THOUGHT, "think", 0.0),  # no answer
        ("<answer>B</answer>" + LONG_THOUGHT, "think", 0.0),  # answer before thinking
        ("</think>x<think><answer>B</answer>", "think", 0.0),  # tags out of order
        ("<think>short</think><answer>B</answer>", "think", 0.0),  # 18 of 36 characters is > 20 %
        (LONG_THOUGHT + "<answer>" + "x" * 200 + "</answer>", "think", 0.0),  # answer > 20 %
        ("<answer>B</answer>", "think", 0.0),
        ("<answer>B</answer>", "normal", 1.0),
        ("\\boxed{B}", "normal", 1.0),
        ("The answer is \\boxed{B}.", "normal", 1.0),
        ("\\boxed{B} \\boxed{C}", "normal", 0.0),
        ("<answer>B</answer><answer>C</answer>", "normal", 0.0),
        (LONG_THOUGHT + "<answer>B</answer>", "normal", 0.0),
        ("B", "normal", 0.0),
        ("<answer>B", "normal", 0.0),
    ],
)
def test_format_score(response: str, prompt_type: str, expected: float) -> None:
    assert format_score(response, prompt_type) == expected
