"""rl-filter's selection on columns agrees with the one-prompt rules (selection.evaluate / source_report)."""

from __future__ import annotations

import math
import random

import pyarrow as pa
import pytest

from curate.rl.config import RlFilterConfig
from curate.rl.decide import account, decide, output_table, reports
from curate.rl.filter import PROMPT_SCHEMA
from curate.rl.selection import Thresholds, evaluate, source_report


def _prompts(seed: int = 3, count: int = 400) -> list[dict]:
    rng = random.Random(seed)
    rows = []
    for i in range(count):
        n = rng.choice([0, 1, 3, 4, 8, 16])
        acc = [rng.choice([0.0, 0.25, 0.5, 1.0, 1.0]) for _ in range(n)]
        rows.append({"id": f"p{i}", "source": rng.choice(["alpha", "beta", "gamma", "delta", "eps"]),
                     "answer_type": "number", "prompt_type": "normal", "n": n, "accuracy": acc,
                     "reward": [a * rng.choice([1.0, 0.9]) for a in acc],
                     "format": [rng.choice([0.0, 1.0]) for _ in range(n)],
                     "truncated": [rng.random() < 0.2 for _ in range(n)],
                     "response_chars": [rng.randrange(5, 900) for _ in range(n)],
                     "reflection": [rng.random() < 0.3 for _ in range(n)],
                     "error": rng.choice([None] * 8 + ["timeout: server", "no_responses", ""]),
                     "error_detail": rng.choice(["", "detail"]),
                     "box": [[rng.random() for _ in range(7)] for _ in range(n)] if rng.random() < 0.4 else []})
    return rows


def _close(a: object, b: object) -> bool:
    if isinstance(a, float) and isinstance(b, float):
        return math.isclose(a, b, rel_tol=1e-12, abs_tol=1e-12)
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_close(a[k], b[k]) for k in a)
    return a == b


def test_columns_agree_with_the_one_prompt_rules() -> None:
    rows = _prompts()
    default = Thresholds(band=(0.0, 0.6), min_gap=0.1)
    per_source = {"beta": Thresholds(band=(1.5, 6.0), metric="reward_sum", inclusive=True, pass_threshold=0.5),
                  "gamma": Thresholds(filter=False), "delta": Thresholds(band=(0.2, 0.9), metric="pass_at_1"),
                  "eps": Thresholds(band=(-0.1, 1.1), inclusive=True, min_reward_std=0.0)}  # DAPO: spread > 0
    decided = decide(pa.Table.from_pylist(rows, schema=PROMPT_SCHEMA), default, per_source)
    got = decided.to_pylist()
    want = [{**r, **evaluate(r, per_source.get(r["source"], default))} for r in rows]
    for g, w in zip(got, want):
        assert _close({k: g[k] for k in w}, w), (g["id"], g, w)
    assert {r["decision"] for r in want} == {"kept", "dropped", "errored"}
    assert {r["reason"] for r in want} >= {"too_hard", "too_easy", "small_gap", "unfiltered", "timeout",
                                                 "low_spread"}
    # the accounting: every prompt seen once, kept ones out, the rest rejected with their reason
    stats = account(decided)
    assert stats.records_in == len(rows) and stats.records_out == sum(r["decision"] == "kept" for r in want)
    assert dict(stats.dropped) == dict(_count(want, "dropped")) and dict(stats.errored) == dict(_count(want, "errored"))
    assert [r[0] for r in stats.rejects] == [r["id"] for r in want if r["decision"] != "kept"]  # input order
    assert [r[2:4] for r in stats.rejects] == [(r["decision"], r["reason"]) for r in want if r["decision"] != "kept"]
    # the monitoring figures, overall and per source (a source without prompts too)
    eps = [r for r in want if r["source"] == "eps" and r["decision"] == "kept"]
    assert eps and all(min(r["reward"]) < max(r["reward"]) for r in eps)  # every kept eps prompt has a spread
    overall, per = reports(decided, ["alpha", "beta", "delta", "gamma", "zeta"])
    assert overall["box"] is not None and overall["truncated"] == sum(sum(r["truncated"]) for r in want
                                                                      if r["decision"] != "errored")
    assert _close(overall, source_report(want))
    for source in ("alpha", "beta", "gamma", "delta", "zeta"):
        assert _close(per[source], source_report([r for r in want if r["source"] == source])), source
    assert output_table(decided).column_names[-2:] == ["decision", "reason"]


def _count(rows: list[dict], decision: str) -> dict[str, int]:
    out: dict[str, int] = {}
    for r in rows:
        if r["decision"] == decision:
            out[r["reason"]] = out.get(r["reason"], 0) + 1
    return out


def test_no_prompts() -> None:
    decided = decide(PROMPT_SCHEMA.empty_table(), Thresholds(), {})
    assert decided.num_rows == 0 and account(decided).records_in == 0
    overall, per = reports(decided, [])
    assert overall["prompts_in"] == 0 and overall["mean_reward"] is None and per == {}


@pytest.mark.parametrize("n,c", [(3, 1), (16, 5), (7, 7), (5, 0)])
def test_pass_at_1_is_the_estimator_bit_for_bit(n: int, c: int) -> None:
    row = {"id": "x", "source": "s", "answer_type": "number", "prompt_type": "normal", "n": n,
           "accuracy": [1.0] * c + [0.0] * (n - c), "reward": [1.0] * c + [0.0] * (n - c), "format": [1.0] * n,
           "truncated": [False] * n, "response_chars": [3] * n, "reflection": [False] * n, "error": None,
           "error_detail": ""}
    got = decide(pa.Table.from_pylist([row], schema=PROMPT_SCHEMA), Thresholds(), {}).to_pylist()[0]
    want = evaluate(row, Thresholds())
    assert (got["pass_at_1"], got["pass_at_n"], got["gap"]) == (want["pass_at_1"], want["pass_at_n"], want["gap"])


def test_ids_repeated_across_shards_are_errored(tmp_path) -> None:
    """A shard errors its own repeats; the driver errors an id an earlier shard already had (duplicate_id)."""
    import json

    from curate.rl.filter import rl_filter

    rows = [{"id": f"q{i % 5}", "source": "alpha" if i < 5 else "beta", "problem": f"{i} + 1 = ?",
             "answer": str(i % 5 + 1), "answer_type": "number"} for i in range(8)]
    src = tmp_path / "rl.jsonl"
    src.write_text("".join(json.dumps(r) + "\n" for r in rows))
    answers = tmp_path / "answers.jsonl"
    answers.write_text("".join(json.dumps({"id": f"q{i}", "response": f"<answer>{i + 1}</answer>"}) + "\n"
                               for i in range(5)))
    stats = rl_filter([str(src)], RlFilterConfig(out=tmp_path / "out", backend={"rollouts": str(answers)}, n=1,
                                                 plot=False, shard_size=5, band=(-1.0, 2.0)))
    assert stats["errored"] == {"duplicate_id": 3} and stats["kept"] == 5
    assert stats["per_source"]["beta"]["errored"] == {"duplicate_id": 3}
    kept = [json.loads(line) for line in (tmp_path / "out" / "kept.jsonl").read_text().splitlines()]
    assert [r["id"] for r in kept] == [f"q{i}" for i in range(5)] and {r["source"] for r in kept} == {"alpha"}
