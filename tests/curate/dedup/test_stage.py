"""``curate dedup`` on a world of real photos with planted copies: reasons, duplicate_of, accounting, records
written back, --prefer, --against, semantic duplicates, determinism and resume after SIGKILL."""

from __future__ import annotations

import json
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from curate.core.records import BadRecord, read_records
from curate.core.stats import reject_schema
from curate.dedup.stage import dedup
from tests._fixtures.dedup import SAME_BYTES, same_files

EXACT_EDITS = {"png", "same_bytes"}


@pytest.fixture(scope="module")
def plain_run(dedup_world, tmp_path_factory) -> Path:
    """The world deduplicated with the defaults (shards of 7 records, so several)."""
    out = tmp_path_factory.mktemp("dedup") / "out"
    dedup(list(dedup_world.inputs), out=out, shard_size=7)
    return out


def _rejects(out: Path) -> dict[str, dict]:
    return {r["id"]: r for r in pq.read_table(out / "rejects.parquet").to_pylist()}


def _kept_ids(out: Path) -> list[str]:
    return sorted(r["id"] for r in read_records([out / "records"]) if not isinstance(r, BadRecord))


def test_every_planted_group_keeps_one_record_and_names_it(dedup_world, plain_run) -> None:
    rejects = _rejects(plain_run)
    kept = set(_kept_ids(plain_run))
    members: dict[str, list[str]] = {}
    for rid, group in dedup_world.groups.items():
        members.setdefault(group, []).append(rid)
    for group, ids in members.items():
        survivors = [i for i in ids if i in kept]
        assert len(survivors) == 1, (group, ids, survivors)
        for rid in ids:
            if rid in rejects:
                assert rejects[rid]["duplicate_of"] == survivors[0], rejects[rid]
    for copy, edit in dedup_world.edits.items():
        original = dedup_world.groups[copy]
        removed = copy if copy in rejects else original
        expected = "exact_duplicate" if edit in EXACT_EDITS else "near_duplicate"
        assert rejects[removed]["reason"] == expected, (edit, rejects[removed])
    # same bytes: the parquet row carrying web-00003's file bytes (its group keeps one of three)
    assert any("same bytes" in r["detail"] for r in rejects.values())
    # the two neighbouring crops are distinct: both kept
    assert {"crop-0", "crop-1", "obelics-1"} <= kept


def test_accounting_and_the_records_written_back(dedup_world, plain_run) -> None:
    stats = json.loads((plain_run / "stats.json").read_text())
    assert stats["stage"] == "dedup"
    for entry in [stats, *stats["per_source"].values()]:
        assert entry["records_in"] == entry["records_out"] + sum(entry["dropped"].values()) + sum(entry["errored"].values())
    assert stats["errored"] == {"missing_image": 1}
    assert stats["records_in"] == len(dedup_world.groups) + 2
    kept = _kept_ids(plain_run)
    assert len(kept) == stats["records_out"] and dedup_world.no_image in kept
    rejects = pq.read_table(plain_run / "rejects.parquet")
    assert rejects.schema.names[:len(reject_schema())] == reject_schema().names
    assert {"duplicate_of", "distance"} <= set(rejects.schema.names)
    assert sorted(set(kept) | set(rejects.column("id").to_pylist())) == sorted([*dedup_world.groups, "no-image",
                                                                               "missing"])
    removed = rejects.filter(pa.compute.equal(rejects.column("kind"), "dropped")).to_pylist()
    d = stats["duplicates"]
    assert d["exact_same_bytes"] + d["exact_same_pixels"] + d["near"] == len(removed)
    assert sum(int(v) for v in stats["near_bits"].values()) == d["near"]
    assert all(r["distance"] <= 8 for r in removed)
    # the kept records keep their layout and point at their images from the new folder
    back = json.loads((plain_run / "records" / "extra.jsonl").read_text().splitlines()[0])
    assert (plain_run / "records" / back["image"]).is_file()
    written = pq.read_table(plain_run / "records" / "bytes.parquet")  # the input's schema: bytes stay bytes
    assert written.schema == pq.read_schema(dedup_world.root / "bytes.parquet")
    assert {r["id"] for r in written.to_pylist()} == {i for i in kept if i.startswith("obelics")}


