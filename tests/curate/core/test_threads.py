"""Thread caps: executors tell each worker its cores, the math verifier pool sizes itself from them; environ() sets and restores variables."""

from __future__ import annotations

import os

import pytest

from curate.core.threads import CPUS_VAR, available_cpus, worker_cpus, environ
from curate.rewards.runtime.limits import default_size


def test_pool_size_follows_the_cores_given(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("CURATE_REWARD_WORKERS", raising=False)
    monkeypatch.delenv(CPUS_VAR, raising=False)
    assert default_size() == available_cpus() == len(os.sched_getaffinity(0))
    with worker_cpus(7):
        assert default_size() == 7  # e.g. a 64-core node with --workers 9, or a Ray actor with 7 CPUs
    assert CPUS_VAR not in os.environ
    monkeypatch.setenv(CPUS_VAR, "12")
    assert default_size() == 12  # more than the old cap of 4
    monkeypatch.setenv("CURATE_REWARD_WORKERS", "2")
    assert default_size() == 2


# ``curate.core.threads.environ``: variables set for a block, then restored or removed, errors included.
def test_values_are_set_then_restored_or_removed(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CURATE_TEST_KEPT", "before")
    monkeypatch.delenv("CURATE_TEST_NEW", raising=False)
    with pytest.raises(RuntimeError):
        with environ({"CURATE_TEST_KEPT": "during", "CURATE_TEST_NEW": "1"}):
            assert os.environ["CURATE_TEST_KEPT"] == "during" and os.environ["CURATE_TEST_NEW"] == "1"
            raise RuntimeError("the block fails")
    assert os.environ["CURATE_TEST_KEPT"] == "before"
    assert "CURATE_TEST_NEW" not in os.environ
