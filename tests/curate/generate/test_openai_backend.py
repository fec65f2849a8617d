"""The openai backend against real HTTP servers on loopback.

* A small stdlib server written here answers from a script (503, 400, slow,
  malformed...) and records every call, to check retries, backoff and the
  payload precisely.
* ``transformers serve`` of the tiny VLM (it answers one choice whatever ``n``
  is) checks that ``n`` answers come back, and, stopped mid-run, the retry and
  error accounting.
"""

from __future__ import annotations

import base64
import json
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from curate.fixtures.tiny_vlm import (
    free_port,
    serve_missing_packages,
    start_transformers_serve,
    stop_process,
    wait_ready,
)
from curate.generate.base import GenerationRequest, SamplingParams
from curate.generate import make_backend
from curate.generate.openai_backend import OpenAIBackend, chat_url


class ScriptedServer:
    """An OpenAI-style chat server on loopback that follows a script of answers.

    Each call pops the next action from ``script`` (when empty: ``"ok"``):
    ``"ok"`` answers ``min(n, max_choices)`` choices, ``("status", code)`` an error
    status, ``("sleep", s)`` waits before answering ok, ``"garbage"`` a non-JSON body.
    Choice ``j`` of a call with seed ``s`` says ``"s<seed>-<j>"`` and is cut
    (finish_reason length) when the seed is odd.
    """

    def __init__(self, script: list | None = None, max_choices: int = 1) -> None:
        self.script = list(script or [])
        self.max_choices = max_choices
        self.calls: list[tuple[float, dict]] = []
        self.lock = threading.Lock()
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: object) -> None:  # quiet
                pass

            def do_POST(self) -> None:  # noqa: N802 - http.server's naming
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                with outer.lock:
                    outer.calls.append((time.monotonic(), body))
                    action = outer.script.pop(0) if outer.script else "ok"
                if isinstance(action, tuple) and action[0] == "sleep":
                    time.sleep(action[1])
                    action = "ok"
                if isinstance(action, tuple) and action[0] == "status":
                    self._send(action[1], json.dumps({"error": f"scripted {action[1]}"}).encode())
                elif action == "garbage":
                    self._send(200, b"<html>not json</html>")
                else:
                    k = min(int(body.get("n", 1)), outer.max_choices)
                    seed = body.get("seed", -1)
                    choices = [{"index": j, "message": {"role": "assistant", "content": f"s{seed}-{j}"},
                                "finish_reason": "length" if seed % 2 else "stop"} for j in range(k)]
                    self._send(200, json.dumps({"choices": choices}).encode())

            def _send(self, code: int, payload: bytes) -> None:
                self.send_response(code)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"
        self.thread = threading.Thread(target=self.httpd.serve_forever, kwargs={"poll_interval": 0.05},
                                       daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture
def scripted() -> Iterator[callable]:
    servers: list[ScriptedServer] = []

    def make(script: list | None = None, max_choices: int = 1) -> ScriptedServer:
        servers.append(ScriptedServer(script, max_choices))
        return servers[-1]

    yield make
    for s in servers:
        s.close()


@pytest.fixture(scope="module")
def photo(tmp_path_factory: pytest.TempPathFactory) -> str:
    path = tmp_path_factory.mktemp("openai-img") / "photo.jpg"
    Image.fromarray(np.random.default_rng(1).integers(0, 256, (60, 90, 3), dtype=np.uint8)).save(path, quality=85)
    return str(path)


def _req(key: str = "q1", n: int = 1, images: tuple[str, ...] = (), seed: int = 0, max_new_tokens: int = 16,
         text: str = "What is shown?") -> GenerationRequest:
    prompt = "<image>" * len(images) + text
    return GenerationRequest(key=key, messages=[{"role": "user", "content": prompt}], images=list(images), n=n,
                             sampling=SamplingParams(max_new_tokens=max_new_tokens, seed=seed))


def test_chat_url_forms() -> None:
    assert chat_url("http://h:1") == "http://h:1/v1/chat/completions"
    assert chat_url("http://h:1/v1/") == "http://h:1/v1/chat/completions"
    assert chat_url("https://h/v1/chat/completions") == "https://h/v1/chat/completions"


def test_503_twice_then_200_is_retried_with_backoff(scripted) -> None:
    server = scripted([("status", 503), ("status", 503)])
    with OpenAIBackend(server.url, max_retries=3, backoff=0.1, backoff_max=5.0) as be:
        res = be.generate([_req()])[0]
        stats = be.stats.as_dict()
    assert res.ok and res.responses == [f"s{derive(0, 'q1')}-0"]
    assert (res.attempts, res.retries, res.retry_reasons) == (3, 2, ["http_error:503", "http_error:503"])
    times = [t for t, _ in server.calls]
    assert len(times) == 3
    # equal jitter: the i-th wait is in [backoff·2^i / 2, backoff·2^i]
    assert times[1] - times[0] >= 0.05 and times[2] - times[1] >= 0.1
    assert all(body == server.calls[0][1] for _, body in server.calls)  # a retry resends the same call (same seed)
    assert stats["retries"] == 2 and stats["retries.http_error:503"] == 2 and stats["errors"] == 0
    assert stats["attempts"] == 3 and stats["requests"] == 1 and stats["responses"] == 1


def test_a_request_fails_after_the_configured_retries(scripted) -> None:
    server = scripted([("status", 503)] * 3 + [("status", 502)] * 3)
    with OpenAIBackend(server.url, max_retries=2, backoff=0.01) as be:
        first, second = be.generate([_req("a"), _req("b")])
        stats = be.stats.as_dict()
    assert len(server.calls) == 6
    for res in (first, second):
        assert not res.ok and res.responses == [] and res.attempts == 3 and res.retries == 2
    assert {first.error, second.error} <= {"http_error:503", "http_error:502"}
    assert stats["errors"] == 2 and stats["retries"] == 4
    assert stats.get("errors.http_error:503", 0) + stats.get("errors.http_error:502", 0) == 2


def test_4xx_is_final_but_429_is_retried(scripted) -> None:
    server = scripted([("status", 400)])
    with OpenAIBackend(server.url, max_retries=3, backoff=0.01) as be:
        res = be.generate([_req()])[0]
    assert (res.error, res.attempts, res.retries) == ("http_error:400", 1, 0)
    assert "scripted 400" in res.detail
    server = scripted([("status", 429), "garbage"])
    with OpenAIBackend(server.url, max_retries=3, backoff=0.01) as be:
        res = be.generate([_req()])[0]
    assert res.ok and res.retry_reasons == ["http_error:429", "bad_response"]


def test_timeouts_and_refused_connections(scripted) -> None:
    server = scripted([("sleep", 1.5), ("sleep", 1.5)])
    with OpenAIBackend(server.url, timeout=0.3, max_retries=1, backoff=0.01) as be:
        res = be.generate([_req()])[0]
    assert (res.error, res.attempts, res.retry_reasons) == ("timeout", 2, ["timeout"])
    with OpenAIBackend(f"http://127.0.0.1:{free_port()}", max_retries=2, backoff=0.01) as be:
        res = be.generate([_req(), _req("other")])
        stats = be.stats.as_dict()
    assert [r.error for r in res] == ["connection_error"] * 2
    assert stats["errors.connection_error"] == 2 and stats["retries.connection_error"] == 4


def test_n_is_counted_and_topped_up_with_fresh_seeds(scripted, photo: str) -> None:
    server = scripted(max_choices=1)  # like transformers serve: one choice whatever n is
    with OpenAIBackend(server.url, served_model="tiny", concurrency=3, backoff=0.01) as be:
        first = be.generate([_req("a", n=4, images=(photo,), seed=7, max_new_tokens=9)])[0]
        assert be.choices_per_call == 1
        later = be.generate([_req("b", n=3, seed=7)])[0]
    assert first.ok and len(first.responses) == 4 and first.attempts == 4
    bodies = [b for _, b in server.calls]
    assert bodies[0]["n"] == 4 and all("n" not in b for b in bodies[1:])  # learned: no n>1 after the first call
    seeds = [b["seed"] for b in bodies[:4]]
    assert len(set(seeds)) == 4  # top-up calls never repeat a seed
    # answers are placed in sample order whatever order the parallel calls finished in
    from curate.generate.base import derive_seed

    expected = [f"s{derive_seed(7, 'a', i, bits=31)}-0" for i in range(4)]
    assert first.responses == expected
    assert first.truncated == [derive_seed(7, "a", i, bits=31) % 2 == 1 for i in range(4)]
    body = bodies[0]
    assert body["model"] == "tiny" and body["max_tokens"] == 9 and body["temperature"] == 1.0
    url = body["messages"][0]["content"][0]["image_url"]["url"]
    assert url.startswith("data:image/jpeg;base64,")
    assert base64.b64decode(url.split(",", 1)[1]) == Path(photo).read_bytes()  # original bytes
    assert body["messages"][0]["content"][1] == {"type": "text", "text": "What is shown?"}
    assert later.ok and len(later.responses) == 3 and later.attempts == 3


def test_a_server_that_honours_n_gets_one_call(scripted) -> None:
    server = scripted(max_choices=16)
    with OpenAIBackend(server.url) as be:
        res = be.generate([_req("a", n=5)])[0]
    assert len(server.calls) == 1 and server.calls[0][1]["n"] == 5
    assert res.responses == [f"s{derive(0, 'a')}-{j}" for j in range(5)] and res.attempts == 1


def derive(seed: int, key: str, i: int = 0) -> int:
    from curate.generate.base import derive_seed

    return derive_seed(seed, key, i, bits=31)


def test_bad_images_and_prompts_make_no_call(scripted, tmp_path: Path) -> None:
    server = scripted()
    empty = tmp_path / "empty.png"
    empty.write_bytes(b"")
    with OpenAIBackend(server.url) as be:
        res = be.generate([_req("a", images=(str(tmp_path / "nope.png"),)), _req("b", images=(str(empty),)),
                           GenerationRequest("c", [{"role": "user", "content": "<image>"}]), _req("d")])
    assert [r.error for r in res] == ["missing_image", "empty_file",
                                      "prompt_error:image_count", None]
    assert len(server.calls) == 1


# -- a real transformers serve ---------------------------------------------------------------------


@pytest.mark.server
@pytest.mark.slow
def test_transformers_serve_n_answers_and_seeds(tiny_vlm_server, photo: str) -> None:
    reqs = [_req(f"r{i}", n=4, images=(photo,), seed=3, max_new_tokens=1 if i == 0 else 6) for i in range(3)]
    # concurrency 1: transformers serve sets its seed globally, so concurrent calls would race for it
    with make_backend(endpoint=tiny_vlm_server.url, served_model=tiny_vlm_server.model, concurrency=1,
                      max_retries=1, backoff=0.1) as be:
        results = be.generate(reqs)
        assert be.choices_per_call == 1  # the server returned one choice for n=4
        again = be.generate(reqs[1:])
        other = be.generate([_req("r1", n=4, images=(photo,), seed=4, max_new_tokens=6)])
        stats = be.stats.as_dict()
    for res in results:
        assert res.ok, res.detail
        assert len(res.responses) == len(res.truncated) == 4
        assert res.retries == 0 and res.attempts == 4  # one call per answer
    # one new token: cut unless it was the end of the turn (finish_reason stop, empty text)
    assert results[0].truncated == [r != "" for r in results[0].responses]
    assert [r.responses for r in again] == [r.responses for r in results[1:]]  # seeds reach the server
    assert other[0].responses != results[1].responses
    assert stats["errors"] == 0 and stats["responses"] == 4 * 6


@pytest.mark.server
@pytest.mark.slow
def test_server_stopped_mid_run_is_counted_not_raised(tiny_vlm_dir: Path, tmp_path: Path, photo: str) -> None:
    missing = serve_missing_packages()
    if missing:
        pytest.skip(f"transformers serve needs {', '.join(missing)}")
    port = free_port()
    proc = start_transformers_serve(tiny_vlm_dir, port, log=tmp_path / "server.log")
    try:
        url = f"http://127.0.0.1:{port}"
        wait_ready(url, timeout=180, proc=proc)
        reqs = [_req(f"k{i}", n=2, images=(photo,), max_new_tokens=4) for i in range(8)]
        got = {}
        # the circuit breaker off (see test_endpoint_failures.py for it): every failure is counted
        with make_backend(endpoint=url, concurrency=2, max_retries=2, backoff=0.05,
                          max_consecutive_failures=10_000) as be:
            for index, res in be.stream(reqs):
                got[index] = res
                if len(got) == 2:
                    stop_process(proc)  # the server goes away while requests are in flight or queued
            stats = be.stats.as_dict()
    finally:
        stop_process(proc)
    assert sorted(got) == list(range(8))
    ok = [r for r in got.values() if r.ok]
    failed = [r for r in got.values() if not r.ok]
    assert len(ok) >= 2 and len(failed) >= 1
    assert all(len(r.responses) == 2 for r in ok)
    for r in failed:
        assert r.error in ("connection_error", "timeout") or r.error.startswith("http_error:5")
        assert r.retries >= 2 and r.attempts >= 3  # every failed call was retried twice first
    assert stats["requests"] == 8 and stats["errors"] == len(failed)
    assert sum(v for k, v in stats.items() if k.startswith("errors.")) == len(failed)
    assert stats["retries"] == sum(r.retries for r in got.values())
    assert sum(v for k, v in stats.items() if k.startswith("retries.")) == stats["retries"]
