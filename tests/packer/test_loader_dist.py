"""The loader under real ``torch.distributed`` (gloo, CPU) jobs: equal work per rank, and exact resume after kill -9.

Packs of 1, 3 and 17 tars come from one real ``curate pack`` of the demo data (ctx 512: 20 sequences):
1 and 3 tars written by ``pack`` (with their index files), 17 tars regrouped from the 1-tar pack
without index files (the loader scans the tar headers). Each job is a set of real processes, one per
rank, started here; a collective per sequence makes a rank with less work hang (and fail on the gloo
timeout) instead of passing.
"""

from __future__ import annotations

import io
import json
import os
import signal
import subprocess
import sys
import tarfile
import time
from collections import Counter
from datetime import timedelta
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from curate.fixtures.tiny_vlm import free_port
from packer.loader import PackedDataset, collate_packed, collate_padded
from packer.pack import pack
from packer.sampler import load_index, scan_tar
from packer.writer import index_path

CTX = 512
MAX_PIXELS = 28 * 28 * 16
ROOT = Path(__file__).resolve().parents[2]
BATCH = 2
KILL_AT = 2  # the training job hangs at this step (its state was saved after step KILL_AT - 1) and is killed


def _regroup(tar: Path, out: Path, parts: int) -> None:
    """The sequences of ``tar`` rewritten into ``parts`` tars (sizes differing by at most one), without index."""
    with tarfile.open(tar) as tf:
        members = [(m, tf.extractfile(m).read()) for m in tf.getmembers()]
    groups: list[list[Any]] = []
    for m, data in members:
        key = m.name.split(".", 1)[0]
        if not groups or groups[-1][0] != key:
            groups.append([key, []])
        groups[-1][1].append((m, data))
    out.mkdir(parents=True)
    for i, chunk in enumerate(np.array_split(np.arange(len(groups)), parts)):
        with tarfile.open(out / f"{i:06d}.tar", "w", format=tarfile.USTAR_FORMAT) as tf:
            for g in chunk:
                for m, data in groups[g][1]:
                    tf.addfile(m, io.BytesIO(data))


