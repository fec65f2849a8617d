"""``--executor ray``: a real local Ray cluster (2 CPUs) gives the local executor's outputs, byte for byte.

One cluster for the whole module (started and stopped by the ``ray_cluster``
fixture of ``tests/_fixtures/ray_cluster.py``). Every stage that runs on Ray is described once as a :class:`StageCase`
(how to run it into a folder with a given executor, the same run as a CLI
command, and which output files must be byte-identical). The tests

* run every stage of ``STAGES`` (pack, embed, tag, score, vocab embed, a filter stage) on Ray and locally and compare the outputs;
* for ``RESUME_STAGES`` (pack: two sharded steps around a global plan), run
  ``curate pack --executor ray`` in a subprocess killed with SIGKILL after its
  first shard markers appear and finish it locally, and finish an interrupted
  local run on Ray; both must give the uninterrupted local run's bytes.

To cover a new stage, add a :class:`StageCase` to ``STAGES``.
"""

from __future__ import annotations

import json
import os
import pickle
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

ray = pytest.importorskip("ray")

from curate.rl.config import ScoreConfig
from curate.core.errors import UserError  # noqa: E402
from curate.executors import Executor, get_executor, run_stage  # noqa: E402
from curate.core.shards import SHARDS_DIR, Shard  # noqa: E402

pytestmark = [pytest.mark.ray, pytest.mark.slow]


# --------------------------------------------------------------------------- the cluster (tests/_fixtures/ray_cluster.py)
def ray_executor(concurrency: int = 2) -> Executor:
    return get_executor("ray", concurrency=concurrency)


def wait_for_free_cpus(cpus: float = 2.0, timeout: float = 60.0) -> None:
    """Wait until the actors of a killed driver are gone and their CPUs are free again."""
    deadline = time.monotonic() + timeout
    while ray.available_resources().get("CPU", 0.0) < cpus:
        if time.monotonic() > deadline:
            raise TimeoutError(f"Ray CPUs still busy after {timeout}s: {ray.available_resources()}")
        time.sleep(0.2)


# --------------------------------------------------------------------------- stages under test
@dataclass
class StageCase:
    """How to run one stage into ``out`` with an executor, and what must match across executors."""

    name: str
    #: run(out, executor, fixtures) runs the stage to completion (a Python call, as the CLI does).
    run: Callable[[Path, Executor | None, dict[str, Any]], Any]
    #: argv (after ``curate``) of the same run, for the subprocess test; ``{out}`` and ``{address}`` are filled in.
    argv: Callable[[dict[str, Any]], list[str]]
    #: Glob patterns (relative to OUT) of the files that must be byte-identical.
    same_bytes: tuple[str, ...]
    #: Sub-stages (marker folders under OUT/_shards) whose shards may be removed to fake an interruption.
    steps: tuple[str, ...]
    #: Fixtures the stage needs (requested through ``request.getfixturevalue``).
    fixtures: tuple[str, ...] = ()
    #: Output files of a shard of a step, as ``{shard}``-templated paths (removed with its marker).
    shard_files: dict[str, tuple[str, ...]] = field(default_factory=dict)
    #: Actors in the comparison run (2 checks parallel dispatch; 1 keeps model-loading stages quick on 2 cores).
    concurrency: int = 2


PACK_OPTIONS = {"ctx": 2048, "seed": 3, "shard_size": 10, "sequences_per_shard": 4, "verify_fraction": 0.1}


def _pack_inputs(fx: dict[str, Any]) -> list[Path]:
    data = fx["sample_data"]
    return [data / "records.jsonl", data / "llava.jsonl", data / "captions.jsonl"]


def _run_pack(out: Path, executor: Executor | None, fx: dict[str, Any]) -> dict[str, Any]:
    from packer.pack import pack

    return pack(_pack_inputs(fx), out=out, processor=str(fx["tiny_processor_dir"]), executor=executor,
                plot=False, **PACK_OPTIONS)


