"""The golds file: what score workers load instead of reading the records again."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow.parquet as pq

from curate.rl.config import ScoreConfig
from curate.core.records import BadRecord, read_records
from curate.rl.golds import GOLDS_FILE, SCORED_FIELDS, load_golds, write_golds
from curate.rl.score import ScoreTask, score


def _read_directly(paths: list[Path]) -> tuple[dict, dict]:
    """What each worker built by reading every record itself: the scored fields by id, bad rows' reasons and
    sources."""
    by_id, bad = {}, {}
    for rec in read_records(paths):
        if isinstance(rec, BadRecord):
            bad[rec.id] = (rec.reason, rec.source)
        else:
            by_id[rec["id"]] = {k: rec[k] for k in SCORED_FIELDS if k in rec}
    return by_id, bad


def _records(tmp_path: Path) -> Path:
    rows = [{"id": "a", "source": "s1", "problem": "1+1?", "answer": "2", "answer_type": "number"},
            {"id": "b", "source": "s2", "problem": "box?", "answer": ["2", "two"], "answer_type": "number"},
            {"id": "a", "source": "s1", "problem": "again", "answer": "3", "answer_type": "number"}]
    path = tmp_path / "prompts.jsonl"
    path.write_text("\n".join(json.dumps(r) for r in rows) + "\n{not json\n")
    return path


def test_golds_file_gives_the_same_dictionaries_as_the_records(sample_data, tmp_path) -> None:
    for paths in ([sample_data / "rl" / "prompts.jsonl"], [_records(tmp_path)]):
        target = tmp_path / "g" / GOLDS_FILE
        rows = write_golds(paths, target)
        by_id, bad = load_golds(target)
        assert (by_id, bad) == _read_directly(paths)
        assert rows == len(by_id) + len(bad) + (1 if paths[0].parent == tmp_path else 0)  # one id twice
    assert by_id["a"]["answer"] == "3" and by_id["b"]["answer"] == ["2", "two"] and len(bad) == 1


def test_empty_records_give_an_empty_golds_file(tmp_path) -> None:
    empty = tmp_path / "empty.jsonl"
    empty.write_text("")
    assert write_golds([empty], tmp_path / GOLDS_FILE) == 0
    assert load_golds(tmp_path / GOLDS_FILE) == ({}, {})


def test_workers_load_the_golds_not_the_records(tmp_path) -> None:
    """A task given the golds never opens the records: scoring works with the record file gone."""
    records = _records(tmp_path)
    write_golds([records], tmp_path / GOLDS_FILE)
    (tmp_path / "answers.jsonl").write_text("")
    config = ScoreConfig(responses=tmp_path / "answers.jsonl", out=tmp_path / "o")
    task = ScoreTask([str(tmp_path / "gone.jsonl")], str(tmp_path / GOLDS_FILE), config)
    task.setup()
    assert task._by_id == _read_directly([records])[0]


def test_score_with_two_workers_equals_one_and_cleans_up(sample_data, tmp_path) -> None:
    """Two forked workers load the golds the driver wrote: the same scores as one process; no golds left."""
    from curate.executors import get_executor

    prompts = sample_data / "rl" / "prompts.jsonl"
    rec = [json.loads(line) for line in prompts.read_text().splitlines()][:12]
    responses = tmp_path / "responses.jsonl"
    responses.write_text("\n".join(json.dumps({"id": r["id"], "response": "<answer>0</answer>"}) for r in rec) + "\n")
    one = score([prompts], ScoreConfig(responses=responses, out=tmp_path / "one", shard_size=4))
    two = score([prompts], ScoreConfig(responses=responses, out=tmp_path / "two",
                                       shard_size=4), executor=get_executor("local", workers=2))
    assert one["scored"] == two["scored"] == len(rec)
    assert pq.read_table(tmp_path / "one" / "scores.parquet").equals(pq.read_table(tmp_path / "two" / "scores.parquet"))
    assert not (tmp_path / "one" / GOLDS_FILE).exists() and not (tmp_path / "two" / GOLDS_FILE).exists()


def test_responses_to_rows_that_are_no_records_keep_their_source(tmp_path) -> None:
    """A response to an unreadable row is errored ``bad_record`` under the row's source, not ``(unknown)``."""
    records = tmp_path / "vqa.jsonl"
    records.write_text(json.dumps({"id": "ok", "source": "chart", "problem": "1+1?", "answer": "2", "answer_type": "number"})
                       + "\n" + json.dumps({"id": "bad", "source": "chart", "problem": ["not text"], "answer": "2"}) + "\n")
    responses = tmp_path / "responses.jsonl"
    responses.write_text("".join(json.dumps({"id": i, "response": "<answer>2</answer>"}) + "\n" for i in ("ok", "bad")))
    stats = score([records], ScoreConfig(responses=responses, out=tmp_path / "out"))
    assert stats["errored"] == {"bad_record": 1}
    assert set(stats["per_source"]) == {"chart"} and stats["per_source"]["chart"]["responses"] == 2
    rejects = pq.read_table(tmp_path / "out" / "rejects.parquet").to_pylist()
    assert [(r["id"], r["source"]) for r in rejects] == [("bad", "chart")]
