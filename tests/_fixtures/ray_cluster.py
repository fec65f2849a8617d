"""Module fixture: a real local Ray cluster (2 CPUs) for the tests of ``--executor ray``.

Each test module that asks for ``ray_cluster`` gets one cluster, started before its first
test and stopped after its last (skipped when Ray is not installed).
"""

from __future__ import annotations

import logging
from collections.abc import Iterator

import pytest


@pytest.fixture(scope="module")
def ray_cluster() -> Iterator[str]:
    """A local 2-CPU Ray cluster for this module; yields its address (for subprocess drivers)."""
    ray = pytest.importorskip("ray")
    if ray.is_initialized():
        ray.shutdown()
    ray.init(address="local", num_cpus=2, include_dashboard=False, logging_level=logging.WARNING)
    try:
        yield ray.get_runtime_context().gcs_address
    finally:
        ray.shutdown()
