"""Megatron-Energon output: energon-prepare, energon lint, and the task encoder against PackedDataset.

The demo data is packed with the tiny processor at ``--max-pixels 28*28*16`` (small
images keep the image processor cheap; the loaders are given the same setting) and
two sequences per shard, so that there are several tars.

One epoch: Energon's train dataset loops forever and shuffles shard slices; with
``repeat=False`` (and ``shuffle_over_epochs_multiplier=1``, the default) it stops
after exactly one pass in which every sequence is read once, over all workers.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import tarfile
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
import torch
import yaml

pytest.importorskip("megatron.energon")

from megatron.energon import (  # noqa: E402
    DefaultTaskEncoder,
    WorkerConfig,
    get_loader,
    get_savable_loader,
    get_train_dataset,
    get_val_dataset,
)
from megatron.energon.errors import FatalSampleError  # noqa: E402
from megatron.energon.flavors.webdataset.empty_dataset_error import EmptyDatasetError  # noqa: E402

from curate.cli import main  # noqa: E402
from curate.core.errors import UserError  # noqa: E402
from packer.energon import (  # noqa: E402
    PackedSequenceSample,
    PackedTaskEncoder,
    parse_split_ratio,
    prepare_energon,
    sample_loader_source,
    split_counts,
)
from packer.loader import PackedDataset, collate_packed  # noqa: E402
from packer.pack import pack  # noqa: E402
from packer.tokens import TokenCounter  # noqa: E402
from packer.verify import verify_pack  # noqa: E402

MAX_PIXELS = 28 * 28 * 16
CTX = 1024
SEQUENCES_PER_SHARD = 2


@pytest.fixture(scope="module")
def packed(sample_data: Path, tiny_processor_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The demo records packed into several tars, then made an Energon dataset (train split only)."""
    root = tmp_path_factory.mktemp("energon")
    out = root / "out"
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("CURATE_CACHE", str(root / "cache"))  # count here, never reuse another test's lengths
        pack([sample_data / "records.jsonl", sample_data / "llava.jsonl"], out=out, ctx=CTX,
             processor=str(tiny_processor_dir), max_pixels=MAX_PIXELS, seed=3,
             sequences_per_shard=SEQUENCES_PER_SHARD, verify_fraction=0.0, plot=False)
    prepare_energon(out, split_ratio="1,0,0", workers=2)
    return out


@pytest.fixture(scope="module")
def reference(packed: Path, tiny_processor_dir: Path) -> dict[tuple[str, ...], dict[str, Any]]:
    """PackedDataset's tensors of every packed sequence, by its ids."""
    counter = TokenCounter(tiny_processor_dir, max_pixels=MAX_PIXELS)
    items = {tuple(item["ids"]): item for item in PackedDataset(packed / "shards", counter)}
    assert len(items) == json.loads((packed / "stats.json").read_text())["sequences"]
    return items


def _shard_sequences(packed: Path, names: list[str]) -> dict[str, tuple[dict[str, Any], dict[str, bytes]]]:
    """key → (JSON, image bytes by member suffix) of every sequence in the named tars, read with tarfile."""
    out: dict[str, tuple[dict[str, Any], dict[str, bytes]]] = {}
    for name in names:
        with tarfile.open(packed / name) as tar:
            for member in tar.getmembers():
                key, part = member.name.split(".", 1)
                meta, images = out.setdefault(key, ({}, {}))
                data = tar.extractfile(member).read()
                if part == "json":
                    meta.update(json.loads(data))
                else:
                    images[part] = data
    return out


def _assert_same(got: dict[str, Any], want: dict[str, Any]) -> None:
    assert set(got) - {"__key__", "__restore_key__"} == set(want)
    for name, value in want.items():
        if isinstance(value, torch.Tensor):
            assert got[name].dtype == value.dtype, name
            assert torch.equal(got[name], value), name
        else:
            assert got[name] == value, name


def test_prepare_writes_energon_metadata(packed: Path) -> None:
    meta = packed / ".nv-meta"
    assert {".info.json", "split.yaml", "index.sqlite", "index.uuid", "dataset.yaml",
            "sample_loader.py"} <= {p.name for p in meta.iterdir()}
    tars = sorted((packed / "shards").glob("*.tar"))
    assert len(tars) >= 3
    info = json.loads((meta / ".info.json").read_text())
    stats = json.loads((packed / "stats.json").read_text())
    assert set(info["shard_counts"]) == {f"shards/{p.name}" for p in tars}
    assert sum(info["shard_counts"].values()) == stats["sequences"]
    assert all(p.with_suffix(".tar.idx").exists() for p in tars)
    definition = yaml.safe_load((meta / "dataset.yaml").read_text())
    assert definition["sample_type"] == {"__module__": "packer.energon", "__class__": "PackedSequenceSample"}
    assert definition["decoder"] is None
    assert (meta / "sample_loader.py").read_text() == sample_loader_source()
    # the pack folder is still a valid pack folder
    report = verify_pack(packed, sample=4)
    assert report.ok, report.problems


