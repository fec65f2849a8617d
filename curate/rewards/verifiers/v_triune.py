"""V-Triune's math accuracy and verl's geometry3k accuracy, as their reward code computes them.

* ``method: v-triune`` (default): V-Triune's ``mathverify`` verifier (MiniMax-AI/One-RL-to-See-Them-All
  ``reward_server/verify.py`` lines 133-175): response and solution lower-cased; the solution parsed by
  math-verify's default extraction (``first_match``), the response by LaTeX extraction only, ``\\boxed`` first and
  never without an anchor (so a bare ``42`` is no answer: the file's own checks, lines 570-580, score
  ``("42", "42")`` 0 and ``("\\boxed{42}", "42")`` 1); 0 when the solution does not parse.
* ``method: geo3k``: verl's geometry3k accuracy (volcengine/verl ``verl/utils/reward_score/geo3k.py`` lines 25-30):
  the last ``\\boxed{…}`` of the response against the gold, 0 without one. verl grades with mathruler's
  ``grade_answer``; curate compares with math-verify (:func:`curate.rewards.verifiers.math.compare`), which agrees
  on numbers and most expressions.

math-verify runs in a worker under the verifier's time limit (no signal timeouts).
"""

from __future__ import annotations

from typing import Any, Mapping

from curate.rewards.extract import last_boxed_span
from curate.rewards.verdict import Context, Deferred, RecordError, param, where

DEFAULT_TIME_LIMIT = 10.0
METHODS = ("v-triune", "geo3k")


def math_accuracy(predict: str, solution: str) -> float:
    """Worker task: V-Triune's ``verify_accuracy`` of ``MathVerifyVerifier`` (see the module docstring)."""
    import math_verify
    from latex2sympy2_extended import NormalizationConfig

    predict, solution = predict.lower(), solution.lower()
    gold = math_verify.parse(solution, extraction_mode="first_match", parsing_timeout=None)
    if not gold:
        return 0.0
    config = math_verify.LatexExtractionConfig(
        normalization_config=NormalizationConfig(nits=False, malformed_operators=False, basic_latex=True,
                                                 boxed="all", units=True),
        boxed_match_priority=0, try_extract_without_anchor=False)
    answer = math_verify.parse(predict, extraction_config=[config], extraction_mode="first_match",
                               parsing_timeout=None)
    try:
        return float(math_verify.verify(gold, answer, timeout_seconds=None))
    except Exception:  # noqa: BLE001 - the seed scores a failed verification 0
        return 0.0


def verify(response: str, golds: list[str], params: Mapping[str, Any], ctx: Context) -> float | Deferred:
    """The accuracy of ``response`` by ``parameters.method`` (see the module docstring)."""
    method = str(param(params, "method", "v-triune"))
    limit = float(param(params, "time_limit", DEFAULT_TIME_LIMIT))
    if method == "v-triune":
        return Deferred("curate.rewards.verifiers.v_triune:math_accuracy", (response, golds[0]), limit=limit)
    if method == "geo3k":
        span = last_boxed_span(response)
        if span is None:
            return 0.0
        boxed = response[span[1]:span[2]]
        return Deferred("curate.rewards.verifiers.math:compare", (tuple(golds), boxed.strip(), 6), limit=limit)
    raise RecordError(f"{where(ctx.record.get('id'))}: method {method!r} is not one of {', '.join(METHODS)}")
