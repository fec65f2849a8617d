"""serve-rewards cannot be abused: a bearer token, a body limit, capped pools, and the escape table through it."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import httpx
import pytest

from curate.core.threads import available_cpus
from curate.rl.config import ServeRewardsConfig
from tests._fixtures.servers import serving
from tests.curate.rewards.escapes import ATTACKS, make_target, needs_bwrap, response

ROOT = Path(__file__).resolve().parents[3]
TOKEN = "test-token-0123456789abcdef"

pytestmark = [pytest.mark.server, pytest.mark.slow]


def test_token_from_the_environment_and_pool_cap(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CURATE_REWARD_TOKEN", TOKEN)
    config = ServeRewardsConfig(host="0.0.0.0", pool_workers=40)
    assert config.token == TOKEN and TOKEN not in repr(config)
    assert config.pool_workers == available_cpus() and config.pool_capped == 40
    assert ServeRewardsConfig(host="::1").host == "::1"  # loopback: no token needed


@pytest.fixture(scope="module")
def guarded(tmp_path_factory):
    """A server with a token, a 1 MB body limit, one sandbox, low code limits and the audit hook off."""
    target = make_target(tmp_path_factory.mktemp("serve") / "target")
    env = {**target.env(), "PYTHONPATH": str(ROOT), "CURATE_CODE_AUDIT_HOOK": "0"}
    command = [sys.executable, "-m", "curate", "serve-rewards", "--port", "{port}", "--pool-workers", "1", "--token",
               TOKEN, "--max-body-mb", "1", "--code-cpu-seconds", "1", "--code-wall-seconds", "4"]
    with serving(command, env) as url:
        yield url, {"Authorization": f"Bearer {TOKEN}"}, target


def test_requests_need_the_token(guarded) -> None:
    url, auth, _ = guarded
    item = {"record": {"answer": "7", "answer_type": "number"}, "response": "<answer>7</answer>"}
    assert httpx.get(url + "/health", timeout=10).status_code == 401
    assert httpx.get(url + "/health", headers={"Authorization": "Bearer wrong-token-0123456789"}, timeout=10).status_code == 401
    assert httpx.post(url + "/score", json={"items": [item]}, timeout=10).status_code == 401
    ok = httpx.post(url + "/score", json={"items": [item]}, headers=auth, timeout=30)
    assert ok.status_code == 200 and ok.json()["results"][0]["accuracy"] == 1.0
    openrlhf = httpx.post(url + f"/openrlhf?answer_type=number&token={TOKEN}",
                          json={"query": ["<answer>7</answer>"], "labels": ["7"]}, timeout=30)
    assert openrlhf.status_code == 200 and openrlhf.json()["rewards"] == [1.0]


def test_large_bodies_get_413(guarded) -> None:
    url, auth, _ = guarded
    big = b'{"items": [' + b",".join([b'{"record": {"answer": "7", "answer_type": "number"}, "response": "x"}'] * 20000) + b"]}"
    assert len(big) > 1024 * 1024
    declared = httpx.post(url + "/score", content=big, headers={**auth, "content-type": "application/json"}, timeout=30)
    assert declared.status_code == 413

    def chunks():
        for i in range(0, len(big), 65536):
            yield big[i:i + 65536]

    streamed = httpx.post(url + "/score", content=chunks(), headers={**auth, "content-type": "application/json"},
                          timeout=30)
    assert streamed.status_code == 413
    small = httpx.post(url + "/score", json={"items": []}, headers=auth, timeout=30)
    assert small.status_code == 200


@needs_bwrap
def test_escape_table_through_serve_rewards(guarded) -> None:
    url, auth, target = guarded
    items = [{"record": target.record(a), "response": response(a)} for a in ATTACKS]
    reply = httpx.post(url + "/score", json={"items": items}, headers=auth, timeout=120)
    assert reply.status_code == 200, reply.text
    results = reply.json()["results"]
    assert {a.name: r["accuracy"] for a, r in zip(ATTACKS, results) if r["accuracy"] > 0} == {}
    assert {r["error"] for r in results} <= {None, "timeout"}
    assert os.listdir(target.watch) == [] and target.accepted == []
    health = httpx.get(url + "/health", headers=auth, timeout=10).json()
    assert health["sandbox"]["sandbox"] == "bwrap" and health["sandbox"]["cpu_seconds"] == 1.0
    assert health["workers"] == 1
