"""General-code verifier: run the proposed Python program against the record's tests.

Gold (``answer``): JSON ``{"tests": [{"input": "...", "output": "..."}, ...]}`` (the
LLaVA-OneVision-1.5-RL layout), or ``{"inputs": [...], "outputs": [...]}``, or a bare list
of ``{"input", "output"}``; optional ``fn_name`` (default ``solution``) and ``mode``.

Program: the extracted answer (its last fenced block if it has one), else the last
fenced Python block of the response. Mode ``function`` (chosen by ``auto`` when the
program defines ``fn_name``): the program is executed, then ``fn_name(input)`` is called
and ``str()`` of its return value is the output. Mode ``stdio``: the input is the
program's stdin and its stdout is the output. Outputs compare after stripping trailing
whitespace of each line and surrounding blank lines. Score: 1.0 when every test
passes (``partial: true`` gives the passing fraction), else 0.0; exceeding the CPU or
wall limit is the error ``timeout`` (score 0). A program that does not compile scores 0; it
is compiled in the sandbox, under the test's limits, never in the scoring process (a program
built to be slow or large to compile costs its own CPU budget, not the server's). The scoring
process only *parses* programs of at most :data:`PARSE_HERE_CHARS` characters, to score a syntax
error 0 without a sandbox run (parsing is about linear in the length: a few ms at that size;
code generation is where compiles blow up).

Sandbox: the program runs in an operating-system sandbox (bubblewrap: namespaces, a private
file system, no network, uid 65534, seccomp; see :mod:`curate.rewards.runtime.sandbox`), one
fresh process per test, and never sees the expected outputs: the sandbox returns a digest of
each test's output and this module compares. Without a sandbox the response scores 0 with the
error ``sandbox_unavailable`` (unless the run trusts the code, ``--trust-code``). Programs of
different responses run in parallel, one sandbox per core.

Parameters: ``cpu_seconds``, ``wall_seconds`` and ``memory_mb`` lower the run's limits (the
operator's ceilings, ``--code-cpu-seconds`` … default 5 s, 10 s, 512 MB) and never raise them;
``partial`` (false), ``mode`` (auto), ``fn_name`` (solution).
"""

from __future__ import annotations

import ast
import functools
import json
import re
import warnings
from typing import Any, Mapping, Sequence

from curate.rewards.extract import extract_answer, last_code_block
from curate.rewards.verdict import Context, Deferred, RecordError, VerifierFailure, param, where
from curate.rewards.runtime import sandbox
from curate.rewards.runtime.box.runner import digest

MAX_CODE_CHARS = 200_000
MAX_TESTS = 256
PARSE_HERE_CHARS = 16_000
# The parse check warns about odd escapes in untrusted programs: not our warnings.
warnings.filterwarnings("ignore", category=SyntaxWarning, module="<solution>")
warnings.filterwarnings("ignore", category=DeprecationWarning, module="<solution>")


def parse_tests(golds: list[Any], record_id: Any = None) -> tuple[list[str], list[str], dict]:
    """``(inputs, expected_outputs, options)`` from a code record's gold."""
    raw = golds[0] if golds else None
    data = raw
    if isinstance(raw, str):
        try:
            data = json.loads(raw)
        except ValueError:
            raise RecordError(f"{where(record_id)}: general-code gold is not JSON test cases") from None
    options: dict = {}
    if isinstance(data, Mapping):
        options = {k: data[k] for k in ("fn_name", "mode") if k in data}
        if "tests" in data:
            data = data["tests"]
        elif "inputs" in data and "outputs" in data:
            data = [{"input": i, "output": o} for i, o in zip(data["inputs"], data["outputs"])]
    if not isinstance(data, list) or not data or not all(
            isinstance(t, Mapping) and "input" in t and "output" in t for t in data):
        raise RecordError(f"{where(record_id)}: general-code gold needs a non-empty list of tests "
                          "with 'input' and 'output'")
    if len(data) > MAX_TESTS:
        raise RecordError(f"{where(record_id)}: more than {MAX_TESTS} tests")
    inputs = [t["input"] if isinstance(t["input"], str) else json.dumps(t["input"]) for t in data]
    return inputs, [_expected_text(t["output"]) for t in data], options


