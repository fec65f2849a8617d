"""rl-filter's per-source figures count every record, errored and dropped ones too (issue 11, item 4)."""

from __future__ import annotations

import json
from pathlib import Path

from curate.rl.config import RlFilterConfig
from curate.rl.filter import rl_filter


def test_per_source_adds_up_to_the_totals(tmp_path: Path) -> None:
    rows = [{"id": f"a{i}", "source": "alpha", "problem": f"{i} + 1 = ?", "answer": str(i + 1),
             "answer_type": "number"} for i in range(3)]
    rows += [{"id": "b0", "source": "beta", "problem": "1 + 1 = ?", "answer": "2", "answer_type": "number"},
             {"id": "b1", "source": "beta", "problem": "?", "answer": "2", "answer_type": "no-such-type"},
             {"id": "b2", "source": "beta", "problem": "x" * 300_000, "answer": "2", "answer_type": "number"}]
    src = tmp_path / "rl.jsonl"
    src.write_text("".join(json.dumps(r) + "\n" for r in rows) + "{not json\n")
    answers = tmp_path / "answers.jsonl"
    answers.write_text("".join(json.dumps({"id": r["id"], "response": f"<answer>{r['answer']}</answer>"}) + "\n"
                               for r in rows if r["id"] != "a2"))  # a2: no stored answer
    stats = rl_filter([str(src)], RlFilterConfig(out=tmp_path / "out", backend={"rollouts": str(answers)}, n=1,
                                                 plot=False))
    assert stats["records_in"] == len(rows) + 1
    assert stats["errored"].get("record_error") == 1 and stats["dropped"].get("too_long") == 1
    total = {"records_in": 0, "kept": 0, "dropped": 0, "errored": 0}
    for source, s in stats["per_source"].items():
        assert s["records_in"] == s["kept"] + sum(s["dropped"].values()) + sum(s["errored"].values()), source
        for k in total:
            total[k] += s[k] if k in ("records_in", "kept") else sum(s[k].values())
    assert total == {"records_in": stats["records_in"], "kept": stats["kept"],
                     "dropped": sum(stats["dropped"].values()), "errored": sum(stats["errored"].values())}
    assert stats["per_source"]["beta"]["records_in"] == 3  # b1 and b2 never reached the selection
    o = stats["overall"]
    assert o["records_in"] == stats["records_in"] and o["kept"] == stats["kept"]


def test_rerun_with_other_operational_settings_resumes(tmp_path: Path) -> None:
    """--concurrency, --timeout, --max-retries are how a run goes (history.json), not what it gives: a rerun
    with others resumes; another --n is other answers and is refused (issue 14)."""
    import pytest

    from curate.core.errors import UserError
    from tests.curate.generate.test_openai_backend import ScriptedServer

    rows = [{"id": f"q{i}", "source": "alpha", "problem": f"{i} + 1 = ?", "answer": str(i + 1),
             "answer_type": "number"} for i in range(4)]
    src = tmp_path / "rl.jsonl"
    src.write_text("".join(json.dumps(r) + "\n" for r in rows))
    server = ScriptedServer(max_choices=2)
    try:
        def run(concurrency: int, timeout: float, n: int = 2) -> dict:
            backend = {"endpoint": server.url, "served_model": "tiny", "concurrency": concurrency,
                       "timeout": timeout, "max_retries": 1}
            return rl_filter([str(src)], RlFilterConfig(out=tmp_path / "out", n=n, plot=False, shard_size=2,
                                                        backend=backend))

        first = run(concurrency=1, timeout=30.0)
        calls = len(server.calls)
        stats = (tmp_path / "out" / "stats.json").read_bytes()
        second = run(concurrency=3, timeout=60.0)  # resumes: every shard is done, nothing is asked again
        assert len(server.calls) == calls and second == first
        assert (tmp_path / "out" / "stats.json").read_bytes() == stats  # operational settings are not in stats.json
        history = json.loads((tmp_path / "out" / "history.json").read_text())["rl-filter"]
        assert [r["operational"]["concurrency"] for r in history["runs"]] == [1, 3]
        assert history["runs"][1]["shards_reused"] == 2
        with pytest.raises(UserError, match="other settings \\(n\\)"):
            run(concurrency=3, timeout=60.0, n=3)
    finally:
        server.close()
