"""``--out s3://...`` through the command line and through configs, against a real S3 server (moto).

The server's own request recorder gives the order of the uploads: every shard's files before its
marker, ``stats.json`` last.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from curate.cli import main
from curate.core.records import read_records
from tests._fixtures.formats import Layouts
from tests._fixtures.s3 import bucket_objects, folder_files, recorded_requests, s3

PACKED = ("shards/*.tar", "lengths/*.parquet", "plan.parquet", "lengths.parquet")
SCORED = ("scores.parquet", "scores/*.parquet", "rejects.parquet")


@contextmanager
def _recorded_puts(endpoint: str) -> Iterator[list[str]]:
    """The object paths (``bucket/key``) PUT to the server while the block runs, in the order they arrived."""
    puts: list[str] = []
    with recorded_requests(endpoint) as seen:
        yield puts
    puts.extend(key for method, key, _ in seen if method == "PUT")


def _check_order(puts: list[str], url: str) -> None:
    """In ``url``'s uploads, each marker comes once, after the files it lists and its stage's settings;
    stats.json is the last one."""
    inner = url[len("s3://"):]
    rel = [p[len(inner) + 1:] for p in puts if p.startswith(inner + "/")]
    assert rel and rel[-1] == "stats.json" and rel.count("stats.json") == 1, rel
    markers = [r for r in rel if r.startswith("_shards/") and r.split("/")[-1][0].isdigit() and r.endswith(".json")]
    assert markers, rel
    for marker in markers:
        listed = json.loads(s3().cat_file(f"{inner}/{marker}"))["files"]
        assert listed and all(f in rel and rel.index(f) < rel.index(marker) for f in listed), (marker, rel)
        assert rel.count(marker) == 1, (marker, rel)  # written last and once, never uploaded again
        settings = marker.rsplit("/", 1)[0] + "/settings.json"
        assert settings in rel and rel.index(settings) < rel.index(marker), (marker, rel)


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("CURATE_CACHE", str(tmp_path / "cache"))
    return tmp_path / "cache"


@pytest.fixture
def responses(sample_data: Path, tmp_path: Path) -> Path:
    recs = list(read_records([sample_data / "rl" / "prompts.jsonl"]))
    path = tmp_path / "responses.jsonl"
    path.write_text("".join(json.dumps({"id": r["id"], "response": f"<answer>{json.dumps(r['answer'])}</answer>"}) + "\n"
                            for r in recs) + json.dumps({"id": "nobody", "response": "<answer>1</answer>"}) + "\n")
    return path


def test_pack_score_and_balance_write_into_a_bucket_through_the_cli(
        s3_server: str, bucket: str, layouts: Layouts, tiny_processor_dir: Path, tiny_clip_spec: str,
        sample_data: Path, responses: Path, cache: Path, tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    pack_args = [str(layouts.hf), "--processor", str(tiny_processor_dir), "--ctx", "1024", "--seed", "2",
                 "--shard-size", "5", "--sequences-per-shard", "3", "--verify-fraction", "0"]
    score_args = ["--records", str(sample_data / "rl" / "prompts.jsonl"), "--responses", str(responses),
                  "--shard-size", "7"]
    vocab = tmp_path / "vocab.txt"
    vocab.write_text("\n".join(sorted({w.lower() for it in layouts.items for w in it["caption"].split()})) + "\n")
    balance_args = [str(layouts.hf), "--vocab", str(vocab), "--model", tiny_clip_spec, "--top-k", "2",
                    "--fraction", "0.5", "--seed", "3", "--cache-dir", str(tmp_path / "concepts")]
    with _recorded_puts(s3_server) as puts:
        main(["pack", *pack_args, "--out", f"{bucket}/packed"])
        main(["score", *score_args, f"--out={bucket}/scored"])
        main(["balance", *balance_args, "--out", f"{bucket}/bal"])
    assert f"outputs in {bucket}/packed" in capsys.readouterr().err
    main(["pack", *pack_args, "--out", str(tmp_path / "packed")])
    main(["score", *score_args, "--out", str(tmp_path / "scored")])
    packed = bucket_objects(f"{bucket}/packed", PACKED)
    assert any(k.startswith("shards/") for k in packed) and packed == folder_files(tmp_path / "packed", PACKED)
    scored = bucket_objects(f"{bucket}/scored", SCORED)
    assert "scores.parquet" in scored and scored == folder_files(tmp_path / "scored", SCORED)
    assert not s3().exists(f"{bucket[5:]}/scored/_golds.arrow")  # the workers' golds: pushed for them, then gone
    assert s3().exists(f"{bucket[5:]}/bal/selection.parquet") and s3().exists(f"{bucket[5:]}/bal/records/hf.parquet")
    for prefix in ("packed", "scored", "bal"):
        _check_order(puts, f"{bucket}/{prefix}")


def test_a_config_with_out_in_a_bucket(bucket: str, layouts: Layouts, tiny_processor_dir: Path, sample_data: Path,
                                       responses: Path, cache: Path, tmp_path: Path) -> None:
    from packer.config import PackConfig
    from packer.pack import pack
    from curate.rl.config import ScoreConfig
    from curate.rl.score import score

    kw = dict(processor=str(tiny_processor_dir), ctx=1024, seed=2, shard_size=5, sequences_per_shard=3,
              verify_fraction=0.0, plot=False)
    pack([layouts.hf], PackConfig(out=f"{bucket}/packed", **kw))
    pack([layouts.hf], config=PackConfig(out=tmp_path / "packed", **kw))
    assert bucket_objects(f"{bucket}/packed", PACKED) == folder_files(tmp_path / "packed", PACKED)
    records = (str(sample_data / "rl" / "prompts.jsonl"),)
    stats = score(records, ScoreConfig(responses=str(responses), out=f"{bucket}/scored"))
    score(records, ScoreConfig(responses=responses, out=tmp_path / "scored"))
    assert stats["responses_in"] > 0 and bucket_objects(f"{bucket}/scored", SCORED) == folder_files(tmp_path / "scored", SCORED)


def test_a_full_staging_folder_is_named_with_what_moves_it(bucket: str, layouts: Layouts, tiny_processor_dir: Path,
                                                           tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                           capsys: pytest.CaptureFixture) -> None:
    """``--out s3://...`` writes through a staging folder on this machine: when its disk is full, the line names
    that folder and ``CURATE_CACHE`` (which moves it), not ``--out`` (the bucket has room)."""
    from curate.core.io import staging
    from tests._fixtures.hostile import small_tmpfs

    with small_tmpfs(tmp_path / "small", "96k") as small:
        monkeypatch.setenv("CURATE_CACHE", str(small / "cache"))
        with pytest.raises(SystemExit) as exc:
            main(["pack", str(layouts.hf), "--processor", str(tiny_processor_dir), "--ctx", "1024",
                  "--out", f"{bucket}/full"])
        err = [line for line in capsys.readouterr().err.splitlines() if line.startswith("error")]
        folder = staging(f"{bucket}/full")
    assert exc.value.code == 1 and len(err) == 1, err
    line = err[0]
    assert str(folder) in line and "CURATE_CACHE" in line and "no space left" in line, line
    assert "another --out" not in line, line
