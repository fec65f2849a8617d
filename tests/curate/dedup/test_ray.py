"""``curate dedup --executor ray`` (a real local Ray cluster) writes the local executor's bytes."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

pytest.importorskip("ray")

from curate.dedup.stage import dedup  # noqa: E402
from curate.executors import get_executor  # noqa: E402
from tests._fixtures.dedup import SAME_BYTES, same_files  # noqa: E402

pytestmark = [pytest.mark.ray, pytest.mark.slow]


def test_ray_gives_the_local_bytes(ray_cluster, dedup_world, tmp_path: Path) -> None:
    inputs = list(dedup_world.inputs)
    local, on_ray = tmp_path / "local", tmp_path / "ray"
    dedup(inputs, out=local, shard_size=9, search_block=10, decode_threads=1)
    dedup(inputs, out=on_ray, shard_size=9, search_block=10, decode_threads=1,
          executor=get_executor("ray", concurrency=2))
    assert same_files(local, on_ray) >= len(SAME_BYTES) + 3
    a, b = (json.loads((d / "stats.json").read_text()) for d in (local, on_ray))
    assert {k: a[k] for k in ("records_in", "records_out", "dropped", "errored", "per_source", "duplicates")} == \
           {k: b[k] for k in ("records_in", "records_out", "dropped", "errored", "per_source", "duplicates")}
