"""``curate.core.environ.environ``: variables set for a block, then restored or removed, errors included."""

from __future__ import annotations

import os

import pytest

from curate.core.environ import environ


def test_values_are_set_then_restored_or_removed(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CURATE_TEST_KEPT", "before")
    monkeypatch.delenv("CURATE_TEST_NEW", raising=False)
    with pytest.raises(RuntimeError):
        with environ({"CURATE_TEST_KEPT": "during", "CURATE_TEST_NEW": "1"}):
            assert os.environ["CURATE_TEST_KEPT"] == "during" and os.environ["CURATE_TEST_NEW"] == "1"
            raise RuntimeError("the block fails")
    assert os.environ["CURATE_TEST_KEPT"] == "before"
    assert "CURATE_TEST_NEW" not in os.environ
