"""Hostile input that used to be miscounted, stored as an answer, or left behind (issue 36), through the real CLI.

* counts: a tar group with an empty key, golds no answer can match, fewer answers than ``--n``, copies past 32 bits,
  a ``--lengths`` table changed since its pack wrote it, a packed count only a full recount finds;
* failures never stored as answers: a server answering 401, 404, a redirect, ``content: null`` or no choices is
  asked again by the rerun, which then gets the answers;
* a full disk (a 1 MiB tmpfs, as root) says "no space left on the device" and leaves no temporary file;
* a storage server dying mid-pack is one line.
"""

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
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest
from PIL import Image

from curate.cli import main
from tests._fixtures.hostile import ChatServer, run_limited, small_tmpfs
from tests._fixtures.servers import wait_for_port


def _run(args: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    try:
        main([str(a) for a in args])
        code = 0
    except SystemExit as exc:
        code = int(exc.code or 0)
    captured = capsys.readouterr()
    err = captured.err + captured.out  # the verbs' reports (rich) go to stderr, click's echoes to stdout
    assert "Traceback" not in err, err[-3000:]
    return code, err


def _error_line(err: str) -> str:
    lines = [line for line in err.splitlines() if line.startswith("error:")]
    assert len(lines) == 1, err
    return lines[0]


def _stats(out: Path) -> dict:
    return json.loads((out / "stats.json").read_text())


def _rejects(out: Path) -> dict[str, str]:
    return {r["id"]: r["reason"] for r in pq.read_table(out / "rejects.parquet").to_pylist()}


def _png(path: Path) -> Path:
    Image.fromarray(np.random.default_rng(7).integers(0, 256, (40, 56, 3), dtype=np.uint8)).save(path)
    return path


def _jsonl(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


# --------------------------------------------------------------------------------------------------------- counts

def test_a_tar_group_with_an_empty_key_is_counted(tiny_clip_spec: str, tmp_path: Path,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    image = _png(tmp_path / "a.png").read_bytes()
    with tarfile.open(tmp_path / "shard-000.tar", "w") as tar:
        for key in ("k1", "", "k2"):  # ".png" + ".txt": WebDataset drops the pair silently
            for ext, data in (("png", image), ("txt", b"a photo")):
                info = tarfile.TarInfo(f"{key}.{ext}")
                info.size = len(data)
                tar.addfile(info, io.BytesIO(data))
    out = tmp_path / "emb"
    assert _run(["embed", tmp_path / "shard-000.tar", "--model", tiny_clip_spec, "--out", out], capsys)[0] == 0
    stats = _stats(out)
    assert stats["records_in"] == 3 and stats["records_embedded"] == 2 and stats["errored"] == {"empty_key": 1}


def test_golds_no_answer_can_match_and_missing_answers_are_errored(tmp_path: Path,
                                                                   capsys: pytest.CaptureFixture[str]) -> None:
    prompts = _jsonl(tmp_path / "rl.jsonl", [
        {"id": "ok", "problem": "1+1?", "answer": "2", "answer_type": "number"},
        {"id": "code", "problem": "Write f.", "answer": "not JSON test cases", "answer_type": "general-code"},
        {"id": "bbox", "problem": "Where?", "answer": "[10, 20]", "answer_type": "bbox"},
        {"id": "empty", "problem": "Say it.", "answer": "", "answer_type": "any"},
        {"id": "short", "problem": "2+2?", "answer": "4", "answer_type": "number"},
    ])
    answers = [{"id": rid, "response": f"<answer>{k}</answer>"} for rid in ("ok", "code", "bbox", "empty")
               for k in range(4)] + [{"id": "short", "response": "<answer>4</answer>"}]
    _jsonl(tmp_path / "answers.jsonl", answers)
    out = tmp_path / "rl"
    code, err = _run(["rl-filter", prompts, "--rollouts", tmp_path / "answers.jsonl", "--n", "4", "--out", out],
                     capsys)
    assert code == 0, err
    assert _rejects(out) | {"ok": "-"} == {"ok": "-", "code": "record_error", "bbox": "record_error",
                                          "empty": "record_error", "short": "too_few_answers"}
    assert _stats(out)["errored"] == {"record_error": 3, "too_few_answers": 1}  # never dropped too_hard


def test_a_response_sample_past_64_bits_is_an_errored_row(tmp_path: Path,
                                                          capsys: pytest.CaptureFixture[str]) -> None:
    records = _jsonl(tmp_path / "rl.jsonl", [{"id": "q", "problem": "1+1?", "answer": "2", "answer_type": "number"}])
    responses = tmp_path / "responses.jsonl"
    responses.write_text(json.dumps({"id": "q", "response": "<answer>2</answer>", "sample": 0}) + "\n"
                         + '{"id": "q", "response": "<answer>2</answer>", "sample": ' + str(2**70) + "}\n")
    out = tmp_path / "scored"
    assert _run(["score", "--records", records, "--responses", responses, "--out", out], capsys)[0] == 0
    stats = _stats(out)
    assert stats["responses_in"] == 2 and stats["scored"] == 1 and stats["errored"] == {"malformed_response": 1}


def test_copies_past_32_bits_stop_and_large_draws_count_right(tmp_path: Path,
                                                              capsys: pytest.CaptureFixture[str]) -> None:
    rng = np.random.default_rng(1)
    pq.write_table(pa.table({"id": [f"r{i}" for i in range(107)], "source": ["web"] * 107,
                             "concepts": pa.array([rng.choice(30, 3, replace=False).tolist() for _ in range(107)],
                                                  pa.list_(pa.int32()))}), tmp_path / "tags.parquet")
    base = ["resample", "--tags", tmp_path / "tags.parquet"]
    code, err = _run([*base, "--target", 10**12, "--out", tmp_path / "big"], capsys)
    assert code == 2 and "a record would be drawn" in _error_line(err)
    target = 10**9  # about 1e7 copies a record: fits
    assert _run([*base, "--target", target, "--out", tmp_path / "ok"], capsys)[0] == 0
    copies = pq.read_table(tmp_path / "ok" / "selection.parquet").column("copies").to_numpy()
    stats = _stats(tmp_path / "ok")
    assert int(copies.astype(np.int64).sum()) == stats["copies_total"] == target
    assert (copies > 0).all() and stats["records_selected"] == 107 and not stats["dropped"]


@pytest.fixture(scope="module")
def packed(tiny_processor_dir: Path, sample_data: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A small pack of the sample records (module scope: the tests below copy what they change)."""
    out = tmp_path_factory.mktemp("hostile-pack") / "packed"
    main(["pack", str(sample_data / "records.jsonl"), "--processor", str(tiny_processor_dir), "--ctx", "4096",
          "--out", str(out)])
    return out


def test_a_lengths_file_changed_since_its_pack_is_refused(packed: Path, tiny_processor_dir: Path, sample_data: Path,
                                                         tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    copy = tmp_path / "copy"
    copy.mkdir()
    for name in ("stats.json", "lengths.parquet"):
        (copy / name).write_bytes((packed / name).read_bytes())
    table = pq.read_table(copy / "lengths.parquet")
    at = table.schema.get_field_index("text_tokens")
    pq.write_table(table.set_column(at, "text_tokens", pc.add(table["text_tokens"], 5).cast(pa.int32())),
                   copy / "lengths.parquet")
    for args in ([sample_data / "records.jsonl", "--processor", tiny_processor_dir, "--verify-sample", "0"],
                 ["--plan-only"]):
        code, err = _run(["pack", *args, "--lengths", copy / "lengths.parquet", "--out", tmp_path / "p"], capsys)
        assert code == 2 and "changed since curate pack wrote it" in _error_line(err)


def _bump_one_count(tar_path: Path) -> str:
    """Add a token to the first sample of the first sequence of a tar, consistently (tokens and cu_seqlens)."""
    members = []
    with tarfile.open(tar_path) as tar:
        for info in tar.getmembers():
            members.append((info, tar.extractfile(info).read()))
    info, data = next((i, d) for i, d in members if i.name.endswith(".json"))
    meta = json.loads(data)
    meta["tokens"][0] += 1
    meta["cu_seqlens"] = [0, *np.cumsum(meta["tokens"]).tolist()]
    with tarfile.open(tar_path, "w") as tar:
        for i, d in members:
            d = json.dumps(meta).encode() if i is info else d
            i.size = len(d)
            tar.addfile(i, io.BytesIO(d))
    return meta["ids"][0]


def test_verify_recount_all_finds_a_count_the_sample_does_not(packed: Path, tmp_path: Path,
                                                              capsys: pytest.CaptureFixture[str]) -> None:
    import shutil

    out = tmp_path / "tampered"
    shutil.copytree(packed, out)
    rid = _bump_one_count(sorted((out / "shards").glob("*.tar"))[0])
    assert _run(["verify", out, "--sample", "0"], capsys)[0] == 0  # the boundaries agree with the JSON
    code, err = _run(["verify", out, "--recount-all"], capsys)
    assert code == 1 and f"sample {rid!r} recounts to" in err, err


# ------------------------------------------------------------------------------------ failures are not answers

@pytest.mark.parametrize("answer, reason", [(401, "http_error:401"), (404, "http_error:404"),
                                            ("redirect", "http_error:302"), ("null", "bad_response"),
                                            ("no-choices", "bad_response")])
def test_a_failed_call_is_asked_again_by_the_rerun(chat_server: ChatServer, answer: object, reason: str,
                                                   tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    image = _png(tmp_path / "photo.png")
    records = _jsonl(tmp_path / "records.jsonl", [{"id": f"r{i}", "image": str(image), "caption": "old"}
                                                  for i in range(2)])
    out = tmp_path / "cap"
    cmd = ["recaption", records, "--endpoint", chat_server.url, "--langs", "en", "--max-retries", "0",
           "--max-consecutive-failures", "100", "--out", out]
    chat_server.answer = answer
    code, err = _run(cmd, capsys)
    assert code == 0, err
    assert _stats(out)["errored"] == {reason: 2}
    assert not any(p.read_text().strip() for p in (out / "_journal" / "recaption").glob("*.jsonl"))
    chat_server.answer = "ok"
    asked = chat_server.calls
    code, err = _run(cmd, capsys)
    assert code == 0 and chat_server.calls > asked, err  # asked again, not read back as an answer
    stats = _stats(out)
    assert stats["records_out"] == 2 and not stats["errored"]


def test_a_refused_key_trips_the_breaker(chat_server: ChatServer, tmp_path: Path,
                                         capsys: pytest.CaptureFixture[str]) -> None:
    image = _png(tmp_path / "photo.png")
    records = _jsonl(tmp_path / "records.jsonl", [{"id": f"r{i}", "image": str(image), "caption": "old"}
                                                  for i in range(4)])
    chat_server.answer = 401
    code, err = _run(["recaption", records, "--endpoint", chat_server.url, "--langs", "en", "--concurrency", "1",
                      "--max-consecutive-failures", "2", "--out", tmp_path / "cap"], capsys)
    assert code == 3 and "looks down" in _error_line(err) and "http_error:401" in err


# --------------------------------------------------------------------------------------------- a full disk

@pytest.fixture
def full_disk(tmp_path: Path):  # noqa: ANN201
    """A 1 MiB tmpfs (root only; skipped where mounting is not allowed)."""
    with small_tmpfs(tmp_path / "full", "1m") as mnt:
        yield mnt


def test_a_full_disk_is_one_line_and_leaves_no_temporary_file(full_disk: Path, tiny_clip_spec: str, tmp_path: Path,
                                                              capsys: pytest.CaptureFixture[str]) -> None:
    import itertools

    vocab = tmp_path / "vocab.txt"  # 9,000 concepts x 64 x 2 bytes: 1.1 MiB of concepts.npy
    vocab.write_text("".join("".join(w) + "\n" for w in itertools.islice(itertools.product("bcdfghklmn", repeat=4),
                                                                         9000)))
    code, err = _run(["vocab", "embed", "--vocab", vocab, "--model", tiny_clip_spec, "--out",
                      full_disk / "concepts.npy", "--cache-dir", tmp_path / "cache"], capsys)
    assert code == 1 and "no space left on the device of " + str(full_disk) in _error_line(err)
    assert [p.name for p in full_disk.rglob("*")] == []  # nothing half-written keeps the disk full
    code, err = _run(["vocab", "embed", "--vocab", vocab, "--model", tiny_clip_spec, "--out",
                      full_disk / "concepts.npy", "--cache-dir", full_disk / "cache"], capsys)
    assert code == 1 and "no space left on the device of" in _error_line(err)
    assert not [p for p in full_disk.rglob("*") if "tmp" in p.name]


# ---------------------------------------------------------------------------------- a storage server dying

def test_a_storage_server_dying_mid_pack_is_one_line(tiny_processor_dir: Path, sample_data: Path,
                                                     tmp_path: Path) -> None:
    pytest.importorskip("moto.server")
    s3fs = pytest.importorskip("s3fs")
    from curate.fixtures.tiny_vlm import free_port

    port = free_port()
    env = {**os.environ, "AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing",
           "AWS_DEFAULT_REGION": "us-east-1", "AWS_ENDPOINT_URL": f"http://127.0.0.1:{port}",
           "FSSPEC_S3_ENDPOINT_URL": f"http://127.0.0.1:{port}", "AWS_MAX_ATTEMPTS": "1"}  # no backoff once it died
    server = subprocess.Popen([sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)
    try:
        wait_for_port(port)
        fs = s3fs.S3FileSystem(endpoint_url=env["AWS_ENDPOINT_URL"], key="testing", secret="testing",
                               skip_instance_cache=True)
        fs.mkdir("hostile-bucket")
        killer = subprocess.Popen([sys.executable, "-c", _KILL_AFTER_FIRST_MARKER, str(server.pid)], env=env)
        code, err, _ = run_limited(["pack", str(sample_data / "records.jsonl"), "--processor",
                                    str(tiny_processor_dir), "--shard-size", "10", "--out",
                                    "s3://hostile-bucket/packed"], tmp_path, env=env)
        killer.wait(timeout=60)
    finally:
        server.kill()
        server.wait()
    assert code == 1 and "Traceback" not in err, err[-3000:]
    assert "the storage server failed" in _error_line(err) and "rerun the same command" in err


#: A child that kills the storage server (its pid: argv[1]) once the first lengths shard is marked done.
_KILL_AFTER_FIRST_MARKER = """
import os, signal, sys, time
import s3fs
fs = s3fs.S3FileSystem(skip_instance_cache=True)
deadline = time.time() + 120
while time.time() < deadline:
    try:
        if fs.exists("hostile-bucket/packed/_shards/lengths/000000.json"):
            break
    except Exception:
        pass
    fs.invalidate_cache()
    time.sleep(0.05)
os.kill(int(sys.argv[1]), signal.SIGKILL)
"""
