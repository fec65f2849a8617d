"""The code verifier: real programs in real bubblewrap sandboxes (skipped where none can start; CI installs it)."""

from __future__ import annotations

import json
import os
import time

import pytest

from curate.rewards.registry import score, score_many
from curate.rewards.runtime import limits, sandbox
from curate.rewards.runtime.sandbox import CodeSandbox

from .escapes import needs_bwrap

TESTS = json.dumps({"tests": [{"input": "3", "output": "6"}, {"input": "10", "output": "20"}]})
pytestmark = needs_bwrap


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


@pytest.fixture
def ceilings():
    """Set the operator's ceilings for one test, then restore the environment's."""
    def use(**kw) -> None:
        sandbox.configure(CodeSandbox.from_env(**kw))

    yield use
    sandbox.configure(CodeSandbox.from_env())


def test_stdio_program_right_and_wrong() -> None:
    assert score(code_record(), fenced("print(int(input()) * 2)")).accuracy == 1.0
    assert score(code_record(), fenced("print(int(input()) + 3)")).accuracy == 0.0  # 6 right, 13 wrong


def test_function_mode_and_partial_credit() -> None:
    gold = json.dumps({"tests": [{"input": "abc", "output": "cba"}, {"input": "ab", "output": "xx"}]})
    program = "def solution(s):\n    print('debug output is not the answer')\n    return s[::-1]\n"
    assert score(code_record(gold), fenced(program)).accuracy == 0.0
    assert score(code_record(gold, partial=True), fenced(program)).accuracy == 0.5


def test_inputs_outputs_layout_and_unfenced_answer() -> None:
    gold = json.dumps({"inputs": ["1 2", "5 5"], "outputs": ["3", "10"]})
    assert score(code_record(gold), "<answer>a, b = map(int, input().split())\nprint(a + b)</answer>").accuracy == 1.0


def test_each_test_is_a_fresh_process() -> None:
    """State left by one test (a file, a module global) is that program's own; a crash fails only its test."""
    gold = json.dumps({"tests": [{"input": "1", "output": "first"}, {"input": "2", "output": "first"},
                                 {"input": "3", "output": "x"}]})
    program = ("import os\nn = input()\nif n == '3':\n    raise SystemExit(3)\n"
               "print('again' if os.path.exists('seen') else 'first')\nopen('seen', 'w').close()")
    result = score(code_record(gold, partial=True), fenced(program))
    assert result.accuracy == pytest.approx(1 / 3)  # test 2 sees test 1's file in the same work folder; 3 fails


def test_syntax_error_scores_zero_without_error() -> None:
    result = score(code_record(), fenced("def broken(:\n"))
    assert (result.accuracy, result.error) == (0.0, None)


def test_infinite_loop_is_stopped() -> None:
    t0 = time.monotonic()
    result = score(code_record(cpu_seconds=1, wall_seconds=3), fenced("while True:\n    pass"))
    assert result.error == "timeout" and result.accuracy == 0.0
    assert time.monotonic() - t0 < 3 + sandbox.GRACE


def test_sleeping_program_hits_the_wall_limit() -> None:
    t0 = time.monotonic()
    result = score(code_record(wall_seconds=1.5), fenced("import time\ntime.sleep(30)"))
    assert result.error == "timeout"
    assert time.monotonic() - t0 < 1.5 + sandbox.GRACE


def test_output_flood_is_cut() -> None:
    result = score(code_record(), fenced("while True:\n    print('y' * 100000)"))
    assert result.accuracy == 0.0 and result.error in (None, "timeout")


def test_memory_limit() -> None:
    program = "try:\n    x = bytearray(1024 ** 3)\n    print('allocated')\nexcept MemoryError:\n    print('refused')"
    assert probe(program, "refused", memory_mb=256) == 1.0
    assert probe(program, "allocated", memory_mb=2048) == 0.0  # the run's ceiling (512 MB) wins


def test_record_parameters_only_lower_the_ceilings(ceilings) -> None:
    ceilings(cpu_seconds=1, wall_seconds=2, memory_mb=256)
    t0 = time.monotonic()
    burn = "import time\nend = time.process_time() + 2.5\nwhile time.process_time() < end:\n    pass\nprint('done')"
    result = score(code_record(json.dumps({"tests": [{"input": "", "output": "done"}]}), cpu_seconds=60,
                               wall_seconds=120), fenced(burn))
    assert result.error == "timeout" and time.monotonic() - t0 < 2 + sandbox.GRACE
    assert probe("x = bytearray(400 * 1024 ** 2)\nprint('allocated')", "allocated", memory_mb=8192) == 0.0
    ceilings(memory_mb=1024)
    assert probe("x = bytearray(400 * 1024 ** 2)\nprint('allocated')", "allocated", memory_mb=8192) == 1.0


@pytest.mark.parametrize("value", ["lots", -1, 0, True])
def test_bad_limit_parameters_are_record_errors(value) -> None:
    result = score_many([(code_record(cpu_seconds=value), fenced("print(6)"))], on_record_error="result")[0]
    assert result.error.startswith("record_error") and "cpu_seconds" in result.error


def test_programs_run_in_parallel_sandboxes() -> None:
    """Four programs sleeping 2 s on a pool of two sandboxes take two rounds, not four (issue: 4 took 40 s)."""
    before = limits.pool_size()
    limits.configure(workers=2)
    try:
        gold = json.dumps({"tests": [{"input": "", "output": "ok"}]})
        items = [(code_record(gold), fenced(f"import time\ntime.sleep(2)\nprint('ok')  # {k}")) for k in range(4)]
        sandbox.get_pool().warm_up(wait=True)
        t0 = time.monotonic()
        results = score_many(items)
        elapsed = time.monotonic() - t0
    finally:
        limits.configure(workers=before)
    assert [r.accuracy for r in results] == [1.0] * 4
    assert elapsed < 4 * 2 - 1


def test_dangerous_calls_are_refused() -> None:
    for program in ("import os\nos.fork()", "import subprocess\nsubprocess.run(['true'])", "import ctypes",
                    "import socket\nsocket.socket()", "open('/etc/passwd').read()"):
        wrapped = "try:\n" + "".join(f"    {line}\n" for line in program.splitlines()) + \
                  "    print('done')\nexcept Exception:\n    print('refused')"
        assert probe(wrapped, "refused") == 1.0, program


def test_nothing_of_the_host_is_visible() -> None:
    program = "import os\nprint(os.getuid(), os.path.exists('/etc'), os.path.exists('/proc/1'), len(os.environ) < 6)"
    assert probe(program, "65534 False False True") == 1.0