@pytest.fixture(scope="module")
def packs(sample_data: Path, tiny_vlm_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Shard folders of 1, 3 and 17 tars holding the same sequences."""
    root = tmp_path_factory.mktemp("loader-dist")
    inputs = [sample_data / "records.jsonl", sample_data / "llava.jsonl"]
    out: dict[str, Path] = {}
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("CURATE_CACHE", str(root / "cache"))
        for name, per_shard in (("1", 1000), ("3", 7)):
            pack(inputs, out=root / name, ctx=CTX, processor=str(tiny_vlm_dir), max_pixels=MAX_PIXELS, seed=1,
                 sequences_per_shard=per_shard, verify_fraction=0.0, plot=False)
            out[name] = root / name / "shards"
    _regroup(out["1"] / "000000.tar", root / "17" / "shards", 17)
    out["17"] = root / "17" / "shards"
    for name, folder in out.items():
        assert len(list(folder.glob("*.tar"))) == int(name)
    return out


def _launch(world: int, job: str, args: dict[str, Any], tmp: Path, *, kill_at_step: str | None = None) -> None:
    """Run ``job`` on ``world`` real processes (one per rank, a gloo group); with ``kill_at_step`` (a log file
    pattern), kill -9 every rank's process group once each has logged step KILL_AT."""
    port = free_port()
    (tmp / f"{job}.json").write_text(json.dumps(args))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
           "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port), "WORLD_SIZE": str(world), "OMP_NUM_THREADS": "1"}
    code = f"import tests.packer.test_loader_dist as m; m.{job}({str(tmp / (job + '.json'))!r})"
    procs = [subprocess.Popen([sys.executable, "-c", code], env={**env, "RANK": str(r)}, cwd=ROOT,
                              start_new_session=True, stderr=subprocess.PIPE, text=True) for r in range(world)]
    deadline = time.monotonic() + 240
    if kill_at_step is not None:
        logs = [Path(kill_at_step.format(rank=r)) for r in range(world)]
        while not all(p.exists() and any(json.loads(line)["step"] == KILL_AT for line in p.read_text().splitlines())
                      for p in logs):
            assert time.monotonic() < deadline and all(p.poll() is None for p in procs), \
                [p.stderr.read()[-3000:] for p in procs if p.poll() is not None]
            time.sleep(0.2)
        for p in procs:
            os.killpg(p.pid, signal.SIGKILL)  # kill -9, DataLoader workers included
        for p in procs:
            p.wait(timeout=30)
            assert p.returncode == -signal.SIGKILL
        return
    for p in procs:
        _, err = p.communicate(timeout=max(1, deadline - time.monotonic()))
        assert p.returncode == 0, err[-4000:]


def _init() -> tuple[int, int]:
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    torch.distributed.init_process_group("gloo", rank=rank, world_size=world, timeout=timedelta(seconds=60))
    return rank, world


def partition_job(path: str) -> None:
    """Each rank reads every pack (plain and shuffled, epoch 1); one all_reduce per sequence; rank 0 writes all keys."""
    args = json.loads(Path(path).read_text())
    rank, world = _init()
    results: dict[str, Any] = {}
    for name, shards in args["packs"].items():
        for shuffle in (False, True):
            ds = PackedDataset(shards, None, shuffle=shuffle, seed=7)
            ds.set_epoch(1)
            keys = []
            for item in ds:
                keys.append(item["key"])
                torch.distributed.all_reduce(torch.ones(1))  # a rank with fewer sequences would hang here
            results[f"{name}/{shuffle}"] = {"keys": keys, "len": len(ds), "repeated": ds.repeated}
    ds = PackedDataset(args["packs"]["1"], None)  # one tar, two DataLoader workers on every rank
    loader = torch.utils.data.DataLoader(ds, batch_size=None, num_workers=2)
    results["1/workers"] = {"keys": [item["key"] for item in loader]}
    gathered: list[Any] = [None] * world
    torch.distributed.all_gather_object(gathered, results)
    if rank == 0:
        Path(args["result"]).write_text(json.dumps(gathered))
    torch.distributed.destroy_process_group()


@pytest.mark.parametrize("world", [2, 4])
def test_every_rank_same_count_disjoint_and_covering(packs: dict[str, Path], world: int, tmp_path: Path) -> None:
    result = tmp_path / "result.json"
    _launch(world, "partition_job", {"packs": {k: str(v) for k, v in packs.items()}, "result": str(result)}, tmp_path)
    ranks = json.loads(result.read_text())
    everything = [item["key"] for item in PackedDataset(packs["1"], None)]
    n = len(everything)
    assert n == 20 and len(set(everything)) == n
    for name in packs:
        assert sorted(item["key"] for item in PackedDataset(packs[name], None)) == sorted(everything)
        orders = {}
        for shuffle in (False, True):
            per = [r[f"{name}/{shuffle}"] for r in ranks]
            counts = {len(p["keys"]) for p in per} | {p["len"] for p in per}
            assert counts == {-(-n // world)}  # the same count on every rank, len() included
            seen = Counter(k for p in per for k in p["keys"])
            assert set(seen) == set(everything)  # together the ranks cover the epoch
            repeats = sum(p["repeated"] for p in per)
            assert repeats == world * -(-n // world) - n and sum(seen.values()) == n + repeats
            assert sum(v - 1 for v in seen.values()) == repeats  # disjoint but for the counted fill
            orders[shuffle] = [k for p in per for k in p["keys"]]
            # the same order on any machine: rebuilt here, per rank, from (seed, epoch)
            for r, p in enumerate(per):
                again = PackedDataset(packs[name], None, rank=r, world_size=world, shuffle=shuffle, seed=7)
                again.set_epoch(1)
                assert [i["key"] for i in again] == p["keys"]
        assert orders[True] != orders[False]
    assert [r["1/workers"]["keys"] for r in ranks] == [r["1/False"]["keys"] for r in ranks]
    shuffled = PackedDataset(packs["3"], None, shuffle=True, seed=7)
    first = [i["key"] for i in shuffled]
    shuffled.set_epoch(2)
    assert sorted(i["key"] for i in shuffled) == sorted(first) and [i["key"] for i in shuffled] != first


def test_index_written_by_pack_equals_the_tar_scan(packs: dict[str, Path]) -> None:
    for tar in sorted(packs["3"].glob("*.tar")) + sorted(packs["1"].glob("*.tar")):
        assert Path(index_path(str(tar))).exists()
        written, scanned = load_index(str(tar)), scan_tar(str(tar))
        assert written.starts.tolist() == scanned.starts.tolist() and written.ends.tolist() == scanned.ends.tolist()
    assert not list(packs["17"].glob("*.index.json"))  # the 17-tar pack was read through the scan


def test_collate_thd_and_padded(packs: dict[str, Path], tiny_vlm_dir: Path) -> None:
    from packer.tokens import IGNORE_INDEX, TokenCounter

    items = list(PackedDataset(packs["3"], TokenCounter(tiny_vlm_dir, max_pixels=MAX_PIXELS)))[:3]
    thd = collate_packed(items)
    lengths = [i["input_ids"].numel() for i in items]
    assert thd["input_ids"].shape == (sum(lengths),) and int(thd["cu_seqlens"][-1]) == sum(lengths)
    assert thd["cu_seqlens"].tolist()[:len(items[0]["cu_seqlens"])] == items[0]["cu_seqlens"].tolist()
    padded = collate_padded(items, pad_id=0)
    assert padded["input_ids"].shape == (3, max(lengths)) and padded["position_ids"].shape == (3, 3, max(lengths))
    for row, (item, n) in enumerate(zip(items, lengths)):
        assert padded["input_ids"][row, :n].tolist() == item["input_ids"].tolist()
        assert int(padded["attention_mask"][row].sum()) == n
        assert (padded["labels"][row, n:] == IGNORE_INDEX).all()
    grids = [i["image_grid_thw"] for i in items if "image_grid_thw" in i]
    if grids:
        assert padded["image_grid_thw"].tolist() == torch.cat(grids).tolist() == thd["image_grid_thw"].tolist()


# --- a training loop killed with kill -9 and restored -----------------------------------------------------


def train_job(path: str) -> None:
    """A DDP-style loop (gradients all-reduced, SGD) of the tiny VLM over the pack; saves every step (model and
    loader state, then ``latest.json`` once every rank has saved), logs each step's sample ids. ``train`` False:
    the same loop reading only (the 4-rank restore)."""
    from torchdata.stateful_dataloader import StatefulDataLoader

    from packer.loader import block_causal_mask

    args = json.loads(Path(path).read_text())
    rank, world = _init()
    ckpt, save = Path(args["ckpt"]), Path(args["save"])
    save.mkdir(exist_ok=True)
    torch.manual_seed(0)
    model, processor = None, None  # read only (the 4-rank restore)
    if args["train"]:
        from transformers import AutoModelForImageTextToText

        from packer.tokens import TokenCounter

        model = AutoModelForImageTextToText.from_pretrained(args["vlm"], attn_implementation="sdpa").train()
        processor = TokenCounter(args["vlm"], max_pixels=MAX_PIXELS)
    ds = PackedDataset(args["shards"], processor, shuffle=True, seed=5, batch_size=BATCH)
    ds.set_epoch(3)
    first = 0
    saved = None
    if args["restore"]:
        first = json.loads((ckpt / "latest.json").read_text())["step"] + 1
        saved = torch.load(ckpt / f"rank{rank % args['saved_world']}-step{first - 1}.pt", weights_only=False)
        if model is not None:
            model.load_state_dict(saved["model"])
        if args["elastic"]:
            ds.load_state_dict(saved["loader"])  # any world size, any workers: the rest is split again
    loader = StatefulDataLoader(ds, batch_size=BATCH, num_workers=2, collate_fn=_collate)
    if saved is not None and not args["elastic"]:
        loader.load_state_dict(saved["loader"])  # torchdata's own path: same ranks and workers
    log = open(args["log"].format(rank=rank), "a", encoding="utf-8")
    for step, batch in enumerate(loader, start=first):
        log.write(json.dumps({"step": step, "ids": batch["ids"], "sequences": batch["sequences"]}) + "\n")
        log.flush()
        if step == args.get("kill_at"):
            time.sleep(300)  # hangs here until killed
        if model is None:
            torch.distributed.barrier()  # the ranks step together
            continue
        loss = model(input_ids=batch["input_ids"][None], labels=batch["labels"][None],
                     position_ids=batch["position_ids"][:, None, :],
                     attention_mask=block_causal_mask(batch["cu_seqlens"]),
                     mm_token_type_ids=batch["mm_token_type_ids"][None], pixel_values=batch.get("pixel_values"),
                     image_grid_thw=batch.get("image_grid_thw")).loss
        loss.backward()
        params = list(model.parameters())
        flat = torch.cat([(p.grad if p.grad is not None else torch.zeros_like(p)).flatten() for p in params])
        torch.distributed.all_reduce(flat)
        with torch.no_grad():
            for p, g in zip(params, torch.split(flat, [p.numel() for p in params])):
                p -= 1e-3 * g.view_as(p) / world
        model.zero_grad()
        tmp = save / f".rank{rank}.tmp"
        torch.save({"loader": loader.state_dict(), "model": model.state_dict()}, tmp)
        os.replace(tmp, save / f"rank{rank}-step{step}.pt")
        torch.distributed.barrier()  # every rank saved this step: it is the latest
        if rank == 0:
            (save / "latest.tmp").write_text(json.dumps({"step": step}))
            os.replace(save / "latest.tmp", save / "latest.json")
    log.close()
    torch.distributed.destroy_process_group()


def _collate(items: list[dict[str, Any]]) -> dict[str, Any]:
    if "meta" in items[0]:  # read only (processor None)
        return {"ids": [i for item in items for i in item["meta"]["ids"]], "sequences": len(items)}
    return collate_packed(items) | {"sequences": len(items)}


def _keys(items: list[dict[str, Any]]) -> list[str]:
    return [item["key"] for item in items]


def _logged(pattern: str, rank: int, *, upto: int | None = None) -> list[str]:
    lines = [json.loads(x) for x in Path(pattern.format(rank=rank)).read_text().splitlines()]
    return [i for x in lines if upto is None or x["step"] <= upto for i in x["ids"]]


def test_training_killed_and_restored_sees_exactly_the_epoch(packs: dict[str, Path], tiny_vlm_dir: Path,
                                                             tmp_path: Path) -> None:
    shards = packs["3"]
    ckpt = tmp_path / "ckpt"
    ckpt.mkdir()
    common = {"vlm": str(tiny_vlm_dir), "shards": str(shards), "ckpt": str(ckpt), "saved_world": 2, "train": True}
    killed = str(tmp_path / "killed-{rank}.jsonl")
    _launch(2, "train_job", {**common, "save": str(ckpt), "log": killed, "restore": False, "kill_at": KILL_AT},
            tmp_path, kill_at_step=killed)
    last = json.loads((ckpt / "latest.json").read_text())["step"]
    assert last == KILL_AT - 1
    same = str(tmp_path / "same-{rank}.jsonl")
    _launch(2, "train_job", {**common, "save": str(tmp_path / "after"), "log": same, "restore": True,
                             "elastic": False}, tmp_path)
    # the uninterrupted epoch of each rank, in order: sample ids of the rank's sequences
    for rank in range(2):
        ds = PackedDataset(shards, None, rank=rank, world_size=2, shuffle=True, seed=5, batch_size=BATCH)
        ds.set_epoch(3)
        expected = [i for item in ds for i in item["meta"]["ids"]]
        got = _logged(killed, rank, upto=last) + _logged(same, rank)
        assert got == expected, rank
    # the same state restored on 4 ranks: with what 2 ranks saw before, every sample exactly once
    wide = str(tmp_path / "wide-{rank}.jsonl")
    _launch(4, "train_job", {**common, "save": str(tmp_path / "wide"), "log": wide, "restore": True, "elastic": True,
                             "train": False}, tmp_path)
    before = [i for r in range(2) for i in _logged(killed, r, upto=last)]
    after = [i for r in range(4) for i in _logged(wide, r)]
    everything = [i for item in PackedDataset(shards, None) for i in item["meta"]["ids"]]
    counts = Counter(before + after)
    assert set(counts) == set(everything) and set(counts.values()) == {1}
    sequences = [sum(json.loads(x)["sequences"] for x in Path(wide.format(rank=r)).read_text().splitlines())
                 for r in range(4)]
    assert sequences == [(20 - 2 * BATCH * KILL_AT) // 4] * 4  # the rest of the epoch, split evenly


# --- in one process: many ranks and workers, drop_last, compute-balanced steps -----------------------------


def test_one_tar_feeds_8_ranks_of_4_workers_and_drop_last(packs: dict[str, Path]) -> None:
    everything = [item["key"] for item in PackedDataset(packs["1"], None)]
    seen = []
    for rank in range(8):
        ds = PackedDataset(packs["1"], None, rank=rank, world_size=8)
        loader = torch.utils.data.DataLoader(ds, batch_size=None, num_workers=4)
        keys = [item["key"] for item in loader]
        assert len(keys) == len(ds) == 3  # ceil(20 / 8), in the rank's order through 4 workers
        assert keys == [item["key"] for item in ds]
        seen += keys
    assert set(seen) == set(everything) and len(seen) == 24
    dropped = [len(PackedDataset(packs["1"], None, rank=r, world_size=8, drop_last=True)) for r in range(8)]
    assert dropped == [2] * 8
    with pytest.raises(ValueError, match="cannot give each of 32 ranks one with drop_last"):
        len(PackedDataset(packs["1"], None, rank=0, world_size=32, drop_last=True))
    assert len(PackedDataset(packs["1"], None, rank=31, world_size=32)) == 1  # 20 sequences still feed 32 ranks


def test_resume_with_other_workers_and_a_plain_loop_state(packs: dict[str, Path]) -> None:
    full = PackedDataset(packs["17"], None, rank=1, world_size=2, shuffle=True, seed=9, batch_size=2)
    order = [item["key"] for item in full]
    loader = torch.utils.data.DataLoader(full, batch_size=2, num_workers=3, collate_fn=lambda b: [i["key"] for i in b])
    delivered = []
    for batch in loader:
        delivered += batch
        if len(delivered) == 4:
            break
    assert delivered == order[:4]  # batches arrive in the rank's order through 3 workers
    state = full.state_at(sequences=4)
    for workers in (0, 2):
        again = PackedDataset(packs["17"], None, rank=1, world_size=2, shuffle=True, seed=9, batch_size=2)
        again.load_state_dict(state)
        again.set_epoch(0)  # the restored epoch: the position stays
        rest = [k for b in torch.utils.data.DataLoader(again, batch_size=2, num_workers=workers,
                                                        collate_fn=lambda b: [i["key"] for i in b]) for k in b]
        assert rest == order[4:] and len(again) == len(order) - 4
        again.set_epoch(1)
        assert len(again) == len(order)  # another epoch starts at its beginning
    # a StatefulDataLoader snapshotting every 3 batches: its state still gives the exact position
    from torchdata.stateful_dataloader import StatefulDataLoader

    sparse = StatefulDataLoader(full, batch_size=2, num_workers=2, collate_fn=_keys, snapshot_every_n_steps=3)
    batches = iter(sparse)
    delivered = [k for _ in range(4) for k in next(batches)]
    again = PackedDataset(packs["17"], None, rank=1, world_size=2, shuffle=True, seed=9, batch_size=2)
    again.load_state_dict(sparse.state_dict())
    assert delivered + [item["key"] for item in again] == order
    other = PackedDataset(packs["3"], None, shuffle=True, seed=8)
    with pytest.raises(ValueError, match="seed 9 \\(here 8\\)"):
        other.load_state_dict(state)


def test_compute_balanced_steps_are_shuffled_whole(sample_data: Path, tiny_vlm_dir: Path, tmp_path: Path) -> None:
    out = tmp_path / "balanced"
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("CURATE_CACHE", str(tmp_path / "cache"))
        pack([sample_data / "records.jsonl", sample_data / "llava.jsonl"], out=out, ctx=CTX, processor=str(tiny_vlm_dir),
             max_pixels=MAX_PIXELS, seed=1, verify_fraction=0.0, plot=False, balance_compute=True, dp=2,
             micro_batches=2)
    ranks = []
    for rank in range(2):
        ds = PackedDataset(out / "shards", None, rank=rank, world_size=2, shuffle=True, seed=4)
        ds.set_epoch(1)
        ranks.append([(item["meta"]["step"], item["meta"]["micro"], item["meta"]["rank"]) for item in ds])
        plain = [(i["meta"]["step"], i["meta"]["micro"]) for i in PackedDataset(out / "shards", None, rank=rank,
                                                                                 world_size=2)]
        assert plain == sorted(plain)  # unshuffled: step order, then micro-batch
        assert sorted((s, m) for s, m, _ in ranks[-1]) == plain and {r for *_, r in ranks[-1]} == {rank}
    steps = [[s for s, _, _ in r] for r in ranks]
    assert steps[0] == steps[1] and steps[0] != sorted(steps[0])  # the same steps together on both ranks, permuted
    for r in ranks:  # a step's micro-batches stay together and in order
        for s in set(steps[0]):
            at = [i for i, x in enumerate(r) if x[0] == s]
            assert at == list(range(at[0], at[0] + len(at))) and [r[i][1] for i in at] == sorted(r[i][1] for i in at)
    # resumed mid-epoch (each rank its own list, 2 workers): the rest of the rank's steps
    ds = PackedDataset(out / "shards", None, rank=1, world_size=2, shuffle=True, seed=4)
    ds.set_epoch(1)
    ds.load_state_dict(ds.state_at(sequences=2))
    rest = [(i["meta"]["step"], i["meta"]["micro"], 1) for i in torch.utils.data.DataLoader(ds, batch_size=None,
                                                                                             num_workers=2)]
    assert rest == ranks[1][2:]
