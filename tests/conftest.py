"""Shared test set-up: offline environment and session-scoped fixtures.

Fixture modules live in tests/_fixtures/ and are loaded as plugins so that
several people can add fixtures without editing this file.
"""

from __future__ import annotations

import os
import tempfile

# Nothing may reach a model hub at test time.
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
# Tiny models run fastest on one thread, and a shared 2-core machine stays responsive.
os.environ.setdefault("OMP_NUM_THREADS", "1")
# Stage verbs write OUT/report/ at their end; tests of the report turn it on where they need it.
os.environ.setdefault("CURATE_REPORT", "0")
# Every Ray cluster of the session (local ones and the two-node one) without token authentication: Ray reads
# the mode once per process, and a machine with ~/.ray/auth_token would otherwise start local clusters that
# want a token this process, once connected to a cluster without one, never sends.
os.environ["RAY_AUTH_MODE"] = "disabled"
os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
# Caches across runs (lengths, tar splits, remote mirrors) go to a folder of this test session, never the user's.
os.environ["CURATE_CACHE"] = tempfile.mkdtemp(prefix="curate-test-cache-")

import pathlib

pytest_plugins = [
    f"tests._fixtures.{p.stem}"
    for p in sorted((pathlib.Path(__file__).parent / "_fixtures").glob("*.py"))
    if p.stem != "__init__"
]


import pytest  # noqa: E402 - after the environment above is set


@pytest.fixture(autouse=True)
def _cwd_kept() -> object:
    """Each test leaves the working folder as it found it: a test process runs many files (pytest-xdist), and a
    Ray cluster started later takes its workers' import path from the folder it starts in."""
    where = os.getcwd()
    yield
    os.chdir(where)