def check_gold(golds: list[Any], record_id: Any = None) -> None:
    """Refuse a gold that holds no test cases (see :func:`parse_tests`) before any program runs.

    Raises:
        RecordError: the gold is not JSON test cases.
    """
    parse_tests(golds, record_id)


def _expected_text(value: Any) -> str:
    """An expected output as text: strings as they are, numbers and lists as ``str()``,
    objects, booleans and null as JSON."""
    if isinstance(value, str):
        return value
    if isinstance(value, (dict, bool)) or value is None:
        return json.dumps(value)
    return str(value)


def extract_program(response: str) -> str | None:
    """The Python program a response proposes (see the module docstring)."""
    answer = extract_answer(response)
    if answer is not None:
        fenced = last_code_block(answer)
        return (fenced if fenced is not None else answer).strip("\n")
    fenced = last_code_block(response, ("python", "py", "python3"))
    return fenced.strip("\n") if fenced is not None else None


def parses(program: str) -> bool:
    """Whether ``program`` parses (syntax only, no code generation); programs over :data:`PARSE_HERE_CHARS`
    characters are not parsed here and count as parsing (the sandbox compiles them under its limits)."""
    if len(program) > PARSE_HERE_CHARS:
        return True
    try:
        compile(program, "<solution>", "exec", flags=ast.PyCF_ONLY_AST, dont_inherit=True)
    except (SyntaxError, ValueError, RecursionError, MemoryError, OverflowError):
        return False
    return True


def passed(wants: Sequence[str], partial: bool, tests: Any) -> float:
    """The score of a sandbox's per-test results (``[digest, error]`` each) against the expected digests.

    Raises:
        ValueError: the results do not have one well-formed entry per test.
    """
    if not isinstance(tests, (list, tuple)) or len(tests) != len(wants) or not all(
            isinstance(t, (list, tuple)) and len(t) == 2 for t in tests):
        raise ValueError("the sandbox's answer does not match the tests")
    good = sum(1 for (got, err), want in zip(tests, wants) if err is None and got == want)
    return good / len(wants) if partial else float(good == len(wants))


def verify(response: str, golds: list[Any], params: Mapping[str, Any], ctx: Context) -> float | Deferred:
    """Fraction of tests passed (1.0 / 0.0 unless ``partial``): the program's run, deferred to a sandbox."""
    rid = ctx.record.get("id")
    inputs, expected, options = parse_tests(golds, rid)
    program = extract_program(response)
    if not program or not program.strip():
        return 0.0
    if len(program) > MAX_CODE_CHARS:
        raise VerifierFailure("answer_too_long")
    if not parses(program):
        return 0.0
    fn_name = str(param(params, "fn_name", options.get("fn_name", "solution")))
    mode = str(param(params, "mode", options.get("mode", "auto")))
    if mode == "auto":
        mode = "function" if re.search(rf"^\s*def\s+{re.escape(fn_name)}\s*\(", program, re.M) else "stdio"
    if mode not in ("function", "stdio"):
        raise RecordError(f"{where(rid)}: code mode {mode!r} is not auto, function or stdio")
    settings = sandbox.current()
    try:
        limits = sandbox.job_limits(params, settings, where(rid))
    except ValueError as exc:
        raise RecordError(str(exc)) from None
    if not sandbox.usable(settings):
        raise VerifierFailure(sandbox.UNAVAILABLE)
    wants = tuple(digest(e) for e in expected)
    return Deferred("run", sandbox.job_args(program, inputs, mode, fn_name, limits, settings.audit_hook),
                    post=functools.partial(passed, wants, bool(param(params, "partial", False))),
                    limit=limits[1] + sandbox.GRACE, pool="sandbox")
