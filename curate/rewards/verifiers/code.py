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
wall limit is the error ``timeout`` (score 0). A program that does not compile scores 0
without starting a sandbox.

Sandbox (one process per response, all tests in it, never sees the expected outputs):
``python -I -S -B`` started in a fresh temporary folder, in a new session (the whole
process group is killed at the wall limit), inside a new network namespace when
``unshare`` works here (checked once; ``CURATE_SANDBOX_NETNS=0`` turns it off), with
RLIMIT_CPU / RLIMIT_AS / RLIMIT_FSIZE / RLIMIT_NPROC=0, root dropped to ``nobody``, and
an audit hook refusing process creation, sockets, ctypes, writes outside the folder and
reads outside it and the standard library (see :mod:`curate.rewards.runtime._sandbox_boot`).
At most one sandbox per core this process was given runs at once
(:func:`curate.core.threads.available_cpus`).

Parameters: ``cpu_seconds`` (default 5), ``wall_seconds`` (10), ``memory_mb`` (512),
``partial`` (false), ``mode`` (auto), ``fn_name`` (solution).
"""

from __future__ import annotations

import json
import os
import pwd
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import warnings
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any, Mapping

from curate.core.threads import available_cpus
from curate.rewards.extract import extract_answer, last_code_block
from curate.rewards.result import Context, RecordError, VerifierFailure, param, where
from curate.rewards.runtime import deadline

MAX_CODE_CHARS = 200_000
MAX_TESTS = 256
OUTPUT_CHARS = 1_000_000
FILE_BYTES = 16 * 1024 * 1024
# The compile() check warns about odd escapes in untrusted programs: not our warnings.
warnings.filterwarnings("ignore", category=SyntaxWarning, module="<solution>")
warnings.filterwarnings("ignore", category=DeprecationWarning, module="<solution>")
_BOOT = (Path(__file__).parents[1] / "runtime" / "_sandbox_boot.py").read_text(encoding="utf-8")
_SLOTS = threading.BoundedSemaphore(available_cpus())


@dataclass(frozen=True, slots=True)
class SandboxRun:
    """Outcome of one sandboxed run: per-test output (``None`` if missing) and error name."""

    outputs: tuple[str | None, ...]
    errors: tuple[str | None, ...]
    timed_out: bool
    returncode: int | None
    seconds: float


@lru_cache(maxsize=1)
def netns_prefix() -> tuple[str, ...]:
    """The ``unshare`` command that gives the sandbox an empty network namespace, if it works."""
    if os.environ.get("CURATE_SANDBOX_NETNS", "1") == "0":
        return ()
    exe = shutil.which("unshare")
    if not exe:
        return ()
    args = (exe, "--net") if os.geteuid() == 0 else (exe, "--net", "--map-root-user")
    try:
        rc = subprocess.run([*args, "true"], capture_output=True, timeout=5).returncode
    except (OSError, subprocess.SubprocessError):
        return ()
    return args if rc == 0 else ()


def _world_readable(path: str) -> bool:
    """True when every folder on the way to ``path`` can be entered and read by anyone."""
    p = Path(path).resolve()
    try:
        for folder in [p, *p.parents]:
            if folder.stat().st_mode & 0o005 != 0o005:
                return False
    except OSError:
        return False
    return True


@lru_cache(maxsize=1)
def _nobody_uid() -> int | None:
    """``nobody``'s uid when running as root and ``nobody`` can read the interpreter's library."""
    if os.geteuid() != 0:
        return None
    import sysconfig

    if not all(_world_readable(sysconfig.get_paths()[k]) for k in ("stdlib", "platstdlib")):
        return None
    try:
        return pwd.getpwnam("nobody").pw_uid
    except KeyError:
        return None


def run_program(code: str, inputs: list[str], *, mode: str = "stdio", fn_name: str = "solution",
                cpu_seconds: float = 5, wall_seconds: float = 10, memory_mb: int = 512) -> SandboxRun:
    """Run ``code`` once per input in one sandboxed process (see the module docstring)."""
    job = {
        "code": code, "inputs": inputs, "mode": mode, "fn_name": fn_name,
        "cpu_seconds": max(1, int(round(cpu_seconds))), "memory_bytes": int(memory_mb) * 1024 * 1024,
        "file_bytes": FILE_BYTES, "output_chars": OUTPUT_CHARS, "drop_to_uid": _nobody_uid(),
    }
    with _SLOTS:
        workdir = tempfile.mkdtemp(prefix="curate-sandbox-")
        try:
            os.chmod(workdir, 0o777 if job["drop_to_uid"] is not None else 0o700)
            job["workdir"] = workdir
            cmd = [*netns_prefix(), sys.executable, "-I", "-S", "-B", "-c", _BOOT]
            env = {"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8", "HOME": workdir}
            t0 = time.monotonic()
            timed_out = False
            with tempfile.TemporaryFile() as out:
                proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=out, stderr=subprocess.DEVNULL,
                                        cwd=workdir, env=env, start_new_session=True, close_fds=True)
                try:
                    proc.communicate(json.dumps(job).encode("utf-8", "replace"), timeout=wall_seconds)
                except subprocess.TimeoutExpired:
                    timed_out = True
                finally:
                    try:
                        os.killpg(proc.pid, signal.SIGKILL)
                    except (ProcessLookupError, PermissionError):
                        pass
                    proc.wait()
                seconds = time.monotonic() - t0
                out.seek(0)
                data = out.read(FILE_BYTES + 1)
        finally:
            shutil.rmtree(workdir, ignore_errors=True)
    outputs: list[str | None] = [None] * len(inputs)
    errors: list[str | None] = [None] * len(inputs)
    for line in data.decode("utf-8", "replace").splitlines():
        try:
            rec = json.loads(line)
            i = int(rec["i"])
        except (ValueError, KeyError, TypeError):
            continue
        if 0 <= i < len(inputs) and outputs[i] is None:
            out_val = rec.get("out")
            outputs[i] = out_val if isinstance(out_val, str) else None
            errors[i] = rec.get("err") if isinstance(rec.get("err"), str) else None
    rc = proc.returncode
    if rc in (-signal.SIGXCPU, -signal.SIGKILL) and not timed_out:
        timed_out = all(o is None for o in outputs[-1:])
    return SandboxRun(tuple(outputs), tuple(errors), timed_out, rc, seconds)


def _norm_output(text: str) -> str:
    return "\n".join(line.rstrip() for line in str(text).strip("\n").splitlines()).strip()


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


def compiles(program: str) -> bool:
    """Whether ``program`` compiles (checked in the caller: bounded, and it saves a sandbox run).

    CPython's compiler limits nesting and constant folding, so this cannot hang.
    """
    try:
        compile(program, "<solution>", "exec", dont_inherit=True)
    except (SyntaxError, ValueError, RecursionError, MemoryError, OverflowError):
        return False
    return True


def verify(response: str, golds: list[Any], params: Mapping[str, Any], ctx: Context) -> float:
    """Fraction of tests passed (1.0 / 0.0 unless ``partial``), in the sandbox."""
    inputs, expected, options = parse_tests(golds, ctx.record.get("id"))
    program = extract_program(response)
    if not program or not program.strip():
        return 0.0
    if len(program) > MAX_CODE_CHARS:
        raise VerifierFailure("answer_too_long")
    if not compiles(program):
        return 0.0
    fn_name = str(param(params, "fn_name", options.get("fn_name", "solution")))
    mode = str(param(params, "mode", options.get("mode", "auto")))
    if mode == "auto":
        mode = "function" if re.search(rf"^\s*def\s+{re.escape(fn_name)}\s*\(", program, re.M) else "stdio"
    if mode not in ("function", "stdio"):
        raise RecordError(f"{where(ctx.record.get('id'))}: code mode {mode!r} is not auto, function or stdio")
    wall = min(120.0, float(param(params, "wall_seconds", 10)))
    left = deadline.remaining()  # a caller's deadline (serve-rewards --deadline) cuts the wall limit
    if left is not None and left < wall:
        if left <= 0:
            raise VerifierFailure(deadline.DEADLINE)
        wall = left
    run = run_program(program, inputs, mode=mode, fn_name=fn_name,
                      cpu_seconds=min(60.0, float(param(params, "cpu_seconds", 5))), wall_seconds=wall,
                      memory_mb=min(8192, int(param(params, "memory_mb", 512))))
    if run.timed_out:
        raise VerifierFailure(deadline.DEADLINE if deadline.passed() else "timeout")
    passed = sum(1 for got, err, want in zip(run.outputs, run.errors, expected)
                 if got is not None and err is None and _norm_output(got) == _norm_output(want))
    if bool(param(params, "partial", False)):
        return passed / len(expected)
    return 1.0 if passed == len(expected) else 0.0
