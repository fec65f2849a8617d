"""Hostile records through the real CLI (issue 36): one record never stops, hangs or sinks a run.

The records file of ``hostile_records`` (tests/_fixtures/hostile.py) holds three good records and, one per line, an
image that is a FIFO, ``/dev/zero``, a symlink to it or to ``/dev/urandom``, a path with a NUL, a symlink loop, a
5,000-character path, a record of 1,000 images, a 5,000-digit integer, JSON nested 100,000 deep, a lone surrogate
and a processor special token in user text. ``pack``, ``embed`` and ``recaption`` run on it as a child process
group under a time limit and an address-space limit, and its peak memory is checked: each hostile record is
errored with its reason, the good ones are processed, the exit code is 0 and no traceback reaches the terminal.
"""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from curate.cli import main
from tests._fixtures.hostile import PEAK_RSS, HostileRecords, run_limited


def _rejects(out: Path) -> dict[str, str]:
    return {r["id"]: r["reason"] for r in pq.read_table(out / "rejects.parquet").to_pylist()}


def _check_run(code: int, err: str, peak: int, out: Path, expected: dict[str, str], good: list[str]) -> dict:
    assert code == 0, err[-3000:]
    assert "Traceback" not in err, err[-3000:]
    assert peak < PEAK_RSS, f"peak resident memory {peak / 2**30:.2f} GiB"
    stats = json.loads((out / "stats.json").read_text())
    rejects = _rejects(out)
    for rid, reason in expected.items():
        assert rejects.get(rid) == reason, (rid, rejects.get(rid), reason)
    assert not set(good) & set(rejects), rejects
    assert stats["records_in"] == len(expected) + len(good)
    return stats


def test_pack_errors_each_hostile_record_and_packs_the_rest(hostile_records: HostileRecords, tiny_processor_dir: Path,
                                                            tmp_path: Path) -> None:
    out = tmp_path / "packed"
    code, err, peak = run_limited(["pack", str(hostile_records.records), "--processor", str(tiny_processor_dir),
                                   "--ctx", "4096", "--out", str(out)], tmp_path)
    expected = {**hostile_records.reasons, hostile_records.special: "special_token"}
    stats = _check_run(code, err, peak, out, expected, list(hostile_records.good))
    assert stats["records_packed"] == len(hostile_records.good)  # the default processor check ran on them
    packed = set(pq.read_table(out / "plan.parquet").column("id").to_pylist())
    assert packed == set(hostile_records.good)  # the special token's record never reaches the loader


def test_embed_errors_each_hostile_record_and_embeds_the_rest(hostile_records: HostileRecords, tiny_clip_spec: str,
                                                              tmp_path: Path) -> None:
    out = tmp_path / "emb"
    code, err, peak = run_limited(["embed", str(hostile_records.records), "--model", tiny_clip_spec,
                                   "--out", str(out)], tmp_path)
    stats = _check_run(code, err, peak, out, hostile_records.reasons,
                       [*hostile_records.good, hostile_records.special])  # no processor: its text is only text
    assert stats["records_embedded"] == len(hostile_records.good) + 1


def test_recaption_errors_each_hostile_record_before_asking(hostile_records: HostileRecords, tmp_path: Path) -> None:
    answers = tmp_path / "answers.jsonl"
    answers.write_text("".join(json.dumps({"id": f"{rid}#en", "response": "A small grey square on a plain background."})
                               + "\n" for rid in [*hostile_records.good, hostile_records.special]))
    out = tmp_path / "cap"
    code, err, peak = run_limited(["recaption", str(hostile_records.records), "--rollouts", str(answers),
                                   "--langs", "en", "--out", str(out)], tmp_path)
    stats = _check_run(code, err, peak, out, hostile_records.reasons, [*hostile_records.good, hostile_records.special])
    assert stats["records_out"] == len(hostile_records.good) + 1


