"""Running the isolated part of scoring on the worker pools: batching, deduplication, cache.

Verifiers whose work is slow or unsafe (math-verify, detection mAP, SVG rendering,
code) return a :class:`~curate.rewards.verdict.Deferred`; :func:`run_deferred` sends
all of a call's deferred work to its pool in one batch, with the time limits enforced
there: the verifier pool (:mod:`curate.rewards.runtime.limits`) and, for programs, the
code sandboxes (:mod:`curate.rewards.runtime.sandbox`), both at once.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

from curate.rewards.verdict import Deferred, RecordError, RewardResult
from curate.rewards.runtime import deadline as _deadline
from curate.rewards.runtime.cache import ResultCache
from curate.rewards.runtime import limits, sandbox
from curate.rewards.runtime.limits import Outcome, Task, WorkerPool

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


_POOLS: dict[str, Callable[[], WorkerPool]] = {"verifiers": limits.get_pool, "sandbox": sandbox.get_pool}


def _run_on(pool: str, tasks: list[Task], until: float | None) -> list[Outcome]:
    try:
        return _POOLS[pool]().run(tasks, until=until)
    except Exception as exc:  # noqa: BLE001 - the pool itself failed (cannot start, closed): a reason, not a crash
        return [Outcome(None, f"verifier_unavailable:{type(exc).__name__}") for _ in tasks]


def _run_pools(tasks: list[Task], pools: list[str], until: float | None) -> list[Outcome]:
    """Every task on its pool, the pools at the same time; outcomes in the order of ``tasks``."""
    groups: dict[str, list[int]] = {}
    for i, pool in enumerate(pools):
        groups.setdefault(pool, []).append(i)
    outcomes: list[Outcome] = [Outcome(None, "verifier_crashed")] * len(tasks)

    def run(pool: str) -> None:
        for i, outcome in zip(groups[pool], _run_on(pool, [tasks[i] for i in groups[pool]], until)):
            outcomes[i] = outcome

    others = [threading.Thread(target=run, args=(pool,), name=f"curate-{pool}") for pool in list(groups)[1:]]
    for t in others:
        t.start()
    if groups:
        run(next(iter(groups)))
    for t in others:
        t.join()
    return outcomes


def shutdown() -> None:
    """Stop the verifier workers and the code sandboxes of this process (new ones start on the next call)."""
    limits.shutdown()
    sandbox.shutdown()


def run_deferred(deferred: list[tuple[int, Any, Any, Deferred]], results: list, on_record_error: str,
                 finish: Callable[[Any, float | None, Any, str | None], RewardResult]) -> None:
    """Run the isolated part of many scores on the worker pool and fill their ``results`` slots.

    Each ``(slot, plan, format scores, deferred work)`` (the plan: the caller's, ``curate.rewards.registry.Plan``,
    handed back to ``finish`` and read for its ``verifier.name`` only) becomes a pool task unless the
    result cache has it or an identical task is already in the batch; the whole batch
    goes to the pool at once (cut at the deadline of :mod:`curate.rewards.runtime.deadline`).
    ``finish`` turns a value or error into the slot's result. A record error raised by the
    deferred work is raised, or (``on_record_error="result"``) becomes a zero result.
    """
    tasks: list[Task] = []
    index: dict[Any, int] = {}
    slots: list[int | Outcome] = []
    pools: list[str] = []
    for _, _, _, d in deferred:
        task = Task(d.task, d.args, d.limit)
        key = _cache.key(task, d.pool)
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
        pools.append(d.pool)
    outcomes = _run_pools(tasks, pools, _deadline.until())
    for task, pool, outcome in zip(tasks, pools, outcomes):
        if outcome.error is None and outcome.value is not None:
            _cache.put(_cache.key(task, pool), outcome.value)
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
