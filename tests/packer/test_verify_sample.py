"""The processor check runs on a fixed, seeded number of records spread over shards; workers use the threads given."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from curate.core.errors import UserError
from curate.core.shards import plan_shards
from curate.core.threads import cap_threads, task_threads, torch_threads
from packer.config import PackConfig
from packer.count import LengthsTask
from packer.pack import pack


def _shards(sample_data: Path, size: int):
    return plan_shards([sample_data / "records.jsonl", sample_data / "llava.jsonl", sample_data / "captions.jsonl"], size)


def test_sample_is_fixed_seeded_and_spread(sample_data, tmp_path) -> None:
    def task_of(**settings: object) -> LengthsTask:
        return LengthsTask(PackConfig(out=tmp_path / "packed", **settings), "unused")

    shards = _shards(sample_data, 7)
    total = sum(len(s) for s in shards)
    task = task_of(verify_sample=10)
    assert task.choose_verified(shards, seed=1) == 10
    first = dict(task.verified_rows)
    assert sum(len(v) for v in first.values()) == 10
    sizes = {s.id: len(s) for s in shards}
    assert all(0 <= p < sizes[k] for k, rows in first.items() for p in rows)
    assert len(first) > 1  # spread over several shards
    task.choose_verified(shards, seed=1)
    assert task.verified_rows == first
    task.choose_verified(shards, seed=2)
    assert task.verified_rows != first
    big = task_of(verify_sample=10 * total)
    assert big.choose_verified(shards, seed=0) == total  # never more than the records
    assert task_of(verify_fraction=0.5).choose_verified(shards, seed=0) == 0  # the older share
    assert task_of(verify_sample=0).choose_verified(shards, seed=0) == 0
    with pytest.raises(UserError, match="verify_sample"):  # the config refuses it; the task takes it as checked
        task_of(verify_sample=-1)


def test_pack_checks_exactly_the_sample(tiny_processor_dir, sample_data, tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("CURATE_CACHE", str(tmp_path / "cache"))
    files = [sample_data / "records.jsonl", sample_data / "captions.jsonl"]
    stats = pack(files, out=tmp_path / "a", ctx=2048, processor=str(tiny_processor_dir), seed=3,
                 shard_size=10, verify_sample=6, plan_only=True, plot=False)
    assert 0 < stats["verified_records"] <= 6  # a bad record drawn is counted as an error, not verified
    assert stats["settings"]["verify_sample"] == 6


def test_thread_caps(monkeypatch) -> None:
    import torch

    class CpuTask:
        pass

    class ModelTask:
        threads = None

    assert task_threads(CpuTask()) == 1
    assert task_threads(ModelTask()) is None
    ModelTask.threads = 3
    assert task_threads(ModelTask()) == 3
    before = torch.get_num_threads()
    with torch_threads(1):
        assert torch.get_num_threads() == 1
    assert torch.get_num_threads() == before
    for var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS"):
        monkeypatch.delenv(var, raising=False)
    cap_threads(None)
    assert "OMP_NUM_THREADS" not in os.environ
    try:
        cap_threads(1)
        assert os.environ["OMP_NUM_THREADS"] == "1" and torch.get_num_threads() == 1
    finally:
        torch.set_num_threads(before)
    assert "torch" in sys.modules
