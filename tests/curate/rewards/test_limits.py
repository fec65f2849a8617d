"""The worker pool: time limits off the main thread, crashes, restarts, threads."""

from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor

import pytest

from curate.rewards.registry import score
from curate.rewards.runtime.cache import ResultCache
from curate.rewards.runtime.limits import Task, WorkerPool

PROBE = "curate.rewards.runtime._probe:"


@pytest.fixture(scope="module")
def pool():
    p = WorkerPool(2, memory_mb=512)
    yield p
    p.close()


def test_values_and_order(pool: WorkerPool) -> None:
    out = pool.run([Task(PROBE + "echo", (float(i),), 5.0) for i in range(100)])
    assert [o.value for o in out] == [float(i) for i in range(100)]


def test_timeout_kills_and_replaces_the_worker(pool: WorkerPool) -> None:
    restarts = pool.counts["restarts"]
    t0 = time.monotonic()
    out = pool.run([Task(PROBE + "sleep", (30.0,), 0.5), Task(PROBE + "spin", (30.0,), 0.5), Task(PROBE + "echo", (7.0,), 5.0)])
    elapsed = time.monotonic() - t0
    assert [o.error for o in out[:2]] == ["timeout", "timeout"]
    assert out[2].value == 7.0
    assert elapsed < 5.0
    assert pool.counts["restarts"] >= restarts + 2
    assert pool.run([Task(PROBE + "echo", (1.0,), 5.0)])[0].value == 1.0  # the pool still works


def test_crash_error_and_memory(pool: WorkerPool) -> None:
    out = pool.run([Task(PROBE + "crash", (), 5.0), Task(PROBE + "fail", (), 5.0),
                    Task(PROBE + "allocate", (2048,), 10.0), Task(PROBE + "allocate", (8,), 10.0)])
    assert out[0].error == "verifier_crashed"
    assert out[1].error == "verifier_error:ZeroDivisionError"
    assert out[2].error == "verifier_error:MemoryError"
    assert out[3].value == 8.0


def test_only_reward_tasks_run(pool: WorkerPool) -> None:
    assert pool.run([Task("os:getcwd", (), 5.0)])[0].error == "verifier_error:ValueError"


def test_items_after_a_timeout_in_a_batch_still_run(pool: WorkerPool) -> None:
    tasks = [Task(PROBE + "echo", (1.0,), 5.0)] * 5 + [Task(PROBE + "sleep", (30.0,), 0.3)] + [Task(PROBE + "echo", (2.0,), 5.0)] * 5
    out = pool.run(tasks)
    assert [o.value for o in out[:5]] == [1.0] * 5 and out[5].error == "timeout" and [o.value for o in out[6:]] == [2.0] * 5


def test_concurrent_callers_share_workers(pool: WorkerPool) -> None:
    def call(i: int) -> list[float | None]:
        return [o.value for o in pool.run([Task(PROBE + "echo", (float(i),), 5.0)] * 3)]

    with ThreadPoolExecutor(16) as ex:
        results = list(ex.map(call, range(32)))
    assert results == [[float(i)] * 3 for i in range(32)]
    pids = {pool.run([Task(PROBE + "pid", (), 5.0)])[0].value for _ in range(10)}
    assert 1 <= len(pids) <= 2


def test_timeouts_are_parallel_across_threads(pool: WorkerPool) -> None:
    t0 = time.monotonic()
    threads = [threading.Thread(target=pool.run, args=([Task(PROBE + "sleep", (30.0,), 1.0)],)) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert time.monotonic() - t0 < 4.0


def test_closed_pool_refuses() -> None:
    p = WorkerPool(1, memory_mb=256)
    assert p.run([Task(PROBE + "echo", (3.0,), 5.0)])[0].value == 3.0
    p.close()
    with pytest.raises(RuntimeError):
        p.run([Task(PROBE + "echo", (3.0,), 5.0)])


def test_result_cache_bounds() -> None:
    cache = ResultCache(capacity=2, max_key_chars=10)
    keys = [cache.key(Task("m:f", (str(i),), 1.0)) for i in range(3)]
    for i, k in enumerate(keys):
        cache.put(k, float(i))
    assert cache.get(keys[0]) is None and cache.get(keys[2]) == 2.0
    assert cache.key(Task("m:f", ("x" * 50,), 1.0)) is None
    assert cache.key(Task("m:f", ([1],), 1.0)) is None


def test_math_timeout_through_score() -> None:
    # 9^(9^(9^9)) makes sympy try to build an astronomically large integer.
    record = {"answer": "3", "answer_type": "math-expressions", "reward": {"parameters": {"time_limit": 1.0}}}
    t0 = time.monotonic()
    result = score(record, "<answer>9^{9^{9^{9}}}</answer>")
    assert time.monotonic() - t0 < 6.0
    assert result.accuracy == 0.0
    assert result.error in (None, "timeout") or result.error.startswith("verifier_error")


def test_pool_size_follows_the_cpu_affinity(monkeypatch: pytest.MonkeyPatch) -> None:
    """A process pinned to one core (taskset, a cgroup cpuset) sizes its pool to one worker, not to os.cpu_count()."""
    import os

    from curate.core.threads import CPUS_VAR
    from curate.rewards.runtime.limits import default_size

    monkeypatch.delenv("CURATE_REWARD_WORKERS", raising=False)
    monkeypatch.delenv(CPUS_VAR, raising=False)
    mine = os.sched_getaffinity(0)
    try:
        os.sched_setaffinity(0, {min(mine)})
        assert default_size() == 1
    finally:
        os.sched_setaffinity(0, mine)
    assert default_size() == len(mine)
