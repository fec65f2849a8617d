"""stats.json is a function of inputs, settings and seed (issue 11, item 4).

The same ``curate recaption`` command run straight through, and run, killed with
SIGKILL part-way and run again, writes byte-identical files, every one of them (``stats.json``,
the outputs, the shards' markers, the answer journals, the report) but ``history.json``: how each
run went (resumes, generation counters, timings) is there. This is the test of the generating
stages' mechanism (journals, backend counters); the local shard contract's is
``test_resume_identity.py``.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
from PIL import Image

ROOT = Path(__file__).resolve().parents[3]
N = 60


def _command(src: Path, rollouts: Path, out: Path) -> list[str]:
    return [sys.executable, "-m", "curate", "recaption", str(src), "--rollouts", str(rollouts), "--langs", "en",
            "--shard-size", "1", "--out", str(out)]


def test_killed_and_resumed_run_writes_the_same_stats(tmp_path: Path) -> None:
    Image.fromarray(np.full((32, 32, 3), 200, dtype=np.uint8)).save(tmp_path / "a.png")
    src = tmp_path / "records.jsonl"
    src.write_text("".join(json.dumps({"id": f"r{i}", "source": ["web", "book"][i % 2], "image": "a.png",
                                       "caption": "old"}) + "\n" for i in range(N)))
    answers = ["A light grey square fills the whole picture evenly.", "I cannot help with that.", ""]
    rollouts = tmp_path / "rollouts.jsonl"
    rollouts.write_text("".join(json.dumps({"id": f"r{i}#en", "response": answers[i % 3]}) + "\n"
                                for i in range(N) if i % 7) +  # every 7th has no answer: errored
                        "".join(json.dumps({"id": f"r{i}#en#retry", "response": answers[0]}) + "\n" for i in range(N)))
    out = tmp_path / "out"
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1", "CURATE_REPORT": "1"}

    subprocess.run(_command(src, rollouts, out), check=True, env=env, capture_output=True, timeout=300)
    straight = {p.relative_to(out): p.read_bytes() for p in out.rglob("*") if p.is_file() and p.name != "history.json"}
    assert json.loads((out / "history.json").read_text())["recaption"]["resumes"] == 0
    shutil.rmtree(out)

    proc = subprocess.Popen(_command(src, rollouts, out), env=env, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    markers = out / "_shards" / "recaption"
    deadline = time.monotonic() + 120
    while len(list(markers.glob("0*.json"))) < 5 and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.01)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    done = len(list(markers.glob("0*.json")))
    assert 0 < done < N and not (out / "stats.json").exists(), f"the kill came after {done} of {N} shards"

    subprocess.run(_command(src, rollouts, out), check=True, env=env, capture_output=True, timeout=300)
    history = json.loads((out / "history.json").read_text())["recaption"]
    assert history["resumes"] == 1 and history["runs"][-1]["shards_reused"] == done
    assert history["generation"]["requests"] > 0 and "timings" in history["runs"][-1]
    stats = json.loads((out / "stats.json").read_text())
    assert stats["records_in"] == N and "timings" not in stats and "generation" not in stats
    again = {p.relative_to(out): p.read_bytes() for p in out.rglob("*") if p.is_file() and p.name != "history.json"}
    assert sorted(again) == sorted(straight)
    assert [rel for rel in straight if again[rel] != straight[rel]] == []
    for rel in ("stats.json", "report/index.html", "_shards/recaption/000000.json", "_journal/recaption/000000.jsonl"):
        assert Path(rel) in straight, rel
