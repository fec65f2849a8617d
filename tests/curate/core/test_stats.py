"""Typed results built from a stage's stats.json content."""

from __future__ import annotations

from curate.core.stats import from_stats
from curate.recaption.config import CaptionCounts, RecaptionResult
from curate.rl.config import RlFilterResult


def test_nested_sections_become_dataclasses() -> None:
    stats = {"records_in": 3, "records_out": 2, "dropped": {"no_image": 1}, "errored": {}, "stage": "recaption",
             "captions": {"images": 4, "kept": 3, "retried": 1, "failed": {"refusal": 1}, "mean_chars": 20.5,
                          "attempts": 5},
             "per_lang": {"en": {"images": 2, "kept": 2}, "zh": {"images": 2, "kept": 1, "mean_chars": None}}}
    r = from_stats(RecaptionResult, stats)
    assert (r.records_in, r.records_out, r.rejected) == (3, 2, True)
    assert r.captions == CaptionCounts(images=4, kept=3, retried=1, failed={"refusal": 1}, mean_chars=20.5)
    assert r.per_lang["zh"].kept == 1 and r.per_lang["en"].mean_chars is None


def test_missing_sections_keep_their_defaults() -> None:
    r = from_stats(RlFilterResult, {"records_in": 5, "kept": 2, "overall": {"mean_reward": 0.25}})
    assert r.kept == 2 and r.overall.mean_reward == 0.25 and r.overall.mean_pass_at_1 is None
    assert not r.rejected


def test_from_stats_picks_the_result_of_the_stage(tmp_path) -> None:
    """Issue 49: ``from_stats(stats)`` (or a folder, or its stats.json) needs no class: the stage names it."""
    import json

    import pytest

    from curate.core.errors import UserError
    from curate.core.stats import from_stats
    from packer.config import PackResult

    stats = {"stage": "pack", "records_in": 5, "records_packed": 4, "bins": 2, "dropped": {"too_long": 1}}
    (tmp_path / "stats.json").write_text(json.dumps(stats))
    assert from_stats(stats) == from_stats(tmp_path) == from_stats(str(tmp_path / "stats.json")) \
        == from_stats(PackResult, stats)
    assert isinstance(from_stats(stats), PackResult) and from_stats(stats).bins == 2
    with pytest.raises(UserError, match="no typed result"):
        from_stats({"stage": "report"})
    with pytest.raises(UserError, match="no stats.json there"):
        from_stats(tmp_path / "nope")
