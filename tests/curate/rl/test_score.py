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
    records_first = (tmp_path / "o" / "scored.jsonl").read_bytes()
    markers = sorted((tmp_path / "o" / "_shards" / "score").glob("0*.json"))
    stamps = [m.stat().st_mtime_ns for m in markers]
    score([sample_data / "rl" / "prompts.jsonl"], ScoreConfig(responses=path, out=tmp_path / "o", shard_size=50))
    assert [m.stat().st_mtime_ns for m in markers] == stamps
    assert (tmp_path / "o" / "scores.parquet").read_bytes() == first
    assert (tmp_path / "o" / "scored.jsonl").read_bytes() == records_first
    assert not list((tmp_path / "o").glob("_scored*"))  # the scratch file is gone


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


def test_scored_records_come_back_in_their_layout_row_for_row(sample_data, tmp_path) -> None:
    """OUT/scored.jsonl: the records with a scored response, the input's rows in records order (image paths
    resolved to the same files), with their responses, mean scores and rewards; read back by the same reader."""
    from curate.rl.score import RECORD_COLUMNS

    source = sample_data / "rl" / "prompts.jsonl"
    rows = [json.loads(line) for line in source.read_text().splitlines()]
    picked = [rows[i] for i in (40, 3, 17)]  # responses in another order than the records
    lines = [{"id": r["id"], "response": gold_response(r)} for r in picked]
    lines += [{"id": picked[0]["id"], "response": "I am not sure."}, {"id": "nobody", "response": "<answer>1</answer>"},
              {"id": picked[1]["id"], "response": None}]  # an unknown id and a malformed row: no record for them
    answers = tmp_path / "answers.jsonl"
    answers.write_text("".join(json.dumps(r) + "\n" for r in lines))
    stats = score([source], ScoreConfig(responses=answers, out=tmp_path / "o", shard_size=2))
    assert stats["scored_file"] == "scored.jsonl" and stats["scored_records"] == 3
    back = [json.loads(line) for line in (tmp_path / "o" / "scored.jsonl").read_text().splitlines()]
    assert [b["id"] for b in back] == [rows[i]["id"] for i in (3, 17, 40)]  # records order
    scores = pq.read_table(tmp_path / "o" / "scores.parquet").to_pylist()
    for out in back:
        row = next(r for r in rows if r["id"] == out["id"])
        assert set(out) == {*row, *RECORD_COLUMNS}
        key = "images" if "images" in row else "image"
        assert {k: out[k] for k in row if k != key} == {k: v for k, v in row.items() if k != key}
        paths = (lambda v: v if isinstance(v, list) else [v])
        assert [Path(p).read_bytes() for p in paths(out[key])] == \
            [(source.parent / p).read_bytes() for p in paths(row[key])]
        mine = [s["reward"] for s in scores if s["id"] == out["id"] and s["error"] != "malformed_response"]
        assert out["rewards"] == mine and out["responses"] == len(mine)
        assert out["mean_reward"] == pytest.approx(sum(mine) / len(mine))
    assert back[2]["rewards"][1] == 0.0 < back[2]["rewards"][0]  # the refusal, after the gold answer
    again = {r["id"]: r for r in read_records([tmp_path / "o" / "scored.jsonl"])}
    before = {r["id"]: r for r in read_records([source])}
    assert {k: (r["answer"], r["answer_type"], r["images"]) for k, r in again.items()} == \
        {k: (before[k]["answer"], before[k]["answer_type"], before[k]["images"]) for k in again}
    quiet = score([source], ScoreConfig(responses=answers, out=tmp_path / "q", write_records=False))
    assert "scored_file" not in quiet and not list((tmp_path / "q").glob("scored.*"))


def test_preset_gives_the_layout_and_reward_not_the_sampling(tmp_path) -> None:
    from curate.rl.presets import PRESETS, SCORING

    (tmp_path / "r.jsonl").write_text('{"id": "a", "response": "x"}\n')
    config = ScoreConfig(responses=tmp_path / "r.jsonl", out=tmp_path / "o", preset="vlm-r1-rec")
    assert (config.layout, config.reward_method, config.part_layout) == ("vlm-r1", "rec", "vlm-r1:rec")
    given = ScoreConfig(responses=tmp_path / "r.jsonl", out=tmp_path / "o", preset="vlm-r1-rec", reward_method="mcq")
    assert given.reward_method == "mcq"  # a flag given wins
    assert ScoreConfig(responses=tmp_path / "r.jsonl", out=tmp_path / "o", preset="v-triune").layout == "verl"
    assert all(set(p) & set(SCORING) for p in PRESETS.values())  # every preset decides something of a reward
    with pytest.raises(UserError, match="preset nope: use llava-ov-1.5-rl"):
        ScoreConfig(responses=tmp_path / "r.jsonl", out=tmp_path / "o", preset="nope")


def test_cli_preset_and_records_written(tmp_path) -> None:
    """``curate score --preset llava-ov-1.5-rl``: LLaVA-OV-1.5-RL's Parquet, its spatial box bonus, rows back."""
    import pyarrow as pa
    from click.testing import CliRunner

    from curate.cli import cli

    rows = [{"id": "s0", "images": [], "problem": "Which side? A. left B. right", "answer": ["B"],
             "problem_type": "spatial-reasoning", "answer_type": "multiple-choice", "source": "refspatial",
             "prompt_type": "default"}]
    pq.write_table(pa.Table.from_pylist(rows), tmp_path / "rl.parquet")
    (tmp_path / "r.jsonl").write_text(json.dumps({"id": "s0", "response": "<think>[1, 2, 3, 4]</think><answer>B</answer>"})
                                      + "\n")
    result = CliRunner().invoke(cli, ["score", "--records", str(tmp_path / "rl.parquet"), "--responses",
                                      str(tmp_path / "r.jsonl"), "--out", str(tmp_path / "o"),
                                      "--preset", "llava-ov-1.5-rl"])
    assert result.exit_code == 0, result.output
    assert "scored.jsonl" in result.output
    back = [json.loads(line) for line in (tmp_path / "o" / "scored.jsonl").read_text().splitlines()]
    assert back[0]["rewards"] == [1.5] and {k: back[0][k] for k in rows[0]} == rows[0]  # the box bonus: +0.5
