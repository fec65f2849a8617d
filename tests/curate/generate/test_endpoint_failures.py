"""A server that is down is not an answer (issue 11, item 2): rl-filter and recaption through the CLI.

First runs go to a port where nothing listens: recaption finishes with every request
failed (nothing journaled, no shard complete), rl-filter trips the circuit breaker and
stops with one line. Then a real ``transformers serve`` starts on that port and the same
commands, run again, answer every request.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest
from PIL import Image

from curate.cli import main
from curate.fixtures.tiny_vlm import free_port, serve_missing_packages, start_transformers_serve, stop_process, wait_ready

pytestmark = [pytest.mark.server, pytest.mark.slow]


def _jsonl(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


def _run(args: list[str], capsys: pytest.CaptureFixture) -> tuple[int, str]:
    try:
        main(args)
        code = 0
    except SystemExit as exc:
        code = int(exc.code or 0)
    return code, capsys.readouterr().err


def test_down_then_up(tiny_vlm_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    missing = serve_missing_packages()
    if missing:
        pytest.skip(f"transformers serve needs {', '.join(missing)}")
    image = tmp_path / "photo.png"
    Image.fromarray(np.random.default_rng(2).integers(0, 256, (56, 56, 3), dtype=np.uint8)).save(image)
    prompts = _jsonl(tmp_path / "rl.jsonl", [{"id": f"p{i}", "source": "s", "problem": f"What is {i} + 1?",
                                               "answer": str(i + 1), "answer_type": "number"} for i in range(3)])
    records = _jsonl(tmp_path / "records.jsonl", [{"id": f"r{i}", "source": "web", "image": str(image),
                                                   "caption": "old"} for i in range(2)])
    port = free_port()
    endpoint = ["--endpoint", f"http://127.0.0.1:{port}/v1", "--max-retries", "1", "--concurrency", "1",
                "--max-new-tokens", "4", "--seed", "0"]
    rl = ["rl-filter", str(prompts), "--out", str(tmp_path / "rl"), "--n", "2", "--shard-size", "2", *endpoint,
          "--max-consecutive-failures", "3"]
    cap = ["recaption", str(records), "--out", str(tmp_path / "cap"), "--langs", "en", *endpoint,
           "--max-consecutive-failures", "1000"]

    code, err = _run(rl, capsys)  # nobody listens: three failed calls in a row trip the breaker
    assert code == 3, err
    lines = [line for line in err.splitlines() if line.startswith("error:")]  # (beside the progress line)
    assert len(lines) == 1 and "looks down" in lines[0] and "rerun" in lines[0] and "Traceback" not in err
    assert not (tmp_path / "rl" / "stats.json").exists()
    journal = tmp_path / "rl" / "_journal" / "rl-filter"
    assert all(not p.read_text().strip() for p in journal.glob("*.jsonl"))  # failures are never journaled

    code, err = _run(cap, capsys)  # breaker off: the run ends, every request failed, nothing complete
    assert code == 0, err
    first = json.loads((tmp_path / "cap" / "stats.json").read_text())
    assert first["records_out"] == 0 and first["errored"] == {"connection_error": 2}
    history = json.loads((tmp_path / "cap" / "history.json").read_text())["recaption"]
    assert history["unanswered"] == 2 and history["generation"]["retries.connection_error"] == 2
    assert not any(p.read_text().strip() for p in (tmp_path / "cap" / "_journal" / "recaption").glob("*.jsonl"))

    proc = start_transformers_serve(tiny_vlm_dir, port, log=tmp_path / "server.log")
    try:
        wait_ready(f"http://127.0.0.1:{port}", timeout=180, proc=proc)
        code, err = _run(rl, capsys)
        assert code == 0, err
        code, err = _run(cap, capsys)
        assert code == 0, err
    finally:
        stop_process(proc)

    rl_stats = json.loads((tmp_path / "rl" / "stats.json").read_text())
    assert rl_stats["records_in"] == 3 and not rl_stats["errored"]
    assert pq.read_table(tmp_path / "rl" / "prompts.parquet").column("n").to_pylist() == [2, 2, 2]
    again = json.loads((tmp_path / "cap" / "stats.json").read_text())
    assert "connection_error" not in again["errored"]
    assert again["captions"]["images"] == 2 and sum(again["captions"]["failed"].values()) + again["captions"]["kept"] == 2
    history = json.loads((tmp_path / "cap" / "history.json").read_text())["recaption"]
    assert len(history["runs"]) == 2 and history["runs"][-1]["shards_reused"] == 0  # the failed shard was redone
    assert history["unanswered"] == 0 and history["generation"]["errors"] == 0
