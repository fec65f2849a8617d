"""The code verifier and its sandbox: real programs in real sandboxed processes."""

from __future__ import annotations

import json
import os
import socket
import threading
import time
import uuid

import pytest

from curate.rewards import score
from curate.rewards.verifiers.code import netns_prefix, run_program

TESTS = json.dumps({"tests": [{"input": "3", "output": "6"}, {"input": "10", "output": "20"}]})


def code_record(gold: str = TESTS, **params) -> dict:
    return {"id": "c", "answer": gold, "answer_type": "general-code", "reward": {"parameters": params}}


def fenced(program: str) -> str:
    return f"<answer>\n```python\n{program}\n```\n</answer>"


def probe(program: str, expected: str, **params) -> float:
    """Score a program whose single test expects ``expected`` on stdout."""
    gold = json.dumps({"tests": [{"input": "", "output": expected}]})
    result = score(code_record(gold, **params), fenced(program))
    assert result.error is None, result
    return result.accuracy


def test_stdio_program_right_and_wrong() -> None:
    assert score(code_record(), fenced("print(int(input()) * 2)")).accuracy == 1.0
    assert score(code_record(), fenced("print(int(input()) + 3)")).accuracy == 0.0  # 6 right, 13 wrong


def test_function_mode_and_partial_credit() -> None:
    gold = json.dumps({"tests": [{"input": "abc", "output": "cba"}, {"input": "ab", "output": "xx"}]})
    program = "def solution(s):\n    return s[::-1]\n"
    assert score(code_record(gold), fenced(program)).accuracy == 0.0
    assert score(code_record(gold, partial=True), fenced(program)).accuracy == 0.5


def test_inputs_outputs_layout_and_unfenced_answer() -> None:
    gold = json.dumps({"inputs": ["1 2", "5 5"], "outputs": ["3", "10"]})
    assert score(code_record(gold), "<answer>a, b = map(int, input().split())\nprint(a + b)</answer>").accuracy == 1.0


def test_syntax_error_scores_zero_without_error() -> None:
    result = score(code_record(), fenced("def broken(:\n"))
    assert (result.accuracy, result.error) == (0.0, None)


def test_infinite_loop_is_stopped() -> None:
    t0 = time.monotonic()
    result = score(code_record(cpu_seconds=1, wall_seconds=3), fenced("while True:\n    pass"))
    assert result.error == "timeout" and result.accuracy == 0.0
    assert time.monotonic() - t0 < 3 + 2.0


def test_sleeping_program_hits_the_wall_limit() -> None:
    t0 = time.monotonic()
    result = score(code_record(wall_seconds=1.5), fenced("import time\ntime.sleep(30)"))
    assert result.error == "timeout"
    assert time.monotonic() - t0 < 1.5 + 2.0


def test_fork_and_subprocess_are_refused() -> None:
    fork = "import os\ntry:\n    os.fork()\n    print('forked')\nexcept Exception:\n    print('refused')"
    assert probe(fork, "refused") == 1.0
    spawn = ("try:\n    import subprocess\n    subprocess.run(['true'])\n    print('spawned')\n"
             "except Exception:\n    print('refused')")
    assert probe(spawn, "refused") == 1.0
    bomb = "import os\nwhile True:\n    os.fork()"
    before = len(os.listdir("/proc"))
    assert probe(bomb, "") == 0.0
    assert len(os.listdir("/proc")) < before + 20  # no process explosion


def test_socket_connect_is_refused() -> None:
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(8)
    server.settimeout(0.2)
    port = server.getsockname()[1]
    accepted: list[object] = []
    done = threading.Event()

    def accept() -> None:
        while not done.is_set():
            try:
                accepted.append(server.accept())
            except OSError:
                pass

    watcher = threading.Thread(target=accept)
    watcher.start()
    program = (f"try:\n    import socket\n    socket.create_connection(('127.0.0.1', {port}), timeout=2)\n"
               "    print('connected')\nexcept Exception:\n    print('refused')")
    assert probe(program, "refused") == 1.0
    assert probe(program, "connected") == 0.0
    time.sleep(0.3)
    done.set()
    watcher.join()
    server.close()
    assert accepted == []


def test_write_outside_the_folder_is_refused_inside_allowed() -> None:
    target = f"/tmp/curate-escape-{uuid.uuid4().hex}"
    program = (f"try:\n    open({target!r}, 'w').write('x')\n    print('wrote')\n"
               "except Exception:\n    print('refused')")
    assert probe(program, "refused") == 1.0
    assert not os.path.exists(target)
    relative = "try:\n    open('../escape.txt', 'w')\n    print('wrote')\nexcept Exception:\n    print('refused')"
    assert probe(relative, "refused") == 1.0
    inside = "open('notes.txt', 'w').write('kept')\nprint(open('notes.txt').read())"
    assert probe(inside, "kept") == 1.0


def test_memory_limit() -> None:
    program = "try:\n    x = bytearray(2 * 1024 ** 3)\n    print('allocated')\nexcept MemoryError:\n    print('refused')"
    assert probe(program, "refused", memory_mb=256) == 1.0


def test_program_cannot_read_the_expected_output_from_disk(tmp_path) -> None:
    secret = tmp_path / "gold.json"
    secret.write_text("42")
    os.chmod(tmp_path, 0o755)
    os.chmod(secret, 0o644)
    program = f"print(open({str(secret)!r}).read())"
    gold = json.dumps({"tests": [{"input": "", "output": "42"}]})
    assert score(code_record(gold), fenced(program)).accuracy == 0.0


def test_run_program_reports_outputs() -> None:
    run = run_program("print(input()[::-1])", ["abc", "xy"])
    assert run.outputs == ("cba\n", "yx\n") and not run.timed_out


def test_network_namespace_probe_is_cached() -> None:
    assert netns_prefix() == netns_prefix()


@pytest.mark.parametrize("program", ["import ctypes", "import _posixsubprocess", "import mmap"])
def test_dangerous_modules_are_refused(program: str) -> None:
    wrapped = f"try:\n    {program}\n    print('imported')\nexcept Exception:\n    print('refused')"
    assert probe(wrapped, "refused") == 1.0
