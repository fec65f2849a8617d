"""A filter stage on Ray (the local 2-CPU cluster of ``tests/_fixtures/ray_cluster.py``) writes the local run's
bytes, and a run begun locally is finished on Ray: nothing in :mod:`curate.core.filters` is Ray's."""

from __future__ import annotations

from pathlib import Path

import pytest

ray = pytest.importorskip("ray")

from curate.core.filters import FilterConfig, run_filter  # noqa: E402
from curate.core.shards import SHARDS_DIR  # noqa: E402
from curate.executors import get_executor  # noqa: E402
from tests.curate.core.test_filters import MinWords, _files, inputs  # noqa: E402, F401 (the fixture)

pytestmark = [pytest.mark.ray, pytest.mark.slow]


def test_ray_finishes_a_local_run_with_the_local_bytes(ray_cluster: str, inputs: Path, tmp_path: Path) -> None:
    import shutil

    local, mixed = tmp_path / "local", tmp_path / "mixed"
    run_filter([inputs], FilterConfig(out=local, shard_size=3), MinWords(min_words=3))
    shutil.copytree(local, mixed)
    for name in ("records.jsonl", "stats.json", "rejects.parquet"):
        (mixed / name).unlink()
    markers = sorted(p for p in (mixed / SHARDS_DIR / "min-words").glob("0*.json"))
    for marker in markers[1:]:  # all shards but the first lost: Ray runs those, the first is kept
        marker.unlink()
        (mixed / "records" / marker.name.replace(".json", ".jsonl")).unlink()
    result = run_filter([inputs], FilterConfig(out=mixed, shard_size=3), MinWords(min_words=3),
                        executor=get_executor("ray", concurrency=1))
    assert result.records_out == 5 and _files(mixed) == _files(local)
