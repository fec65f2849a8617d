"""Ray on nodes that share nothing but the bucket: two real Ray nodes on this machine, a real S3 server (moto).

The ``ray_two_nodes`` fixture (tests/_fixtures/ray_cluster.py) starts ``ray start --head`` and
``ray start --address`` with one CPU, a temp folder and a ``CURATE_CACHE`` each, inside bubblewrap so
that neither can see the driver's folders nor the other's. Inputs and ``--out`` are only in the
bucket. ``pack``, ``balance`` and ``rl-filter`` run with two actors (one per node) and must give the
bytes of a run with the local executor; a worker node stopped mid-run leaves a run that finishes on
the other node or is finished by a rerun, with the same bytes.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

ray = pytest.importorskip("ray")

from curate.rl.config import RlFilterConfig
from curate.executors import get_executor  # noqa: E402
from packer.pack import pack  # noqa: E402
from tests._fixtures.formats import Layouts  # noqa: E402
from tests._fixtures.ray_cluster import TwoNodes  # noqa: E402
from tests._fixtures.s3 import bucket_objects, folder_files, s3  # noqa: E402

pytestmark = [pytest.mark.ray, pytest.mark.slow]

PACKED = ("shards/*.tar", "lengths/*.parquet", "plan.parquet", "lengths.parquet", "_records/*.arrow")


@pytest.fixture
def driver_cache(ray_two_nodes: TwoNodes, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The driver's own cache, hidden from both nodes."""
    monkeypatch.setenv("CURATE_CACHE", ray_two_nodes.env["CURATE_CACHE"])
    return Path(ray_two_nodes.env["CURATE_CACHE"])


def _upload(bucket: str, layouts: Layouts) -> list[str]:
    fs = s3()
    fs.put_file(str(layouts.hf), f"{bucket}/in/hf.parquet")
    for tar in sorted(layouts.wds_dir.glob("*.tar")):
        fs.put_file(str(tar), f"{bucket}/in/wds/{tar.name}")
    fs.put(str(layouts.files.parent) + "/", f"{bucket}/in/files/", recursive=True)
    return [f"{bucket}/in/hf.parquet", f"{bucket}/in/wds/{{00000..00001}}.tar"]


def test_the_nodes_share_nothing_but_the_bucket(ray_two_nodes: TwoNodes, driver_cache: Path, bucket: str) -> None:
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    (ray_two_nodes.driver / "secret.txt").write_text("the driver's")
    s3().pipe_file(f"{bucket[5:]}/seen.txt", b"the bucket's")

    @ray.remote(num_cpus=1)
    def look(driver: str, url: str) -> tuple[str, bool, bytes]:
        import s3fs

        return (os.environ["CURATE_CACHE"], os.path.exists(os.path.join(driver, "secret.txt")),
                s3fs.S3FileSystem(skip_instance_cache=True).cat_file(url[5:]))

    nodes = [n["NodeID"] for n in ray.nodes() if n["Alive"]]
    seen = ray.get([look.options(scheduling_strategy=NodeAffinitySchedulingStrategy(n, soft=False)).remote(
        str(ray_two_nodes.driver), f"{bucket}/seen.txt") for n in nodes])
    caches = {cache for cache, _, _ in seen}
    assert caches == {str(ray_two_nodes.head.cache), str(ray_two_nodes.worker.cache)}, seen
    assert not any(sees for _, sees, _ in seen)  # the driver's folder is empty for them
    assert all(data == b"the bucket's" for _, _, data in seen)


def _many(folder: Path, layouts: Layouts, n: int) -> Path:
    """A tar of ``n`` records (the layouts' items again and again): enough shards for both nodes' actors."""
    import webdataset as wds

    tar = folder / f"many-{n}.tar"
    with wds.TarWriter(str(tar)) as sink:
        for i in range(n):
            it = layouts.items[i % len(layouts.items)]
            sink.write({"__key__": f"k{i:04d}", it["name"].rsplit(".", 1)[-1]: it["bytes"], "txt": it["caption"]})
    return tar


def test_pack_on_two_nodes_gives_the_local_bytes(ray_two_nodes: TwoNodes, driver_cache: Path, bucket: str,
                                                  layouts: Layouts, tiny_processor_dir: Path) -> None:
    inputs = _upload(bucket, layouts)[:1]  # images as Parquet bytes: they travel in the record store
    s3().put_file(str(_many(ray_two_nodes.driver, layouts, 36)), f"{bucket}/in/many.tar")
    inputs.append(f"{bucket}/in/many.tar")  # tar members, read again by address; many small shards: the actor
    kw = dict(ctx=1024, processor=str(tiny_processor_dir), seed=2, shard_size=3, sequences_per_shard=1,  # that
              verify_sample=0, plot=False)  # starts last gets some too
    executor = get_executor("ray", workers=2)
    pack(inputs, out=f"{bucket}/ray", executor=executor, **kw)
    pack(inputs, out=ray_two_nodes.driver / "local", **kw)
    got, want = bucket_objects(f"{bucket}/ray", PACKED), folder_files(ray_two_nodes.driver / "local", PACKED)
    assert sum(k.startswith("shards/") for k in got) > 10 and got == want
    used = [(run["desc"], run["actors_used"]) for run in executor.runs]
    assert max(n for _, n in used) == 2, used  # shards ran on both nodes (one actor each: one CPU each)
    for node in (ray_two_nodes.head, ray_two_nodes.worker):  # each worked in its own staging folder for the URL
        assert [p.read_text() for p in (node.cache / "remote").glob("*/.url")] == [f"{bucket}/ray"], node.name
        assert not [p for p in (node.cache / "remote").rglob("*") if p.suffix == ".tar"]  # none kept once uploaded


