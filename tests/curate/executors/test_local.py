"""The local executor's worker processes: they end with their driver, however it dies."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
DRIVER = textwrap.dedent("""
    import os, sys, time
    from pathlib import Path
    from curate.core.shards import Shard, ShardTask
    from curate.core.stats import StageStats
    from curate.executors import get_executor, run_stage

    class Wait(ShardTask):
        stage = "wait"
        start_method = sys.argv[3]
        def run(self, shard, work, ctx):
            (Path(sys.argv[2]) / str(os.getpid())).write_text("working")
            time.sleep(120)
            return StageStats()

    if __name__ == "__main__":
        shards = [Shard(i, meta=(i,), size=1) for i in range(4)]
        run_stage(Wait(), shards, Path(sys.argv[1]), executor=get_executor("local", workers=2))
""")


@pytest.mark.parametrize("start_method", ["spawn", "fork"])
def test_workers_end_when_their_driver_is_killed(tmp_path: Path, start_method: str) -> None:
    script, seen = tmp_path / "driver.py", tmp_path / "workers"
    script.write_text(DRIVER)
    seen.mkdir()
    driver = subprocess.Popen([sys.executable, str(script), str(tmp_path / "out"), str(seen), start_method],
                              env={**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"},
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    workers: list[int] = []
    try:
        deadline = time.monotonic() + 90
        while len(workers) < 2:
            assert driver.poll() is None and time.monotonic() < deadline, "the workers did not start"
            time.sleep(0.1)
            workers = [int(p.name) for p in seen.iterdir()]
        driver.send_signal(signal.SIGKILL)  # no cleanup of any kind in the driver
        driver.wait()
        deadline = time.monotonic() + 15
        while any(_alive(pid) for pid in workers) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert not [pid for pid in workers if _alive(pid)], "a worker outlived its killed driver"
    finally:
        for pid in workers:
            if _alive(pid):
                os.kill(pid, signal.SIGKILL)
        if driver.poll() is None:
            driver.kill()


def _alive(pid: int) -> bool:
    """Whether ``pid`` runs (a zombie counts as ended)."""
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


FROZEN = textwrap.dedent("""
    import gc, json, os, sys
    from pathlib import Path
    from curate.core.shards import Shard, ShardTask
    from curate.core.stats import StageStats
    from curate.executors import get_executor, run_stage

    class Frozen(ShardTask):
        stage = "frozen"
        start_method = sys.argv[2]
        def run(self, shard, work, ctx):
            stats = StageStats()
            stats.extra["frozen"] = gc.get_freeze_count()
            return stats

    if __name__ == "__main__":
        kept = [[i] for i in range(50_000)]  # the driver's heap, as a loaded processor makes it
        shards = [Shard(i, meta=(i,), size=1) for i in range(4)]
        stats = run_stage(Frozen(), shards, Path(sys.argv[1]), executor=get_executor("local", workers=2))
        print(json.dumps({"workers": stats.extra["frozen"], "driver_after": gc.get_freeze_count()}))
""")


@pytest.mark.parametrize("start_method", ["spawn", "fork"])
def test_forked_workers_never_collect_the_drivers_objects(tmp_path: Path, start_method: str) -> None:
    """Forked workers start with the driver's objects frozen (out of every collection); spawned ones have none to
    freeze; the driver's collector gets its objects back when the pool ends."""
    script = tmp_path / "driver.py"
    script.write_text(FROZEN)
    done = subprocess.run([sys.executable, str(script), str(tmp_path / "out"), start_method], capture_output=True,
                          text=True, env={**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}, timeout=120)
    assert done.returncode == 0, done.stderr
    import json

    seen = json.loads(done.stdout.strip().splitlines()[-1])
    if start_method == "fork":
        assert seen["workers"] >= 4 * 50_000  # summed over the 4 shards: each worker saw the heap frozen
    else:
        assert seen["workers"] == 0
    assert seen["driver_after"] == 0
