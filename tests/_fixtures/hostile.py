"""Session fixtures of the hostile-input table (tests/curate/cli/test_hostile*.py): files made here, as a careless or
hostile user, a crawl or a server would hand them to ``curate``.

* ``hostile_records``: a JSONL of good records and one record per hostile case (a FIFO, ``/dev/zero``, a symlink
  to ``/dev/urandom``, a NUL, a symlink loop, a 5,000-character path, 1,000 images, a 5,000-digit integer, JSON
  nested 100,000 deep, a lone surrogate, a processor special token in user text), with the reason each stage
  gives each one;
* ``chat_server``: an OpenAI-style chat server on loopback whose answer is set by the test (a status, a redirect,
  ``content: null``, no choices, or a good answer), counting the calls.
"""

from __future__ import annotations

import json
import os
import resource
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from curate.fixtures.tiny_vlm import free_port

ROOT = Path(__file__).resolve().parents[2]
#: Every child of these tests: killed (its whole process group) past this many seconds.
SECONDS = 180
#: Address space of a child (torch reserves about 4 GB of it at import): a runaway read fails at this bound.
ADDRESS_SPACE = 8 << 30
#: Peak resident memory a child may reach (a good run of these tiny models stays under 1 GiB).
PEAK_RSS = 2 << 30


def run_limited(args: list[str], tmp: Path, seconds: float = SECONDS,
                env: dict[str, str] | None = None) -> tuple[int, str, int]:
    """``python -m curate ARGS`` as its own process group under the limits above: ``(exit code, stderr, peak RSS in
    bytes)``; the group is killed and the test failed when the time runs out. ``env``: more environment."""
    env = {**os.environ, "PYTHONPATH": f"{ROOT}{os.pathsep}{os.environ.get('PYTHONPATH', '')}", "CURATE_REPORT": "0",
           "OMP_NUM_THREADS": "1", "PYTHONDONTWRITEBYTECODE": "1", **(env or {})}

    def limits() -> None:
        os.setsid()
        resource.setrlimit(resource.RLIMIT_AS, (ADDRESS_SPACE, ADDRESS_SPACE))

    err_path = tmp / f"stderr-{time.monotonic_ns()}.txt"
    with open(err_path, "w+") as err:
        proc = subprocess.Popen([sys.executable, "-m", "curate", *args], stdout=subprocess.DEVNULL, stderr=err,
                                env=env, preexec_fn=limits)
        deadline = time.monotonic() + seconds
        while True:
            pid, status, usage = os.wait4(proc.pid, os.WNOHANG)
            if pid:
                break
            if time.monotonic() > deadline:
                os.killpg(proc.pid, signal.SIGKILL)
                os.wait4(proc.pid, 0)
                proc.returncode = -9
                pytest.fail(f"curate {' '.join(args[:2])} still running after {seconds} s (killed)")
            time.sleep(0.1)
        proc.returncode = os.waitstatus_to_exitcode(status)
        err.seek(0)
        return proc.returncode, err.read(), usage.ru_maxrss * 1024


@contextmanager
def small_tmpfs(folder: Path, size: str) -> Iterator[Path]:
    """A tmpfs of ``size`` (``64k``, ``1m``) mounted on ``folder`` for the block: a full disk, for real (root only;
    the test is skipped where mounting is not allowed)."""
    folder.mkdir(parents=True, exist_ok=True)
    if os.geteuid() != 0 or subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(folder)],
                                           capture_output=True).returncode != 0:
        pytest.skip("mounting a small tmpfs needs root")
    try:
        yield folder
    finally:
        subprocess.run(["umount", str(folder)], check=False)


#: Record id -> the reason every image stage gives it (the special token: pack only, the stage with the processor).
IMAGE_CASES = {
    "fifo": "not_a_file", "zero": "not_a_file", "devzero": "not_a_file", "urandom": "not_a_file",
    "nul": "invalid_path", "loop": "invalid_path", "long": "invalid_path", "many": "too_many_images",
}
GOOD = ("good-1", "good-2", "good-3")


@dataclass(frozen=True)
class HostileRecords:
    """The hostile records file and what each stage must make of its rows."""

    folder: Path
    records: Path  #: good and hostile records, one per line
    reasons: dict[str, str]  #: record id (or fallback id of an unreadable line) -> reason, every image stage
    special: str  #: the id of the record with ``<|image_pad|>`` in its user text
    good: tuple[str, ...] = GOOD


