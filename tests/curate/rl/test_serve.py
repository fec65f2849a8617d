"""The reward service: a real uvicorn server on loopback, 64 concurrent requests."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest

from curate.rewards.registry import score

pytestmark = [pytest.mark.server, pytest.mark.slow]

THOUGHT = "<think>" + "Checking every candidate carefully before answering. " * 3 + "</think>"


def _items(k: int) -> list[dict]:
    """A mixed batch (several verifiers, right and wrong answers) that differs with ``k``."""
    code_gold = json.dumps({"tests": [{"input": str(k), "output": str(2 * k)}]})
    code = [
        {"record": {"id": f"k{k}", "answer": code_gold, "answer_type": "general-code"},
         "response": "<answer>\n```python\nprint(int(input()) * " + ("2" if k % 16 else "3") + ")\n```\n</answer>"},
    ] if k % 8 == 0 else []
    return code + [
        {"record": {"id": f"c{k}", "answer": "ABCD"[k % 4], "answer_type": "multiple-choice", "prompt_type": "think"},
         "response": f"{THOUGHT}<answer>({'ABCD'[(k // 2) % 4]})</answer>"},
        {"record": {"id": f"n{k}", "answer": str(k), "answer_type": "number"}, "response": f"<answer>{k:,}.0</answer>"},
        {"record": {"id": f"m{k}", "answer": f"\\frac{{{k}}}{{4}}", "answer_type": "math-expressions"},
         "response": f"<answer>{(k + k % 2) / 4}</answer>"},
        {"record": {"id": f"b{k}", "answer": "[10, 10, 50, 50]", "answer_type": "bbox", "image_size": [100, 100]},
         "response": f"<answer>[{10 + k % 7}, 10, 50, 50]</answer>"},
        {"record": {"id": f"o{k}", "answer": "hello world", "answer_type": "ocrtext"},
         "response": "<answer>" + "hello world"[: 11 - k % 5] + "</answer>"},
        {"record": {"id": f"y{k}", "answer": "yes", "answer_type": "boolean"},
         "response": "<answer>" + ("Yes" if k % 3 else "I don't know") + "</answer>"},
    ]


@pytest.fixture(scope="module")
def server_url():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    code = f"from curate.rl.serve import serve; serve(host='127.0.0.1', port={port})"
    proc = subprocess.Popen([sys.executable, "-c", code])
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 90
    try:
        while True:
            try:
                if httpx.get(url + "/health", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError("the reward service did not start")
            time.sleep(0.2)
        yield url
    finally:
        proc.terminate()
        try:
            proc.wait(15)
        except subprocess.TimeoutExpired:
            proc.kill()


def test_health(server_url: str) -> None:
    body = httpx.get(server_url + "/health", timeout=10).json()
    assert body["status"] == "ok"
    assert "math" in body["verifiers"] and "multiple-choice" in body["answer_types"]


def test_64_concurrent_requests_match_in_process_scores(server_url: str) -> None:
    batches = [_items(k) for k in range(64)]

    def post(batch: list[dict]) -> list[dict]:
        r = httpx.post(server_url + "/score", json={"items": batch}, timeout=120)
        r.raise_for_status()
        return r.json()["results"]

    with ThreadPoolExecutor(64) as ex:
        answers = list(ex.map(post, batches))
    assert len(answers) == 64
    for batch, results in zip(batches, answers):
        assert len(results) == len(batch)
        for item, got in zip(batch, results):
            want = score(item["record"], item["response"]).to_dict()
            assert got == want, (item, got, want)
    accuracies = [r["accuracy"] for results in answers for r in results]
    assert 0 < sum(accuracies) < len(accuracies)  # a real mix of right and wrong answers


@pytest.mark.parametrize(
    "body,needle",
    [
        ("not json", "JSON"),
        ({"itemz": []}, "items: Field required"),
        ({"items": [{"record": {"answer": "B", "answer_type": "multiple-choice"}}]}, "items.0.response: Field required"),
        ({"items": [{"record": "B", "response": "x"}]}, "items.0.record"),
        ({"items": [{"record": {"answer": "B", "answer_type": "colour"}, "response": "x"}]}, "unknown answer_type 'colour'"),
        ({"items": [], "progress": 2}, "progress"),
    ],
)
def test_malformed_requests_get_422_with_a_readable_message(server_url: str, body, needle: str) -> None:
    if isinstance(body, str):
        r = httpx.post(server_url + "/score", content=body, headers={"content-type": "application/json"}, timeout=30)
    else:
        r = httpx.post(server_url + "/score", json=body, timeout=30)
    assert r.status_code == 422
    detail = r.json()["detail"]
    assert isinstance(detail, str) and needle in detail and "\n" not in detail


def test_progress_reaches_the_dynamic_threshold(server_url: str) -> None:
    record = {"answer": "[0, 0, 10, 10]", "answer_type": "bbox", "reward": {"parameters": {"iou_threshold": "dynamic"}}}
    item = {"record": record, "response": "<answer>[0, 0, 10, 9]</answer>"}  # IoU 0.9
    early = httpx.post(server_url + "/score", json={"items": [item], "progress": 0.05}, timeout=30).json()
    late = httpx.post(server_url + "/score", json={"items": [item], "progress": 0.5}, timeout=30).json()
    assert early["results"][0]["accuracy"] == 1.0 and late["results"][0]["accuracy"] == 0.0
