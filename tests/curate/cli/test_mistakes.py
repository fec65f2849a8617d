"""Ordinary mistakes through every verb: one line on stderr naming the flag or path, a non-zero exit, no traceback.

The table runs in-process through :func:`curate.cli.main` (what the console script
calls); a handful run through a real ``python -m curate`` to show that nothing
else reaches the terminal, including an ``OSError`` while writing outputs (a
file size limit set on the child process makes every write past it fail).
Every mistake is caught before any model loads: the table holds no model, and
the few that name a model folder name one that does not exist.
"""

from __future__ import annotations

import json
import os
import resource
import subprocess
import sys
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from curate.cli import main
from tests._fixtures.hostile import small_tmpfs

ROOT = Path(__file__).resolve().parents[3]


@pytest.fixture(scope="module")
def ws(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A workspace of small inputs, most of them wrong in one way."""
    d = tmp_path_factory.mktemp("mistakes")
    (d / "afile").write_text("not a folder\n")
    (d / "recs.jsonl").write_text(json.dumps({"id": "a", "caption": "a cat", "images": ["x.jpg"]}) + "\n")
    (d / "rl.jsonl").write_text(json.dumps({"id": "q", "problem": "1+1?", "answer": "2", "answer_type": "number"}) + "\n")
    (d / "answers.jsonl").write_text(json.dumps({"id": "q", "response": "<answer>2</answer>"}) + "\n")
    (d / "vocab.txt").write_text("cat\ndog\n")
    (d / "empty.txt").write_text("")
    (d / "blank.txt").write_text("cat\n\ndog\n")
    (d / "tags.parquet").write_bytes(b"")
    emb = d / "emb"
    emb.mkdir()
    np.save(emb / "000000.npy", np.eye(2, 4, dtype=np.float16))
    pq.write_table(pa.table({"id": ["a", "b"], "source": ["s", "s"]}), emb / "000000.ids.parquet")
    nan = np.ones((3, 4), np.float16)
    nan[1, 2] = np.nan
    np.save(d / "nan.npy", nan)
    np.save(d / "ok.npy", np.eye(3, 4, dtype=np.float16))
    (d / "corrupt").mkdir()
    (d / "corrupt" / "stats.json").write_text('{"stage": "pack", "settings": {"ctx": 81')
    (d / "notpack").mkdir()
    (d / "notpack" / "stats.json").write_text('{"stage": "embed"}')
    (d / "folder").mkdir()
    return d


R = "{d}/recs.jsonl"
RL = "{d}/rl.jsonl"
ANS = "--rollouts {d}/answers.jsonl"

#: (verb and flags with {d} for the workspace, text the one line must hold)
MISTAKES: list[tuple[str, str]] = [
    # dedup
    (f"dedup {R} --out {{d}}/o --near-threshold 12", "--near-threshold must be at most 11"),
    (f"dedup {R} --out {{d}}/o --semantic-threshold 1.5", "--semantic-threshold"),
    (f"dedup {R} --out {{d}}/o --embeddings {{d}}/missing", "--embeddings {d}/missing"),
    (f"dedup {R} --out {{d}}/o --against {{d}}/missing", "--against {d}/missing"),
    (f"dedup {R} --out {{d}}/o --against-embeddings {{d}}/emb", "--against-embeddings needs --against"),
    (f"dedup {R} --out {{d}}/o --prefer coyo,coyo", "name each source once"),
    # embed
    (f"embed {R} --out {{d}}/afile", "--out {d}/afile"),
    (f"embed {R} --out {{d}}/afile/sub", "{d}/afile"),
    (f"embed {R} --out {{d}}/o --batch-size 0", "--batch-size"),
    (f"embed {R} --out {{d}}/o --shard-size 0", "--shard-size"),
    (f"embed {R} --out {{d}}/o --workers 0", "--workers"),
    (f"embed {R} --out {{d}}/o --threads 0", "--threads"),
    (f"embed {R} --out {{d}}/o --decode-threads 0", "--decode-threads"),
    (f"embed {R} --out {{d}}/o --precision fp8", "--precision"),
    (f"embed {R} --out {{d}}/o --num-gpus -1", "--num-gpus"),
    (f"embed {R}", "--out"),
    (f"embed {R} --out {{d}}/o --image-root {{d}}/missing", "--image-root {d}/missing"),
    (f"embed {R} --out {{d}}/o --image-root {{d}}/afile", "--image-root {d}/afile"),
    # vocab build / vocab embed
    ("vocab build --out {d}/folder --size 2 --no-wordfreq --word-list {d}/vocab.txt", "--out {d}/folder"),
    ("vocab build --out {d}/v.txt --word-list {d}/missing.txt", "--word-list {d}/missing.txt"),
    ("vocab build --out {d}/v.txt --size 0", "--size"),
    ("vocab embed --vocab {d}/vocab.txt --out {d}/folder", "--out {d}/folder"),
    ("vocab embed --vocab {d}/vocab.txt --out {d}/c.npy --cache-dir {d}/afile", "--cache-dir"),
    ("vocab embed --vocab {d}/empty.txt --out {d}/c.npy", "--vocab"),
    ("vocab embed --vocab {d}/missing.txt --out {d}/c.npy", "--vocab"),
    ("vocab embed --vocab {d}/blank.txt --out {d}/c.npy", "blank line"),
    ("vocab embed --vocab {d}/vocab.txt --out {d}/c.npy --template 'a photo'", "--template"),
    ("vocab embed --vocab {d}/vocab.txt --out {d}/c.npy --batch-size 0", "--batch-size"),
    # tag
    ("tag --embeddings {d}/emb --concepts {d}/nan.npy --out {d}/t", "--concepts {d}/nan.npy"),
    ("tag --embeddings {d}/emb --concepts {d}/ok.npy --out {d}/t --top-k 0", "--top-k"),
    ("tag --embeddings {d}/emb --concepts {d}/ok.npy --out {d}/t --nprobe 0", "--nprobe"),
    ("tag --embeddings {d}/emb --concepts {d}/ok.npy --out {d}/t --index hnsw", "--index"),
    ("tag --embeddings {d}/emb --concepts {d}/ok.npy --out {d}/afile", "--out"),
    ("tag --embeddings {d}/missing --concepts {d}/ok.npy --out {d}/t", "--embeddings"),
    ("tag --match text --records {d}/recs.jsonl --vocab {d}/vocab.txt --out {d}/t", "curate match"),
    # match
    ("match {d}/recs.jsonl --vocab {d}/vocab.txt --out {d}/afile", "--out"),
    ("match {d}/recs.jsonl --vocab {d}/vocab.txt --out {d}/t --shard-size 0", "--shard-size"),
    ("match {d}/recs.jsonl --vocab {d}/blank.txt --out {d}/t", "blank line"),
    ("match {d}/recs.jsonl --vocab {d}/vocab.txt --out {d}/t --top-k 0", "--top-k"),
    ("match {d}/missing.jsonl --vocab {d}/vocab.txt --out {d}/t", "missing.jsonl"),
    # resample
    ("resample --tags {d}/tags.parquet --out {d}/r --fraction 0.5 --temperature nan", "--temperature"),
    ("resample --tags {d}/tags.parquet --out {d}/r --target -1", "--target"),
    ("resample --tags {d}/tags.parquet --out {d}/r --target 5 --fraction 0.5", "--target"),
    ("resample --tags {d}/tags.parquet --out {d}/r --mode metaclip --target 3", "--target"),
    ("resample --tags {d}/tags.parquet --out {d}/r --fraction 0.5 --use-k 0", "--use-k"),
    ("resample --tags {d}/tags.parquet --out {d}/r --fraction 0.5 --weighting median", "--weighting"),
    ("resample --tags {d}/missing.parquet --out {d}/r --fraction 0.5", "--tags"),
    ("resample --tags {d}/tags.parquet --out {d}/afile --fraction 0.5", "--out"),
    ("resample --tags {d}/tags.parquet --out {d}/r --fraction 0.5 --image-root {d}/missing", "--image-root {d}/missing"),
    # balance: refused before the first image is embedded
    (f"balance {R} --vocab {{d}}/empty.txt --out {{d}}/b", "--vocab"),
    (f"balance {R} --vocab {{d}}/vocab.txt --out {{d}}/b --top-k 0", "--top-k"),
    (f"balance {R} --vocab {{d}}/vocab.txt --out {{d}}/b --image-root {{d}}/missing", "--image-root {d}/missing"),
    (f"balance {R} --vocab {{d}}/vocab.txt --out {{d}}/b --target -1", "--target"),
    (f"balance {R} --vocab {{d}}/vocab.txt --out {{d}}/b --temperature -1", "--temperature"),
    (f"balance {R} --vocab {{d}}/vocab.txt --out {{d}}/afile", "--out"),
    (f"balance {R} --vocab {{d}}/vocab.txt --out {{d}}/b --cache-dir {{d}}/afile", "--cache-dir"),
    # recaption
    (f"recaption {R} --out {{d}}/c {ANS} --langs xx", "--langs"),  # de, fr... are accepted (issue 49)
    (f"recaption {R} --out {{d}}/c {ANS} --mix en=abc", "--mix"),
    (f"recaption {R} --out {{d}}/c {ANS} --temperature nan", "--temperature"),
    (f"recaption {R} --out {{d}}/c {ANS} --shard-size 0", "--shard-size"),
    (f"recaption {R} --out {{d}}/c --rollouts {{d}}/missing.jsonl", "--rollouts"),
    (f"recaption {R} --out {{d}}/c --model {{d}}/no-checkpoint", "--model"),
    (f"recaption {R} --out {{d}}/c --endpoint http://127.0.0.1:9/v1 --concurrency 0", "--concurrency"),
    (f"recaption {R} --out {{d}}/c", "--rollouts"),
    (f"recaption {R} --out {{d}}/c {ANS} --image-root {{d}}/missing", "--image-root {d}/missing"),
    (f"recaption {R} --out {{d}}/afile {ANS}", "--out"),
    # rl-filter: refused before the model loads
    (f"rl-filter {RL} --out {{d}}/f {ANS} --progress 7", "--progress"),
    (f"rl-filter {RL} --out {{d}}/f {ANS} --band 0.5,0.2", "--band"),
    (f"rl-filter {RL} --out {{d}}/f {ANS} --band abc", "--band"),
    (f"rl-filter {RL} --out {{d}}/f {ANS} --n 0", "--n"),
    (f"rl-filter {RL} --out {{d}}/f {ANS} --image-root {{d}}/missing", "--image-root {d}/missing"),
    (f"rl-filter {RL} --out {{d}}/f {ANS} --pass-threshold 2", "--pass-threshold"),
    (f"rl-filter {RL} --out {{d}}/f {ANS} --top-p 0", "--top-p"),
    (f"rl-filter {RL} --out {{d}}/f {ANS} --thresholds {{d}}/missing.yaml", "--thresholds"),
    (f"rl-filter {RL} --out {{d}}/f --model {{d}}/no-checkpoint --max-new-tokens 0", "--max-new-tokens"),
    # score
    (f"score --records {RL} --responses {{d}}/answers.jsonl --out {{d}}/s --shard-size 0", "--shard-size"),
    (f"score --records {RL} --responses {{d}}/answers.jsonl --out {{d}}/s --progress 2", "--progress"),
    (f"score --records {RL} --responses {{d}}/missing.jsonl --out {{d}}/s", "--responses"),
    (f"score --records {RL} --responses {{d}}/answers.jsonl --out {{d}}/s --answer-type maths", "--answer-type maths"),
    (f"rl-filter {RL} --out {{d}}/f {ANS} --answer-type maths", "--answer-type maths"),
    (f"score --records {RL} --responses {{d}}/answers.jsonl --out {{d}}/afile", "--out"),
    # serve-rewards: refused before a port is bound
    ("serve-rewards --port 70000", "--port"),
    ("serve-rewards --workers 0", "--workers"),
    ("serve-rewards --pool-workers 0", "--pool-workers"),
    ("serve-rewards --log-level loud", "--log-level"),
    # pack / verify / energon-prepare
    (f"pack {R} --processor {{d}}/proc --out {{d}}/p --min-pixels 1000000 --max-pixels 10", "--min-pixels"),
    (f"pack {R} --processor {{d}}/proc --out {{d}}/p --ctx 0", "--ctx"),
    (f"pack {R} --processor {{d}}/proc --out {{d}}/p --image-root {{d}}/missing", "--image-root {d}/missing"),
    (f"pack {R} --processor {{d}}/proc --out {{d}}/afile", "--out {d}/afile"),
    (f"pack {R} --processor {{d}}/proc --out {{d}}/p --verify-sample -1", "--verify-sample"),
    (f"pack {R} --processor {{d}}/proc --out {{d}}/p --energon 1,x", "--split-ratio"),
    (f"pack {R} --processor {{d}}/proc --out {{d}}/p --dp 4", "--dp"),
    (f"pack {R} --out {{d}}/p", "--processor"),
    (f"pack {R} --processor {{d}}/proc --out {{d}}/p --lengths {{d}}/missing.parquet", "--lengths"),
    ("verify {d}/corrupt", "{d}/corrupt/stats.json"),
    ("verify {d}/notpack", "not pack"),
    ("verify {d}/missing", "{d}/missing"),
    ("verify {d}/corrupt --sample -3", "--sample"),
    ("energon-prepare {d}/corrupt --workers 0", "--workers"),
    # run, report, the group itself
    ("run {d}/missing.yaml", "missing.yaml"),
    ("report {d}/missing", "{d}/missing"),
    ("embedd x", "embedd"),
    (f"embed {R} --out {{d}}/o --seed abc", "--seed"),
]


def _argv(line: str, d: Path) -> list[str]:
    import shlex

    return shlex.split(line.format(d=d))


def _one_line(err: str) -> str:
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert len(lines) == 1, f"expected one line, got {len(lines)}:\n{err}"
    return lines[0]


def test_the_table_is_large_and_covers_every_verb() -> None:
    from curate.cli.group import command
    from curate.stages import STAGES as VERBS

    verbs = {line.split()[0] for line, _ in MISTAKES} | {" ".join(line.split()[:2]) for line, _ in MISTAKES}
    for name in VERBS:
        subs = getattr(command(name), "commands", None)
        names = [f"{name} {sub}" for sub in subs] if subs else [name]
        for verb in names:
            if verb.startswith("fixtures"):  # test-data builder, not a user verb
                continue
            assert verb in verbs, f"no mistake of `curate {verb}` in the table"
    assert len(MISTAKES) >= 40


@pytest.mark.parametrize("line, expected", MISTAKES, ids=[m[0].split(" --")[0][:40] for m in MISTAKES])
def test_mistake_gives_one_line(ws: Path, line: str, expected: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        main(_argv(line, ws))
    captured = capsys.readouterr()
    assert exc.value.code not in (0, None)
    assert "Traceback" not in captured.err + captured.out
    message = _one_line(captured.err)
    assert message.startswith("error:"), message
    assert expected.format(d=ws) in message, message


def _run(args: list[str], **kw: object) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": f"{ROOT}{os.pathsep}{os.environ.get('PYTHONPATH', '')}",
           "PYTHONDONTWRITEBYTECODE": "1", "OMP_NUM_THREADS": "1"}
    return subprocess.run([sys.executable, "-m", "curate", *args], capture_output=True, text=True, env=env,
                          timeout=120, **kw)  # type: ignore[call-overload]


@pytest.mark.parametrize("line, expected", [
    (f"pack {R} --processor {{d}}/proc --out {{d}}/afile", "--out {d}/afile"),
    (f"rl-filter {RL} --out {{d}}/f --model {{d}}/no-checkpoint --progress 7", "--progress"),
    ("serve-rewards --port 70000", "--port"),
    ("verify {d}/corrupt", "{d}/corrupt/stats.json"),
])
def test_no_traceback_reaches_the_terminal(ws: Path, line: str, expected: str) -> None:
    proc = _run(_argv(line, ws))
    assert proc.returncode == 2, proc.stderr
    assert "Traceback" not in proc.stderr + proc.stdout
    assert expected.format(d=ws) in _one_line(proc.stderr)


#: Pseudo-words the vocabulary's debris rules keep (consonant runs such as "bcdf" are debris).
SYLLABLES = ("ba", "ke", "mi", "lo", "su", "ta", "ne", "ri", "po", "gu")


def _limit_file_size() -> None:
    resource.setrlimit(resource.RLIMIT_FSIZE, (2048, 2048))  # writes past 2 KB fail with EFBIG (SIGXFSZ is ignored)


def test_an_output_that_cannot_be_written_is_one_line(ws: Path) -> None:
    words = ws / "words.txt"
    import itertools

    words.write_text("".join("".join(w) + "\n" for w in itertools.islice(itertools.product(SYLLABLES, repeat=4), 2000)))
    out = ws / "big" / "vocab.txt"
    proc = _run(["vocab", "build", "--out", str(out), "--size", "1990", "--no-wordfreq", "--word-list", str(words)],
                preexec_fn=_limit_file_size)
    assert proc.returncode == 1, proc.stderr
    assert "Traceback" not in proc.stderr + proc.stdout
    line = _one_line(proc.stderr)
    assert str(out.parent) in line and "file too large" in line, line
    assert not out.exists()  # nothing half-written in place


@pytest.fixture
def full_disk(tmp_path: Path):  # noqa: ANN201
    """A 64 KiB tmpfs (root only; skipped where mounting is not allowed)."""
    with small_tmpfs(tmp_path / "full", "64k") as mnt:
        yield mnt


def test_no_space_left_is_one_line(ws: Path, full_disk: Path) -> None:
    import itertools

    words = ws / "many.txt"
    words.write_text("".join("".join(w) + "\n" for w in itertools.islice(itertools.product(SYLLABLES, repeat=5),
                                                                          20000)))
    out = full_disk / "vocab.txt"
    proc = _run(["vocab", "build", "--out", str(out), "--size", "19990", "--no-wordfreq", "--word-list", str(words)])
    assert proc.returncode == 1, proc.stderr
    assert "Traceback" not in proc.stderr + proc.stdout
    line = _one_line(proc.stderr)
    assert line.startswith(f"error: {out}") and "no space left" in line, line
