"""The rollouts backend: answers stored in JSONL or Parquet files written here."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from curate.core.errors import UserError
from curate.generate.base import GenerationRequest
from curate.generate import make_backend
from curate.generate.rollouts_backend import RolloutsBackend, natural_key


def _req(key: str, n: int = 16) -> GenerationRequest:
    return GenerationRequest(key=key, messages=[{"role": "user", "content": "q"}], n=n)


def _jsonl(path: Path, rows: list[dict]) -> str:
    path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), encoding="utf-8")
    return str(path)


def test_first_n_answers_in_file_order_from_jsonl(tmp_path: Path) -> None:
    rows = [{"id": "a", "response": f"a{i}", "truncated": i == 1} for i in range(5)]
    rows.insert(2, {"id": 7, "response": "seven"})  # integer ids match string keys
    rows.append({"id": "b", "response": "<answer>3</answer>"})
    with make_backend(rollouts=_jsonl(tmp_path / "r.jsonl", rows)) as be:
        a3, a_all, seven, b, missing = be.generate([_req("a", 3), _req("a"), _req("7"), _req("b", 2), _req("zz")])
        stats = be.stats.as_dict()
    assert a3.responses == ["a0", "a1", "a2"] and a3.truncated == [False, True, False]
    assert a_all.responses == [f"a{i}" for i in range(5)]  # fewer stored than n: all of them
    assert seven.responses == ["seven"] and seven.truncated == [False]
    assert b.responses == ["<answer>3</answer>"]
    assert missing.error == "no_rollouts" and missing.responses == []
    assert stats["requests"] == 5 and stats["errors.no_rollouts"] == 1 and stats["responses"] == 3 + 5 + 1 + 1


def test_parquet_with_samples_versions_and_error_rows(tmp_path: Path) -> None:
    table = pa.table({
        "id": ["a", "a", "a", "a", "a", "b"],
        "sample": [2, 0, 1, 0, 1, 0],
        "response": ["v10-s2", "v10-s0", "v10-s1", "v2-s0", "v2-s1", "b-v10"],
        "truncated": [False, True, None, False, False, False],
        "version": ["ckpt-v10", "ckpt-v10", "ckpt-v10", "ckpt-v2", "ckpt-v2", "ckpt-v10"],
        "error": [None, None, None, None, None, "timeout"],
    })
    path = tmp_path / "rollouts.parquet"
    pq.write_table(table, path)
    with RolloutsBackend(path) as latest:  # v10 is newer than v2 in natural order
        assert latest.version == "ckpt-v10" and latest.describe()["versions"] == ["ckpt-v2", "ckpt-v10"]
        a, b = latest.generate([_req("a", 3), _req("b")])
    assert a.responses == ["v10-s0", "v10-s1", "v10-s2"] and a.truncated == [True, False, False]
    assert b.error == "no_rollouts"  # its only row carries an error
    with make_backend(rollouts=str(path), rollouts_version="ckpt-v2") as old:
        assert old.generate([_req("a", 1)])[0].responses == ["v2-s0"]
    with pytest.raises(UserError, match="ckpt-v3.*ckpt-v2, ckpt-v10"):
        RolloutsBackend(path, version="ckpt-v3")


def test_natural_version_order() -> None:
    versions = ["step-1200", "step-900", "v10", "v2", "2024-06-01", "2024-05-31"]
    assert sorted(versions, key=natural_key) == ["2024-05-31", "2024-06-01", "step-900", "step-1200", "v2", "v10"]


def test_bad_rollouts_files_are_user_errors(tmp_path: Path) -> None:
    with pytest.raises(UserError, match="no such file"):
        RolloutsBackend(tmp_path / "missing.jsonl")
    pq.write_table(pa.table({"id": ["a"], "text": ["x"]}), tmp_path / "cols.parquet")
    with pytest.raises(UserError, match="missing column.*response"):
        RolloutsBackend(tmp_path / "cols.parquet")
    with pytest.raises(UserError, match=r"r\.jsonl:2: missing response"):
        RolloutsBackend(_jsonl(tmp_path / "r.jsonl", [{"id": "a", "response": "x"}, {"id": "b", "answer": "y"}]))
    broken = tmp_path / "broken.jsonl"
    broken.write_text('{"id": "a", "response": "x"}\n{"id": "b", "resp\n')
    with pytest.raises(UserError, match=r"broken\.jsonl:2: not valid JSON"):
        RolloutsBackend(broken)
    (tmp_path / "empty.jsonl").write_text("\n")
    with pytest.raises(UserError, match="no rows"):
        RolloutsBackend(tmp_path / "empty.jsonl")
    (tmp_path / "fake.parquet").write_text("not parquet")
    with pytest.raises(UserError, match="not a readable Parquet"):
        RolloutsBackend(tmp_path / "fake.parquet")