@pytest.mark.slow
def test_energon_lint_passes(packed: Path) -> None:
    energon = Path(sys.executable).with_name("energon")
    cmd = [str(energon)] if energon.exists() else [sys.executable, "-m", "megatron.energon.cli.main"]
    run = subprocess.run([*cmd, "lint", str(packed), "--split-parts", "train"], capture_output=True, text=True,
                         timeout=300)
    log = run.stdout + run.stderr
    assert run.returncode == 0, log
    # energon lint 7.4 logs a failing sample and goes on (exit 0): also require that none failed
    assert "Traceback" not in log and "Except " not in log, log
    n = json.loads((packed / "stats.json").read_text())["sequences"]
    assert f"{n}/{n}" in log, log


def test_samples_carry_the_shard_content(packed: Path) -> None:
    """The sample loader gives one PackedSequenceSample per sequence with its JSON fields and original image bytes."""
    wc = WorkerConfig(rank=0, world_size=1, num_workers=0)
    dataset = get_val_dataset(packed, split_part="train", worker_config=wc, batch_size=None,
                              task_encoder=DefaultTaskEncoder())
    expected = _shard_sequences(packed, [f"shards/{p.name}" for p in sorted((packed / "shards").glob("*.tar"))])
    seen = []
    for sample in get_loader(dataset):
        assert isinstance(sample, PackedSequenceSample)
        meta, images = expected[sample.__key__]
        seen.append(sample.__key__)
        assert sample.to_meta() == meta
        assert sample.images == [images[name] for name in meta["image_members"]]
        assert all(isinstance(data, bytes) for data in sample.images)  # not decoded
    assert sorted(seen) == sorted(expected)


@pytest.mark.slow
@pytest.mark.parametrize("workers,batch_size", [(1, None), (2, 2)])
def test_train_loader_equals_packed_dataset(packed: Path, tiny_processor_dir: Path, reference: dict,
                                            workers: int, batch_size: int | None) -> None:
    """One epoch of get_train_dataset + get_loader: PackedDataset's tensors, every sequence and id exactly once."""
    wc = WorkerConfig(rank=0, world_size=1, num_workers=workers)
    encoder = PackedTaskEncoder(tiny_processor_dir, max_pixels=MAX_PIXELS)
    dataset = get_train_dataset(packed, worker_config=wc, batch_size=batch_size, shuffle_buffer_size=None,
                                max_samples_per_sequence=None, task_encoder=encoder, repeat=False)
    sequence_of = {rid: ids for ids in reference for rid in ids}
    sequences: Counter[tuple[str, ...]] = Counter()
    records: Counter[str] = Counter()
    for item in get_loader(dataset):
        records.update(item["ids"])
        if batch_size is None:
            ids = tuple(item["ids"])
            _assert_same(item, reference[ids])
            sequences[ids] += 1
            continue
        # a batch: the sequences concatenated in order (collate_packed)
        parts, flat = [], list(item["ids"])
        while flat:
            ids = sequence_of[flat[0]]
            assert tuple(flat[:len(ids)]) == ids
            parts.append(ids)
            flat = flat[len(ids):]
        assert 1 <= len(parts) <= batch_size and len(item["__key__"]) == len(parts)
        _assert_same(item, collate_packed([reference[ids] for ids in parts]))
        sequences.update(parts)
    assert set(sequences) == set(reference) and set(sequences.values()) == {1}
    assert set(records) == set(sequence_of) and set(records.values()) == {1}


def test_checkpoint_resume_and_restore(packed: Path) -> None:
    """Energon's savable loader: a saved state resumes at the same sequence; a restore key rebuilds a batch."""
    def loader():  # noqa: ANN202
        wc = WorkerConfig(rank=0, world_size=1, num_workers=0)  # no worker processes left to tear down
        return get_savable_loader(get_train_dataset(
            packed, worker_config=wc, batch_size=1, shuffle_buffer_size=None, max_samples_per_sequence=None,
            task_encoder=PackedTaskEncoder.from_pack(packed)))

    first = loader()
    it = iter(first)
    head = [next(it) for _ in range(2)]
    state = first.save_state_rank()
    tail = [next(it)["ids"] for _ in range(2)]
    second = loader()
    second.restore_state_rank(state)
    it2 = iter(second)
    assert [next(it2)["ids"] for _ in range(2)] == tail
    again = first.restore_sample(head[0]["__restore_key__"])
    _assert_same(again, {k: v for k, v in head[0].items() if k not in ("__key__", "__restore_key__")})


