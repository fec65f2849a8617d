"""curate pack --balance-compute end to end: plan and shard fields, verify, and the loader's ranks."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
import tarfile
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.csv as pacsv
import pyarrow.parquet as pq
import pytest
import torch

from curate.core.errors import UserError
from packer.compute_balance import CostModel, table_components, table_costs
from packer.loader import PackedDataset
from packer.pack import pack
from packer.verify import verify_pack

DP, MICRO = 2, 2


def shard_metas(out: Path) -> list[tuple[str, dict]]:
    import webdataset as wds

    return [(tar.name, json.loads(s["json"])) for tar in sorted((out / "shards").glob("*.tar"))
            for s in wds.WebDataset(str(tar), shardshuffle=False, empty_check=False)]


@pytest.fixture(scope="module")
def balanced(tiny_vlm_dir, sample_data, tmp_path_factory) -> tuple[Path, dict]:
    out = tmp_path_factory.mktemp("balanced") / "out"
    os.environ.setdefault("CURATE_CACHE", str(out.parent / "cache"))
    stats = pack([sample_data / "records.jsonl", sample_data / "llava.jsonl"], out=out, ctx=2048,
                 processor=str(tiny_vlm_dir), seed=5, sequences_per_shard=3, verify_fraction=0.0,
                 balance_compute=True, dp=DP, micro_batches=MICRO)
    return out, stats


def test_plan_and_shards_carry_steps_ranks_and_costs(balanced) -> None:
    out, stats = balanced
    plan = pq.read_table(out / "plan.parquet").to_pydict()
    lengths = pq.read_table(out / "lengths.parquet")
    cost_of = dict(zip(lengths.column("id").to_pylist(), table_costs(lengths, CostModel()).tolist()))
    bal = stats["balance"]
    assert stats["settings"]["balance"]["dp"] == DP and bal["steps"] == -(-stats["bins"] // (DP * MICRO))
    for key in ("token_only", "balanced"):
        assert set(bal["imbalance"][key]) >= {"mean", "p99", "idle_fraction"}
    metas = shard_metas(out)
    assert len(metas) == stats["bins"] == stats["sequences"]
    by_bin: dict[int, list[str]] = {}
    for b, rid in zip(plan["bin"], plan["id"]):
        by_bin.setdefault(b, []).append(rid)
    slots = set()
    for tar, meta in metas:
        b = int(meta["key"])
        assert meta["ids"] == by_bin[b] and sum(meta["tokens"]) <= 2048
        assert meta["cost"] == pytest.approx(sum(cost_of[i] for i in meta["ids"]), rel=1e-9)
        assert (meta["dp"], meta["micro_batches"], meta["steps"]) == (DP, MICRO, bal["steps"])
        slots.add((meta["step"], meta["rank"], meta["micro"]))
        row = plan["bin"].index(b)
        assert (plan["step"][row], plan["rank"][row], plan["micro"][row]) == (meta["step"], meta["rank"], meta["micro"])
    assert len(slots) == len(metas)  # every (step, rank, micro-batch) slot used once
    ranks_per_tar: dict[str, set] = {}
    for tar, meta in metas:
        ranks_per_tar.setdefault(tar, set()).add(meta["rank"])
    assert all(len(r) == 1 for r in ranks_per_tar.values())  # a tar holds one rank
    assert verify_pack(out).ok
    assert (out / "packing.png").stat().st_size > 0


def test_each_rank_reads_its_own_steps_in_order(balanced, tiny_vlm_dir) -> None:
    out, stats = balanced
    metas = [m for _, m in shard_metas(out)]
    everything = [tuple(m["ids"]) for m in metas]
    seen = []
    for rank in range(DP):
        expect = sorted((m for m in metas if m["rank"] == rank), key=lambda m: (m["step"], m["micro"]))
        got = [tuple(item["ids"]) for item in PackedDataset(out / "shards", str(tiny_vlm_dir), rank=rank,
                                                             world_size=DP)]
        assert got == [tuple(m["ids"]) for m in expect]  # step by step, micro-batch by micro-batch
        if rank == DP - 1:
            ds = PackedDataset(out / "shards", str(tiny_vlm_dir), rank=rank, world_size=DP, check=False)
            workers = [tuple(i["ids"]) for i in torch.utils.data.DataLoader(ds, batch_size=None, num_workers=2)]
            assert workers == got  # the DataLoader's worker turns keep the step order
        seen.extend(got)
    assert sorted(seen) == sorted(everything) and len(set(seen)) == len(seen)  # disjoint, every sequence once
    alone = [tuple(i["ids"]) for i in PackedDataset(out / "shards", str(tiny_vlm_dir), check=False)]
    assert alone == everything
    with pytest.raises(ValueError, match="packed for --dp 2"):
        next(iter(PackedDataset(out / "shards", str(tiny_vlm_dir), rank=0, world_size=3)))


def test_verify_catches_a_moved_sequence(balanced, tmp_path) -> None:
    out, _ = balanced
    copy = tmp_path / "copy"
    (copy / "shards").mkdir(parents=True)
    for name in ("stats.json", "plan.parquet", "rejects.parquet"):
        (copy / name).write_bytes((out / name).read_bytes())
    tars = sorted((out / "shards").glob("*.tar"))
    for tar in tars:
        (copy / "shards" / tar.name).write_bytes(tar.read_bytes())
    victim = copy / "shards" / tars[0].name
    with tarfile.open(tars[0]) as tin, tarfile.open(victim, "w", format=tarfile.USTAR_FORMAT) as tout:
        done = False
        for member in tin.getmembers():
            data = tin.extractfile(member).read()
            if member.name.endswith(".json") and not done:
                meta = json.loads(data)
                meta["rank"] = 1 - meta["rank"]
                meta["cost"] *= 0.5
                data = json.dumps(meta).encode()
                member.size = len(data)
                done = True
            tout.addfile(member, io.BytesIO(data))
    problems = " | ".join(verify_pack(copy).problems)
    assert "one rank" in problems and "cost model gives" in problems and "plan.parquet" in problems


def test_plan_only_and_user_errors(balanced, tmp_path) -> None:
    out, _ = balanced
    stats = pack([], out=tmp_path / "p", ctx=2048, lengths=out / "lengths.parquet", plan_only=True,
                 balance_compute=True, dp=3, seed=5)
    plan = pq.read_table(tmp_path / "p" / "plan.parquet")
    assert {"step", "rank", "cost"} <= set(plan.column_names) and "micro" not in plan.column_names
    assert stats["bins"] % 3 == 0 or stats["balance"]["split_bins"] == 0
    again = pack([], out=tmp_path / "q", ctx=2048, lengths=out / "lengths.parquet", plan_only=True,
                 balance_compute=True, dp=3, seed=5)
    assert (tmp_path / "q" / "plan.parquet").read_bytes() == (tmp_path / "p" / "plan.parquet").read_bytes()
    assert again["balance"] == stats["balance"]
    with pytest.raises(UserError, match="needs dp"):
        pack([], out=tmp_path / "e", ctx=2048, lengths=out / "lengths.parquet", plan_only=True, balance_compute=True)
    with pytest.raises(UserError, match="only applies with balance_compute"):
        pack([], out=tmp_path / "e", ctx=2048, lengths=out / "lengths.parquet", plan_only=True, dp=2)
    bad = tmp_path / "cost.yaml"
    bad.write_text("lm_layers: many\n")
    with pytest.raises(UserError, match="cost.yaml.*lm_layers"):
        pack([], out=tmp_path / "e", ctx=2048, lengths=out / "lengths.parquet", plan_only=True,
             balance_compute=True, dp=2, cost_model=bad)
    np.testing.assert_array_less(0, plan.column("cost").to_numpy())


def test_cli_flags(balanced, tmp_path) -> None:
    out, _ = balanced
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    base = [sys.executable, "-m", "curate", "pack", "--lengths", str(out / "lengths.parquet"), "--ctx", "2048",
            "--plan-only"]
    done = subprocess.run([*base, "--out", str(tmp_path / "c"), "--balance-compute", "--dp", "2", "--micro-batches",
                           "2", "--seed", "5"], env=env, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert "step imbalance" in done.stdout + done.stderr
    stats = json.loads((tmp_path / "c" / "stats.json").read_text())
    assert stats["settings"]["balance"]["micro_batches"] == 2 and stats["balance"]["steps"] >= 1
    same = pq.read_table(out / "plan.parquet")  # same lengths, seed, dp and micro-batches: the same plan
    assert pq.read_table(tmp_path / "c" / "plan.parquet").equals(same)
    bad = subprocess.run([*base, "--out", str(tmp_path / "d"), "--dp", "2"], env=env, capture_output=True, text=True)
    assert bad.returncode == 2 and "--dp only applies with --balance-compute" in bad.stderr
    assert "Traceback" not in bad.stderr


def test_a_training_loop_writes_a_timing_log(balanced, tiny_vlm_dir, tmp_path) -> None:
    """TimingLog around forward + backward of the tiny Qwen2-VL on two packed sequences of rank 0."""
    from transformers import AutoModelForImageTextToText

    from packer.loader import block_causal_mask
    from packer.compute_balance import TimingLog

    out, _ = balanced
    model = AutoModelForImageTextToText.from_pretrained(tiny_vlm_dir, attn_implementation="sdpa").train()
    items = []
    with TimingLog(tmp_path / "timings.csv") as log:
        for item in PackedDataset(out / "shards", str(tiny_vlm_dir), rank=0, world_size=DP):
            with log.measure(item, step=len(items)):
                loss = model(input_ids=item["input_ids"][None], labels=item["labels"][None],
                             position_ids=item["position_ids"][:, None, :],
                             attention_mask=block_causal_mask(item["cu_seqlens"]),
                             mm_token_type_ids=item["mm_token_type_ids"][None], pixel_values=item.get("pixel_values"),
                             image_grid_thw=item.get("image_grid_thw")).loss
                loss.backward()
            model.zero_grad(set_to_none=True)
            items.append(item)
            if len(items) == 2:
                break
    rows = pacsv.read_csv(tmp_path / "timings.csv").to_pylist()
    assert len(rows) == 2
    for i, (row, item) in enumerate(zip(rows, items)):
        tokens = np.diff(item["cu_seqlens"].numpy()).astype(float)
        grids = item["image_grid_thw"].numpy() if item.get("image_grid_thw") is not None else np.zeros((0, 3))
        patches = grids.prod(axis=1).astype(float)
        assert (row["tokens"], row["tokens_sq"]) == (tokens.sum(), (tokens ** 2).sum())
        assert (row["patches"], row["patches_sq"]) == (patches.sum(), (patches ** 2).sum())
        assert row["seconds"] > 0 and row["sequences"] == 1 and row["step"] == i
    assert any(row["patches"] > 0 for row in rows) or not any(i.get("image_grid_thw") is not None for i in items)


def test_pack_fits_a_timing_log(balanced, tiny_vlm_dir, sample_data, tmp_path) -> None:
    """--cost-model LOG.csv: coefficients fitted, plan costs in seconds, verify recomputes them."""
    out, _ = balanced
    lengths = pq.read_table(out / "lengths.parquet")
    rng = np.random.default_rng(0)
    comps = table_components(lengths)
    true = np.array([3e-5, 2e-9, 1e-5, 4e-9])
    rows = rng.choice(comps.shape[0], (40, 3))  # sequences of three samples each
    sums = comps[rows].sum(axis=1)
    log = tmp_path / "timings.csv"
    pacsv.write_csv(pa.table({**dict(zip(("tokens", "tokens_sq", "patches", "patches_sq"), sums.T)),
                              "seconds": sums @ true + 0.002}), log)
    stats = pack([], out=tmp_path / "p", ctx=2048, lengths=out / "lengths.parquet", plan_only=True,
                 balance_compute=True, dp=DP, seed=5, cost_model=log)
    fit = stats["balance"]["calibration"]
    assert fit["rows"] == 40 and fit["rms_relative_error"] < 1e-6 and fit["file"] == str(log)
    fitted = CostModel(**stats["settings"]["balance"]["cost_model"])
    assert fitted.fitted and np.allclose(fitted.coefficients(), true, rtol=1e-6)
    plan = pq.read_table(tmp_path / "p" / "plan.parquet").to_pydict()
    cost_of = dict(zip(lengths.column("id").to_pylist(), table_costs(lengths, fitted).tolist()))
    by_bin: dict[int, float] = {}
    for b, rid in zip(plan["bin"], plan["id"]):
        by_bin[b] = by_bin.get(b, 0.0) + cost_of[rid]
    for b, cost in zip(plan["bin"], plan["cost"]):
        assert cost == pytest.approx(by_bin[b], rel=1e-9)  # seconds of the fitted model, bin by bin
    shards = tmp_path / "shards"  # written and verified: verify prices every sequence with the fitted model again
    pack([sample_data / "records.jsonl"], out=shards, ctx=2048, processor=str(tiny_vlm_dir), seed=5,
         sequences_per_shard=4, verify_fraction=0.0, balance_compute=True, dp=DP, cost_model=log)
    assert verify_pack(shards).ok
    assert {m["cost"] > 0 for _, m in shard_metas(shards)} == {True}
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    done = subprocess.run([sys.executable, "-m", "curate", "pack", "--lengths", str(out / "lengths.parquet"), "--ctx",
                           "2048", "--plan-only", "--out", str(tmp_path / "c"), "--balance-compute", "--dp", "2",
                           "--cost-model", str(log), "--step-mix", "2"], env=env, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    said = done.stdout + done.stderr
    assert "cost model fitted to 40 timings" in said and "other cost models" in said and "image-token share" in said
    cli = json.loads((tmp_path / "c" / "stats.json").read_text())
    assert cli["settings"]["balance"]["step_mix"] == 2 and cli["balance"]["step_mix"] == 2
    with pytest.raises(UserError, match="step_mix only applies with balance_compute"):
        pack([], out=tmp_path / "d", ctx=2048, lengths=out / "lengths.parquet", plan_only=True, step_mix=2)
    short = tmp_path / "short.csv"
    short.write_text("tokens,tokens_sq,patches,patches_sq,seconds\n1,1,0,0,0.5\n")
    with pytest.raises(UserError, match="short.csv: 1 rows"):
        pack([], out=tmp_path / "e", ctx=2048, lengths=out / "lengths.parquet", plan_only=True,
             balance_compute=True, dp=2, cost_model=short)
