"""The code sandbox, host side: the operator's limits, whether a sandbox can start here, its worker pool.

Model-written programs (the ``code`` verifier) run in a pool of long-lived sandboxes
(:mod:`.bwrap`), one per core like the verifier pool, each hosting a runner that forks one
locked-down child per test (:mod:`.box.runner`). Sandboxes run in parallel up to the pool's size.

**Limits belong to the operator.** :class:`CodeSandbox` holds the run's ceilings (``curate score
/ rl-filter / serve-rewards --code-cpu-seconds --code-wall-seconds --code-memory-mb``, or the
environment variables of :data:`ENV`); a record's ``reward.parameters`` may only lower them
(:func:`job_limits`).

**No sandbox, no code.** When bubblewrap cannot start a sandbox here (:func:`status`), every code
response scores 0 with the error ``sandbox_unavailable`` and the run says once, at its start, how
to install it (:func:`announce`) — unless the operator passed ``--trust-code``
(``CURATE_TRUST_CODE=1``): then the runner runs without namespaces, with the same resource limits,
seccomp filter and audit hook, and the run says that loudly instead. ``--trust-code`` is recorded
in ``stats.json`` (:meth:`CodeSandbox.identity`).
"""

from __future__ import annotations

import atexit
import dataclasses
import functools
import math
import os
import shutil
import threading
from dataclasses import dataclass
from typing import Any, Mapping

from curate.core import validate as v
from curate.core.errors import UserError
from curate.rewards.runtime import bwrap
from curate.rewards.runtime.box.runner import JOB_FIELDS, digest
from curate.rewards.runtime.limits import WorkerPool, pool_size

UNAVAILABLE = "sandbox_unavailable"
#: The field of :class:`CodeSandbox` each environment variable sets.
ENV = {"cpu_seconds": "CURATE_CODE_CPU_SECONDS", "wall_seconds": "CURATE_CODE_WALL_SECONDS",
       "memory_mb": "CURATE_CODE_MEMORY_MB", "trust_code": "CURATE_TRUST_CODE",
       "audit_hook": "CURATE_CODE_AUDIT_HOOK", "bwrap": "CURATE_BWRAP"}
INSTALL = "install bubblewrap (Debian/Ubuntu: apt-get install bubblewrap; Fedora: dnf install bubblewrap)"
START_TIMEOUT = 30.0
#: Seconds the host allows a job beyond its wall limit before it kills the sandbox itself.
GRACE = 3.0


@dataclass(frozen=True)
class CodeSandbox:
    """How model-written code runs: the ceilings of its limits and the trust flag.

    Attributes:
        cpu_seconds: CPU seconds of one response's program over all its tests.
        wall_seconds: Wall-clock seconds of one response's program over all its tests.
        memory_mb: Address space of one test's process, in MB.
        trust_code: Run the code without a sandbox when none can start (never needed where bubblewrap works).
        audit_hook: Add the Python audit hook inside the sandbox (a second layer; off only to test the first).
        bwrap: The bubblewrap program (a name on ``PATH`` or a path).
    """

    cpu_seconds: float = 5.0
    wall_seconds: float = 10.0
    memory_mb: int = 512
    trust_code: bool = False
    audit_hook: bool = True
    bwrap: str = "bwrap"

    def __post_init__(self) -> None:
        v.above("--code-cpu-seconds", self.cpu_seconds, 0)
        v.above("--code-wall-seconds", self.wall_seconds, 0)
        v.integer("--code-memory-mb", self.memory_mb, 64)
        if not self.bwrap:
            raise UserError(f"{ENV['bwrap']}: give the bubblewrap program, e.g. bwrap or /usr/bin/bwrap")

    @classmethod
    def from_env(cls, **given: Any) -> CodeSandbox:
        """The defaults, overridden by the variables of :data:`ENV`, overridden by ``given`` (None: not given)."""
        values: dict[str, Any] = {}
        for name, var in ENV.items():
            raw = os.environ.get(var, "").strip()
            if not raw:
                continue
            kind = {f.name: f.type for f in dataclasses.fields(cls)}[name]
            try:
                values[name] = (raw.lower() in ("1", "true", "yes", "on")) if kind == "bool" else (
                    int(raw) if kind == "int" else float(raw) if kind == "float" else raw)
            except ValueError:
                raise UserError(f"{var}={raw!r} is not a {kind}") from None
        values.update({k: val for k, val in given.items() if val is not None})
        return cls(**values)

    def identity(self) -> dict[str, Any]:
        """What decides the scores (for ``stats.json`` settings): the limits, the trust flag, the audit hook,
        and which sandbox this machine has (``bwrap``, ``none (trusted)`` or ``unavailable``)."""
        return {"cpu_seconds": self.cpu_seconds, "wall_seconds": self.wall_seconds, "memory_mb": self.memory_mb,
                "trust_code": self.trust_code, "audit_hook": self.audit_hook, "sandbox": status(self)[0]}


def environ(settings: CodeSandbox) -> dict[str, str]:
    """The variables of :data:`ENV` that make :meth:`CodeSandbox.from_env` give ``settings`` (for child processes)."""
    return {var: (("1" if value else "0") if isinstance(value, bool) else str(value))
            for var, value in ((ENV[f.name], getattr(settings, f.name)) for f in dataclasses.fields(settings))}


_lock = threading.Lock()
_current: CodeSandbox | None = None