def _record(rid: str, images: list[str], text: str = "<image>\nDescribe the image.") -> dict:
    return {"id": rid, "source": "web", "images": images,
            "messages": [{"role": "user", "content": text}, {"role": "assistant", "content": "A grey square."}]}


@pytest.fixture(scope="session")
def hostile_records(tmp_path_factory: pytest.TempPathFactory) -> HostileRecords:
    """A records file with three good records and every hostile case of issue 36 (see the module docstring)."""
    d = tmp_path_factory.mktemp("hostile-records")
    pixels = np.random.default_rng(36).integers(0, 256, (48, 64, 3), dtype=np.uint8)
    Image.fromarray(pixels).save(d / "good.png")
    os.mkfifo(d / "fifo.jpg")
    os.symlink("/dev/zero", d / "zero.jpg")
    os.symlink("/dev/urandom", d / "urandom.jpg")
    os.symlink("loop-b.jpg", d / "loop-a.jpg")
    os.symlink("loop-a.jpg", d / "loop-b.jpg")
    lines = [json.dumps(_record("good-1", ["good.png"]))]
    images = {"fifo": ["fifo.jpg"], "zero": ["zero.jpg"], "devzero": ["/dev/zero"], "urandom": ["urandom.jpg"],
              "nul": ["a\u0000b.png"], "loop": ["loop-a.jpg"], "long": ["x" * 5000 + ".png"],
              "many": ["good.png"] * 1000}
    for rid, paths in images.items():
        text = "<image>" * len(paths) + "\nDescribe the images."
        lines.append(json.dumps(_record(rid, paths, text)))
    lines.append(json.dumps(_record("good-2", ["good.png", "good.png"], "<image><image>\nCompare them.")))
    tail = json.dumps(_record("x", ["good.png"]))[1:]  # the rest of a good record after its first brace
    unreadable = {
        "number_too_large": '{"n": ' + "9" * 5000 + ", " + tail,
        "nested_too_deep": '{"deep": ' + "[" * 100_000 + "]" * 100_000 + ", " + tail,
        "invalid_text": json.dumps(_record("surrogate", ["good.png"], "<image>\nWhat is \ud800?")),
    }
    reasons = dict(IMAGE_CASES)
    for reason, line in unreadable.items():
        lines.append(line)
        reasons[f"records:{len(lines)}"] = reason  # an unreadable line has no id: file stem and line number
    special = "special"
    lines.append(json.dumps(_record(special, ["good.png"], "<image>\nWhat does <|image_pad|> mean here?")))
    lines.append(json.dumps(_record("good-3", ["good.png"])))
    path = d / "records.jsonl"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return HostileRecords(folder=d, records=path, reasons=reasons, special=special)


@dataclass
class ChatServer:
    """An OpenAI-style ``/v1/chat/completions`` server on loopback; ``answer`` decides every reply.

    ``answer``: ``"ok"`` (one choice per ``n``), ``"null"`` (``content: null``, finish_reason stop),
    ``"no-choices"`` (``{"choices": []}``), ``"redirect"`` (302 to another path), or an HTTP status code.
    """

    url: str
    answer: str | int = "ok"
    calls: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)


@pytest.fixture
def chat_server() -> Iterator[ChatServer]:
    """A :class:`ChatServer` for one test (its answer set by the test, good answers by default)."""
    port = free_port()
    state = ChatServer(url=f"http://127.0.0.1:{port}/v1")

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args: object) -> None:  # quiet
            pass

        def do_POST(self) -> None:  # noqa: N802 - http.server's naming
            body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))) or b"{}")
            with state.lock:
                state.calls += 1
                answer = state.answer
            if answer == "redirect":
                self._send(302, b"", {"Location": "/elsewhere"})
            elif isinstance(answer, int):
                self._send(answer, json.dumps({"error": {"message": f"status {answer}"}}).encode())
            elif answer == "no-choices":
                self._send(200, json.dumps({"choices": []}).encode())
            else:
                content = None if answer == "null" else "A small grey square on a plain background."
                choices = [{"index": j, "message": {"role": "assistant", "content": content},
                            "finish_reason": "stop"} for j in range(int(body.get("n", 1)))]
                self._send(200, json.dumps({"choices": choices}).encode())

        def _send(self, code: int, payload: bytes, headers: dict[str, str] | None = None) -> None:
            self.send_response(code)
            for key, value in {"Content-Type": "application/json", **(headers or {})}.items():
                self.send_header(key, value)
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)

    server = ThreadingHTTPServer(("127.0.0.1", port), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield state
    finally:
        server.shutdown()
        server.server_close()
