"""The training loader: tensors, sharding over workers and ranks, drift detection, and isolation."""

from __future__ import annotations

import json
import shutil
import tarfile
from pathlib import Path

import numpy as np
import pytest
import torch

from packer.loader import PackedDataset, ProcessorDrift, block_causal_mask, collate_packed
from packer.pack import pack
from packer.tokens import IGNORE_INDEX, TokenCounter


@pytest.fixture(scope="module")
def packed_vlm(tiny_vlm_dir, sample_data, tmp_path_factory) -> Path:
    """Sample records packed with the tiny VLM's own processor (so the model can run them)."""
    out = tmp_path_factory.mktemp("loader") / "out"
    import os
    os.environ.setdefault("CURATE_CACHE", str(out.parent / "cache"))
    pack([sample_data / "records.jsonl", sample_data / "llava.jsonl"], out=out, ctx=2048,
         processor=str(tiny_vlm_dir), seed=1, sequences_per_shard=3, verify_fraction=0.0)
    return out


def test_sequences_match_their_json(packed_vlm, tiny_vlm_dir) -> None:
    counter = TokenCounter(tiny_vlm_dir)
    seen = 0
    for item in PackedDataset(packed_vlm / "shards", counter):
        cu = item["cu_seqlens"]
        assert cu.dtype == torch.int32 and int(cu[0]) == 0 and int(cu[-1]) == item["input_ids"].numel()
        assert item["labels"].shape == item["input_ids"].shape
        assert item["max_seqlen"] == int(torch.diff(cu).max())
        pos = item["position_ids"]
        assert pos.shape == (3, item["input_ids"].numel())  # Qwen2-VL: multimodal rotary ids
        for s, e in zip(cu[:-1].tolist(), cu[1:].tolist()):
            assert pos[:, s].tolist() == [0, 0, 0]  # restarts at every boundary
            labels = item["labels"][s:e]
            assert (labels != IGNORE_INDEX).any()  # every sample trains on its answer
            assert labels[0] == IGNORE_INDEX  # the prompt is never trained on
        image_pos = item["input_ids"] == counter.image_token_id
        assert (item["labels"][image_pos] == IGNORE_INDEX).all()
        if "pixel_values" in item:
            grid = item["image_grid_thw"]
            assert int(image_pos.sum()) == int((grid.prod(dim=1) // 4).sum())
            assert item["pixel_values"].shape[0] == int(grid.prod(dim=1).sum())
        seen += 1
    assert seen == json.loads((packed_vlm / "stats.json").read_text())["sequences"]


def test_each_sequence_once_over_workers_and_ranks(packed_vlm, tiny_vlm_dir) -> None:
    def keys(**kw) -> list[tuple[str, ...]]:
        ds = PackedDataset(packed_vlm / "shards", str(tiny_vlm_dir), **kw)
        loader = torch.utils.data.DataLoader(ds, batch_size=None, num_workers=kw.pop("workers", 0))
        return [tuple(item["ids"]) for item in loader]

    alone = keys()
    ds_workers = PackedDataset(packed_vlm / "shards", str(tiny_vlm_dir))
    two = [tuple(i["ids"]) for i in torch.utils.data.DataLoader(ds_workers, batch_size=None, num_workers=2)]
    assert sorted(two) == sorted(alone) and len(set(alone)) == len(alone)
    r0, r1 = keys(rank=0, world_size=2), keys(rank=1, world_size=2)
    assert len(r0) == len(r1) == -(-len(alone) // 2)  # the same count on every rank
    extra = len(r0) + len(r1) - len(alone)  # an odd count is filled by repeating the epoch's first sequence
    assert sorted(set(r0 + r1)) == sorted(alone) and extra in (0, 1)
    assert not extra or r1[-1] == alone[0]
    batch = collate_packed([PackedDataset(packed_vlm / "shards", str(tiny_vlm_dir)).__iter__().__next__()] * 2)
    assert int(batch["cu_seqlens"][-1]) == batch["input_ids"].numel()


def test_processor_drift_is_detected(packed_vlm, tiny_vlm_dir, tmp_path) -> None:
    other = TokenCounter(tiny_vlm_dir, max_pixels=28 * 28 * 16)
    with pytest.raises(ProcessorDrift, match="packed with processor"):
        next(iter(PackedDataset(packed_vlm / "shards", other)))
    # a shard whose stored counts disagree with re-tokenization
    src = sorted((packed_vlm / "shards").glob("*.tar"))[0]
    bad = tmp_path / "bad.tar"
    with tarfile.open(src) as tin, tarfile.open(bad, "w", format=tarfile.USTAR_FORMAT) as tout:
        for member in tin.getmembers():
            data = tin.extractfile(member).read()
            if member.name.endswith(".json"):
                meta = json.loads(data)
                meta["tokens"][0] += 1
                meta["cu_seqlens"] = [0, *np.cumsum(meta["tokens"]).tolist()]
                data = json.dumps(meta).encode()
                member.size = len(data)
            import io
            tout.addfile(member, io.BytesIO(data))
    with pytest.raises(ProcessorDrift, match="stored"):
        next(iter(PackedDataset(bad, str(tiny_vlm_dir))))


def test_packed_logits_equal_each_sample_alone(packed_vlm, tiny_vlm_dir) -> None:
    """Isolation: attention restricted by cu_seqlens and positions reset give each sample's own logits."""
    from transformers import AutoModelForImageTextToText

    torch.manual_seed(0)
    model = AutoModelForImageTextToText.from_pretrained(tiny_vlm_dir, attn_implementation="sdpa").eval()
    ds = PackedDataset(packed_vlm / "shards", str(tiny_vlm_dir))
    checked = 0
    for item in ds:
        if len(item["ids"]) < 2 or "pixel_values" not in item:
            continue
        cu = item["cu_seqlens"].long()
        with torch.no_grad():
            packed = model(input_ids=item["input_ids"][None], position_ids=item["position_ids"][:, None, :],
                           attention_mask=block_causal_mask(item["cu_seqlens"]),
                           mm_token_type_ids=item["mm_token_type_ids"][None],
                           pixel_values=item["pixel_values"], image_grid_thw=item["image_grid_thw"]).logits[0]
        if checked == 0:  # sensitivity: without the boundaries, later samples see earlier ones
            L = item["input_ids"].numel()
            with torch.no_grad():
                leaky = model(input_ids=item["input_ids"][None], position_ids=item["position_ids"][:, None, :],
                              attention_mask=torch.ones(L, L, dtype=torch.bool).tril()[None, None],
                              mm_token_type_ids=item["mm_token_type_ids"][None],
                              pixel_values=item["pixel_values"], image_grid_thw=item["image_grid_thw"]).logits[0]
            assert (leaky[cu[1]:] - packed[cu[1]:]).abs().max().item() > 1e-3
        grids = item["image_grid_thw"]
        patch_start = 0
        image_start = 0
        pad = model.config.image_token_id
        for s, e in zip(cu[:-1].tolist(), cu[1:].tolist()):
            ids = item["input_ids"][s:e]
            n_images = int((torch.diff((ids == pad).int(), prepend=torch.zeros(1, dtype=torch.int32)) == 1).sum())
            kwargs = {}
            if n_images:
                g = grids[image_start:image_start + n_images]
                n_patches = int(g.prod(dim=1).sum())
                kwargs = {"pixel_values": item["pixel_values"][patch_start:patch_start + n_patches], "image_grid_thw": g}
                patch_start += n_patches
                image_start += n_images
            with torch.no_grad():  # the model computes its own positions and a plain causal mask
                alone = model(input_ids=ids[None], attention_mask=torch.ones(1, e - s, dtype=torch.long),
                              mm_token_type_ids=(ids == pad).int()[None], **kwargs).logits[0]
            diff = (packed[s:e] - alone).abs().max().item()
            assert diff < 1e-4, (item["ids"], s, e, diff)
            checked += 1
        if checked >= 6:
            break
    assert checked >= 4


def test_a_sample_whose_image_does_not_decode_is_named_or_skipped(packed_vlm, tiny_vlm_dir, tmp_path) -> None:
    """A pack tampered with after verify passed: the loader names the shard, sequence and sample (raise), or
    rebuilds the sequence without that sample and counts it (skip); verify names the same sample."""
    from packer.loader import SampleError
    from packer.verify import verify_pack

    copy = tmp_path / "copy"
    shutil.copytree(packed_vlm, copy)
    tar_path = sorted((copy / "shards").glob("*.tar"))[0]
    with tarfile.open(tar_path) as tar:
        member = next(m for m in tar.getmembers() if ".img" in m.name)
        meta = json.loads(tar.extractfile(member.name.split(".")[0] + ".json").read())
    data = bytearray(tar_path.read_bytes())
    data[member.offset_data:member.offset_data + 16] = b"not an image now"
    tar_path.write_bytes(bytes(data))
    index = meta["image_members"].index(member.name.split(".", 1)[1])
    victim = meta["ids"][int(np.searchsorted(np.cumsum(meta["images_per_sample"]), index, side="right"))]

    report = verify_pack(copy, sample=0)
    assert not report.ok and any(f"sample {victim!r}" in p and "does not decode" in p for p in report.problems)
    with pytest.raises(SampleError, match=rf"{tar_path.name}.*sample {victim!r}: not_an_image"):
        for _ in PackedDataset(copy / "shards", str(tiny_vlm_dir)):
            pass
    lenient = PackedDataset(copy / "shards", str(tiny_vlm_dir), on_error="skip")
    ids = [rid for item in lenient for rid in item["ids"]]
    clean = [rid for item in PackedDataset(packed_vlm / "shards", str(tiny_vlm_dir)) for rid in item["ids"]]
    assert lenient.skipped == 1 and victim not in ids and sorted(ids + [victim]) == sorted(clean)
    for item in PackedDataset(copy / "shards", str(tiny_vlm_dir), on_error="skip"):
        cu = item["cu_seqlens"]
        assert int(cu[-1]) == item["input_ids"].numel() and len(cu) == len(item["ids"]) + 1
