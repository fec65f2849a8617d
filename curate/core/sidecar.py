"""A helper process that imports slow modules early and later runs one call.

``curate resample`` draws its plot with matplotlib, whose import costs about half a
second of one core and holds the GIL all along: in a thread of the driver it stalled
the reads and the weighing, whose many short numpy calls each waited for the GIL.
A :class:`Sidecar` starts a fresh interpreter at the beginning of the run instead;
it imports the modules beside the driver's work (on another core), then waits for
one call, runs it and exits. The call's arguments go through a pipe, pickled (the
child is ours), and its result or its error comes back the same way.

The child sees the parent's ``sys.path`` and nothing of the working folder, so it
imports what the parent would. Starting one costs an interpreter (tens of
milliseconds of CPU, outside the driver) plus its imports. When no child can be
started the call runs in the calling process: the same function on the same
arguments, so the outputs are the same bytes either way.
"""

from __future__ import annotations

import importlib
import json
import os
import pickle
import subprocess
import sys
import tempfile
import threading
from typing import IO, Any

PATH_VAR = "CURATE_SIDECAR_PATH"
"""The parent's ``sys.path``, as JSON, for the child (which starts isolated: ``python -I``)."""
# The child ends with os._exit once its answer is out: the parent waits for its end, and an interpreter's
# teardown (its modules' objects collected one by one) took longer than matplotlib's plot itself.
_BOOT = ("import json, os, sys; sys.path[:] = json.loads(os.environ[%r]); "
         "from curate.core.sidecar import _serve; code = _serve(sys.argv[1], sys.argv[2:]); "
         "sys.stdout.flush(); sys.stderr.flush(); os._exit(code)" % PATH_VAR)


class SidecarError(RuntimeError):
    """The helper process failed: the call's error, or how the process ended."""


class Sidecar:
    """A child interpreter that imports ``module`` and ``preload`` now and runs one function of ``module`` later.

    Use as a context manager, or call :meth:`close`: a child still running then (no call
    sent, or an error on the way) is ended. See the module docstring.
    """

    def __init__(self, module: str, preload: tuple[str, ...] = ()) -> None:
        self.module = module
        self._proc: subprocess.Popen[bytes] | None = None
        self._stderr: IO[bytes] | None = None
        self._sender: threading.Thread | None = None
        self._local: tuple[str, tuple[Any, ...], dict[str, Any]] | None = None
        self._called = False
        try:
            self._stderr = tempfile.TemporaryFile()
            self._proc = subprocess.Popen([sys.executable, "-I", "-c", _BOOT, module, *preload],
                                          stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self._stderr,
                                          env={**os.environ, PATH_VAR: json.dumps(sys.path)})
        except OSError:  # no child process here: the call will run in this process
            self._proc = None

    def call(self, function: str, *args: Any, **kwargs: Any) -> None:
        """Send the call ``module.function(*args, **kwargs)``; :meth:`result` waits for it. Once per sidecar."""
        if self._called:
            raise RuntimeError("a sidecar runs one call")
        self._called = True
        if self._proc is None:
            self._local = (function, args, kwargs)
            return
        # Written from a thread: the child reads once its imports are done, and a call larger than the
        # pipe's buffer would hold this thread until then.
        payload = pickle.dumps((function, args, kwargs), protocol=pickle.HIGHEST_PROTOCOL)
        self._sender = threading.Thread(target=_send, args=(self._proc.stdin, payload), daemon=True)
        self._sender.start()

    def result(self) -> Any:
        """Wait for the call and return its result.

        Raises:
            SidecarError: the call raised in the child (its type and message), or the child ended
                without an answer (its exit status and the last line it printed).
            Exception: whatever the call raised, when it ran in this process.
        """
        if not self._called:
            raise RuntimeError("result() before call()")
        if self._proc is None:
            function, args, kwargs = self._local
            return getattr(importlib.import_module(self.module), function)(*args, **kwargs)
        answer = self._proc.stdout.read()
        self._sender.join()
        code = self._proc.wait()
        try:
            ok, value = pickle.loads(answer)
        except Exception:  # noqa: BLE001 - no answer: the child died (killed, out of memory, ...)
            raise SidecarError(f"the {self.module} helper process ended with exit status {code} and no answer"
                               f"{self._last_words()}") from None
        if not ok:
            raise SidecarError(value)
        return value

    def _last_words(self) -> str:
        if self._stderr is None:
            return ""
        self._stderr.seek(0)
        lines = [line for line in self._stderr.read().decode(errors="replace").splitlines() if line.strip()]
        return f": {lines[-1].strip()}" if lines else ""

    def close(self) -> None:
        """End the child if it still runs, and free its pipes."""
        proc, self._proc = self._proc, None
        if proc is not None:
            if self._sender is None:  # no call sent: stdin closed empty ends the child quietly
                proc.stdin.close()    # (once a call is sent, stdin is the sender's to close)
            proc.stdout.close()
            if proc.poll() is None:
                proc.kill()
            proc.wait()
        if self._stderr is not None:
            self._stderr.close()

    def __enter__(self) -> Sidecar:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _send(stream: IO[bytes], payload: bytes) -> None:
    try:
        stream.write(payload)
        stream.close()
    except (BrokenPipeError, OSError, ValueError):  # the child is gone: result() says how it ended
        pass


def _serve(module: str, preload: list[str]) -> int:
    """The child: import ``module`` and ``preload``, read one pickled call from stdin, write
    ``(ok, result or "Type: message")`` to stdout. No call (stdin closed empty) ends it quietly."""
    out = sys.stdout.buffer
    try:
        target = importlib.import_module(module)
        for name in preload:
            importlib.import_module(name)
        data = sys.stdin.buffer.read()
        if not data:
            return 0
        function, args, kwargs = pickle.loads(data)
        answer = (True, getattr(target, function)(*args, **kwargs))
    except Exception as exc:  # noqa: BLE001 - every error goes back to the parent as one line
        answer = (False, f"{type(exc).__name__}: {exc}")
    out.write(pickle.dumps(answer, protocol=pickle.HIGHEST_PROTOCOL))
    out.flush()
    return 0
