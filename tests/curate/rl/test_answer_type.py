"""``--answer-type``: RL sets exported without ``answer_type`` (e.g. ViRL39K's problem, answer, images) are scored.

Without it each such record is errored, naming the fix; with it the records that name no
verifier get the default, and a record's own ``answer_type`` or ``reward.verifier`` wins.
"""

from __future__ import annotations

from pathlib import Path

import pyarrow.parquet as pq
import pytest

from curate.rl.config import ScoreConfig
from curate.rl.config import RlFilterConfig
from curate.core.errors import UserError
from curate.rl.filter import rl_filter
from curate.rl.golds import with_answer_type
from curate.rl.score import score
from tests.curate.rl._inputs import write_records_and_responses

ROWS = [{"id": "p0", "problem": "What is 1/2 + 1/4?", "answer": "\\frac{3}{4}", "category": "math"},
        {"id": "p1", "problem": "What is 2 + 2?", "answer": "4", "category": "math"},
        {"id": "p2", "problem": "Is it red?", "answer": "B", "answer_type": "multiple-choice"},
        {"id": "p3", "problem": "Count them.", "answer": "3", "reward": {"verifier": "number"}}]
#: Each row's response: p0 in another form of the same value (math equivalence), p1 wrong, p2 and p3 right.
RESPONSES = {"p0": "<answer>0.75</answer>", "p1": "<answer>5</answer>", "p2": "<answer>(B)</answer>",
             "p3": "<answer>3</answer>"}


def write_inputs(tmp_path: Path) -> tuple[Path, Path]:
    return write_records_and_responses(tmp_path, "virl", ROWS, RESPONSES)


def test_the_default_fills_only_records_that_name_no_verifier() -> None:
    assert with_answer_type(dict(ROWS[0]), "math")["answer_type"] == "math"
    assert with_answer_type(dict(ROWS[2]), "math")["answer_type"] == "multiple-choice"
    assert "answer_type" not in with_answer_type(dict(ROWS[3]), "math")
    assert "answer_type" not in with_answer_type(dict(ROWS[0]), None)


def test_score_with_a_default_answer_type(tmp_path: Path) -> None:
    records, answers = write_inputs(tmp_path)
    plain = score([records], ScoreConfig(responses=answers, out=tmp_path / "plain"))
    assert plain["scored"] == 2  # p0 and p1 are errored: no answer_type
    table = pq.read_table(tmp_path / "plain" / "scores.parquet").to_pylist()
    assert {r["id"] for r in table if r["error"] and "answer_type" in r["error"]} == {"p0", "p1"}
    stats = score([records], ScoreConfig(responses=answers, out=tmp_path / "math", answer_type="math"))
    assert stats["scored"] == 4
    got = {r["id"]: (r["verifier"], r["accuracy"]) for r in pq.read_table(tmp_path / "math" / "scores.parquet").to_pylist()}
    assert got["p0"][1] == 1.0 and got["p1"][1] == 0.0 and got["p2"][1] == 1.0 and got["p3"][1] == 1.0
    assert got["p0"][0] == got["p1"][0] != got["p2"][0]  # the default's verifier; p2 kept its own
    with pytest.raises(UserError, match="answer_type"):
        score([records], ScoreConfig(responses=answers, out=tmp_path / "bad", answer_type="no-such-type"))


def test_rl_filter_with_a_default_answer_type(tmp_path: Path) -> None:
    records, answers = write_inputs(tmp_path)
    plain = rl_filter([str(records)], RlFilterConfig(out=tmp_path / "plain", backend={"rollouts": str(answers)}, n=1,
                                                     plot=False))
    assert plain["errored"] == {"record_error": 2}
    stats = rl_filter([str(records)], RlFilterConfig(out=tmp_path / "math", backend={"rollouts": str(answers)}, n=1,
                                                     plot=False, answer_type="math"))
    assert not stats["errored"] and stats["records_in"] == 4
    prompts = {r["id"]: r for r in pq.read_table(tmp_path / "math" / "prompts.parquet").to_pylist()}
    assert prompts["p0"]["answer_type"] == "math" and prompts["p0"]["pass_at_1"] == 1.0
    assert prompts["p1"]["pass_at_1"] == 0.0 and prompts["p2"]["answer_type"] == "multiple-choice"
    with pytest.raises(UserError, match="other settings"):  # the default decides scores: not mixed on a rerun
        rl_filter([str(records)], RlFilterConfig(out=tmp_path / "math", backend={"rollouts": str(answers)}, n=1,
                                                 plot=False, answer_type="number"))
