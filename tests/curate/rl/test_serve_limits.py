"""serve-rewards (issue 11, item 5): impossible or unsafe options are one line; a request has a deadline."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from curate.cli import main
from curate.fixtures.tiny_vlm import free_port

ROOT = Path(__file__).resolve().parents[3]


@pytest.mark.parametrize("args, flag", [
    (["--port", "70000"], "--port"), (["--port", "0"], "--port"), (["--workers", "0"], "--workers"),
    (["--pool-workers", "0"], "--pool-workers"), (["--deadline", "0"], "--deadline"),
    (["--deadline", "nan"], "--deadline"), (["--host", "0.0.0.0"], "--token"),
    (["--host", "10.1.2.3", "--token", "short"], "--token"), (["--max-body-mb", "0"], "--max-body-mb"),
    (["--code-wall-seconds", "-1"], "--code-wall-seconds"), (["--code-memory-mb", "8"], "--code-memory-mb"),
    (["--header-timeout", "0"], "--header-timeout"), (["--body-timeout", "-1"], "--body-timeout"),
    (["--max-connections", "0"], "--max-connections"), (["--max-queued", "0"], "--max-queued"),
])
def test_impossible_options_are_one_line(args: list[str], flag: str, capsys: pytest.CaptureFixture) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(["serve-rewards", *args])
    err = capsys.readouterr().err
    assert exit_info.value.code == 2
    assert len(err.strip().splitlines()) == 1 and flag in err and "Traceback" not in err


def test_unfinished_items_return_deadline() -> None:
    """Four looping programs (5 s CPU limit each, one sandbox: one after the other) under a 2 s deadline."""
    port = free_port()
    proc = subprocess.Popen([sys.executable, "-m", "curate", "serve-rewards", "--port", str(port), "--deadline", "2",
                             "--pool-workers", "1"], env={**os.environ, "PYTHONPATH": str(ROOT)},
                            stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    try:
        start = time.monotonic()
        while True:
            try:
                health = httpx.get(url + "/health", timeout=2)
                if health.status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            assert proc.poll() is None and time.monotonic() - start < 90, "the reward service did not start"
            time.sleep(0.2)
        assert health.json()["deadline"] == 2.0
        gold = json.dumps({"tests": [{"input": "1", "output": "2"}]})
        loop = {"record": {"id": "loop", "answer": gold, "answer_type": "general-code"},
                "response": "<answer>\n```python\nwhile True:\n    pass\n```\n</answer>"}
        items = [{"record": {"id": "n", "answer": "7", "answer_type": "number"}, "response": "<answer>7</answer>"},
                 *[loop] * 4,
                 {"record": {"id": "m", "answer": "\\frac{1}{2}", "answer_type": "math-expressions"},
                  "response": "<answer>2/4</answer>"}]
        t0 = time.monotonic()
        reply = httpx.post(url + "/score", json={"items": items}, timeout=120)
        elapsed = time.monotonic() - t0
        assert reply.status_code == 200, reply.text
        results = reply.json()["results"]
        assert results[0]["accuracy"] == 1.0 and results[0]["error"] is None  # finished before the deadline
        assert [r["error"] for r in results[1:5]] == ["deadline"] * 4
        assert all(r["reward"] == 0.0 for r in results[1:5])
        # the math item runs on the verifier pool beside the sandboxes: done, unless its worker was still starting
        assert (results[5]["accuracy"], results[5]["error"]) in ((1.0, None), (0.0, "deadline"))
        assert elapsed < 4 * 5  # without the deadline the four CPU limits alone take 20 s
    finally:
        proc.terminate()
        try:
            proc.wait(15)
        except subprocess.TimeoutExpired:
            proc.kill()
