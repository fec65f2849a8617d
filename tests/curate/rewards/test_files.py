"""``score_files``: the logic behind ``curate score``."""

from __future__ import annotations

import json

import pyarrow.parquet as pq
import pytest

from curate.errors import UserError
from curate.rewards.files import score_files


def _write_jsonl(path, rows) -> None:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")


def test_score_files_writes_scores_and_stats(tmp_path) -> None:
    records = tmp_path / "rl.jsonl"
    _write_jsonl(records, [
        {"id": "q1", "source": "charts", "problem": "How many bars?", "answer": "4", "answer_type": "number"},
        {"id": "q2", "source": "science", "problem": "Pick one", "answer": "B", "answer_type": "multiple-choice"},
        {"id": "q3", "source": "science", "problem": "?", "answer": "x", "answer_type": "astrology"},
        {"id": "q4", "source": "science", "problem": "<image> one placeholder, no image", "answer": "1",
         "answer_type": "number"},
    ])
    responses = tmp_path / "responses.jsonl"
    _write_jsonl(responses, [
        {"id": "q1", "response": "<answer>4</answer>"},
        {"id": "q1", "response": "<answer>5</answer>"},
        {"id": "q2", "response": "<answer>(B)</answer>"},
        {"id": "q2", "response": "<answer>Both A and B</answer>", "sample": 7},
        {"id": "q3", "response": "<answer>x</answer>"},
        {"id": "q9", "response": "<answer>1</answer>"},
        {"id": "q4", "response": "<answer>1</answer>"},
    ])
    stats = score_files(records, responses, tmp_path / "out")
    table = pq.read_table(tmp_path / "out" / "scores.parquet").to_pylist()
    assert [(r["id"], r["sample"], r["verifier"], r["accuracy"]) for r in table] == [
        ("q1", 0, "number", 1.0), ("q1", 1, "number", 0.0), ("q2", 0, "choice", 1.0), ("q2", 7, "choice", 0.0),
        ("q3", 0, "", 0.0), ("q9", 0, "", 0.0), ("q4", 0, "", 0.0)]
    assert table[4]["error"].startswith("record_error") and "astrology" in table[4]["error"]
    assert table[5]["error"] == "unknown_id"
    assert table[6]["error"] == "bad_record: image_count_mismatch"
    on_disk = json.loads((tmp_path / "out" / "stats.json").read_text())
    assert on_disk["responses"] == 7 and on_disk["scored"] == 4
    assert on_disk["errors"] == {"bad_record": 1, "record_error": 1, "unknown_id": 1}
    assert on_disk["bad_records"] == {"image_count_mismatch": 1}
    assert on_disk["mean_accuracy"] == pytest.approx(0.5)
    assert on_disk["per_source"]["charts"]["mean_accuracy"] == pytest.approx(0.5)
    assert on_disk["per_verifier"]["choice"]["scored"] == 2
    assert stats["stage"] == "score"


def test_score_files_parquet_responses_and_bad_input(tmp_path) -> None:
    import pyarrow as pa

    records = tmp_path / "rl.jsonl"
    _write_jsonl(records, [{"id": "a", "problem": "?", "answer": "yes", "answer_type": "boolean"}])
    pq.write_table(pa.table({"id": ["a", "a"], "response": ["<answer>Yes</answer>", "<answer>not sure</answer>"]}),
                   tmp_path / "r.parquet")
    score_files(records, tmp_path / "r.parquet", tmp_path / "out")
    assert pq.read_table(tmp_path / "out" / "scores.parquet").column("accuracy").to_pylist() == [1.0, 0.0]
    (tmp_path / "bad.jsonl").write_text('{"id": "a"}\n')
    with pytest.raises(UserError, match="bad.jsonl:1"):
        score_files(records, tmp_path / "bad.jsonl", tmp_path / "out2")
