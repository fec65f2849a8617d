"""``curate embed``: embeddings of real images with the tiny open_clip model, bad images, resuming."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest
import torch

from curate.balance.embed import EMBED_DIR, embed
from curate.models.encoders import load_encoder
from curate.core.images import decode
from curate.core.records import read_records


def _load_pairs(out: Path) -> tuple[np.ndarray, list[str]]:
    folder = out / EMBED_DIR
    mats, ids = [], []
    for npy in sorted(folder.glob("*.npy")):
        mats.append(np.load(npy))
        ids.extend(pq.read_table(npy.with_name(npy.name[:-4] + ".ids.parquet")).column("id").to_pylist())
    return np.concatenate(mats), ids


def _folder_bytes(folder: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(folder.iterdir()) if p.is_file()}


def test_embeds_sample_records_and_accounts_for_every_record(tiny_clip_spec: str, sample_data: Path,
                                                             tmp_path: Path) -> None:
    inputs = [sample_data / "records.jsonl", sample_data / "bad" / "records.jsonl"]
    result = embed(inputs, out=tmp_path / "out", model=tiny_clip_spec, shard_size=16, batch_size=8)
    matrix, ids = _load_pairs(tmp_path / "out")

    records = list(read_records(inputs))
    with_images = [r for r in records if isinstance(r, dict) and r["images"]]
    assert result["records_in"] == len(records)
    assert result["records_in"] == (result["records_embedded"] + sum(result["dropped"].values())
                                    + sum(result["errored"].values()))
    assert result["records_embedded"] == len(ids) == matrix.shape[0]
    assert matrix.dtype == np.float16 and matrix.shape[1] == 64
    np.testing.assert_allclose(np.linalg.norm(matrix.astype(np.float32), axis=1), 1.0, atol=2e-3)

    # Every bad image of the reliability set is errored with the reason the set expects.
    expected = json.loads((sample_data / "bad" / "EXPECTED.json").read_text())
    rejects = pq.read_table(tmp_path / "out" / "rejects.parquet").to_pylist()
    reasons = {r["id"]: r["reason"] for r in rejects}
    for line in expected["lines"]:
        hint = line.get("reason_hint")
        if hint in {"truncated", "empty_file", "not_an_image", "decompression_bomb", "missing_image"}:
            assert reasons[line["id"]] == hint
        if line["expect"] == "ok" and line["id"] != "ok-text":
            assert line["id"] in ids
    assert reasons["ok-text"] == "no_image"  # text-only records have nothing to embed
    assert result["dropped"]["no_image"] == sum(1 for r in records if isinstance(r, dict) and not r["images"])
    assert len(with_images) - result["records_embedded"] == sum(
        n for reason, n in result["errored"].items()
        if reason in {"truncated", "empty_file", "not_an_image", "decompression_bomb", "missing_image"})


def test_rows_are_the_models_embeddings(tiny_clip_spec: str, sample_data: Path, tmp_path: Path) -> None:
    embed([sample_data / "records.jsonl"], out=tmp_path / "out", model=tiny_clip_spec, batch_size=5)
    matrix, ids = _load_pairs(tmp_path / "out")
    enc = load_encoder(tiny_clip_spec)
    by_id = {r["id"]: r for r in read_records([sample_data / "records.jsonl"]) if isinstance(r, dict)}
    multi = [i for i, rid in enumerate(ids) if len(by_id[rid]["images"]) > 1]
    single = [i for i, rid in enumerate(ids) if len(by_id[rid]["images"]) == 1]
    assert multi and single
    for i in single[:5] + multi[:3]:
        images = by_id[ids[i]]["images"]
        feats = enc.encode_images(torch.stack([enc.preprocess(decode(p)) for p in images]))
        want = feats.mean(axis=0)
        want /= np.linalg.norm(want)
        np.testing.assert_allclose(matrix[i].astype(np.float32), want, atol=2e-3)


def test_same_bytes_for_any_decode_threads_and_rerun(tiny_clip_spec: str, sample_data: Path, tmp_path: Path) -> None:
    inputs = [sample_data / "records.jsonl", sample_data / "captions.jsonl"]
    embed(inputs, out=tmp_path / "a", model=tiny_clip_spec, decode_threads=1, shard_size=30)
    embed(inputs, out=tmp_path / "b", model=tiny_clip_spec, decode_threads=4, shard_size=30)
    assert _folder_bytes(tmp_path / "a" / EMBED_DIR) == _folder_bytes(tmp_path / "b" / EMBED_DIR)
    # A finished run is a no-op on rerun, and the files stay identical.
    before = _folder_bytes(tmp_path / "a" / EMBED_DIR)
    again = embed(inputs, out=tmp_path / "a", model=tiny_clip_spec, decode_threads=1, shard_size=30)
    assert _folder_bytes(tmp_path / "a" / EMBED_DIR) == before
    assert again["records_embedded"] == len(_load_pairs(tmp_path / "a")[1])


def test_rerun_with_other_settings_is_refused(tiny_clip_spec: str, sample_data: Path, tmp_path: Path) -> None:
    from curate.core.errors import UserError

    embed([sample_data / "captions.jsonl"], out=tmp_path / "o", model=tiny_clip_spec, batch_size=4)
    with pytest.raises(UserError, match="other settings"):
        embed([sample_data / "captions.jsonl"], out=tmp_path / "o", model=tiny_clip_spec, batch_size=8)


def test_pickled_task_and_other_thread_count_give_the_same_bytes(tiny_clip_spec: str, sample_data: Path,
                                                                  tmp_path: Path) -> None:
    """What a worker process or Ray actor does: unpickle the task (no model inside), set up, run a shard."""
    import pickle

    from curate.balance.config import EmbedConfig
    from curate.balance.embed import EmbedTask
    from curate.core.shards import ShardContext, plan_shards

    shard = plan_shards([sample_data / "records.jsonl"], 40)[1]
    task = EmbedTask(EmbedConfig(out=tmp_path / "out", model=tiny_clip_spec, batch_size=8))
    task.setup()
    blob = pickle.dumps(task)
    assert len(blob) < 10_000  # the model is not pickled
    previous = torch.get_num_threads()
    try:
        outputs = []
        for threads, t in ((1, pickle.loads(blob)), (2, task)):
            torch.set_num_threads(threads)
            work = tmp_path / f"w{threads}"
            t.run(shard, work, ShardContext(seed=0))
            outputs.append(_folder_bytes(work / EMBED_DIR))
    finally:
        torch.set_num_threads(previous)
    assert outputs[0] == outputs[1] and len(outputs[0]) == 2
