"""The sandbox under attack: programs that try to pass its limits or reach its runner, each refused.

One sandbox serves the table (jobs go straight to its runner, as the pool sends them); every program
prints what it won, and a refused attack prints something else or fails. Each row passed before the
sandbox was hardened against it (the memory in a memfd, the inode bomb, the runner killed through
``F_SETOWN``, ctypes found by walking the frames, a compile outside the limits).
"""

from __future__ import annotations

import pytest

from curate.rewards.runtime import bwrap
from curate.rewards.runtime.box.runner import digest

from ..escapes import needs_bwrap

pytestmark = needs_bwrap


def _start():
    worker = bwrap.start("bwrap")
    assert bwrap.start_error(worker, 30) is None
    keys = iter(range(1, 10_000))

    def run(code: str, inputs=("",), memory_mb: int = 256, cpu: float = 5, wall: float = 10, audit: bool = True):
        key = next(keys)
        worker.conn.send([[key, "run", [code, list(inputs), "stdio", "solution", cpu, wall, memory_mb, audit]]])
        assert worker.conn.poll(wall + 10), "the sandbox did not answer"
        return worker.conn.recv()

    return worker, run


@pytest.fixture(scope="module")
def box():
    worker, run = _start()
    yield worker, run
    worker.kill()


@pytest.fixture
def own_box():
    """A sandbox of its own, for an attack that would take the shared one down."""
    worker, run = _start()
    yield worker, run
    worker.kill()


def _printed(answer, text: str) -> bool:
    return answer[1] == "ok" and answer[2] == [[digest(text), None]]


MEMFD = """
import os
chunk = b"x" * (1 << 20)
held = []
try:
    for _ in range(12):  # 16 MB each (the file-size limit), 192 MB in all; 60 of them would make 1 GB
        fd = os.memfd_create("big")
        for _ in range(15):
            os.write(fd, chunk)
        held.append(fd)
    print("won")
except OSError:
    print("held")
"""


@pytest.mark.parametrize("audit", [True, False])
def test_a_memfd_cannot_hold_more_than_the_memory_limit(box, audit: bool) -> None:
    """180 MB in memfds from a program limited to 64 MB (memfd pages are outside RLIMIT_AS): refused."""
    _, run = box
    answer = run(MEMFD, memory_mb=64, audit=audit)
    assert _printed(answer, "held"), answer


INODES = """
import os
made = 0
try:
    for i in range(20000):
        open(f"f{i}", "w").close()
        made += 1
except OSError:
    pass
print("won" if made == 20000 else "held")
"""


def test_an_inode_bomb_stops_at_the_work_folders_limit(box) -> None:
    _, run = box
    assert _printed(run(INODES, audit=False), "held")
    assert _printed(run("print(len(__import__('os').listdir('.')))", audit=False), "0")  # and the next job is clean


SIGNAL_RUNNER = """
import fcntl, os, signal
won = []
try:
    fcntl.fcntl(1, fcntl.F_SETOWN, os.getppid())
    fcntl.fcntl(1, 10, signal.SIGKILL)  # F_SETSIG
    fcntl.fcntl(1, fcntl.F_SETFL, fcntl.fcntl(1, fcntl.F_GETFL) | os.O_ASYNC)
    won.append("owner")
except OSError:
    pass
if os.getsid(0) != os.getpid() or os.getpgid(0) != os.getpid():
    won.append("runner's group")
os.write(1, b"x" * 300000)  # the runner's reads make the pipe writable: the I/O signal would go out now
print(won or "held")
"""


def test_a_program_cannot_signal_its_runner(own_box) -> None:
    """F_SETOWN(getppid()) + F_SETSIG(SIGKILL) on its own pipe, and its process group: the runner lives on."""
    worker, run = own_box
    answer = run(SIGNAL_RUNNER, audit=False)
    assert answer[1] == "ok" and answer[2][0][1] is None, answer
    assert worker.proc.poll() is None
    assert _printed(run("print(6 * 7)"), "42")


FRAMES = """
import sys, types
found = []
seen = set()

def look(obj, depth):
    if id(obj) in seen or depth > 2:
        return
    seen.add(id(obj))
    if isinstance(obj, types.ModuleType) and "ctypes" in obj.__name__ or type(obj).__module__ in ("ctypes", "_ctypes"):
        found.append(obj)
        return
    attrs = getattr(obj, "__dict__", None)
    if isinstance(attrs, dict) and not isinstance(obj, types.ModuleType):
        for value in list(attrs.values()):
            look(value, depth + 1)

frame = sys._getframe()
while frame is not None:
    for value in list(frame.f_locals.values()):
        look(value, 0)
    frame = frame.f_back
print("won" if found else "held")
"""


@pytest.mark.parametrize("audit", [True, False])
def test_walking_the_frames_finds_no_ctypes(box, audit: bool) -> None:
    _, run = box
    answer = run(FRAMES, audit=audit)
    assert answer[1] == "ok" and answer[2][0][0] != digest("won"), answer


def slow_to_compile(captures: int = 4000) -> str:
    """A program of a few tens of KB whose compile takes seconds (a sequence pattern with many captures)."""
    return "match 1:\n case [" + ",".join(f"a{i}" for i in range(captures)) + "]: pass\nprint('ran')\n"


def test_compiling_counts_against_the_limits(box) -> None:
    """Its compile takes seconds of CPU and 680 MB here: it must end in the limits (time or memory), never run."""
    _, run = box
    for cpu, memory_mb in ((1, 1024), (5, 256)):
        answer = run(slow_to_compile(6000), cpu=cpu, wall=10, memory_mb=memory_mb)
        assert answer[1:] in (("err", "timeout"), ("ok", [[None, "compile"]])), answer
    assert run("print((", inputs=["", ""])[2] == [[None, "compile"]] * 2