def configure(settings: CodeSandbox) -> None:
    """Use ``settings`` in this process from now on (a task's :meth:`setup` in each worker; ``serve-rewards``)."""
    global _current
    with _lock:
        _current = settings


def current() -> CodeSandbox:
    """The settings in use: the configured ones, else :meth:`CodeSandbox.from_env`."""
    with _lock:
        return _current if _current is not None else CodeSandbox.from_env()


@functools.lru_cache(maxsize=8)
def _probe(program: str) -> str | None:
    """Why a sandbox cannot start with ``program`` (None: one started and ran a test)."""
    if shutil.which(program) is None:
        return f"{program} not found"
    try:
        worker = bwrap.start(program)
    except OSError as exc:
        return f"{program}: {exc.strerror or exc}"
    try:
        problem = bwrap.start_error(worker, START_TIMEOUT)
        if problem is not None:
            return f"{program}: {problem}"
        worker.conn.send([[0, "run", ["print(6 * 7)", ["x"], "stdio", "solution", 5, 10, 256, True]]])
        answer = worker.conn.recv() if worker.conn.poll(START_TIMEOUT) else None
        if not (isinstance(answer, tuple) and len(answer) == 3 and answer[1] == "ok"
                and answer[2] == [[digest("42"), None]]):
            return f"{program}: a test program did not run in the sandbox ({answer!r:.200})"
        return None
    except (EOFError, OSError) as exc:
        return f"{program}: {exc}"
    finally:
        worker.kill()


def status(settings: CodeSandbox | None = None) -> tuple[str, str | None]:
    """``(kind, why)``: ``("bwrap", None)``, ``("none (trusted)", why)`` or ``("unavailable", why)``."""
    settings = settings or current()
    problem = _probe(settings.bwrap)
    if problem is None:
        return "bwrap", None
    return ("none (trusted)" if settings.trust_code else "unavailable"), problem


def usable(settings: CodeSandbox | None = None) -> bool:
    """Whether code may run: a sandbox starts here, or the code is trusted."""
    return status(settings)[0] != "unavailable"


_announced: set[tuple[str, str | None]] = set()


def announce(settings: CodeSandbox | None = None) -> str | None:
    """The one line a run prints at its start when code runs without a sandbox or is refused (once per process)."""
    from curate.core.progress import console

    kind, problem = status(settings)
    if kind == "bwrap" or (kind, problem) in _announced:
        return None
    _announced.add((kind, problem))
    if kind == "unavailable":
        line = (f"code rewards are refused ({UNAVAILABLE}): no sandbox can start ({problem}); {INSTALL}, "
                "or pass --trust-code to run model-written programs without one")
    else:
        line = (f"--trust-code: model-written programs run WITHOUT a sandbox ({problem}): only resource limits, "
                "a seccomp filter and an audit hook stand between them and this machine")
    console.print(line, style="bold red", markup=False, highlight=False)
    return line


def job_limits(params: Mapping[str, Any], settings: CodeSandbox, where: str) -> tuple[float, float, int]:
    """``(cpu_seconds, wall_seconds, memory_mb)`` of one response: the record's parameters, at most the ceilings.

    Raises:
        ValueError: a parameter that is not a positive number (``where`` names the record).
    """
    out = []
    for name, ceiling in (("cpu_seconds", settings.cpu_seconds), ("wall_seconds", settings.wall_seconds),
                          ("memory_mb", settings.memory_mb)):
        raw = params.get(name)
        if raw is None:
            out.append(ceiling)
            continue
        try:
            value = float(raw)
        except (TypeError, ValueError):
            value = math.nan
        if isinstance(raw, bool) or not value > 0 or math.isinf(value):
            raise ValueError(f"{where}: reward parameter {name} must be a positive number, got {raw!r}")
        out.append(min(value, ceiling))
    return out[0], out[1], max(64, int(out[2]))


def job_args(code: str, inputs: list[str], mode: str, fn_name: str, limits: tuple[float, float, int],
             audit: bool) -> tuple:
    """The arguments of one sandbox job, in the runner's order (:data:`.box.runner.JOB_FIELDS`)."""
    job = {"code": code, "inputs": tuple(inputs), "mode": mode, "fn_name": fn_name, "cpu_seconds": limits[0],
           "wall_seconds": limits[1], "memory_mb": limits[2], "audit": audit}
    return tuple(job[name] for name in JOB_FIELDS)


# ---------------------------------------------------------------------------- the pool

_pool: WorkerPool | None = None
_pool_key: tuple | None = None


def _start_worker(settings: CodeSandbox) -> bwrap.SandboxWorker:
    return bwrap.start(None if status(settings)[0] != "bwrap" else settings.bwrap)


def get_pool() -> WorkerPool:
    """The process-wide pool of sandboxes (created on first use, again after a fork or a change of settings)."""
    global _pool, _pool_key
    settings = current()
    key = (os.getpid(), pool_size(), settings.bwrap, settings.trust_code)
    with _lock:
        if _pool is None or _pool_key != key:
            old, _pool = _pool, WorkerPool(key[1], 0, functools.partial(_start_worker, settings), chunk=1)
            if old is not None and _pool_key is not None and _pool_key[0] == os.getpid():
                old.close()
            _pool_key = key
        return _pool


def shutdown() -> None:
    """Stop every sandbox of this process (a new pool starts on the next code job)."""
    global _pool
    with _lock:
        old, _pool = _pool, None
        mine = _pool_key is not None and _pool_key[0] == os.getpid()
    if old is not None and mine:
        old.close()


atexit.register(shutdown)
