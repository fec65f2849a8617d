"""curate score: sharded scoring of a responses file against the generated RL set."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from curate.rl.config import ScoreConfig
from curate.core.errors import UserError
from curate.core.records import read_records
from curate.rewards.registry import score_many
from curate.rl.score import score


def gold_response(rec: dict) -> str:
    answer = rec["answer"][0] if isinstance(rec["answer"], list) else rec["answer"]
    return f"<think>checking</think><answer>{answer}</answer>" if rec["prompt_type"] == "think" else f"<answer>{answer}</answer>"


@pytest.fixture(scope="module")
def responses(sample_data, tmp_path_factory) -> tuple[Path, list[dict]]:
    records = [r for r in read_records([sample_data / "rl" / "prompts.jsonl"])]
    rows = []
    for rec in records:
        rows.append({"id": rec["id"], "response": gold_response(rec)})
        rows.append({"id": rec["id"], "response": "I am not sure."})
    rows.append({"id": "nobody", "response": "<answer>1</answer>"})
    rows.append({"id": records[0]["id"], "response": None})
    path = tmp_path_factory.mktemp("score") / "responses.jsonl"
    path.write_text("\n".join(json.dumps(r) for r in rows) + "\n{broken\n")
    return path, records


def test_scores_equal_the_library_and_every_row_is_accounted(sample_data, responses, tmp_path) -> None:
    path, records = responses
    stats = score([sample_data / "rl" / "prompts.jsonl"], ScoreConfig(responses=path, out=tmp_path / "o",
                                                                      shard_size=37))
    table = pq.read_table(tmp_path / "o" / "scores.parquet").to_pylist()
    n_rows = 2 * len(records) + 3
    assert len(table) == n_rows and stats["responses_in"] == n_rows
    assert stats["errored"] == {"malformed_response": 2, "unknown_id": 1}
    assert stats["scored"] == 2 * len(records)
    by_id = {r["id"]: r for r in records}
    expected = score_many([(by_id[r["id"]], gold_response(by_id[r["id"]])) for r in records])
    got = [row for row in table if row["sample"] == 0 and row["id"] in by_id and row["error"] != "malformed_response"]
    assert [(g["accuracy"], g["reward"]) for g in got[: len(records)]] == [(e.accuracy, e.reward) for e in expected]
    # the gold answer scores 1 for every exact verifier; bbox gold boxes too (IoU 1)
    assert all(g["accuracy"] == 1.0 for g in got)
    refusals = [row for row in table if row["sample"] == 1 and row["id"] in by_id]
    assert all(r["accuracy"] == 0.0 for r in refusals)
    assert set(stats["per_source"]) >= {r["source"] for r in records}
    assert stats["overall"]["mean_accuracy"] == pytest.approx(0.5)
    rejects = pq.read_table(tmp_path / "o" / "rejects.parquet").to_pylist()
    assert {r["reason"] for r in rejects} == {"malformed_response", "unknown_id"}


def test_rerun_is_skipped_and_identical(sample_data, responses, tmp_path) -> None:
    path, _ = responses
    score([sample_data / "rl" / "prompts.jsonl"], ScoreConfig(responses=path, out=tmp_path / "o", shard_size=50))
    first = (tmp_path / "o" / "scores.parquet").read_bytes()
    markers = sorted((tmp_path / "o" / "_shards" / "score").glob("0*.json"))
    stamps = [m.stat().st_mtime_ns for m in markers]
    score([sample_data / "rl" / "prompts.jsonl"], ScoreConfig(responses=path, out=tmp_path / "o", shard_size=50))
    assert [m.stat().st_mtime_ns for m in markers] == stamps
    assert (tmp_path / "o" / "scores.parquet").read_bytes() == first


def test_user_errors(sample_data, tmp_path) -> None:
    with pytest.raises(UserError, match="responses .*: no such file"):
        score([sample_data / "rl" / "prompts.jsonl"], ScoreConfig(responses=tmp_path / "none.jsonl",
                                                                  out=tmp_path / "o"))
    (tmp_path / "r.csv").write_text("id,response\n")
    with pytest.raises(UserError, match="jsonl or .parquet"):
        score([sample_data / "rl" / "prompts.jsonl"], ScoreConfig(responses=tmp_path / "r.csv", out=tmp_path / "o"))


def test_parquet_responses_and_rows_without_text(tmp_path) -> None:
    import pyarrow as pa

    records = tmp_path / "rl.jsonl"
    records.write_text(json.dumps({"id": "a", "problem": "?", "answer": "yes", "answer_type": "boolean"}) + "\n")
    pq.write_table(pa.table({"id": ["a", "a"], "response": ["<answer>Yes</answer>", "<answer>not sure</answer>"]}),
                   tmp_path / "r.parquet")
    score([records], ScoreConfig(responses=tmp_path / "r.parquet", out=tmp_path / "out"))
    assert pq.read_table(tmp_path / "out" / "scores.parquet").column("accuracy").to_pylist() == [1.0, 0.0]
    (tmp_path / "bad.jsonl").write_text('{"id": "a"}\n')
    stats = score([records], ScoreConfig(responses=tmp_path / "bad.jsonl", out=tmp_path / "out2"))
    assert stats["errored"] == {"malformed_response": 1}
    pq.write_table(pa.table({"id": ["a"]}), tmp_path / "nocol.parquet")
    with pytest.raises(UserError, match="missing response"):
        score([records], ScoreConfig(responses=tmp_path / "nocol.parquet", out=tmp_path / "out3"))


def test_sample_numbers_on_columns_equal_a_count_per_id() -> None:
    import random

    import pyarrow as pa

    from curate.rl.score import rank_within_id

    rng = random.Random(5)
    ids = [f"q{rng.randrange(40)}" for _ in range(1000)]
    seen: dict[str, int] = {}
    want = []
    for rid in ids:
        want.append(seen.get(rid, 0))
        seen[rid] = want[-1] + 1
    chunked = pa.chunked_array([ids[:333], ids[333:]])
    assert rank_within_id(chunked).tolist() == want
    assert rank_within_id(pa.array([], pa.string())).tolist() == []


def test_workers_hold_only_what_scoring_reads(sample_data, responses, tmp_path) -> None:
    """Each worker keeps the golds, not the images or prompts; scores from them equal scores from full records."""
    from curate.rl.golds import SCORED_FIELDS, load_golds, write_golds

    _, records = responses
    write_golds([sample_data / "rl" / "prompts.jsonl"], tmp_path / "golds.arrow")
    by_id, bad = load_golds(tmp_path / "golds.arrow")
    assert not bad and set(by_id) == {r["id"] for r in records}
    assert any(r["images"] for r in records)  # the sample prompts carry images: they must not be held
    assert all(set(kept) <= set(SCORED_FIELDS) and "images" not in kept for kept in by_id.values())
    pairs = [(r, text) for r in records for text in (gold_response(r), "I am not sure.", "<answer>0</answer>")]
    full = score_many(pairs)
    held = score_many([(by_id[r["id"]], text) for r, text in pairs])
    assert [(f.verifier, f.accuracy, f.format, f.reward, f.error) for f in full] == \
        [(h.verifier, h.accuracy, h.format, h.reward, h.error) for h in held]