def test_the_report_rejects_page_reads_the_dedup_rejects(plain_run, tmp_path) -> None:
    from curate.report import write_report

    index = write_report(plain_run)
    page = (index.parent / "stage.html").read_text()
    assert "Duplicate clusters" in page and "Dropped and errored records" in page
    rejects = _rejects(plain_run)
    kept = next(r["duplicate_of"] for r in rejects.values() if r["reason"] == "near_duplicate")
    assert f"<code>{kept}</code>" in page
    assert len(list((index.parent / "assets").glob("t-*.jpg"))) >= 4


def test_prefer_keeps_the_named_source_first(dedup_world, tmp_path) -> None:
    out = tmp_path / "out"
    dedup(list(dedup_world.inputs), out=out, prefer=("copies-half",), write_records=False)
    rejects = _rejects(out)
    halves = [c for c, e in dedup_world.edits.items() if e == "half"]
    assert halves
    for copy in halves:  # smaller than its original, kept all the same
        assert copy not in rejects and rejects[dedup_world.groups[copy]]["duplicate_of"] == copy
    assert not (out / "records").exists()


def test_benchmark_overlap(dedup_world, tmp_path) -> None:
    from curate.fixtures.dupes import EDITS

    bench = tmp_path / "bench"
    (bench / "mmmu").mkdir(parents=True)
    rng = np.random.default_rng(0)
    near, _ = EDITS["half"]((dedup_world.root / "images" / "web-00001.jpg").read_bytes(), rng)
    (bench / "mmmu" / "q1.jpg").write_bytes(near)
    (bench / "mmmu" / "test.jsonl").write_text(json.dumps({"id": "mmmu-1", "image": "q1.jpg", "caption": "q"}) + "\n")
    exact = (dedup_world.root / "images" / "web-00005.jpg").read_bytes()
    pq.write_table(pa.table({"id": ["cqa-7"], "image": [{"bytes": exact, "path": None}], "question": ["?"],
                             "answer": ["4"]}), bench / "chartqa.parquet")
    out = tmp_path / "out"
    stats = dedup([dedup_world.root / "records.jsonl"], out=out, against=(bench / "mmmu", bench / "chartqa.parquet"),
                  write_records=False)
    rejects = _rejects(out)
    overlap = {rid: r for rid, r in rejects.items() if r["reason"] == "benchmark_overlap"}
    group = {rid for rid, g in dedup_world.groups.items() if g in ("web-00001", "web-00005") and rid in
             {r["id"] for r in read_records([dedup_world.root / "records.jsonl"]) if not isinstance(r, BadRecord)}}
    assert set(overlap) == group  # the originals and their copies alike
    for rid, r in overlap.items():
        assert r["duplicate_of"] == ("mmmu-1" if dedup_world.groups[rid] == "web-00001" else "cqa-7")
    b = stats["benchmark_overlap"]
    assert b["records"] == len(group) and sum(b["by_benchmark"].values()) == len(group)
    assert set(b["by_benchmark"]) == {"mmmu", "chartqa"} and sum(b["by_source"].values()) == len(group)
    assert b["references"]["hashed"] == 2


def test_semantic_duplicates_from_embeddings(dedup_world, tmp_path) -> None:
    ids = ["crop-0", "crop-1", "obelics-1", "web-00000"]
    rng = np.random.default_rng(1)
    vecs = rng.normal(size=(4, 16)).astype(np.float32)
    vecs[1] = vecs[0] + 0.05 * rng.normal(size=16)  # crop-1 means what crop-0 means
    vecs /= np.linalg.norm(vecs, axis=1, keepdims=True)
    emb = tmp_path / "emb" / "embeddings"
    emb.mkdir(parents=True)
    np.save(emb / "000000.npy", vecs.astype(np.float16))
    pq.write_table(pa.table({"id": ids, "source": ["crops", "crops", "obelics", "web"]}), emb / "000000.ids.parquet")
    out = tmp_path / "out"
    stats = dedup(list(dedup_world.inputs), out=out, near=False, embeddings=tmp_path / "emb", write_records=False)
    rejects = _rejects(out)
    semantic = {rid: r for rid, r in rejects.items() if r["reason"] == "semantic_duplicate"}
    from PIL import Image

    area = {c: np.prod(Image.open(dedup_world.root / "images" / f"{c}.jpg").size) for c in ("crop-0", "crop-1")}
    keeper = max(area, key=lambda c: (area[c], -int(c[-1])))  # the largest image, then the smaller id
    other = ({"crop-0", "crop-1"} - {keeper}).pop()
    assert set(semantic) == {other} and semantic[other]["duplicate_of"] == keeper
    cos = float(vecs[0].astype(np.float16).astype(np.float32) @ vecs[1].astype(np.float16).astype(np.float32))
    assert semantic[other]["distance"] == pytest.approx(1 - cos, abs=2e-3)
    assert stats["duplicates"]["semantic"] == 1 and stats["duplicates"]["near"] == 0


