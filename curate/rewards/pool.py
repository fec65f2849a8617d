"""Running the isolated part of scoring on the verifier worker pool: batching, deduplication, cache.

Verifiers whose work is slow or unsafe (math-verify, detection mAP, SVG rendering,
code) return a :class:`~curate.rewards.result.Deferred`; :func:`run_deferred` sends
all of a call's deferred work to the pool (:mod:`curate.rewards.runtime.limits`)
in one batch, with the time limits enforced there.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from curate.rewards.result import Deferred, RecordError, RewardResult
from curate.rewards.runtime import deadline as _deadline
from curate.rewards.runtime.cache import ResultCache
from curate.rewards.runtime.limits import Outcome, Task, get_pool

if TYPE_CHECKING:
    from curate.rewards.registry import Plan

_cache = ResultCache()


def _post(d: Deferred, outcome: Outcome) -> tuple[float | None, str | None]:
    if outcome.error == "record_error":
        raise RecordError(outcome.message or "record error in a worker")
    if outcome.error is not None:
        return None, outcome.error
    value = outcome.value
    if d.post is not None:
        try:
            value = d.post(value)
        except RecordError:
            raise
        except Exception as exc:  # noqa: BLE001
            return None, f"verifier_error:{type(exc).__name__}"
    return value, None


def run_deferred(deferred: list[tuple[int, Plan, float, Deferred]], results: list, on_record_error: str,
                 finish: Callable[[Plan, float | None, float, str | None], RewardResult]) -> None:
    """Run the isolated part of many scores on the worker pool and fill their ``results`` slots.

    Each ``(slot, plan, format score, deferred work)`` becomes a pool task unless the
    result cache has it or an identical task is already in the batch; the whole batch
    goes to the pool at once (cut at the deadline of :mod:`curate.rewards.runtime.deadline`).
    ``finish`` turns a value or error into the slot's result. A record error raised by the
    deferred work is raised, or (``on_record_error="result"``) becomes a zero result.
    """
    tasks: list[Task] = []
    index: dict[Any, int] = {}
    slots: list[int | Outcome] = []
    for _, _, _, d in deferred:
        task = Task(d.task, d.args, d.limit)
        key = _cache.key(task)
        cached = _cache.get(key)
        if cached is not None:
            slots.append(Outcome(cached))
            continue
        if key is not None and key in index:
            slots.append(index[key])
            continue
        if key is not None:
            index[key] = len(tasks)
        slots.append(len(tasks))
        tasks.append(task)
    try:
        outcomes = get_pool().run(tasks, until=_deadline.until()) if tasks else []
    except Exception as exc:  # noqa: BLE001 - the pool itself failed (cannot start, closed): a reason, not a crash
        outcomes = [Outcome(None, f"verifier_unavailable:{type(exc).__name__}") for _ in tasks]
    for task, outcome in zip(tasks, outcomes):
        if outcome.error is None and outcome.value is not None:
            _cache.put(_cache.key(task), outcome.value)
    for (i, p, fmt, d), slot in zip(deferred, slots):
        outcome = slot if isinstance(slot, Outcome) else outcomes[slot]
        try:
            value, error = _post(d, outcome)
        except RecordError as exc:
            if on_record_error == "raise":
                raise
            results[i] = RewardResult(0.0, 0.0, 0.0, f"record_error: {exc}", p.verifier.name)
            continue
        results[i] = finish(p, value, fmt, error)
