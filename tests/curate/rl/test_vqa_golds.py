"""VQA rows in the RL stages: golds from the annotators' ``answers`` and multiple-choice rows scored by letter.

TextVQA/VQAv2 rows carry no ``answer``, only their annotators' ``answers``; ScienceQA rows carry
``choices`` and ``answer``, the index of the right one. Both were errored or scored against the
wrong gold before (``no 'answer'``; the text ``1``).
"""

from __future__ import annotations

from pathlib import Path

import pyarrow.parquet as pq

from curate.rl.config import ScoreConfig
from curate.rl.config import RlFilterConfig
from curate.rewards.registry import plan
from curate.rl.filter import rl_filter
from curate.rl.score import score
from tests.curate.rl._inputs import write_records_and_responses

ROWS = [
    {"id": "tvqa", "question": "What brand is the phone?", "answers": ["nokia", "nokia", "Nokia", "toshiba"],
     "answer_type": "ocrtext"},
    {"id": "vqav2", "question": "What color is the bus?", "answers": [{"answer": "red"}, {"answer": "orange"}],
     "answer_type": "ocrtext"},
    {"id": "sqa", "question": "Which animal is a mammal?", "choices": ["frog", "whale", "shark"], "answer": 1,
     "hint": "", "answer_type": "multiple-choice"},
    {"id": "sqa-wrong", "question": "Which is a fruit?", "choices": ["carrot", "apple"], "answer": 1,
     "answer_type": "multiple-choice"},
]
RESPONSES = {"tvqa": "<answer>toshiba</answer>", "vqav2": "<answer>orange</answer>", "sqa": "<answer>B</answer>",
             "sqa-wrong": "<answer>A</answer>"}


def write_inputs(tmp_path: Path) -> tuple[Path, Path]:
    return write_records_and_responses(tmp_path, "vqa", ROWS, RESPONSES)


def test_plan_takes_the_annotators_answers_and_the_options_letter() -> None:
    assert plan(ROWS[0]).golds == ["nokia", "Nokia", "toshiba"]
    assert plan(ROWS[1]).golds == ["red", "orange"]
    assert plan(ROWS[2]).golds == ["B"]
    assert plan({**ROWS[2], "answer_type": "number"}).golds == ["1"]  # the letter is for the choice verifier only
    assert plan({"question": "Why?", "choices": ["rain", "sun"], "correct_choice_idx": 0,
                 "answer_type": "mcq"}).golds == ["A"]
    # MMMU names no answer_type: a row with options and an answer naming one is multiple choice
    mmmu = plan({"question": "<image 1> Which?", "options": "['x', 'y', 'z']", "answer": "C"})
    assert mmmu.verifier.name == "choice" and mmmu.golds == ["C"]


def test_mmmu_rows_mix_multiple_choice_and_open_questions(tmp_path: Path) -> None:
    rows = [{"id": "mc", "question": "Which?", "options": "['x', 'y', 'z']", "answer": "C",
             "question_type": "multiple-choice"},
            {"id": "open", "question": "How many?", "options": "[]", "answer": "12", "question_type": "open"}]
    records, answers = write_records_and_responses(tmp_path, "mmmu", rows, {"mc": "<answer>(C)</answer>",
                                                                           "open": "<answer>12.0</answer>"})
    stats = score([records], ScoreConfig(responses=answers, out=tmp_path / "out",
                                         answer_type="number"))  # the default for the open ones
    assert stats["scored"] == 2 and not stats.get("errored")
    got = {r["id"]: r["accuracy"] for r in pq.read_table(tmp_path / "out" / "scores.parquet").to_pylist()}
    assert got == {"mc": 1.0, "open": 1.0}


def test_score_vqa_rows(tmp_path: Path) -> None:
    records, answers = write_inputs(tmp_path)
    stats = score([records], ScoreConfig(responses=answers, out=tmp_path / "out"))
    assert stats["scored"] == 4 and not stats.get("errored")
    got = {r["id"]: r["accuracy"] for r in pq.read_table(tmp_path / "out" / "scores.parquet").to_pylist()}
    assert got == {"tvqa": 1.0, "vqav2": 1.0, "sqa": 1.0, "sqa-wrong": 0.0}


def test_rl_filter_vqa_rows(tmp_path: Path) -> None:
    records, answers = write_inputs(tmp_path)
    stats = rl_filter([str(records)], RlFilterConfig(out=tmp_path / "rl", backend={"rollouts": str(answers)}, n=1,
                                                     plot=False))
    assert not stats["errored"] and stats["records_in"] == 4
    prompts = {r["id"]: r for r in pq.read_table(tmp_path / "rl" / "prompts.parquet").to_pylist()}
    assert {k: p["pass_at_1"] for k, p in prompts.items()} == {"tvqa": 1.0, "vqav2": 1.0, "sqa": 1.0,
                                                                 "sqa-wrong": 0.0}
