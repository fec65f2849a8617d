"""curate score and model-written code: the escape table through the command, refusal without a sandbox,
--trust-code and the limits recorded in stats.json."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pyarrow.parquet as pq

from tests.curate.rewards.escapes import ATTACKS, make_target, needs_bwrap, response

ROOT = Path(__file__).resolve().parents[3]
MISSING = "/nonexistent/curate-test/bwrap"


def run_score(records: Path, responses: Path, out: Path, env: dict[str, str], *flags: str) -> subprocess.CompletedProcess:
    cmd = [sys.executable, "-m", "curate", "score", "--records", str(records), "--responses", str(responses),
           "--out", str(out), *flags]
    return subprocess.run(cmd, env={**env, "PYTHONPATH": str(ROOT)}, capture_output=True, text=True, timeout=600)


def write_responses(path: Path, rows: dict[str, str]) -> Path:
    path.write_text("".join(json.dumps({"id": k, "response": v}) + "\n" for k, v in rows.items()))
    return path


@needs_bwrap
def test_escape_table_through_curate_score(tmp_path: Path) -> None:
    """The OS sandbox alone (audit hook off): every attack scores 0, nothing is written or reached outside."""
    target = make_target(tmp_path / "target")
    answers = write_responses(tmp_path / "answers.jsonl", {a.name: response(a) for a in ATTACKS})
    env = {**target.env(), "CURATE_CODE_AUDIT_HOOK": "0", "CURATE_REWARD_WORKERS": "1"}
    before = len(os.listdir("/proc"))
    done = run_score(target.records, answers, tmp_path / "o", env, "--code-cpu-seconds", "1", "--code-wall-seconds", "4")
    assert done.returncode == 0, done.stderr
    rows = {r["id"]: r for r in pq.read_table(tmp_path / "o" / "scores.parquet").to_pylist()}
    assert set(rows) == {a.name for a in ATTACKS}
    assert {k: r["accuracy"] for k, r in rows.items() if r["accuracy"] > 0} == {}
    assert {r["error"] for r in rows.values()} <= {None, "timeout"}  # every program ran, none was cut short for other reasons
    assert os.listdir(target.watch) == [] and target.accepted == []
    assert len(os.listdir("/proc")) < before + 20  # no process explosion left behind
    code = json.loads((tmp_path / "o" / "stats.json").read_text())["settings"]["code"]
    assert code == {"cpu_seconds": 1.0, "wall_seconds": 4.0, "memory_mb": 512, "trust_code": False,
                    "audit_hook": False, "sandbox": "bwrap"}


def test_without_a_sandbox_code_is_refused_with_one_line(tmp_path: Path) -> None:
    """Independent of bubblewrap being installed: the run points at a bubblewrap that does not exist."""
    gold = json.dumps({"tests": [{"input": "3", "output": "6"}]})
    records = tmp_path / "records.jsonl"
    records.write_text(json.dumps({"id": "c", "problem": "Double it.", "answer": gold, "answer_type": "general-code"})
                       + "\n" + json.dumps({"id": "n", "problem": "Count.", "answer": "7", "answer_type": "number"}) + "\n")
    answers = tmp_path / "answers.jsonl"
    answers.write_text("".join(json.dumps({"id": i, "response": r}) + "\n" for i, r in
                               [("c", "<answer>print(int(input()) * 2)</answer>"), ("c", "<answer>print(5)</answer>"),
                                ("n", "<answer>7</answer>")]))
    env = {**os.environ, "CURATE_BWRAP": MISSING}
    done = run_score(records, answers, tmp_path / "o", env)
    assert done.returncode == 0, done.stderr
    refusals = [line for line in done.stderr.splitlines() if "sandbox_unavailable" in line]
    assert len(refusals) == 1 and "apt-get install bubblewrap" in refusals[0] and "Traceback" not in done.stderr
    rows = pq.read_table(tmp_path / "o" / "scores.parquet").to_pylist()
    assert [(r["id"], r["accuracy"], r["error"]) for r in rows] == [
        ("c", 0.0, "sandbox_unavailable"), ("c", 0.0, "sandbox_unavailable"), ("n", 1.0, None)]
    stats = json.loads((tmp_path / "o" / "stats.json").read_text())
    assert stats["settings"]["code"]["sandbox"] == "unavailable"
    assert stats["per_verifier"]["code"]["verifier_errors"] == {"sandbox_unavailable": 2}

    trusted = run_score(records, answers, tmp_path / "t", env, "--trust-code")
    assert trusted.returncode == 0, trusted.stderr
    assert "WITHOUT a sandbox" in trusted.stderr
    rows = pq.read_table(tmp_path / "t" / "scores.parquet").to_pylist()
    assert [(r["id"], r["accuracy"], r["error"]) for r in rows] == [("c", 1.0, None), ("c", 0.0, None), ("n", 1.0, None)]
    code = json.loads((tmp_path / "t" / "stats.json").read_text())["settings"]["code"]
    assert code["trust_code"] is True and code["sandbox"] == "none (trusted)"