def _without_timings(path: Path) -> dict:
    stats = json.loads(path.read_text())
    stats.pop("timings", None)  # none since wall times moved to history.json
    stats.pop("command")
    return stats


def test_resume_after_sigkill_gives_the_same_bytes(dedup_world, plain_run, tmp_path) -> None:
    out = tmp_path / "out"
    cmd = [sys.executable, "-m", "curate", "dedup", *map(str, dedup_world.inputs), "--shard-size", "2",
           "--search-block", "8", "--decode-threads", "1", "--out", str(out)]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    markers = out / "_shards" / "dedup_hash"
    deadline = time.time() + 120
    while time.time() < deadline and proc.poll() is None:
        if markers.exists() and any(p.name[0].isdigit() and not p.name.endswith("rejects.parquet")
                                    for p in markers.iterdir()):
            proc.send_signal(signal.SIGKILL)
            break
        time.sleep(0.005)
    proc.wait()
    assert proc.returncode == -signal.SIGKILL, "dedup finished before it could be killed"
    assert not (out / "stats.json").exists()
    done = len([p for p in markers.glob("0*.json")])
    dedup(list(dedup_world.inputs), out=out, shard_size=2, search_block=8)
    reference = tmp_path / "reference"  # uninterrupted, in two worker processes
    from curate.executors import get_executor

    dedup(list(dedup_world.inputs), out=reference, shard_size=2, search_block=8,
          executor=get_executor("local", workers=2))
    assert same_files(reference, out) >= len(SAME_BYTES)
    # the shards' markers too: a worker of the killed run, still writing as the rerun began, marked its shard done
    # listing only the files written after the rerun removed its work folder (the rerun then missed the others)
    assert same_files(reference, out, ("_shards/*/0*.json", "_shards/*/settings.json")) > 1
    assert _without_timings(reference / "stats.json") == _without_timings(out / "stats.json")
    assert done >= 1
    # another shard size gives other shard files, but the same decisions
    assert same_files(plain_run, out, ("rejects.parquet", "records/*")) >= 2


def test_rerun_with_other_settings_is_refused(dedup_world, plain_run, tmp_path) -> None:
    from curate.core.errors import UserError

    copy = tmp_path / "copy"
    shutil.copytree(plain_run, copy, ignore=shutil.ignore_patterns("report"))
    with pytest.raises(UserError, match="other settings"):
        dedup(list(dedup_world.inputs), out=copy, shard_size=7, near_threshold=4)


def test_pixel_digests_only_where_a_near_pair_needs_them(dedup_world, plain_run) -> None:
    """Hashing decodes a JPEG at a reduced scale and digests no pixels; the full decode and pixel digest run only
    for the records within a few bits of another with other bytes (the planted groups), and still find the same
    pixels in another encoding (the ``png`` edit: ``exact_duplicate``, checked above)."""
    digested = [rid for f in sorted((plain_run / "digests").glob("*.parquet"))
                for rid in pq.read_table(f).column("id").to_pylist()]
    assert len(digested) == len(set(digested)) > 0
    members: dict[str, int] = {}
    for group in dedup_world.groups.values():
        members[group] = members.get(group, 0) + 1
    in_groups = {rid for rid, group in dedup_world.groups.items() if members[group] > 1}
    assert set(digested) <= in_groups, set(digested) - in_groups
    png_copies = {rid for rid, edit in dedup_world.edits.items() if edit == "png"}
    assert png_copies and png_copies <= set(digested)
    hashed = pa.concat_tables([pq.read_table(f) for f in sorted((plain_run / "hashes").glob("*.parquet"))])
    assert hashed.column("pixel_key").null_count == hashed.num_rows  # the hash step digests no pixels
