"""Scoring inside Ray workers: the worker pool and the code sandbox work there too."""

from __future__ import annotations

import json
import logging

import pytest

from curate.rewards.registry import score, score_many

from .escapes import needs_bwrap

ray = pytest.importorskip("ray")
pytestmark = [pytest.mark.ray, pytest.mark.slow, needs_bwrap]

SVG = '<svg xmlns="http://www.w3.org/2000/svg" width="32" height="32"><rect x="4" y="4" width="16" height="16"/></svg>'
ITEMS = [
    ({"answer": "\\frac{1}{2}", "answer_type": "math-expressions"}, "<answer>2/4</answer>"),
    ({"answer": "\\frac{1}{2}", "answer_type": "math-expressions"}, "<answer>0.4</answer>"),
    ({"answer": "3", "answer_type": "math-expressions", "reward": {"parameters": {"time_limit": 1.0}}},
     "<answer>9^{9^{9^{9}}}</answer>"),
    ({"answer": SVG, "answer_type": "svg-code"}, "<answer>" + SVG.replace('width="16"', 'width="12"') + "</answer>"),
    ({"answer": json.dumps({"tests": [{"input": "2", "output": "4"}]}), "answer_type": "general-code"},
     "<answer>print(int(input()) ** 2)</answer>"),
    ({"answer": "B", "answer_type": "multiple-choice"}, "<answer>The answer is B</answer>"),
]


def _score_in_worker(items: list) -> list[dict]:
    return [r.to_dict() for r in score_many(items)]


def test_scoring_inside_ray_workers() -> None:
    if ray.is_initialized():
        ray.shutdown()
    ray.init(num_cpus=2, include_dashboard=False, logging_level=logging.WARNING)
    try:
        remote = ray.remote(_score_in_worker)
        got = ray.get([remote.remote(ITEMS)], timeout=240)
    finally:
        ray.shutdown()
    want = [score(r, s).to_dict() for r, s in ITEMS]
    for results in got:
        for g, w in zip(results, want):
            if w["error"] == "timeout":
                assert g["error"] == "timeout"
            else:
                assert g == w
    assert [w["accuracy"] for w in want][:2] == [1.0, 0.0]
    assert want[4]["accuracy"] == 1.0 and want[5]["accuracy"] == 1.0
