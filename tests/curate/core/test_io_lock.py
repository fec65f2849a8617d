"""One run per output folder (issue 11, item 6): two real processes, a live holder and a killed one."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from curate.core.io import LOCK_NAME, OutputLocked, out_lock

ROOT = Path(__file__).resolve().parents[3]
HOLDER = textwrap.dedent("""
    import sys, time
    from pathlib import Path
    from curate.core.shards import Shard, ShardTask
    from curate.core.stats import StageStats
    from curate.executors import run_stage

    class Wait(ShardTask):
        stage = "wait"
        def run(self, shard, work, ctx):
            Path(sys.argv[2]).write_text("inside")
            time.sleep(120)
            return StageStats()

    run_stage(Wait(), [Shard(0, meta=(0,), size=1)], Path(sys.argv[1]))
""")


def _env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}


def _score(records: Path, responses: Path, out: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "curate", "score", "--records", str(records), "--responses",
                           str(responses), "--out", str(out)], capture_output=True, text=True, timeout=120, env=_env())


def test_second_run_stops_then_takes_over_a_dead_holders_lock(tmp_path: Path) -> None:
    records, responses, out = tmp_path / "rl.jsonl", tmp_path / "responses.jsonl", tmp_path / "out"
    records.write_text("".join(json.dumps({"id": f"p{i}", "problem": "<image>? ", "images": [], "answer": str(i),
                                           "answer_type": "number"}) + "\n" for i in range(3)))
    responses.write_text("".join(json.dumps({"id": f"p{i}", "response": f"<answer>{i}</answer>"}) + "\n"
                                 for i in range(3)))
    inside = tmp_path / "inside"
    holder = subprocess.Popen([sys.executable, "-c", HOLDER, str(out), str(inside)], env=_env())
    try:
        deadline = time.monotonic() + 60
        while not inside.exists():
            assert holder.poll() is None and time.monotonic() < deadline, "the holder did not start its stage"
            time.sleep(0.05)
        lock = json.loads((out / LOCK_NAME).read_text())
        assert lock["pid"] == holder.pid and lock["host"]

        second = _score(records, responses, out)  # other verb, other settings: refused all the same
        assert second.returncode == 2, second.stderr
        lines = [line for line in second.stderr.splitlines() if line.strip()]
        assert len(lines) == 1 and "Traceback" not in second.stderr
        assert f"pid {holder.pid}" in lines[0] and "in use" in lines[0] and "--out" in lines[0]
        assert not (out / "scores.parquet").exists()
    finally:
        holder.send_signal(signal.SIGKILL)
        holder.wait()

    third = _score(records, responses, out)  # the holder died without releasing: its lock is stale
    assert third.returncode == 0, third.stderr
    assert f"taking over the lock of a run that is no longer running (pid {holder.pid}" in third.stderr
    assert (out / "scores.parquet").exists() and not (out / LOCK_NAME).exists()


FORKING_HOLDER = textwrap.dedent("""
    import os, signal, sys, time
    from curate.core.io import acquire
    acquire(sys.argv[1])
    child = os.fork()
    if child == 0:  # a forked worker that outlives the run: it must not keep the lock
        quiet = os.open(os.devnull, os.O_WRONLY)
        os.dup2(quiet, 1)  # let go of the test's pipes
        os.dup2(quiet, 2)
        time.sleep(60)
        os._exit(0)
    print(child, flush=True)
    os.kill(os.getpid(), signal.SIGKILL)  # the run dies without releasing
""")


def test_a_forked_child_that_outlives_the_holder_does_not_keep_the_lock(tmp_path: Path) -> None:
    out = tmp_path / "out"
    holder = subprocess.run([sys.executable, "-c", FORKING_HOLDER, str(out)], capture_output=True, text=True,
                            env=_env(), timeout=60)
    child = int(holder.stdout.split()[0])
    try:
        assert holder.returncode == -signal.SIGKILL and (out / LOCK_NAME).exists() and _alive(child)
        with out_lock(out):  # the holder is dead; its child lives on, without the flock
            assert json.loads((out / LOCK_NAME).read_text())["pid"] == os.getpid()
    finally:
        os.kill(child, signal.SIGKILL)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def test_the_lock_is_reentrant_and_removed_on_release(tmp_path: Path) -> None:
    out = tmp_path / "o"
    with out_lock(out):
        with out_lock(out):
            assert (out / LOCK_NAME).exists()
        assert json.loads((out / LOCK_NAME).read_text())["pid"] == os.getpid()
    assert not (out / LOCK_NAME).exists()
    probe = "import sys; from curate.core.io import acquire; acquire(sys.argv[1])"
    with out_lock(out):  # another process meets the lock this one holds
        proc = subprocess.run([sys.executable, "-c", probe, str(out)], capture_output=True, text=True, env=_env(),
                              timeout=60)
    assert proc.returncode != 0 and OutputLocked.__name__ in proc.stderr and f"pid {os.getpid()}" in proc.stderr


def test_a_zombie_is_not_alive_and_a_running_child_is() -> None:
    """A process that ended but was not yet reaped (a zombie) holds nothing: a lock, a work folder or a parent's
    watch taken over from it is safe (curate.core.io.pid_alive)."""
    import subprocess
    import time

    from curate.core.io import pid_alive

    running = subprocess.Popen(["sleep", "30"])
    ended = subprocess.Popen(["true"])
    try:
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and pid_alive(ended.pid):  # not reaped: a zombie once it has exited
            time.sleep(0.01)
        assert not pid_alive(ended.pid)
        assert ended.poll() == 0  # it was a zombie until now: reaped here
        assert pid_alive(running.pid) and pid_alive(os.getpid())
    finally:
        running.kill()
        running.wait()
