"""Routing a record to its verifier, and scoring.

Inline verifiers run here; the isolated part of the others runs on the worker pool
through :mod:`curate.rewards.pool`; calls and errors are counted in
:mod:`curate.rewards.counters`.

A record in the RL layout carries:

- ``answer``: the gold, a string or a list of acceptable strings (for ``bbox`` /
  ``detection`` / ``general-code`` also JSON data). ``reward.ground_truth`` is used
  when ``answer`` is missing, then a VQA row's ``answers`` (its annotators' answers, any
  of which is right). For the ``choice`` verifier a row with options (``choices`` or
  ``options``) and the index of the right one (``answer`` or ``correct_choice_idx``, as
  ScienceQA, AI2D and A-OKVQA store them) is scored against that option's letter
  (:mod:`curate.core.formats.rows`).
- ``answer_type``: one of :data:`ANSWER_TYPES` (the LLaVA-OneVision-1.5-RL names) or a
  verifier name (``math``, ``choice``, ``detection``, …); case and ``_``/``-`` are ignored.
- ``prompt_type``: ``normal`` (answer-only, default) or ``think``.
- optional ``reward`` (V-Triune style): ``{"verifier": name, "parameters": {...},
  "accuracy_ratio": a, "format_ratio": f}`` (``verifier_parm``/``verifier_params``/``params``
  and ``accuracy_weight``/``format_weight`` are accepted too). ``reward.verifier`` wins over
  ``answer_type``. ``reward.format`` names a seed's format check, ``reward.bonus`` a seed's bonus
  (:mod:`curate.rewards.format`); any other key is the record's error (:data:`REWARD_KEYS`).
- for boxes: ``image_size``, ``resized_size``, ``min_pixels``, ``max_pixels``,
  ``box_coords``, ``pred_coords`` (see :mod:`curate.rewards.boxes`).

``reward = a * accuracy + f * format`` with defaults ``a = 1``, ``f = 0`` (the anchor's
reward is the accuracy; the format score is always reported). When ``a + f > 1`` both
are divided by ``a + f``, so ``a * accuracy + f * format`` is in [0, 1]; a bonus adds to that.

Errors: a record that cannot be scored (no ``answer``, an unknown ``answer_type`` or
verifier, a malformed gold or ``reward`` object) raises :class:`RecordError`
(:class:`UnknownAnswerType` for unknown types), a :class:`curate.core.errors.UserError`,
so that callers report it per record. A *response* never raises: verifier errors and
timeouts give accuracy 0 and reward 0 with ``error`` set (``timeout``,
``verifier_error:<ExceptionName>``, ``verifier_crashed``, ``response_too_large``, …).
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Callable, Sequence

from curate.core.formats.rows import annotator_answers, is_multiple_choice, multiple_choice
from curate.rewards.verifiers import (bbox, boolean, choice, code, critic, detection, html, number, ocr, string, svg,
                                      llava_ov_rl, v_triune, vlm_r1)
from curate.rewards.verifiers import math as math_verifier
from curate.rewards.format import FORMAT_CHECKS, PROMPT_TYPES, bonus_terms, format_and_bonus, format_score
from curate.rewards.runtime import deadline as _deadline
from curate.rewards.counters import count
from curate.rewards.pool import run_deferred
from curate.rewards.verdict import (
    where,
    Context,
    Deferred,
    RecordError,
    RewardResult,
    UnknownAnswerType,
    VerifierFailure,
    clamp01,
)

MAX_RESPONSE_CHARS = 4_000_000
INLINE_LIMIT = 2.0


@dataclass(frozen=True, slots=True)
class Verifier:
    """A named verifier: ``fn(response, golds, params, ctx) -> float | Deferred``.

    ``limit`` is the time limit in seconds of one call (for isolated work the default,
    overridable by ``parameters.time_limit``; for the code verifier the default wall limit plus
    the sandbox's grace, the run's ``--code-wall-seconds`` deciding; for inline verifiers the
    bound the fuzz test enforces).
    """

    name: str
    fn: Callable[..., Any]
    limit: float
    isolated: bool = False
    structured_gold: bool = False
    self_limited: bool = False
    #: ``check(golds, record_id)`` raising :class:`RecordError` for a gold no answer can be scored against.
    check_gold: Callable[[list[Any], Any], None] | None = None

    def __call__(self, record: Mapping[str, Any], response: str, *, progress: float | None = None) -> RewardResult:
        """Score ``response`` against ``record`` with this verifier (ignoring ``answer_type``)."""
        return score(record, response, progress=progress, verifier=self.name)


VERIFIERS: dict[str, Verifier] = {
    v.name: v
    for v in (
        Verifier("math", math_verifier.verify, math_verifier.DEFAULT_TIME_LIMIT, isolated=True),
        Verifier("choice", choice.verify, INLINE_LIMIT),
        Verifier("number", number.verify, INLINE_LIMIT),
        Verifier("boolean", boolean.verify, INLINE_LIMIT),
        Verifier("ocr", ocr.verify, INLINE_LIMIT),
        Verifier("string", string.verify, INLINE_LIMIT),
        Verifier("critic", critic.verify, INLINE_LIMIT),
        Verifier("bbox", bbox.verify, INLINE_LIMIT, structured_gold=True, check_gold=bbox.check_gold),
        Verifier("detection", detection.verify, detection.DEFAULT_TIME_LIMIT, isolated=True, structured_gold=True),
        Verifier("html", html.verify, INLINE_LIMIT),
        Verifier("svg", svg.verify, svg.DEFAULT_TIME_LIMIT, isolated=True),
        Verifier("code", code.verify, 15.0, isolated=True, structured_gold=True, self_limited=True,
                 check_gold=code.check_gold),
        Verifier("vlm-r1", vlm_r1.verify, vlm_r1.DEFAULT_TIME_LIMIT, isolated=True),
        Verifier("v-triune-math", v_triune.verify, v_triune.DEFAULT_TIME_LIMIT, isolated=True),
        Verifier("llava-ov-rl", llava_ov_rl.verify, INLINE_LIMIT),
    )
}
"""Verifier name -> :class:`Verifier` (callable as ``VERIFIERS[name](record, response)``)."""

ANSWER_TYPES: dict[str, str] = {
    "number": "number",
    "math-expressions": "math",
    "html-code": "html",
    "svg-code": "svg",
    "boolean": "boolean",
    "multiple-choice": "choice",
    "ocrtext": "ocr",
    "general-code": "code",
    "bbox": "bbox",
    "critic": "critic",
    "any": "string",
}
"""LLaVA-OneVision-1.5-RL answer types -> verifier names."""

ALIASES: dict[str, str] = {
    **{name: name for name in VERIFIERS},
    "mathverify": "math", "math-verify": "math", "multiple-choice": "choice", "mcq": "choice",
    "yes-no": "boolean", "bool": "boolean", "iou": "bbox", "grounding": "bbox", "od": "detection",
    "odlength": "detection", "exact": "string", "string-match": "string", "string-matching": "string",
    "general-code": "code", "python": "code",
}

#: The keys a ``reward`` object may hold (V-Triune's names and ours); any other is the record's error, named, so a
#: verifier parameter put beside ``parameters`` instead of inside it is never silently ignored.
REWARD_KEYS = frozenset({"verifier", "parameters", "verifier_parm", "verifier_params", "params", "accuracy_ratio",
                         "accuracy_weight", "format_ratio", "format_weight", "ground_truth", "format", "bonus"})


def answer_types() -> list[str]:
    """Every accepted ``answer_type``: the LLaVA-OneVision-1.5-RL names, then the extra ones."""
    extra = sorted(set(ALIASES) - set(ANSWER_TYPES))
    return list(ANSWER_TYPES) + extra


def _key(name: Any) -> str:
    return str(name).strip().lower().replace("_", "-")


@dataclass(frozen=True, slots=True)
class Plan:
    """How one record is scored (resolved once per record)."""

    verifier: Verifier
    golds: list[Any]
    params: Mapping[str, Any]
    prompt_type: str
    accuracy_weight: float
    format_weight: float
    #: The format check (``reward.format``: a seed's own, :data:`curate.rewards.format.FORMAT_CHECKS`), else the
    #: prompt style's.
    format_rule: str = "normal"
    #: Bonus terms added to the reward (``reward.bonus``: name -> weight, :data:`curate.rewards.format.BONUSES`).
    bonus: tuple[tuple[str, float], ...] = ()


def _weights(reward: Mapping[str, Any], rid: Any) -> tuple[float, float]:
    def get(*names: str, default: float) -> float:
        for n in names:
            if reward.get(n) is not None:
                try:
                    v = float(reward[n])
                except (TypeError, ValueError):
                    raise RecordError(f"{where(rid)}: reward.{n} must be a number, got {reward[n]!r}") from None
                if not v >= 0:
                    raise RecordError(f"{where(rid)}: reward.{n} must be >= 0, got {reward[n]!r}")
                return v
        return default

    a = get("accuracy_ratio", "accuracy_weight", default=1.0)
    f = get("format_ratio", "format_weight", default=0.0)
    total = a + f
    if total > 1.0:
        a, f = a / total, f / total
    return a, f


def plan(record: Mapping[str, Any], verifier: str | None = None) -> Plan:
    """Resolve the verifier, golds, parameters and weights of ``record``.

    Raises:
        RecordError: the record cannot be scored (message names the record and the fix).
        UnknownAnswerType: its ``answer_type`` / ``reward.verifier`` names no verifier.
    """
    if not isinstance(record, (dict, Mapping)):
        raise RecordError(f"a record must be a JSON object, got {type(record).__name__}")
    rid = record.get("id")
    reward = record.get("reward") or {}
    if not isinstance(reward, (dict, Mapping)):
        raise RecordError(f"{where(rid)}: 'reward' must be an object, got {type(reward).__name__}")
    unknown = sorted(str(k) for k in reward if k not in REWARD_KEYS)
    if unknown:
        raise RecordError(f"{where(rid)}: unknown key {unknown[0]!r} under 'reward' (accepted: "
                          f"{', '.join(sorted(REWARD_KEYS))}); verifier settings go under reward.parameters, e.g. "
                          f"{{\"parameters\": {{\"{unknown[0]}\": ...}}}}")
    name = verifier or reward.get("verifier")
    if name is not None:
        resolved = ALIASES.get(_key(name))
        if resolved is None:
            raise UnknownAnswerType(
                f"{where(rid)}: unknown verifier {name!r}; expected one of {', '.join(sorted(VERIFIERS))}")
    else:
        at = record.get("answer_type")
        if at in (None, "") and is_multiple_choice(record):  # options, an answer naming one: MMMU has no answer_type
            at = "multiple-choice"
        if at is None:
            raise UnknownAnswerType(f"{where(rid)}: no 'answer_type' (or reward.verifier); "
                                    f"expected one of {', '.join(ANSWER_TYPES)}")
        key = _key(at)
        resolved = ANSWER_TYPES.get(key) or ALIASES.get(key)
        if resolved is None:
            raise UnknownAnswerType(f"{where(rid)}: unknown answer_type {at!r}; "
                                    f"expected one of {', '.join(ANSWER_TYPES)}")
    v = VERIFIERS[resolved]
    gold = record.get("answer")
    if gold is None:
        gold = reward.get("ground_truth")
    if gold is None:
        gold = annotator_answers(record) or None  # a VQA row's annotators (TextVQA, VQAv2): any of them
    if v.name == "choice":  # a multiple-choice row (ScienceQA: choices and the index of the right one): its letter
        try:
            choice = multiple_choice(record)
        except ValueError as exc:
            raise RecordError(f"{where(rid)}: {exc}") from None
        gold = choice[1] if choice is not None else gold
    if gold is None:
        raise RecordError(f"{where(rid)}: no 'answer' (gold) to score against")
    if isinstance(gold, (list, tuple)) and not v.structured_gold:
        golds = [g if isinstance(g, str) else str(g) for g in gold if g is not None]
    elif isinstance(gold, (int, float)) and not isinstance(gold, bool):
        golds = [str(gold)]
    elif isinstance(gold, str):
        golds = [gold]
    elif v.structured_gold:
        golds = list(gold) if v.name == "bbox" and isinstance(gold, (list, tuple)) and gold and all(
            isinstance(g, str) for g in gold) else [gold]
    else:
        golds = [str(gold)]
    if not golds or all(isinstance(g, str) and not g.strip() for g in golds):
        raise RecordError(f"{where(rid)}: 'answer' is empty")
    if v.check_gold is not None:  # a gold no answer can match is the record's error, never a prompt "too hard"
        v.check_gold(golds, rid)
    params = reward.get("parameters", reward.get("verifier_parm", reward.get("verifier_params", reward.get("params")))) or {}
    if not isinstance(params, (dict, Mapping)):
        raise RecordError(f"{where(rid)}: reward.parameters must be an object")
    a, f = _weights(reward, rid)
    prompt_type = _prompt_type(record)
    rule = reward.get("format") or prompt_type
    if rule not in FORMAT_CHECKS and rule not in PROMPT_TYPES:
        raise RecordError(f"{where(rid)}: reward.format {rule!r} is not one of "
                          f"{', '.join([*PROMPT_TYPES, *FORMAT_CHECKS])}")
    return Plan(v, golds, params, prompt_type, a, f, str(rule), bonus_terms(reward.get("bonus"), rid))


def _prompt_type(record: Mapping[str, Any]) -> str:
    prompt_type = _key(record.get("prompt_type") or "normal")
    if prompt_type not in PROMPT_TYPES:
        raise RecordError(f"{where(record.get('id'))}: prompt_type {record.get('prompt_type')!r} is not 'normal' or 'think'")
    return prompt_type


def format_only(record: Mapping[str, Any], response: Any) -> float:
    """The format score of ``response`` for ``record``'s prompt style, alone (see :mod:`curate.rewards.format`).

    Only ``prompt_type`` is read: no verifier runs and no gold is needed, so a format
    reward costs one linear scan of the response, never a verifier or the worker pool.

    Raises:
        RecordError: the record is not a mapping, its ``prompt_type`` is neither normal nor
            think, or the response is not a string.
    """
    if not isinstance(record, Mapping):
        raise RecordError(f"a record must be a JSON object, got {type(record).__name__}")
    prompt_type = _prompt_type(record)
    text = _coerce(response)
    return format_score(text, prompt_type) if len(text) <= MAX_RESPONSE_CHARS else 0.0


def _finish(p: Plan, accuracy: float | None, scores: tuple[float, float], error: str | None) -> RewardResult:
    fmt, bonus = scores
    if error is not None or accuracy is None:
        result = RewardResult(0.0, fmt, 0.0, error or "verifier_error", p.verifier.name)
    else:
        acc = clamp01(accuracy)
        # a bonus (LLaVA-OneVision-1.5-RL's box in the thinking) adds to the reward as the seed's does, past 1
        reward = clamp01(p.accuracy_weight * acc + p.format_weight * fmt) + bonus
        result = RewardResult(acc, fmt, reward, None, p.verifier.name)
    count(p.verifier.name, result.error)
    return result


def _inline(p: Plan, response: str, progress: float | None, record: Mapping[str, Any]) -> tuple[Any, str | None]:
    """Run the inline part; ``(float | Deferred | None, error)``."""
    if len(response) > MAX_RESPONSE_CHARS:
        return None, "response_too_large"
    t0 = time.monotonic()
    try:
        out = p.verifier.fn(response, p.golds, p.params, Context(record, progress, p.prompt_type))
    except RecordError:
        raise
    except VerifierFailure as exc:
        return None, exc.reason
    except Exception as exc:  # noqa: BLE001 - a response never raises
        return None, f"verifier_error:{type(exc).__name__}"
    if not isinstance(out, Deferred) and not p.verifier.self_limited and time.monotonic() - t0 > INLINE_LIMIT:
        return None, "timeout"
    return out, None


def _coerce(response: Any) -> str:
    if response is None:
        return ""
    if isinstance(response, bytes):
        return response.decode("utf-8", "replace")
    if not isinstance(response, str):
        raise RecordError(f"a response must be a string, got {type(response).__name__}")
    return response


def score(record: Mapping[str, Any], response: str, *, progress: float | None = None,
          verifier: str | None = None) -> RewardResult:
    """Score one response against one record.

    Args:
        record: An RL record (see the module docstring for the fields used).
        response: The model's answer (``None`` counts as empty).
        progress: Training progress in [0, 1] for the dynamic IoU threshold, or ``None``.
        verifier: Force a verifier by name, ignoring ``answer_type`` and ``reward.verifier``.

    Returns:
        A :class:`RewardResult`; verifier errors and timeouts are results, never exceptions.

    Raises:
        RecordError: the record itself cannot be scored (including :class:`UnknownAnswerType`).
    """
    return score_many([(record, response)], progress=progress, verifier=verifier)[0]


def score_many(items: Sequence[tuple[Mapping[str, Any], str]], *, progress: float | None = None,
               verifier: str | None = None, on_record_error: str = "raise") -> list[RewardResult]:
    """Score many ``(record, response)`` pairs; results in the same order.

    Inline verifiers run in the caller; isolated work is deduplicated, looked up in a
    result cache, and sent to the worker pool in one batch spread over its workers, so
    scoring the 16 samples of a prompt costs one round trip. Under a deadline
    (:func:`curate.rewards.runtime.deadline.deadline_in`) unfinished items get ``error="deadline"``.

    Args:
        items: ``(record, response)`` pairs.
        progress: Training progress for the dynamic IoU threshold (all items).
        verifier: Force a verifier by name for every item.
        on_record_error: ``"raise"`` (default) raises the first :class:`RecordError`;
            ``"result"`` returns a zero result with ``error="record_error: <message>"``.
    """
    if on_record_error not in ("raise", "result"):
        raise ValueError("on_record_error must be 'raise' or 'result'")
    if progress is not None and not 0.0 <= float(progress) <= 1.0:
        raise ValueError(f"progress must be a training fraction in [0, 1], got {progress!r}")
    results: list[RewardResult | None] = [None] * len(items)
    deferred: list[tuple[int, Plan, tuple[float, float], Deferred]] = []
    plans: dict[int, Plan] = {}
    for i, (record, response) in enumerate(items):
        try:
            p = plans.get(id(record))
            if p is None:
                p = plan(record, verifier)
                plans[id(record)] = p
            text = _coerce(response)
            if _deadline.passed():
                results[i] = RewardResult(0.0, 0.0, 0.0, _deadline.DEADLINE, p.verifier.name)
                continue
            fmt = format_and_bonus(text, p.format_rule, p.bonus) if len(text) <= MAX_RESPONSE_CHARS else (0.0, 0.0)
            out, error = _inline(p, text, progress, record)
        except RecordError as exc:
            if on_record_error == "raise":
                raise
            results[i] = RewardResult(0.0, 0.0, 0.0, f"record_error: {exc}", "")
            continue
        if isinstance(out, Deferred):
            deferred.append((i, p, fmt, out))
        else:
            results[i] = _finish(p, out, fmt, error)
    if deferred:
        run_deferred(deferred, results, on_record_error, _finish)
    return results  # type: ignore[return-value] - every slot is filled above
