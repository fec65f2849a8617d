"""``curate dedup --executor ray`` (a real local Ray cluster) writes the local executor's bytes."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

pytest.importorskip("ray")

from curate.dedup.stage import dedup  # noqa: E402
from curate.executors import get_executor  # noqa: E402

pytestmark = [pytest.mark.ray, pytest.mark.slow]

SAME = ("rejects.parquet", "records/*", "hashes/*.parquet", "near_pairs/*.parquet", "_shards/*/*.rejects.parquet")


def test_ray_gives_the_local_bytes(ray_cluster, dedup_world, tmp_path: Path) -> None:
    inputs = list(dedup_world.inputs)
    local, on_ray = tmp_path / "local", tmp_path / "ray"
    dedup(inputs, out=local, shard_size=9, search_block=10, decode_threads=1)
    dedup(inputs, out=on_ray, shard_size=9, search_block=10, decode_threads=1,
          executor=get_executor("ray", concurrency=2))
    compared = 0
    for pattern in SAME:
        names = sorted(p.relative_to(local) for p in local.glob(pattern))
        assert names == sorted(p.relative_to(on_ray) for p in on_ray.glob(pattern)), pattern
        for rel in names:
            assert (local / rel).read_bytes() == (on_ray / rel).read_bytes(), rel
            compared += 1
    assert compared >= 8
    a, b = (json.loads((d / "stats.json").read_text()) for d in (local, on_ray))
    assert {k: a[k] for k in ("records_in", "records_out", "dropped", "errored", "per_source", "duplicates")} == \
           {k: b[k] for k in ("records_in", "records_out", "dropped", "errored", "per_source", "duplicates")}
