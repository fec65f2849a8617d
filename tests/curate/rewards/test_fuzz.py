"""Fuzz: hostile outputs through every verifier (2,500 by default: every fixed case and random ones;
``CURATE_FUZZ_N=10000`` for the long run).

No exception escapes, every score is in [0, 1], every error is a named reason, and no
call outlives its verifier's time limit (plus a small allowance for process start-up).
"""

from __future__ import annotations

import json
import os
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor

import pytest

from curate.rewards.registry import VERIFIERS, score
from curate.rewards.runtime.limits import warm_up
from curate.rewards.registry import INLINE_LIMIT

from .escapes import needs_bwrap
from .hostile import hostile_outputs

SVG_GOLD = '<svg xmlns="http://www.w3.org/2000/svg" width="32" height="32"><circle cx="16" cy="16" r="8"/></svg>'
DETECTION_GOLD = json.dumps([{"bbox_2d": [0, 0, 10, 10], "label": "cat"}, {"bbox_2d": [20, 20, 30, 30], "label": "dog"}])
CODE_GOLD = json.dumps({"tests": [{"input": "3", "output": "6"}]})

# verifier -> (record, limit in seconds the call must finish within): the verifier's own time
# limit, plus 6 s for killing a worker and process scheduling on a busy 2-core machine (the suite runs two test processes at once).
SLACK = 6.0
RECORDS = {
    "math": ({"answer": "\\frac{1}{2}", "answer_type": "math-expressions", "reward": {"parameters": {"time_limit": 1.0}}}, 1.0 + SLACK),
    "choice": ({"answer": "B", "answer_type": "multiple-choice"}, INLINE_LIMIT),
    "number": ({"answer": "42", "answer_type": "number"}, INLINE_LIMIT),
    "boolean": ({"answer": "yes", "answer_type": "boolean"}, INLINE_LIMIT),
    "ocr": ({"answer": "hello world", "answer_type": "ocrtext"}, INLINE_LIMIT),
    "string": ({"answer": "Paris", "answer_type": "any"}, INLINE_LIMIT),
    "critic": ({"answer": "correct", "answer_type": "critic", "prompt_type": "think"}, INLINE_LIMIT),
    "bbox": ({"answer": "[10, 10, 50, 50]", "answer_type": "bbox", "image_size": [640, 480]}, INLINE_LIMIT),
    "detection": ({"answer": DETECTION_GOLD, "answer_type": "bbox",
                   "reward": {"verifier": "detection", "parameters": {"time_limit": 2.0}}}, 2.0 + SLACK),
    "html": ({"answer": "<p>hello <b>world</b></p>", "answer_type": "html-code"}, INLINE_LIMIT),
    "svg": ({"answer": SVG_GOLD, "answer_type": "svg-code", "reward": {"parameters": {"time_limit": 2.0}}}, 2.0 + SLACK),
    "code": ({"answer": CODE_GOLD, "answer_type": "general-code",
              "reward": {"parameters": {"wall_seconds": 2.0, "cpu_seconds": 1}}}, 2.0 + SLACK),
    "vlm-r1": ({"answer": "B", "reward": {"verifier": "vlm-r1", "parameters": {"method": "default", "time_limit": 2.0}}},
               2.0 + SLACK),
    "v-triune-math": ({"answer": "42", "reward": {"verifier": "v-triune-math", "parameters": {"time_limit": 2.0}}},
                      2.0 + SLACK),
    "llava-ov-rl": ({"answer": "[10, 10, 50, 50]", "reward": {"verifier": "llava-ov-rl",
                                                               "parameters": {"answer_type": "bbox"}}}, INLINE_LIMIT),
}
KNOWN_ERRORS = {"timeout", "verifier_crashed", "response_too_large", "answer_too_long", "answer_too_deep"}


def test_records_cover_every_verifier() -> None:
    assert set(RECORDS) == set(VERIFIERS)


@pytest.mark.slow
@needs_bwrap  # the code verifier's hostile programs run in the sandbox
@pytest.mark.filterwarnings("ignore::SyntaxWarning", "ignore::DeprecationWarning")
def test_fuzz_hostile_outputs_through_every_verifier() -> None:
    n = int(os.environ.get("CURATE_FUZZ_N", "2500"))
    outputs = hostile_outputs(n, seed=1234)
    assert len(outputs) == n
    warm_up(wait=True)  # worker start-up is not part of any call's limit
    errors: Counter = Counter()
    slowest: dict[str, float] = {}

    def run(args: tuple[str, int]) -> tuple[str, int, float, object]:
        name, i = args
        t0 = time.monotonic()
        result = score(RECORDS[name][0], outputs[i])  # must never raise
        return name, i, time.monotonic() - t0, result

    jobs = [(name, i) for name in RECORDS for i in range(len(outputs))]
    with ThreadPoolExecutor(2) as ex:  # two callers at a time, as many as there are cores
        for name, i, elapsed, result in ex.map(run, jobs, chunksize=64):
            slowest[name] = max(slowest.get(name, 0.0), elapsed)
            assert elapsed <= RECORDS[name][1], (name, i, elapsed, outputs[i][:200])
            assert result.verifier == name
            for value in (result.accuracy, result.format, result.reward):
                assert 0.0 <= value <= 1.0, (name, i, result)
            if result.error is not None:
                assert result.error in KNOWN_ERRORS or result.error.startswith("verifier_error:"), result
                assert result.accuracy == 0.0 and result.reward == 0.0
                errors[(name, result.error)] += 1
    print("\nerrors:", dict(errors), "\nslowest call per verifier:", {k: round(v, 3) for k, v in slowest.items()})
    # The hostile cases are really exercised: pooled work timed out, huge inputs were refused.
    assert errors[("math", "timeout")] >= 1
    assert errors[("code", "timeout")] >= 1
    assert any(reason == "answer_too_long" for _, reason in errors)