def test_processor_drift_stops_the_loader(packed: Path, tiny_processor_dir: Path) -> None:
    """Loading with other image settings than the pack's is fatal, never a skipped sample."""
    wc = WorkerConfig(rank=0, world_size=1, num_workers=0)
    dataset = get_val_dataset(packed, split_part="train", worker_config=wc, batch_size=None,
                              task_encoder=PackedTaskEncoder(tiny_processor_dir))  # packed with max_pixels
    with pytest.raises(FatalSampleError, match="packed with processor"):
        next(iter(get_loader(dataset)))


def test_split_ratio_and_cli(packed: Path, tmp_path: Path) -> None:
    out = tmp_path / "copy"
    out.mkdir()
    shutil.copytree(packed / "shards", out / "shards", ignore=shutil.ignore_patterns("*.idx"))
    shutil.copy(packed / "stats.json", out / "stats.json")
    main(["energon-prepare", str(out), "--split-ratio", "2,1,1"])
    main(["energon-prepare", str(out), "--split-ratio", "2,1,1"])  # a rerun rewrites the metadata
    splits = yaml.safe_load((out / ".nv-meta" / "split.yaml").read_text())["split_parts"]
    info = json.loads((out / ".nv-meta" / ".info.json").read_text())
    tars = list(info["shard_counts"])
    wc = WorkerConfig(rank=0, world_size=1, num_workers=0)
    assigned: list[str] = []
    for split in ("train", "val", "test"):
        names = [n for pattern in splits[split] for n in tars if _matches(pattern, n)]
        assigned += names
        want = sorted(_shard_sequences(out, names))
        try:
            dataset = get_val_dataset(out, split_part=split, worker_config=wc, batch_size=None,
                                      task_encoder=DefaultTaskEncoder())
            got = sorted(sample.__key__ for sample in get_loader(dataset))
        except EmptyDatasetError:
            got = []
        assert got == want, split
    assert assigned == sorted(tars)  # every shard in exactly one split: train first, then val, then test
    counts = [len([n for p in splits[k] for n in tars if _matches(p, n)]) for k in ("train", "val", "test")]
    assert all(c >= 1 for c in counts) and all(abs(c - len(tars) * w / 4) < 1 for c, w in zip(counts, (2, 1, 1)))


def test_split_counts() -> None:
    for shards in range(1, 40):
        for ratio in ((1, 0, 0), (8, 1, 1), (98, 1, 1), (1, 0, 1), (0, 1, 0), (1, 1, 1), (0.5, 0.25, 0.25)):
            positive = sum(w > 0 for w in ratio)
            if shards < positive:
                with pytest.raises(UserError, match="cannot be split"):
                    split_counts(shards, ratio)
                continue
            counts = split_counts(shards, ratio)
            assert sum(counts) == shards
            assert all((c >= 1) == (w > 0) for c, w in zip(counts, ratio)), (shards, ratio, counts)
            if all(shards * w / sum(ratio) >= 1 or w == 0 for w in ratio):  # no split raised to its minimum
                assert all(abs(c - shards * w / sum(ratio)) < 1 for c, w in zip(counts, ratio)), (shards, ratio)
    assert split_counts(100, (98, 1, 1)) == [98, 1, 1]
    assert split_counts(10, (8, 1, 1)) == [8, 1, 1]
    assert split_counts(5, (8, 1, 1)) == [3, 1, 1]  # 4 by share, one given up so that test is not empty


def _matches(pattern: str, name: str) -> bool:
    import braceexpand
    return name in set(braceexpand.braceexpand(pattern))


def test_bad_input_is_a_user_error(packed: Path, tmp_path: Path) -> None:
    with pytest.raises(UserError, match="no stats.json"):
        prepare_energon(tmp_path)
    plan = tmp_path / "plan"
    pack([], out=plan, ctx=CTX, lengths=packed / "lengths.parquet", plan_only=True, plot=False)
    with pytest.raises(UserError, match="plan.only"):
        prepare_energon(plan)
    broken = tmp_path / "broken"
    shutil.copytree(packed / "shards", broken / "shards", ignore=shutil.ignore_patterns("*.idx"))
    shutil.copy(packed / "stats.json", broken / "stats.json")
    second = sorted((broken / "shards").glob("*.tar"))[1]
    second.write_bytes(second.read_bytes()[:second.stat().st_size // 2])  # truncated in the middle
    with pytest.raises(UserError, match="could not index the shards"):
        prepare_energon(broken)
    second.write_bytes(b"not a tar")
    with pytest.raises(UserError, match="not a readable tar"):
        prepare_energon(broken)
    for bad in ("1,1", "a,b,c", "0,0,0", "-1,1,1"):
        with pytest.raises(UserError, match="split-ratio"):
            parse_split_ratio(bad)
    assert parse_split_ratio("8,1,1") == (8.0, 1.0, 1.0)
