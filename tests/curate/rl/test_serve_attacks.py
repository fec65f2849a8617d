"""serve-rewards under attack, on 127.0.0.1: slow headers, a flood of looping programs, a program slow to compile.

One server with small limits (2 s for headers, 3 queued requests, one sandbox, 256 open files) takes
the table. Before the door (:mod:`curate.rl.guard`) each row passed: 300 slow connections ran the
server out of file descriptors (``/health`` stopped answering, a traceback per failed ``accept()``),
looping programs queued without limit and no one got 503, and the compile ran in the server process.
"""

from __future__ import annotations

import json
import os
import resource
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx
import pytest

from curate.fixtures.tiny_vlm import free_port
from tests._fixtures.servers import wait_for_port
from tests.curate.rewards.escapes import needs_bwrap
from tests.curate.rewards.runtime.test_attacks import slow_to_compile

ROOT = Path(__file__).resolve().parents[3]
TOKEN = "attack-token-0123456789abcdef"
AUTH = {"Authorization": f"Bearer {TOKEN}"}
FILES = 256

pytestmark = [pytest.mark.server, pytest.mark.slow, needs_bwrap]


def _few_files() -> None:
    resource.setrlimit(resource.RLIMIT_NOFILE, (FILES, FILES))


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    """``(url, pid, log)``: a server with a token, tight door limits and one sandbox, its stderr in ``log``."""
    log = tmp_path_factory.mktemp("attacks") / "server.log"
    port = free_port()
    command = [sys.executable, "-m", "curate", "serve-rewards", "--port", str(port), "--pool-workers", "1",
               "--token", TOKEN, "--header-timeout", "2", "--body-timeout", "2", "--max-queued", "3", "--deadline", "8",
               "--code-cpu-seconds", "1", "--code-wall-seconds", "2"]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    with open(log, "wb") as err:
        proc = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=err, env=env, preexec_fn=_few_files)
    try:
        wait_for_port(port)
        url = f"http://127.0.0.1:{port}"
        assert httpx.get(url + "/health", headers=AUTH, timeout=30).status_code == 200
        yield url, proc.pid, log
    finally:
        proc.terminate()
        proc.wait(timeout=30)


@pytest.fixture(scope="module")
def client():
    """One HTTP client for the module (a client per request costs this process more than the server's answer)."""
    with httpx.Client(headers=AUTH, limits=httpx.Limits(max_connections=32)) as c:
        yield c


#: How long /health may take: 0.1-0.2 s measured with the attacks running; the slack is for the other test process
#: sharing the 2 cores (the old server never answered while the attack lasted).
HEALTH_SECONDS = 3.0


def _health_seconds(client: httpx.Client, url: str) -> float:
    started = time.monotonic()
    reply = client.get(url + "/health", timeout=HEALTH_SECONDS)
    assert reply.status_code == 200
    return time.monotonic() - started


def _opened(port: int, data: bytes) -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", port), timeout=10)
    sock.sendall(data)
    return sock


def _status(sock: socket.socket) -> bytes:
    try:
        return sock.recv(64).split(b"\r\n")[0]
    except OSError:
        return b"reset"


def test_slow_headers_without_a_token(server, client) -> None:
    """300 connections that send half a head and stop: /health keeps answering, the log stays short.

    Beside them: a head without the token that announces a body gets 401 at once, and a body that stops
    halfway gets 408 once the body timeout has passed.
    """
    url, _, log = server
    port = int(url.rsplit(":", 1)[1])
    slow = []
    unsent_body = _opened(port, b"POST /score HTTP/1.1\r\nHost: x\r\nContent-Length: 1000000\r\n\r\n")
    half_body = _opened(port, f"POST /score HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {TOKEN}\r\n"
                              "Content-Type: application/json\r\nContent-Length: 100\r\n\r\n{\"items\"".encode())
    assert _status(unsent_body) == b"HTTP/1.1 401 Unauthorized"
    try:
        for _ in range(300):
            sock = socket.socket()
            sock.settimeout(10)
            sock.connect(("127.0.0.1", port))
            sock.sendall(b"POST /score HTTP/1.1\r\nHost: x\r\nContent-Length: 1000000\r\n")
            slow.append(sock)
        for _ in range(3):
            assert _health_seconds(client, url) < HEALTH_SECONDS
            time.sleep(0.3)
        time.sleep(2.5)  # past the header timeout: every slow connection is answered and closed
        answers = {_status(sock) for sock in slow[-20:]}
        assert answers <= {b"HTTP/1.1 408 Request Timeout", b""}, answers
        assert _status(half_body) == b"HTTP/1.1 408 Request Timeout"
    finally:
        for sock in slow + [unsent_body, half_body]:
            sock.close()
    text = log.read_text(errors="replace")
    assert "Traceback" not in text and len(text.splitlines()) < 20, text[-2000:]


LOOP = {"record": {"answer": json.dumps({"tests": [{"input": "", "output": "x"}]}), "answer_type": "code"},
        "response": "```python\nwhile True:\n    pass\n```"}


def test_looping_programs_past_the_queue_get_503(server, client) -> None:
    """12 concurrent requests of a looping program with 3 queue places: the rest get 503 + Retry-After at once."""
    url, _, _ = server
    replies: list[httpx.Response] = []

    def post() -> None:
        replies.append(client.post(url + "/score", json={"items": [LOOP]}, timeout=60))

    threads = [threading.Thread(target=post) for _ in range(12)]
    for t in threads:
        t.start()
    until = time.monotonic() + 10
    while len(replies) < 8 and time.monotonic() < until:  # the refused ones are back, the queued ones loop
        time.sleep(0.05)
    try:
        assert _health_seconds(client, url) < HEALTH_SECONDS
    finally:
        for t in threads:
            t.join()
    busy = [r for r in replies if r.status_code == 503]
    done = [r for r in replies if r.status_code == 200]
    assert len(busy) >= 12 - 3 - 1 and len(busy) + len(done) == 12, [r.status_code for r in replies]
    assert all(r.headers.get("retry-after", "").isdigit() for r in busy)
    assert all(r.json()["results"][0]["error"] in ("timeout", "deadline") for r in done)


def _cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def test_a_program_slow_to_compile_is_compiled_in_the_sandbox(server, client) -> None:
    url, pid, _ = server
    item = {**LOOP, "response": "```python\n" + slow_to_compile(6000) + "```"}
    before = _cpu_seconds(pid)
    reply = client.post(url + "/score", json={"items": [item]}, timeout=60)
    used = _cpu_seconds(pid) - before
    assert reply.status_code == 200 and reply.json()["results"][0]["accuracy"] == 0.0
    assert used < 1.0, f"the server process spent {used:.1f} CPU seconds on one request"


def test_accept_errors_are_one_line_per_kind(caplog: pytest.LogCaptureFixture) -> None:
    """asyncio reports every failed accept() (EMFILE) to the loop's handler: a thousand make one line, no traceback."""
    import asyncio
    import errno
    import logging

    from curate.rl.guard import quiet_loop_errors

    loop = asyncio.new_event_loop()
    try:
        quiet_loop_errors(loop)
        with caplog.at_level(logging.WARNING, logger="curate.serve"):
            for _ in range(1000):
                loop.call_exception_handler({"message": "socket.accept() out of system resource",
                                             "exception": OSError(errno.EMFILE, "Too many open files")})
            loop.call_exception_handler({"message": "another kind"})
    finally:
        loop.close()
    lines = [r for r in caplog.records if r.name == "curate.serve"]
    assert len(lines) == 2 and all(r.exc_info is None for r in lines)
    assert "Too many open files" in lines[0].getMessage()