def test_rl_filter_errors_prompts_with_hostile_images(hostile_records: HostileRecords, tmp_path: Path,
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    rows = [json.loads(line) for line in hostile_records.records.read_text().splitlines()[:9]]  # good-1, 8 images
    prompts = tmp_path / "rl.jsonl"
    prompts.write_text("".join(json.dumps({"id": r["id"], "images": [str(hostile_records.folder / p) if "\0" not in p
                                                                     else p for p in r["images"]],
                                           "problem": "<image>" * len(r["images"]) + "How many squares?",
                                           "answer": "1", "answer_type": "number"}) + "\n" for r in rows))
    answers = tmp_path / "answers.jsonl"
    answers.write_text("".join(json.dumps({"id": r["id"], "response": f"<answer>{k}</answer>"}) + "\n"
                               for r in rows for k in range(2)))
    out = tmp_path / "rl"
    main(["rl-filter", str(prompts), "--rollouts", str(answers), "--n", "2", "--out", str(out)])
    assert "Traceback" not in capsys.readouterr().err
    stats = json.loads((out / "stats.json").read_text())
    assert stats["records_in"] == 9
    assert {rid: reason for rid, reason in _rejects(out).items() if rid != "good-1"} == {
        rid: reason for rid, reason in hostile_records.reasons.items() if not rid.startswith("records:")}


@pytest.fixture(scope="module")
def limited_records(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Four records for the image limit flags: one within them, one over the bytes, one over the pixels, one
    over the images per record (``--max-image-bytes 4k --max-image-pixels 2000 --max-images-per-record 1``)."""
    from PIL import Image
    import numpy as np

    d = tmp_path_factory.mktemp("limited")
    Image.new("RGB", (40, 40), (90, 120, 150)).save(d / "small.png")  # 1,600 pixels, a few hundred bytes
    Image.fromarray(np.random.default_rng(3).integers(0, 256, (40, 40, 3), dtype=np.uint8)).save(d / "heavy.png")
    Image.new("RGB", (60, 60), (90, 120, 150)).save(d / "wide.png")  # 3,600 pixels, small
    rows = [("small", ["small.png"]), ("heavy", ["heavy.png"]), ("wide", ["wide.png"]),
            ("two", ["small.png", "small.png"])]
    path = d / "records.jsonl"
    path.write_text("".join(json.dumps({"id": rid, "source": "s", "images": images, "problem": "<image>" * len(images)
                                        + "How many squares?", "answer": "1", "answer_type": "number"}) + "\n"
                            for rid, images in rows))
    (d / "answers.jsonl").write_text("".join(json.dumps({"id": key, "response": "<answer>1</answer> A grey square."})
                                             + "\n" for rid, _ in rows for key in (rid, f"{rid}#en")))
    return path


LIMITS = ["--max-image-bytes", "4k", "--max-image-pixels", "2000", "--max-images-per-record", "1"]


@pytest.mark.parametrize("verb", ["pack", "embed", "recaption", "rl-filter"])
def test_the_image_limit_flags_reach_every_stage_that_reads_pixels(verb: str, limited_records: Path,
                                                                   tiny_processor_dir: Path, tiny_clip_spec: str,
                                                                   tmp_path: Path) -> None:
    answers = str(limited_records.parent / "answers.jsonl")
    extra = {"pack": ["--processor", str(tiny_processor_dir)], "embed": ["--model", tiny_clip_spec],
             "recaption": ["--rollouts", answers, "--langs", "en"], "rl-filter": ["--rollouts", answers, "--n", "1"]}
    out = tmp_path / verb
    main([verb, str(limited_records), *extra[verb], *LIMITS, "--out", str(out)])
    rejects = {rid: reason for rid, reason in _rejects(out).items() if rid != "small"}  # rl-filter may drop it
    assert rejects == {"heavy": "too_large", "wide": "decompression_bomb", "two": "too_many_images"}
    settings = json.loads((out / "stats.json").read_text())["settings"]  # the limits key the run's settings
    assert settings["image_limits"] == {"max_bytes": 4096, "max_pixels": 2000, "max_aspect": 200.0}
    assert settings["max_images"] == 1
