"""curate pack end to end on the generated sample data: shards read back with webdataset."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest
import webdataset as wds

from curate.core.errors import UserError
from curate.executors import get_executor
from curate.core.records import BadRecord, read_records
from packer.pack import pack
from packer.verify import verify_pack


@pytest.fixture(autouse=True)
def private_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CURATE_CACHE", str(tmp_path / "cache"))


def read_shards(out: Path) -> list[dict]:
    items = []
    for tar in sorted((out / "shards").glob("*.tar")):
        for sample in wds.WebDataset(str(tar), shardshuffle=False, empty_check=False):
            meta = json.loads(sample["json"])
            meta["_members"] = {k: v for k, v in sample.items() if not k.startswith("__") and k != "json"}
            meta["_key"] = sample["__key__"]
            items.append(meta)
    return items


def inputs(sample_data: Path) -> list[Path]:
    return [sample_data / "records.jsonl", sample_data / "llava.jsonl", sample_data / "captions.jsonl"]


@pytest.fixture(scope="module")
def packed(tiny_processor_dir, sample_data, tmp_path_factory) -> tuple[Path, dict]:
    out = tmp_path_factory.mktemp("pack") / "out"
    os.environ["CURATE_CACHE"] = str(out.parent / "cache")
    stats = pack(inputs(sample_data), out=out, ctx=2048, processor=str(tiny_processor_dir), seed=3,
                 shard_size=25, sequences_per_shard=4, verify_fraction=1.0)
    return out, stats


def test_every_record_is_packed_or_listed(packed, sample_data) -> None:
    out, stats = packed
    records = [r for r in read_records(inputs(sample_data))]
    good = [r for r in records if not isinstance(r, BadRecord)]
    assert stats["records_in"] == len(records)
    assert stats["records_in"] == stats["records_packed"] + sum(stats["dropped"].values()) + sum(stats["errored"].values())
    seqs = read_shards(out)
    packed_ids = [i for s in seqs for i in s["ids"]]
    rejects = pq.read_table(out / "rejects.parquet").to_pylist()
    assert len(packed_ids) == len(set(packed_ids)) == stats["records_packed"]
    assert sorted(packed_ids + [r["id"] for r in rejects]) == sorted(r.id if isinstance(r, BadRecord) else r["id"]
                                                                    for r in records)
    assert stats["sequences"] == len(seqs) == stats["bins"]
    # ids with dots, slashes, spaces and non-ASCII characters round-trip through the tar
    odd = [r["id"] for r in good if any(c in r["id"] for c in "./ ") or not r["id"].isascii()]
    assert odd and set(odd) <= set(packed_ids) | {r["id"] for r in rejects}
    by_id = {r["id"]: r for r in good}
    for seq in seqs:
        cu = seq["cu_seqlens"]
        assert cu[0] == 0 and np.diff(cu).tolist() == seq["tokens"] and cu[-1] <= 2048
        # original image bytes, not re-encoded, in sample order
        paths = [p for rid in seq["ids"] for p in by_id[rid]["images"]]
        assert [seq["_members"][m] for m in seq["image_members"]] == [Path(p).read_bytes() for p in paths]
        assert seq["messages"] == [by_id[rid]["messages"] for rid in seq["ids"]]


def test_stats_figures_are_consistent(packed) -> None:
    out, stats = packed
    lengths = pq.read_table(out / "lengths.parquet").to_pydict()
    tokens = dict(zip(lengths["id"], lengths["tokens"]))
    plan = pq.read_table(out / "plan.parquet").to_pydict()
    packed_tokens = sum(tokens[i] for i in plan["id"])
    assert stats["lower_bound_bins"] == -(-packed_tokens // 2048)
    assert stats["bins"] >= stats["lower_bound_bins"]
    assert stats["fill_ratio"] == pytest.approx(packed_tokens / (stats["bins"] * 2048))
    assert stats["verified_records"] == len(lengths["id"])  # verify_fraction 1.0: the full processor agreed on all
    assert set(stats["per_source"]) >= {"coyo", "laion"} or len(stats["per_source"]) >= 2
    assert (out / "packing.png").stat().st_size > 10_000
    report = verify_pack(out)
    assert report.ok, report.problems
    assert report.records == stats["records_packed"] and report.recounted > 0


def test_too_long_records_are_listed_not_truncated(tiny_processor_dir, sample_data, tmp_path) -> None:
    stats = pack([sample_data / "records.jsonl"], out=tmp_path / "o", ctx=300, processor=str(tiny_processor_dir),
                 verify_fraction=0.0)
    lengths = pq.read_table(tmp_path / "o" / "lengths.parquet").to_pydict()
    too_long = {i for i, t in zip(lengths["id"], lengths["tokens"]) if t > 300}
    assert too_long and stats["dropped"]["too_long"] == len(too_long)
    rejects = pq.read_table(tmp_path / "o" / "rejects.parquet").to_pylist()
    assert {r["id"] for r in rejects if r["reason"] == "too_long"} == too_long
    assert all(max(s["cu_seqlens"]) <= 300 for s in read_shards(tmp_path / "o"))


def test_bad_inputs_are_recorded_with_their_reasons(tiny_processor_dir, sample_data, tmp_path) -> None:
    expected = json.loads((sample_data / "bad" / "EXPECTED.json").read_text())
    stats = pack([sample_data / "bad" / "records.jsonl", sample_data / "bad" / "empty.jsonl"], out=tmp_path / "b",
                 ctx=8192, processor=str(tiny_processor_dir), verify_fraction=1.0)
    rejects = pq.read_table(tmp_path / "b" / "rejects.parquet").to_pylist()
    packed_ids = {i for s in read_shards(tmp_path / "b") for i in s["ids"]}
    by_reason = {}
    for r in rejects:
        by_reason.setdefault(r["reason"], []).append(r)
    for line in expected["lines"]:
        if line["expect"] == "ok":
            assert line["id"] in packed_ids, line
        elif line["expect"] == "error":
            hits = by_reason.get(line["reason_hint"], [])
            assert hits, line
            if line["id"] and line["reason_hint"] != "duplicate_id":
                assert any(r["id"] == line["id"] for r in hits), line
    assert stats["records_in"] == sum(1 for x in expected["lines"] if x["expect"] != "skip")
    assert stats["records_in"] == stats["records_packed"] + sum(stats["errored"].values()) + sum(stats["dropped"].values())


@pytest.mark.slow
def test_same_seed_same_bytes_whatever_the_workers(packed, tiny_processor_dir, sample_data, tmp_path) -> None:
    out, _ = packed
    again = pack(inputs(sample_data), out=tmp_path / "w2", ctx=2048, processor=str(tiny_processor_dir), seed=3,
                 shard_size=25, sequences_per_shard=4, verify_fraction=0.0, workers=2,
                 executor=get_executor("local", workers=2))
    assert again["bins"] > 0
    for name in ["plan.parquet", "lengths.parquet", *[f"shards/{p.name}" for p in (out / "shards").glob("*.tar")]]:
        assert (out / name).read_bytes() == (tmp_path / "w2" / name).read_bytes(), name
    other = pack(inputs(sample_data), out=tmp_path / "s4", ctx=2048, processor=str(tiny_processor_dir), seed=4,
                 shard_size=25, sequences_per_shard=4, verify_fraction=0.0)
    assert pq.read_table(tmp_path / "s4" / "plan.parquet")["id"].to_pylist() != \
        pq.read_table(out / "plan.parquet")["id"].to_pylist()
    assert other["bins"] == again["bins"]


@pytest.mark.slow
def test_forked_workers_run_the_processor_check_and_count_the_same(tiny_processor_dir, sample_data, tmp_path) -> None:
    # Workers forked from a driver that loaded the processor (torch imported, never run) run the full
    # processor on every record and count exactly what one process counts.
    settings = dict(ctx=2048, processor=str(tiny_processor_dir), plan_only=True, shard_size=10, verify_sample=10_000)
    one = pack([sample_data / "llava.jsonl"], out=tmp_path / "one", **settings)
    two = pack([sample_data / "llava.jsonl"], out=tmp_path / "two", workers=2,
               executor=get_executor("local", workers=2), **settings)
    assert two["verified_records"] == one["verified_records"] == one["records_packed"] > 10
    for name in ("lengths.parquet", "plan.parquet"):
        assert (tmp_path / "one" / name).read_bytes() == (tmp_path / "two" / name).read_bytes(), name


def test_lengths_are_reused_at_another_ctx(packed, sample_data, tmp_path, tiny_processor_dir) -> None:
    out, _ = packed
    # plan-only from a lengths file: no processor, no images
    stats = pack([], out=tmp_path / "p", ctx=4096, lengths=out / "lengths.parquet", plan_only=True)
    assert (tmp_path / "p" / "plan.parquet").exists() and not (tmp_path / "p" / "shards").exists()
    assert stats["lower_bound_bins"] == -(-stats["packed_tokens"] // 4096)
    # shards at another ctx with the counted lengths: every text count reused (the processor of the
    # earlier run, from its stats.json), image headers read again, nothing ignored
    again = pack(inputs(sample_data), out=tmp_path / "c", ctx=4096, lengths=out / "lengths.parquet")
    reuse = again["lengths_reuse"]
    assert reuse["text_counts_reused"] == reuse["records_in_lengths"] and reuse["ignored"] == reuse["counted"] == 0
    assert again["bins"] == stats["bins"] and verify_pack(tmp_path / "c").ok
    with pytest.raises(UserError, match="was packed at ctx 2048"):  # the folder's own ctx, before any counting
        pack(inputs(sample_data), out=out, ctx=4096, processor=str(tiny_processor_dir))


def test_auto_reuse_of_counted_lengths(tiny_processor_dir, sample_data, tmp_path) -> None:
    first = pack([sample_data / "llava.jsonl"], out=tmp_path / "a", ctx=2048, processor=str(tiny_processor_dir))
    second = pack([sample_data / "llava.jsonl"], out=tmp_path / "b", ctx=1024, processor=str(tiny_processor_dir))
    markers = [json.loads(p.read_text()) for p in (tmp_path / "b" / "_shards" / "lengths").glob("0*.json")]
    reused = sum(m["stats"].get("extra", {}).get("text_counts_reused", 0) for m in markers)
    assert reused == first["records_in"] - sum(first["errored"].values())  # no text tokenized again
    assert pq.read_table(tmp_path / "b" / "lengths.parquet").equals(pq.read_table(tmp_path / "a" / "lengths.parquet"))
    assert second["records_in"] == first["records_in"] and second["settings"]["ctx"] == 1024
    assert verify_pack(tmp_path / "b").ok and not (tmp_path / "b" / "_reuse").exists()  # workers' index removed


def test_user_errors(tmp_path) -> None:
    with pytest.raises(UserError, match="processor"):
        pack([tmp_path / "x.jsonl"], out=tmp_path / "o", ctx=10)
    with pytest.raises(UserError, match="ctx"):
        pack([], out=tmp_path / "o", ctx=0, lengths=tmp_path / "l.parquet", plan_only=True)
    with pytest.raises(UserError, match="no such file"):
        pack([], out=tmp_path / "o", ctx=10, lengths=tmp_path / "l.parquet", plan_only=True)


def test_exact_mode_counts_like_the_header_rule(tiny_processor_dir, sample_data, tmp_path) -> None:
    """--exact runs the full processor on every record; the Qwen2-VL header rule gives the same lengths."""
    header = pack([sample_data / "llava.jsonl"], out=tmp_path / "h", ctx=8192, processor=str(tiny_processor_dir),
                  verify_fraction=0.0, plan_only=True)
    exact = pack([sample_data / "llava.jsonl"], out=tmp_path / "e", ctx=8192, processor=str(tiny_processor_dir),
                 exact=True, plan_only=True)
    a = pq.read_table(tmp_path / "h" / "lengths.parquet").to_pydict()
    b = pq.read_table(tmp_path / "e" / "lengths.parquet").to_pydict()
    assert a["id"] == b["id"] and a["tokens"] == b["tokens"] and a["image_grids"] == b["image_grids"]
    assert exact["verified_records"] == exact["records_in"] and header["verified_records"] == 0


def test_verify_in_parallel_equals_serial(packed, tmp_path) -> None:
    out, stats = packed
    copy = tmp_path / "copy"
    shutil.copytree(out, copy)
    tars = sorted((copy / "shards").glob("*.tar"))
    shutil.copy(tars[0], copy / "shards" / "zzzzzz.tar")  # the same sequences twice
    serial, parallel = (verify_pack(copy, sample=10, workers=w) for w in (1, 2))
    assert serial.problems == parallel.problems and serial.recounted == parallel.recounted == 10
    assert (serial.shards, serial.sequences, serial.records, serial.images) == \
        (parallel.shards, parallel.sequences, parallel.records, parallel.images) != (0, 0, 0, 0)
    text = " | ".join(serial.problems)
    assert "appear more than once" in text and "not unique and increasing" in text and "stats.json says" in text
    assert serial.records > stats["records_packed"] and not (copy / ".verify").exists()


def test_verify_reports_a_cut_tar_and_a_broken_image(packed, tmp_path) -> None:
    """verify reads every tar once and proves every image decodes: a tar cut short and an image that no longer
    decodes are problems with their place (the tar, the sequence, the image, the sample), never a crash."""
    import tarfile

    out, _ = packed
    copy = tmp_path / "copy"
    shutil.copytree(out, copy)
    tars = sorted((copy / "shards").glob("*.tar"))
    clean = verify_pack(copy, sample=0)
    assert clean.ok and clean.images > 0, clean.problems[:3]
    with tarfile.open(tars[0]) as tar:
        member = next(m for m in tar.getmembers() if m.name.endswith(".jpg"))
    data = bytearray(tars[0].read_bytes())
    data[member.offset_data:member.offset_data + 16] = b"not a JPEG now!!"  # the loader could not decode it
    tars[0].write_bytes(bytes(data))
    tars[1].write_bytes(tars[1].read_bytes()[:tars[1].stat().st_size // 2])
    for workers in (1, 2):
        report = verify_pack(copy, sample=0, workers=workers)
        text = " | ".join(report.problems)
        assert not report.ok and f"{tars[1].name}: unreadable after " in text, text
        key, _, ext = member.name.partition(".")
        assert f"{tars[0].name}:{key}: image {ext} of sample " in text and "does not decode" in text, text
        assert report.sequences < clean.sequences  # the cut tar's sequences before the cut are checked


def test_pack_reads_images_from_the_image_root(tiny_processor_dir, sample_data, tmp_path) -> None:
    """``pack --image-root``: LLaVA-style annotations apart from their images are counted and packed with them."""
    from tests.curate.core.test_image_root import llava_tree

    ann, root, names = llava_tree(tmp_path, sample_data / "images")
    stats = pack([ann], out=tmp_path / "p", ctx=2048, processor=str(tiny_processor_dir), image_root=root, plot=False)
    assert stats["records_packed"] == stats["records_in"] == len(names) + 1 and not stats["errored"]
    report = verify_pack(tmp_path / "p", sample=len(names) + 1)
    assert report.ok and report.images == len(names) + 1 and report.recounted == len(names) + 1
    plain = pack([ann], out=tmp_path / "q", ctx=2048, processor=str(tiny_processor_dir), plan_only=True, plot=False)
    assert plain["records_packed"] == 1 and plain["errored"] == {"missing_image": len(names)}