def _pack_argv(fx: dict[str, Any]) -> list[str]:
    o = PACK_OPTIONS
    return ["pack", *map(str, _pack_inputs(fx)), "--processor", str(fx["tiny_processor_dir"]), "--ctx", str(o["ctx"]),
            "--seed", str(o["seed"]), "--shard-size", str(o["shard_size"]),
            "--sequences-per-shard", str(o["sequences_per_shard"]), "--verify-fraction", str(o["verify_fraction"]),
            "--out", "{out}", "--executor", "ray", "--ray-address", "{address}", "--workers", "1"]


def _embed_inputs(fx: dict[str, Any]) -> list[Path]:
    data = fx["sample_data"]
    return [data / "records.jsonl", data / "bad" / "records.jsonl"]


def _run_embed(out: Path, executor: Executor | None, fx: dict[str, Any]) -> dict[str, Any]:
    from curate.balance.embed import embed

    return embed(_embed_inputs(fx), out=out, model=fx["tiny_clip_spec"], shard_size=16, batch_size=8,
                 executor=executor)


def _embed_argv(fx: dict[str, Any]) -> list[str]:
    return ["embed", *map(str, _embed_inputs(fx)), "--model", fx["tiny_clip_spec"], "--shard-size", "16",
            "--batch-size", "8", "--out", "{out}", "--executor", "ray", "--ray-address", "{address}", "--workers", "1"]


def _run_tag(out: Path, executor: Executor | None, fx: dict[str, Any]) -> dict[str, Any]:
    from curate.balance.tag import tag

    embeddings, concepts = fx["tag_inputs"]
    return tag(embeddings, concepts, out=out, top_k=5, executor=executor)


def _tag_argv(fx: dict[str, Any]) -> list[str]:
    embeddings, concepts = fx["tag_inputs"]
    return ["tag", "--embeddings", str(embeddings), "--concepts", str(concepts), "--top-k", "5", "--out", "{out}",
            "--executor", "ray", "--ray-address", "{address}", "--workers", "1"]


