"""Starting a code sandbox: a sandbox lives as long as it is not killed, whichever thread started it."""

from __future__ import annotations

import threading
import time

from curate.rewards.runtime import bwrap
from curate.rewards.runtime.box.runner import digest

from .escapes import needs_bwrap

JOB = ["print(int(input()) * 2)", ["21"], "stdio", "solution", 5, 10, 256, True]


@needs_bwrap
def test_a_sandbox_outlives_the_thread_that_started_it() -> None:
    """bwrap --die-with-parent follows the thread that forked it: a sandbox started (and up) on a thread that
    has ended since (a pool's refill or warm-up thread) must still answer, not be killed with that thread."""
    started: list = []

    def start() -> None:
        worker = bwrap.start("bwrap")
        started.append((worker, bwrap.start_error(worker, 30)))

    thread = threading.Thread(target=start)
    thread.start()
    thread.join()
    worker, problem = started[0]
    try:
        assert problem is None
        time.sleep(0.2)  # the thread's end reaches its children a moment after join returns
        assert worker.proc.poll() is None, f"the sandbox died with its thread ({worker.proc.poll()})"
        worker.conn.send([[7, "run", JOB]])
        assert worker.conn.poll(30)
        assert worker.conn.recv() == (7, "ok", [[digest("42"), None]])
    finally:
        worker.kill()
    assert worker.proc.poll() is not None  # and kill still takes it down
