"""Progress outside a terminal (rate and time left in each line) and how much is said (quiet, normal, verbose)."""

from __future__ import annotations

import os
import re

import pytest

from curate.core import progress
from curate.core.progress import NORMAL, QUIET, VERBOSE, StageProgress, duration, log_line, set_verbosity, verbosity


@pytest.fixture
def level(monkeypatch: pytest.MonkeyPatch):  # noqa: ANN201 - the setter
    """Set a verbosity for one test; the environment and the console are put back after it."""
    monkeypatch.delenv("CURATE_VERBOSITY", raising=False)
    for key in ("HF_HUB_DISABLE_PROGRESS_BARS", "TRANSFORMERS_VERBOSITY"):
        monkeypatch.delenv(key, raising=False)
    quiet = progress.console.quiet
    yield set_verbosity
    progress._SET_HERE.clear()
    progress.console.quiet = quiet


def test_duration() -> None:
    assert [duration(s) for s in (0, 42.4, 185, 7620)] == ["0s", "42s", "3m05s", "2h07m"]


def test_log_line_has_rate_and_eta() -> None:
    line = log_line("embed concepts", 311296, 500000, "concepts", 31.0)
    assert line == "embed concepts: 311,296/500,000 concepts (62%) 31s, 10,042 concepts/s, eta 19s"
    assert log_line("tag", 0, 10, "shards", 0.0) == "tag: 0/10 shards (0%) 0s"
    assert log_line("tag", 10, 10, "shards", 4.0) == "tag: 10/10 shards (100%) 4s, 2.5 shards/s"


def test_lines_outside_a_terminal(level, capsys: pytest.CaptureFixture[str]) -> None:  # noqa: ANN001
    level(NORMAL)
    with StageProgress("count", 4, unit="records", log_every=0.0) as bar:
        bar.advance(1)
        bar.advance(3)
    lines = capsys.readouterr().err.splitlines()
    assert re.fullmatch(r"count: 1/4 records \(25%\) \d+s, [\d.,e+]+ records/s, eta \d+[smh].*", lines[0]), lines
    assert lines[1].startswith("count: 4/4 records (100%)")
    assert re.fullmatch(r"count: 4/4 records done in [\d.]+s, [\d.,e+]+ records/s", lines[2]), lines


def test_quiet_says_nothing(level, capsys: pytest.CaptureFixture[str]) -> None:  # noqa: ANN001
    level(QUIET)
    assert verbosity() == QUIET and os.environ["CURATE_VERBOSITY"] == "-1"
    with StageProgress("count", 4, log_every=0.0) as bar:
        bar.advance(4)
    progress.console.print("a summary")
    assert capsys.readouterr().err == ""
    assert os.environ["HF_HUB_DISABLE_PROGRESS_BARS"] == "1" and os.environ["TRANSFORMERS_VERBOSITY"] == "error"


def test_verbose_logs_more_often_and_lets_libraries_speak(level) -> None:  # noqa: ANN001
    level(NORMAL)
    assert os.environ["HF_HUB_DISABLE_PROGRESS_BARS"] == "1"
    assert StageProgress("x", 1)._log_every == 30.0
    level(VERBOSE)
    assert "HF_HUB_DISABLE_PROGRESS_BARS" not in os.environ  # set by curate, so taken back
    assert StageProgress("x", 1)._log_every == 5.0


def test_a_users_setting_wins(level, monkeypatch: pytest.MonkeyPatch) -> None:  # noqa: ANN001
    monkeypatch.setenv("HF_HUB_DISABLE_PROGRESS_BARS", "0")
    level(NORMAL)
    assert os.environ["HF_HUB_DISABLE_PROGRESS_BARS"] == "0"
    level(VERBOSE)
    assert os.environ["HF_HUB_DISABLE_PROGRESS_BARS"] == "0"