@pytest.fixture(scope="module")
def tag_inputs(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """Seeded embeddings (4 files in curate's layout, rows near concept vectors) and a concept matrix."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.parquet as pq

    root = tmp_path_factory.mktemp("tag-inputs")
    rng = np.random.default_rng(7)
    concepts = rng.normal(size=(400, 32)).astype(np.float32)
    concepts /= np.linalg.norm(concepts, axis=1, keepdims=True)
    concepts[[5, 77]] = 0.0  # entries the encoder could not read: never returned
    np.save(root / "concepts.npy", concepts.astype(np.float16))
    (root / "emb").mkdir()
    for f in range(4):
        truth = rng.integers(0, 400, size=50)
        rows = concepts[truth] + 0.3 * rng.normal(size=(50, 32)).astype(np.float32)
        rows /= np.linalg.norm(rows, axis=1, keepdims=True)
        np.save(root / "emb" / f"{f:06d}.npy", rows.astype(np.float16))
        pq.write_table(pa.table({"id": [f"r{f}.{i}" for i in range(50)], "source": ["synthetic"] * 50}),
                       root / "emb" / f"{f:06d}.ids.parquet")
    return root / "emb", root / "concepts.npy"


def _run_score(out: Path, executor: Executor | None, fx: dict[str, Any]) -> dict[str, Any]:
    from curate.rl.score import score

    prompts, responses = fx["score_inputs"]
    return score([prompts], ScoreConfig(responses=responses, out=out, shard_size=40), executor=executor)


def _score_argv(fx: dict[str, Any]) -> list[str]:
    prompts, responses = fx["score_inputs"]
    return ["score", "--records", str(prompts), "--responses", str(responses), "--shard-size", "40", "--out", "{out}",
            "--executor", "ray", "--ray-address", "{address}", "--workers", "1"]


@pytest.fixture(scope="module")
def score_inputs(sample_data: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """The sample RL prompts and a responses file: per prompt its true answer and a refusal, plus bad rows."""
    import json

    from curate.core.records import BadRecord, read_records

    prompts = sample_data / "rl" / "prompts.jsonl"
    rows = []
    for rec in read_records([prompts]):
        if isinstance(rec, BadRecord):
            continue
        answer = rec["answer"][0] if isinstance(rec["answer"], list) else rec["answer"]
        rows.append({"id": rec["id"], "response": f"<think>hm</think><answer>{answer}</answer>"
                     if rec.get("prompt_type") == "think" else f"<answer>{answer}</answer>"})
        rows.append({"id": rec["id"], "response": "I am not sure."})
    rows += [{"id": "nobody", "response": "<answer>1</answer>"}, {"id": rows[0]["id"], "response": None}]
    path = tmp_path_factory.mktemp("score-inputs") / "responses.jsonl"
    path.write_text("\n".join(json.dumps(r) for r in rows) + "\n{broken\n", encoding="utf-8")
    return prompts, path


def _run_vocab_embed(out: Path, executor: Executor | None, fx: dict[str, Any]) -> dict[str, Any]:
    from curate.balance.vocab.embed import embed_vocab

    return embed_vocab(fx["small_vocab"], out=out / "concepts.npy", model=fx["tiny_clip_spec"],
                       cache_dir=out / "cache", executor=executor, show_progress=False)


def _vocab_embed_argv(fx: dict[str, Any]) -> list[str]:
    return ["vocab", "embed", "--vocab", str(fx["small_vocab"]), "--model", fx["tiny_clip_spec"],
            "--out", "{out}/concepts.npy", "--cache-dir", "{out}/cache", "--executor", "ray",
            "--ray-address", "{address}"]


@pytest.fixture(scope="module")
def small_vocab(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The first 40,000 concepts of the bundled vocabulary (3 chunks; half English, half skipped Chinese)."""
    lines = (Path(__file__).resolve().parents[3] / "vocab" / "500k.txt").read_text(encoding="utf-8").splitlines()
    path = tmp_path_factory.mktemp("vocab") / "40k.txt"
    path.write_text("\n".join(lines[:40_000]) + "\n", encoding="utf-8")
    return path


PACK = StageCase(
    "pack", _run_pack, _pack_argv,
    same_bytes=("shards/*.tar", "lengths.parquet", "plan.parquet", "rejects.parquet", "lengths/*.parquet",
                "_records/*.arrow", "_plan/plan.npz", f"{SHARDS_DIR}/*/*.rejects.parquet"),
    steps=("lengths", "write"), fixtures=("sample_data", "tiny_processor_dir"),
    shard_files={"lengths": ("lengths/{shard}.parquet", "_records/{shard}.arrow"), "write": ("shards/{shard}.tar",)})
EMBED = StageCase(
    "embed", _run_embed, _embed_argv,
    same_bytes=("embeddings/*.npy", "embeddings/*.ids.parquet", "rejects.parquet",
                f"{SHARDS_DIR}/embed/*.rejects.parquet"),
    steps=("embed",), fixtures=("sample_data", "tiny_clip_spec"),
    shard_files={"embed": ("embeddings/{shard}.npy", "embeddings/{shard}.ids.parquet")}, concurrency=1)
TAG = StageCase(
    "tag", _run_tag, _tag_argv, same_bytes=("tags.parquet", "tags/*.parquet"), steps=("tag",),
    fixtures=("tag_inputs",), shard_files={"tag": ("tags/{shard}.parquet",)})

SCORE = StageCase(
    "score", _run_score, _score_argv, same_bytes=("scores.parquet", "scores/*.parquet", "rejects.parquet"),
    steps=("score",), fixtures=("score_inputs",), shard_files={"score": ("scores/{shard}.parquet",)})

VOCAB_EMBED = StageCase(
    "vocab-embed", _run_vocab_embed, _vocab_embed_argv, same_bytes=("concepts.npy",), steps=(),
    fixtures=("small_vocab", "tiny_clip_spec"), concurrency=1)



def _run_min_words(out: Path, executor: Executor | None, fx: dict[str, Any]) -> Any:
    """A filter stage (tests/curate/core/test_filters.py: one class, nothing of Ray's in it)."""
    from curate.core.filters import FilterConfig
    from curate.executors.filters import run_filter
    from tests.curate.core.test_filters import MinWords

    data = fx["sample_data"]
    return run_filter([data / "captions.jsonl", data / "records.jsonl"], FilterConfig(out=out, shard_size=5),
                      MinWords(min_words=6), executor=executor)


MIN_WORDS = StageCase(
    "min-words", _run_min_words, lambda fx: [], same_bytes=("records.jsonl", "records/*.jsonl", "rejects.parquet",
                                                             "stats.json"),
    steps=("min-words",), fixtures=("sample_data",), shard_files={"min-words": ("records/{shard}.jsonl",)})

#: Every stage compared across executors.
STAGES: list[StageCase] = [PACK, EMBED, TAG, SCORE, VOCAB_EMBED, MIN_WORDS]
#: Stages also checked for interrupted runs (Ray → local, local → Ray); one multi-step stage keeps it quick.
RESUME_STAGES: list[StageCase] = [PACK]


@pytest.fixture
def stage(request: pytest.FixtureRequest, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
          ) -> tuple[StageCase, dict[str, Any]]:
    """The test's stage case (indirect ``stage`` parameter) with its fixtures; private caches (no reuse across runs)."""
    monkeypatch.setenv("CURATE_CACHE", str(tmp_path / "cache"))
    case: StageCase = request.param
    return case, {name: request.getfixturevalue(name) for name in case.fixtures}


def stage_params(cases: list[StageCase]) -> Any:
    return pytest.mark.parametrize("stage", cases, ids=[c.name for c in cases], indirect=True)


_reference: dict[str, Path] = {}


def reference_run(case: StageCase, fx: dict[str, Any], factory: pytest.TempPathFactory) -> Path:
    """The stage run once with the local executor (cached for the module); treat it as read-only."""
    if case.name not in _reference:
        out = factory.mktemp(f"local-{case.name}") / "out"
        with pytest.MonkeyPatch.context() as mp:
            mp.setenv("CURATE_CACHE", str(out.parent / "cache"))
            case.run(out, get_executor("local"), fx)
        _reference[case.name] = out
    return _reference[case.name]


@pytest.fixture
def local_reference(stage: tuple[StageCase, dict[str, Any]], tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The local executor's outputs of the stage under test."""
    case, fx = stage
    return reference_run(case, fx, tmp_path_factory)


# --------------------------------------------------------------------------- helpers
def assert_same_outputs(a: Path, b: Path, patterns: tuple[str, ...]) -> int:
    """Every file matching ``patterns`` exists in both folders with the same bytes; returns how many."""
    compared = 0
    for pattern in patterns:
        names_a = sorted(p.relative_to(a) for p in a.glob(pattern))
        names_b = sorted(p.relative_to(b) for p in b.glob(pattern))
        assert names_a == names_b, f"{pattern}: {names_a} != {names_b}"
        for rel in names_a:
            assert (a / rel).read_bytes() == (b / rel).read_bytes(), f"{rel} differs"
            compared += 1
    return compared


def shard_markers(out: Path, step: str) -> list[Path]:
    return sorted(p for p in (out / SHARDS_DIR / step).glob("*.json") if p.name != "settings.json")


def counts(out: Path, step: str) -> list[dict[str, Any]]:
    """Per-shard counts recorded in the markers (timings excluded: they differ run to run)."""
    from curate.core.io import read_json

    result = []
    for path in shard_markers(out, step):
        m = read_json(path)
        result.append({"shard": m["shard"], "rows": m["rows"], "files": m["files"],
                       **{k: v for k, v in m["stats"].items() if k != "timings"}})
    return result


def remove_shards(out: Path, case: StageCase, step: str, keep_every: int) -> list[str]:
    """Delete the marker and outputs of every shard of ``step`` whose index is not a multiple of ``keep_every``."""
    removed = []
    for marker in shard_markers(out, step):
        sid = marker.stem
        if int(sid) % keep_every == 0:
            continue
        marker.unlink()
        for template in case.shard_files.get(step, ()):
            (out / template.format(shard=sid)).unlink(missing_ok=True)
        removed.append(sid)
    return removed


# --------------------------------------------------------------------------- tests
@stage_params(STAGES)
def test_ray_outputs_equal_local_outputs(ray_cluster, stage, local_reference, tmp_path) -> None:
    case, fx = stage
    out = tmp_path / "ray"
    case.run(out, ray_executor(case.concurrency), fx)
    assert assert_same_outputs(local_reference, out, case.same_bytes) >= len(case.same_bytes)
    for step in case.steps:
        assert counts(out, step) == counts(local_reference, step), step
    assert not any((out / ".tmp").rglob("*.*")), "work folders left behind"


@stage_params(RESUME_STAGES)
def test_killed_ray_run_is_finished_locally(ray_cluster, stage, local_reference, tmp_path) -> None:
    case, fx = stage
    out = tmp_path / "killed"
    argv = [a.format(out=out, address=ray_cluster) for a in case.argv(fx)]
    code = "import sys; from curate.cli import main; main(sys.argv[1:])"
    log = tmp_path / "driver.log"
    with open(log, "wb") as fh:
        proc = subprocess.Popen([sys.executable, "-c", code, *argv], stdout=fh, stderr=subprocess.STDOUT,
                                env={**os.environ, "PYTHONUNBUFFERED": "1"})
    first_step = case.steps[0]
    deadline = time.monotonic() + 240
    try:
        while not shard_markers(out, first_step):
            assert proc.poll() is None, f"driver ended before any shard finished:\n{log.read_text()[-3000:]}"
            assert time.monotonic() < deadline, f"no shard finished in time:\n{log.read_text()[-3000:]}"
            time.sleep(0.05)
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    wait_for_free_cpus()
    done = len(shard_markers(out, first_step))
    total = len(shard_markers(local_reference, first_step))
    print(f"killed after {done}/{total} '{first_step}' shards")
    assert 0 < done < total, f"the kill came too late to interrupt anything ({done}/{total} shards done)"
    assert "on Ray cluster" in log.read_text(), log.read_text()[-3000:]
    case.run(out, get_executor("local"), fx)  # resume locally
    assert_same_outputs(local_reference, out, case.same_bytes)
    for step in case.steps:
        assert counts(out, step) == counts(local_reference, step), step


@stage_params(RESUME_STAGES)
def test_interrupted_local_run_is_finished_on_ray(ray_cluster, stage, local_reference, tmp_path) -> None:
    """A local run stopped during its last step (two shards in three missing) is finished on Ray.

    (The killed-run test above interrupts the first step; this one the last, so both steps are covered.)
    """
    case, fx = stage
    out = tmp_path / "resumed"
    shutil.copytree(local_reference, out)
    last = case.steps[-1]
    assert remove_shards(out, case, last, keep_every=3)
    before = {p: p.stat().st_mtime_ns for step in case.steps for p in shard_markers(out, step)}
    case.run(out, ray_executor(concurrency=1), fx)
    assert [p.stem for p in shard_markers(out, last)] == [p.stem for p in shard_markers(local_reference, last)]
    assert_same_outputs(local_reference, out, case.same_bytes)
    for step in case.steps:
        assert counts(out, step) == counts(local_reference, step), step
    # shards that were complete were skipped, not redone
    assert all(p.stat().st_mtime_ns == t for p, t in before.items())


def test_task_errors_reach_the_driver_unchanged(ray_cluster, tmp_path) -> None:
    """A UserError raised in an actor's setup surfaces as the same UserError (one-line CLI message)."""
    from packer.config import PackConfig
    from packer.writer import ShardWriteTask

    task = ShardWriteTask(PackConfig(out=tmp_path, ctx=64), "none", out=str(tmp_path))
    with pytest.raises(UserError, match="no counted records"):
        run_stage(task, [Shard(0, meta=(0, 1), size=1), Shard(1, meta=(1, 2), size=1)], tmp_path,
                  executor=ray_executor(concurrency=1), seed=0)
    assert not (tmp_path / SHARDS_DIR / "write" / "000000.json").exists()


def test_ray_executor_refuses_missing_gpus(ray_cluster, tmp_path, sample_data, tiny_processor_dir) -> None:
    from packer.config import PackConfig
    from packer.count import LengthsTask
    from curate.core.shards import plan_shards

    task = LengthsTask(PackConfig(out=tmp_path / "packed"), str(tiny_processor_dir))
    shards = plan_shards([sample_data / "llava.jsonl"], 100)
    with pytest.raises(UserError, match="GPUs"):
        run_stage(task, shards, tmp_path, executor=get_executor("ray", num_gpus=1), seed=0)


def test_tasks_pickle_without_their_heavy_state(request, tmp_path_factory, tiny_processor_dir) -> None:
    """What is shipped to every actor is small: models, processors and stores are rebuilt by setup()."""
    from packer.config import PackConfig
    from packer.count import LengthsTask
    from packer.writer import ShardWriteTask

    case = PACK
    local_pack_dir = reference_run(case, {n: request.getfixturevalue(n) for n in case.fixtures}, tmp_path_factory)

    lengths = LengthsTask(PackConfig(out=tmp_path_factory.mktemp("packed")), str(tiny_processor_dir))
    lengths.setup()
    writer = ShardWriteTask(PackConfig(out=local_pack_dir, ctx=2048), "x", out=str(local_pack_dir))
    writer.setup()
    for task, heavy in [(lengths, "counter"), (writer, "_store")]:
        assert getattr(task, heavy) is not None
        blob = pickle.dumps(task)
        assert len(blob) < 4096, (type(task).__name__, len(blob))
        clone = pickle.loads(blob)
        assert getattr(clone, heavy) is None
        clone.setup()
        assert getattr(clone, heavy) is not None


def test_plain_worker_pools_spawn_while_connected_to_ray(ray_cluster, tmp_path) -> None:
    """A driver connected to Ray starts its tar walkers and record writers with spawn, never fork (Ray's gRPC
    threads do not survive a fork), and the spawned record writers write the same files."""
    import pyarrow as pa

    from curate.core.filters import write_kept
    from curate.core.threads import plain_workers_context

    assert ray.is_initialized() and plain_workers_context().get_start_method() == "spawn"
    inputs = []
    for f in range(3):
        path = tmp_path / f"in-{f}.jsonl"
        path.write_text("".join(json.dumps({"id": f"r{f}-{i}", "caption": f"c {i}"}) + "\n" for i in range(20)))
        inputs.append(path)
    chosen = [f"r{f}-{i}" for f in range(3) for i in range(0, 20, 3)]
    selection = pa.table({"id": chosen, "copies": pa.array([1, 2] * (len(chosen) // 2) + [1] * (len(chosen) % 2),
                                                          pa.int32())})
    one = write_kept(tmp_path / "one", inputs=inputs, selection=selection, workers=1)
    two = write_kept(tmp_path / "two", inputs=inputs, selection=selection, workers=2)
    assert one == two and one["records"] == sum(selection.column("copies").to_pylist())
    for name in one["files"]:
        assert (tmp_path / "one" / name).read_bytes() == (tmp_path / "two" / name).read_bytes()
