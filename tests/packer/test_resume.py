"""SIGKILL while `curate pack` writes shards, rerun the same command: byte-identical output."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest


def big_input(sample_data: Path, tmp: Path, copies: int = 3) -> Path:
    lines = (sample_data / "records.jsonl").read_text(encoding="utf-8").splitlines()
    out = tmp / "big.jsonl"
    with open(out, "w", encoding="utf-8") as fh:
        for c in range(copies):
            for line in lines:
                rec = json.loads(line)
                rec["id"] = f"{rec['id']}#{c}"
                rec["images"] = [str((sample_data / p).resolve()) for p in rec.get("images", [])]
                fh.write(json.dumps(rec, ensure_ascii=False) + "\n")
    return out


def command(src: Path, proc: Path, out: Path) -> list[str]:
    return [sys.executable, "-m", "curate", "pack", str(src), "--processor", str(proc), "--ctx", "1024",
            "--out", str(out), "--sequences-per-shard", "1", "--shard-size", "200", "--seed", "7",
            "--verify-fraction", "0"]


def files(out: Path) -> dict[str, bytes]:
    names = ["lengths.parquet", "plan.parquet"] + [f"shards/{p.name}" for p in sorted((out / "shards").glob("*.tar"))]
    return {n: (out / n).read_bytes() for n in names}


@pytest.mark.slow
def test_sigkill_during_shard_writing_then_rerun(tiny_processor_dir, sample_data, tmp_path) -> None:
    src = big_input(sample_data, tmp_path)
    env = {**os.environ, "CURATE_CACHE": str(tmp_path / "cache-ref")}
    ref = tmp_path / "ref"
    subprocess.run(command(src, tiny_processor_dir, ref), env=env, check=True, capture_output=True)
    expected = files(ref)
    assert len(expected) > 40

    out = tmp_path / "killed"
    env = {**os.environ, "CURATE_CACHE": str(tmp_path / "cache-killed")}
    proc = subprocess.Popen(command(src, tiny_processor_dir, out), env=env, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    markers = out / "_shards" / "write"
    deadline = time.time() + 300
    while time.time() < deadline and proc.poll() is None:
        if markers.exists() and sum(1 for p in markers.glob("0*.json")) >= 3:
            proc.send_signal(signal.SIGKILL)
            break
        time.sleep(0.002)
    proc.wait()
    assert proc.returncode == -signal.SIGKILL, "the run finished before it could be killed"
    assert not (out / "stats.json").exists()
    done_before = len(list(markers.glob("0*.json")))
    assert 3 <= done_before < len(expected) - 2

    subprocess.run(command(src, tiny_processor_dir, out), env=env, check=True, capture_output=True)
    assert files(out) == expected
    assert not list((out / "shards").glob(".*"))  # no temporary files left behind
