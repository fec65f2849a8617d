"""OpenRLHF: a running ``curate serve-rewards`` answers OpenRLHF's remote reward requests.

OpenRLHF does not install here (it pins transformers 5.15 and builds flash-attn, which needs
CUDA), so the requests are made the way its code makes them: ``SingleTurnAgentExecutor``
POSTs ``{"query", "prompts", "labels"}`` with aiohttp and reads ``rewards``, ``scores`` and
``extra_logs``; the older ``remote_rm_fn`` POSTs the same body with requests and reads
``rewards``.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from pathlib import Path

import pytest

from curate.fixtures.tiny_vlm import free_port, stop_process, wait_ready
from curate.rewards.registry import score

pytestmark = [pytest.mark.server]
aiohttp = pytest.importorskip("aiohttp", reason="aiohttp is not installed")
requests = pytest.importorskip("requests", reason="requests is not installed")

CASES = [  # (user text, response, record)
    ("How many red squares?", "<answer>7</answer>", {"answer": "7", "answer_type": "number"}),
    ("How many red squares?", "<answer>6</answer>", {"answer": "7", "answer_type": "number"}),
    ("Pick one.", "<think>" + "B fits the picture. " * 5 + "</think><answer>(B)</answer>",
     {"answer": ["B"], "answer_type": "multiple-choice", "prompt_type": "think",
      "reward": {"accuracy_ratio": 0.5, "format_ratio": 0.5}}),
    ("Half of one?", "<answer>\\frac{1}{2}</answer>", {"answer": "0.5", "answer_type": "math-expressions"}),
]


@pytest.fixture(scope="module")
def server() -> str:
    port = free_port()
    proc = subprocess.Popen([sys.executable, "-m", "curate", "serve-rewards", "--host", "127.0.0.1",
                             "--port", str(port), "--pool-workers", "1"],
                            start_new_session=True)  # its own process group: stop_process ends it and its workers
    url = f"http://127.0.0.1:{port}"
    try:
        wait_ready(url, 90, proc=proc)
        yield url
    finally:
        stop_process(proc)


def _queries(tokenizer, with_image: bool = False) -> tuple[list[str], list[str]]:
    """prompt and prompt + response decoded with special tokens, as OpenRLHF builds them."""
    eos = tokenizer.convert_tokens_to_ids("<|im_end|>")
    prompts, queries = [], []
    for text, response, _ in CASES:
        content = [{"type": "image"}, {"type": "text", "text": text}] if with_image else text
        prompt = tokenizer.apply_chat_template([{"role": "user", "content": content}], tokenize=False,
                                               add_generation_prompt=True)
        ids = tokenizer.encode(prompt, add_special_tokens=False)
        if with_image:  # the processor expands the one image pad into one per image token
            pad = tokenizer.convert_tokens_to_ids("<|image_pad|>")
            at = ids.index(pad)
            ids = ids[:at] + [pad] * 16 + ids[at + 1:]
        ids += tokenizer.encode(response, add_special_tokens=False) + [eos]
        prompts.append(prompt)
        queries.append(tokenizer.decode(ids, skip_special_tokens=False))
    return prompts, queries


async def _post(url: str, payload: dict) -> dict:
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=180)) as session:
        async with session.post(url, json=payload) as response:
            response.raise_for_status()
            return await response.json()


def _expected() -> list:
    return [score(rec, response) for _, response, rec in CASES]


def test_single_turn_executor_requests(server: str, tiny_processor_dir: Path) -> None:
    import torch
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(tiny_processor_dir)
    want = _expected()
    assert [w.accuracy for w in want] == [1.0, 0.0, 1.0, 1.0]
    for with_image in (False, True):
        prompts, queries = _queries(tokenizer, with_image)
        for i, (_, _, rec) in enumerate(CASES):  # the executor sends one item per request
            info = asyncio.run(_post(server + "/openrlhf", {"query": [queries[i]], "prompts": [prompts[i]],
                                                            "labels": [json.dumps(rec)]}))
            assert info["rewards"] == pytest.approx([want[i].reward])
            assert info["scores"] == pytest.approx([want[i].accuracy])
            logs = {k: torch.tensor([v]) for k, v in info["extra_logs"].items()}  # what OpenRLHF does with them
            assert logs["format"].flatten().tolist() == [want[i].format]
    assert want[2].reward == pytest.approx(1.0) and want[2].format == 1.0


def test_batch_request_with_bare_golds_and_the_old_client(server: str, tiny_processor_dir: Path) -> None:
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(tiny_processor_dir)
    prompts, queries = _queries(tokenizer)
    want = _expected()
    response = requests.post(server + "/get_reward?answer_type=number",
                             json={"query": queries[:2], "prompts": prompts[:2], "labels": ["7", "7"]},
                             headers={"Content-Type": "application/json"}, timeout=180)
    response.raise_for_status()
    assert response.json()["rewards"] == [want[0].reward, want[1].reward] == [1.0, 0.0]
    # a label that names no answer type scores 0 instead of failing the batch
    body = requests.post(server + "/openrlhf", json={"query": [queries[0]] * 2, "prompts": [prompts[0]] * 2,
                                                     "labels": ["7", json.dumps(CASES[0][2])]}, timeout=60).json()
    assert body["rewards"] == [0.0, 1.0] and body["extra_logs"]["verifier_error"] == [1.0, 0.0]
    bad = requests.post(server + "/openrlhf", json={"query": queries[:2], "labels": ["7"]}, timeout=60)
    assert bad.status_code == 422 and "same length" in bad.json()["detail"]


def test_reward_func_file_mode(monkeypatch: pytest.MonkeyPatch) -> None:
    """``--remote_rm_url path/to/openrlhf.py``: OpenRLHF loads reward_func from the file and calls it in a thread."""
    import importlib.util

    from curate.rewards.trainers import openrlhf

    spec = importlib.util.spec_from_file_location("reward_func", openrlhf.__file__)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    monkeypatch.setenv("CURATE_ANSWER_TYPE", "number")
    out = asyncio.run(asyncio.to_thread(module.reward_func, ["Q: count. <answer>7</answer>"], ["Q: count. "], ["7"]))
    assert out["rewards"] == [1.0]
