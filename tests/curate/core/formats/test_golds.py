"""The golds of VQA rows (curate.core.formats.rows): annotators' answers, options and the letter of the right one."""

from __future__ import annotations

import pytest

from curate.core.formats.rows import CHOICE_PROMPT, annotator_answers, answer_letter, choice_question, options_of


def test_annotator_answers_are_distinct_strings_first_seen_first() -> None:
    assert annotator_answers({"answers": ["nokia", "Nokia", "nokia", " toshiba ", "", None]}) == \
        ["nokia", "Nokia", "toshiba"]
    assert annotator_answers({"answers": [{"answer": "red", "answer_confidence": "yes"}, {"answer": "red"},
                                          {"answer": 2}, {"other": "x"}]}) == ["red", "2"]
    assert annotator_answers({"answers": "red"}) == [] and annotator_answers({}) == []


@pytest.mark.parametrize("row, options", [
    ({"choices": ["cat", "dog"]}, ["cat", "dog"]),
    ({"options": ["1", 2, 3.5]}, ["1", "2", "3.5"]),
    ({"choices": ["only one"]}, None),  # not a choice
    ({"choices": [["nested"], "x"]}, None),
    ({"choices": None, "options": ["a", "b"]}, ["a", "b"]),
    ({"choices": list("abcdefghijklmnopqrstuvwxyz0")}, None),  # more options than letters
    ({}, None),
])
def test_options_of(row: dict, options: list[str] | None) -> None:
    assert options_of(row) == options


@pytest.mark.parametrize("row, letter", [
    ({"answer": 1}, "B"),  # ScienceQA: the index
    ({"answer": 0}, "A"),
    ({"answer": "2"}, "C"),  # AI2D exports: the index as text
    ({"answer": "dog"}, "B"),  # the option's text
    ({"answer": "C"}, "C"),  # a letter
    ({"answer": "(b)"}, None),  # a lowercase letter is not read as one
    ({"answer": "(C)"}, "C"),
    ({"answer": "E"}, None),  # a letter past the options
    ({"correct_choice_idx": 2, "direct_answers": ["bird"]}, "C"),  # A-OKVQA
    ({"answer": "a horse"}, None),
    ({"answer": True}, None),
    ({}, None),
])
def test_answer_letter(row: dict, letter: str | None) -> None:
    assert answer_letter(row, ["cat", "dog", "bird"]) == letter


def test_an_index_outside_the_options_is_an_error() -> None:
    with pytest.raises(ValueError, match="answer 3 is not the index of one of the 3 options"):
        answer_letter({"answer": 3}, ["cat", "dog", "bird"])
    with pytest.raises(ValueError, match="answer -1"):
        answer_letter({"answer": -1}, ["cat", "dog", "bird"])


def test_an_option_written_as_digits_wins_over_an_index() -> None:
    assert answer_letter({"answer": "1"}, ["3", "1", "2"]) == "B"


def test_choice_question_lists_the_context_and_the_lettered_options() -> None:
    text = choice_question({"hint": "  The map shows Europe. "}, "Which country is highlighted?", ["France", "Spain"])
    assert text == ("Context: The map shows Europe.\nWhich country is highlighted?\nA. France\nB. Spain\n"
                    f"{CHOICE_PROMPT}")
    assert choice_question({"hint": ""}, "Q?", ["x", "y"]).splitlines()[0] == "Q?"
