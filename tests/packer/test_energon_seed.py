"""``curate pack --energon 1,0,0 --energon-layout llava-ov-1.5``: LLaVA-OneVision-1.5's own offline-packing layout.

Read back through Megatron-Energon with a sample class of the seed's fields (``images``, ``prompts``,
``captions``: ``aiak_training_llm.data.multimodal.PackedCaptioningSample``, typed here as the seed
defines it, in a package on ``sys.path`` since the seed's trainer is not installed), then checked
against the records that went in and the sequences ``curate pack`` planned.
"""

from __future__ import annotations

import io
import json
import sys
import tarfile
from pathlib import Path

import numpy as np
import pytest
import torch
import yaml
from PIL import Image

pytest.importorskip("megatron.energon")

from megatron.energon import DefaultTaskEncoder, WorkerConfig, get_loader, get_val_dataset  # noqa: E402

from curate.cli import main  # noqa: E402
from curate.core.errors import UserError  # noqa: E402
from packer.energon import write_seed_layout  # noqa: E402
from packer.verify import verify_pack  # noqa: E402

SEED_CLASS = '''
from dataclasses import dataclass
from typing import List, Optional

import torch
from megatron.energon.flavors.base_dataset import Sample


@dataclass
class PackedCaptioningSample(Sample):
    images: List[torch.Tensor]
    prompts: Optional[List[str]]
    captions: List[str]
'''


@pytest.fixture(scope="module")
def seed_pack(sample_data: Path, tiny_processor_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Single-image, single-turn records of the demo data packed in the seed's layout (3 sequences per tar)."""
    root = tmp_path_factory.mktemp("seed")
    records = [json.loads(line) for line in (sample_data / "records.jsonl").read_text().splitlines()]
    fit = [r for r in records if len(r.get("images") or []) == 1 and [m["role"] for m in r["messages"]] == ["user", "assistant"]
           and r["messages"][0]["content"].count("<image>") == 1]
    assert len(fit) >= 20
    inputs = root / "captions.jsonl"
    inputs.write_text("".join(json.dumps(r | {"images": [str(sample_data / p) for p in r["images"]]}) + "\n"
                              for r in fit))
    out = root / "out"
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("CURATE_CACHE", str(root / "cache"))
        main(["pack", str(inputs), "--processor", str(tiny_processor_dir), "--ctx", "1024", "--max-pixels",
              str(28 * 28 * 16), "--sequences-per-shard", "3", "--out", str(out), "--energon", "1,0,0",
              "--energon-layout", "llava-ov-1.5"])
    return out


@pytest.fixture
def seed_class(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    package = tmp_path / "seedpkg" / "aiak_training_llm" / "data" / "multimodal"
    package.mkdir(parents=True)
    for folder in (package.parent.parent, package.parent):
        (folder / "__init__.py").write_text("")
    (package / "__init__.py").write_text(SEED_CLASS)
    monkeypatch.syspath_prepend(str(tmp_path / "seedpkg"))
    yield
    for name in [m for m in sys.modules if m.startswith("aiak_training_llm")]:
        del sys.modules[name]


def _pixels(data: bytes) -> torch.Tensor:
    """An image as Energon's default decoder gives it: RGB, (3, H, W) floats in [0, 1]."""
    with Image.open(io.BytesIO(data)) as im:
        return torch.from_numpy(np.asarray(im.convert("RGB")).copy()).permute(2, 0, 1).float() / 255


def test_the_seed_reads_what_pack_planned(seed_pack: Path, sample_data: Path, seed_class: None) -> None:
    seed = seed_pack / "llava-ov"
    meta = seed / ".nv-meta"
    assert yaml.safe_load((meta / "dataset.yaml").read_text()) == {
        "sample_type": {"__module__": "aiak_training_llm.data.multimodal", "__class__": "PackedCaptioningSample"},
        "part_filter": "sample_loader.py:part_filter", "sample_loader": "sample_loader.py:sample_loader"}
    records = {json.loads(x)["id"]: json.loads(x) for x in (seed_pack.parent / "captions.jsonl").read_text().splitlines()}
    planned = {}
    for tar in sorted((seed_pack / "shards").glob("*.tar")):
        with tarfile.open(tar) as tf:
            files = {m.name: tf.extractfile(m).read() for m in tf.getmembers()}
        for name, data in files.items():
            if name.endswith(".json"):
                m = json.loads(data)
                planned[m["key"]] = (m["ids"], [files[f"{m['key']}.{n}"] for n in m["image_members"]])
    assert len(list(seed.glob("pretrain-*.tar"))) == len(list((seed_pack / "shards").glob("*.tar"))) >= 2

    wc = WorkerConfig(rank=0, world_size=1, num_workers=0)
    dataset = get_val_dataset(seed, split_part="train", worker_config=wc, batch_size=None, task_encoder=DefaultTaskEncoder())
    seen = []
    for sample in get_loader(dataset):
        assert type(sample).__name__ == "PackedCaptioningSample"
        ids, images = planned[sample.__key__]
        seen.append(sample.__key__)
        # the seed's sample loader needs Energon's default decoder (JSON parsed, img*.jpg decoded)
        assert len(sample.images) == len(images)
        for got, data in zip(sample.images, images):  # the packed images, in packing order
            assert torch.allclose(got.float(), _pixels(data), atol=1e-6)
        assert sample.captions == [records[i]["messages"][1]["content"] for i in ids]
        assert sample.prompts == [records[i]["messages"][0]["content"].replace("<image>\n", "").replace("<image>", "")
                                  for i in ids]
        assert all("<image>" not in p for p in sample.prompts)
    assert sorted(seen) == sorted(planned)
    assert verify_pack(seed_pack, sample=0).ok


def test_verify_names_a_changed_caption_and_a_sample_that_does_not_fit(seed_pack: Path, tmp_path: Path) -> None:
    import shutil

    copy = tmp_path / "copy"
    shutil.copytree(seed_pack, copy)
    tar = sorted((copy / "llava-ov").glob("pretrain-*.tar"))[0]
    with tarfile.open(tar) as tf:
        members = [(m, tf.extractfile(m).read()) for m in tf.getmembers()]
    with tarfile.open(tar, "w", format=tarfile.USTAR_FORMAT) as tf:
        import io
        for m, data in members:
            if m.name.endswith(".json") and m.name == members[0][0].name:
                payload = json.loads(data)
                payload["captions"][0] = "something else"
                data = json.dumps(payload).encode()
                m.size = len(data)
            tf.addfile(m, io.BytesIO(data))
    report = verify_pack(copy, sample=0)
    assert not report.ok and any(tar.name in p and "differs from the packed samples" in p for p in report.problems)
    # a multi-turn record cannot be written in the seed layout: named, not silently dropped
    shard = sorted((copy / "shards").glob("*.tar"))[0]
    with tarfile.open(shard) as tf:
        members = [(m, tf.extractfile(m).read()) for m in tf.getmembers()]
    with tarfile.open(shard, "w", format=tarfile.USTAR_FORMAT) as tf:
        for m, data in members:
            if m.name.endswith(".json"):
                meta = json.loads(data)
                meta["messages"][0] += [{"role": "user", "content": "And?"}, {"role": "assistant", "content": "No."}]
                data = json.dumps(meta).encode()
                m.size = len(data)
            tf.addfile(m, io.BytesIO(data))
    with pytest.raises(UserError, match=r"sample '.*' has 1 image\(s\) and turns \['user', 'assistant', 'user'"):
        write_seed_layout(copy)
