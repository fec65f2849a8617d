"""The Arrow pool curate chooses, in fresh interpreters (the choice is process-wide)."""

from __future__ import annotations

import os
import subprocess
import sys

import pyarrow as pa
import pytest

_SHOW = "from curate.core.arrow_pool import prefer_jemalloc; print(prefer_jemalloc())"


def _pool_after(env_pool: str | None) -> str:
    env = {k: v for k, v in os.environ.items() if k != "ARROW_DEFAULT_MEMORY_POOL"}
    if env_pool:
        env["ARROW_DEFAULT_MEMORY_POOL"] = env_pool
    out = subprocess.run([sys.executable, "-c", _SHOW], env=env, capture_output=True, text=True, check=True)
    return out.stdout.strip()


def test_jemalloc_is_chosen_unless_the_environment_names_a_pool() -> None:
    try:
        pa.jemalloc_memory_pool()
    except NotImplementedError:
        pytest.skip("this pyarrow has no jemalloc")
    assert _pool_after(None) == "jemalloc"
    assert _pool_after("system") == "system"  # the user's choice stands
    assert _pool_after("mimalloc") == "mimalloc"