def test_balance_and_rl_filter_on_two_nodes_give_the_local_bytes(
        ray_two_nodes: TwoNodes, driver_cache: Path, bucket: str, layouts: Layouts, tiny_clip_spec: str,
        sample_data: Path) -> None:
    from curate.balance.pipeline import balance
    from curate.rl.filter import rl_filter

    fs = s3()
    inputs = _upload(bucket, layouts)[:1]
    vocab = "\n".join(sorted({w.lower().strip(".") for it in layouts.items for w in it["caption"].split()})) + "\n"
    fs.pipe_file(f"{bucket[5:]}/vocab.txt", vocab.encode())
    kw = dict(model=tiny_clip_spec, top_k=2, fraction=0.5, shard_size=4, seed=3)
    balance(inputs, out=f"{bucket}/bal", vocab=f"{bucket}/vocab.txt", executor=get_executor("ray", workers=2),
            cache_dir=ray_two_nodes.driver / "concepts-ray", **kw)
    balance(inputs, out=ray_two_nodes.driver / "bal", vocab=f"{bucket}/vocab.txt",
            cache_dir=ray_two_nodes.driver / "concepts-local", **kw)
    pats = ("embeddings/*", "tags.parquet", "selection.parquet", "concepts.npy", "records/*")
    got = bucket_objects(f"{bucket}/bal", pats)
    assert any(k.startswith("records/") for k in got) and got == folder_files(ray_two_nodes.driver / "bal", pats)

    rl = sample_data / "rl"
    fs.put(str(rl) + "/", f"{bucket}/rl/", recursive=True)
    prompts = [json.loads(line) for line in (rl / "prompts.jsonl").read_text().splitlines() if line.strip()]
    answers = "".join(json.dumps({"id": p["id"], "response": f"<answer>{json.dumps(p['answer'] if i % 3 else 'no')}"
                                  "</answer>", "sample": k}) + "\n"
                      for i, p in enumerate(prompts) for k in range(2))
    fs.pipe_file(f"{bucket[5:]}/answers.jsonl", answers.encode())
    kw = dict(backend={"rollouts": f"{bucket}/answers.jsonl"}, n=2, shard_size=3, band=(-0.1, 1.1))
    rl_filter([f"{bucket}/rl/prompts.jsonl"], RlFilterConfig(out=f"{bucket}/rl-out", **kw),
              executor=get_executor("ray", workers=2))
    rl_filter([f"{bucket}/rl/prompts.jsonl"], RlFilterConfig(out=ray_two_nodes.driver / "rl-out", **kw))
    pats = ("kept.jsonl", "prompts.parquet", "rollouts.parquet", "rejects.parquet")
    got = bucket_objects(f"{bucket}/rl-out", pats)
    assert "kept.jsonl" in got and got == folder_files(ray_two_nodes.driver / "rl-out", pats)


def test_a_worker_node_stopped_mid_run(ray_two_nodes: TwoNodes, driver_cache: Path, bucket: str,
                                       layouts: Layouts, tiny_processor_dir: Path) -> None:
    """``ray stop`` of the worker node while ``curate pack`` runs there: the run finishes on the head node, or a
    rerun finishes it; the bytes are those of an uninterrupted local run. (Last in the module: the node stays down.)"""
    tar = _many(ray_two_nodes.driver, layouts, 40)
    fs = s3()
    fs.put_file(str(tar), f"{bucket}/in/stopped.tar")
    args = [f"{bucket}/in/stopped.tar", "--processor", str(tiny_processor_dir), "--ctx", "1024", "--seed", "4",
            "--shard-size", "2", "--sequences-per-shard", "1", "--verify-sample", "0"]
    env = {**os.environ, **ray_two_nodes.env, "CURATE_REPORT": "0"}
    log = ray_two_nodes.driver / "driver.log"
    with open(log, "w") as fh:  # a file, not a pipe: the driver never blocks on its progress lines
        run = subprocess.Popen([sys.executable, "-m", "curate", "pack", *args, "--out", f"{bucket}/stopped",
                                "--executor", "ray", "--workers", "2"], env=env, stdout=fh, stderr=subprocess.STDOUT)
    markers = f"{bucket[5:]}/stopped/_shards/lengths"
    deadline = time.monotonic() + 120
    try:
        while time.monotonic() < deadline and run.poll() is None:
            fs.invalidate_cache()
            if fs.exists(markers) and sum(p.rsplit("/", 1)[-1][0].isdigit() for p in fs.ls(markers)) >= 6:
                break
            time.sleep(0.05)
        assert run.poll() is None, "the run ended before the node could be stopped:\n" + log.read_text()
        ray_two_nodes.worker.stop(grace=0.5)  # what `ray stop` does on that node: its processes end
        try:
            finished = run.wait(timeout=90) == 0
        except subprocess.TimeoutExpired:
            finished = False
    finally:
        if run.poll() is None:
            run.kill()
            run.wait()
    print(f"the run {'finished on the head node' if finished else 'stopped; a rerun finishes it'}")
    kw = dict(processor=str(tiny_processor_dir), ctx=1024, seed=4, shard_size=2, sequences_per_shard=1, verify_sample=0)
    if not finished:  # the run could not go on without the node: the same command again finishes it (here: locally)
        pack([f"{bucket}/in/stopped.tar"], out=f"{bucket}/stopped", **kw)
    pack([f"{bucket}/in/stopped.tar"], out=ray_two_nodes.driver / "reference", **kw)
    got, want = bucket_objects(f"{bucket}/stopped", PACKED), folder_files(ray_two_nodes.driver / "reference", PACKED)
    assert sum(k.startswith("shards/") for k in got) > 10 and got == want
